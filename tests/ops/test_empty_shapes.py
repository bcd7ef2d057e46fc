"""Empty and degenerate shapes through the compiled kernels (issue 14).

Every op must give the reference path's result for a batch of size 0, zero time steps, lengths
that are all zero and channel/hidden size 1: outputs of the right shape and dtype, final states
equal to the initial ones (zeros when none), gradients of the right shape; and never a signal
(a batch of size 0 used to stop the process with SIGFPE, an integer division by zero in the
kernels' work splitting). The layers with a batch of size 0 behave as :class:`torch.nn.LSTM`
does: an empty output and empty final states (a sequence of 0 steps stays a ``ValueError``
naming ``input``).

A crash must fail a test, not kill pytest: the cases run in a few subprocesses (one per group,
each paying the imports once), which report each case's result on its own line as they go. A
case without a result ended its subprocess: it fails naming the signal or exit status, and a new
subprocess runs the group's remaining cases (up to :data:`MAX_CRASHES` times).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

CASES: dict[str, tuple[str, Callable[[], None]]] = {}  # name -> (group, case)
MARK = "CTRLRNN_CASE_RESULT "


def case(group: str, *variants: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``fn(variant)`` for each variant (or ``fn()``) as cases of ``group``."""

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        if not variants:
            CASES[fn.__name__.removeprefix("case_")] = (group, fn)
        for v in variants:
            name = f"{fn.__name__.removeprefix('case_')}[{v}]"
            CASES[name] = (group, functools.partial(fn, v))
        return fn

    return register


# ------------------------------------------------------------------------------------------------
# helpers (run inside the subprocesses)
# ------------------------------------------------------------------------------------------------


def _flat(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    flat: list[Tensor] = []
    for o in out:
        flat.extend(_flat(o))
    return flat


def _forward_backward(
    fn: Callable[..., Any], inputs: Sequence[Tensor | None]
) -> tuple[list[Tensor], list[Tensor | None], list[Tensor]]:
    """Outputs of ``fn(*inputs)``, the gradients of ``sum_k <w_k, out_k>`` w.r.t. the floating
    inputs (None where an input does not reach any output) and those inputs."""
    leaves = [
        x.detach().clone().requires_grad_() if x is not None and x.is_floating_point() else x
        for x in inputs
    ]
    outs = _flat(fn(*leaves))
    g = torch.Generator().manual_seed(5)
    diff = [o for o in outs if o.requires_grad]
    weights = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in diff]
    wrt = [x for x in leaves if isinstance(x, Tensor) and x.requires_grad]
    grads: list[Tensor | None] = [None] * len(wrt)
    if diff:
        grads = list(torch.autograd.grad(diff, wrt, weights, allow_unused=True))
    return [o.detach() for o in outs], grads, wrt


def _both_paths(fn: Callable[..., Any], inputs: Sequence[Tensor | None]) -> list[Tensor]:
    """Run ``fn`` compiled and with ``CTRLRNN_BACKEND=reference``; assert that outputs and
    gradients agree (shapes, dtypes, values); return the compiled outputs."""
    os.environ.pop("CTRLRNN_BACKEND", None)
    outs, grads, wrt = _forward_backward(fn, inputs)
    os.environ["CTRLRNN_BACKEND"] = "reference"
    try:
        ref_outs, ref_grads, _ = _forward_backward(fn, inputs)
    finally:
        os.environ.pop("CTRLRNN_BACKEND", None)
    assert len(outs) == len(ref_outs)
    for k, (x, y) in enumerate(zip(outs, ref_outs, strict=True)):
        assert x.shape == y.shape and x.dtype == y.dtype, (
            f"output {k}: compiled {tuple(x.shape)} {x.dtype}, reference {tuple(y.shape)} {y.dtype}"
        )
        torch.testing.assert_close(x, y, msg=lambda m, k=k: f"output {k}: {m}")
    for k, (x, y, leaf) in enumerate(zip(grads, ref_grads, wrt, strict=True)):
        # a gradient of the input's shape on the compiled path (autograd may give the
        # reference's None where no output depends on the input: zeros)
        assert x is not None, f"gradient {k}: None on the compiled path"
        assert x.shape == leaf.shape and x.dtype == leaf.dtype, f"gradient {k}: {x.shape}"
        torch.testing.assert_close(x, torch.zeros_like(leaf) if y is None else y,
                                   msg=lambda m, k=k: f"gradient {k}: {m}")  # fmt: skip
    return outs


def _r(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _u(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


#: (B, T, H, lengths) of the op cases: an empty batch, no steps, all-zero lengths, size 1
SHAPES: dict[str, tuple[int, int, int, list[int] | None]] = {
    "B0": (0, 3, 2, None),
    "B0-lengths": (0, 3, 2, []),
    "T0": (2, 0, 2, None),
    "T0-lengths": (2, 0, 2, [0, 0]),
    "zero-lengths": (2, 3, 2, [0, 0]),
    "H1": (2, 3, 1, [3, 1]),
    "B1-H1": (1, 1, 1, None),
}


def _shape(name: str) -> tuple[int, int, int, Tensor | None]:
    b, t, h, lengths = SHAPES[name]
    return b, t, h, None if lengths is None else torch.tensor(lengths, dtype=torch.long)


def _assert_state_kept(outs_last: Tensor, init: Tensor | None, steps: int, lengths: Any) -> None:
    """With no step to run, the final state is the initial one (zeros when none)."""
    if steps == 0 or (lengths is not None and not bool((lengths > 0).any())):
        want = torch.zeros_like(outs_last) if init is None else init
        assert torch.equal(outs_last, want), "final state != initial state"


# ------------------------------------------------------------------------------------------------
# ops
# ------------------------------------------------------------------------------------------------


@case("scan", *SHAPES)
def case_linear_scan(shape: str) -> None:
    from ctrlrnn.ops.linear_scan import linear_scan

    B, T, C, lengths = _shape(shape)
    a, b, h0 = _u(B, T, C, seed=1), _r(B, T, C, seed=2), _r(B, C, seed=3)
    for reverse in (False, True):
        for init in (None, h0):
            outs = _both_paths(
                lambda a, b, h0, reverse=reverse: linear_scan(
                    a, b, h0, reverse=reverse, lengths=lengths, return_last=True
                ),
                [a, b, init],
            )
            assert outs[0].shape == (B, T, C) and outs[1].shape == (B, C)
            _assert_state_kept(outs[1], init, T, lengths)


@case("scan", *SHAPES)
def case_qrnn_pooling(shape: str) -> None:
    from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, qrnn_pooling

    B, T, H, lengths = _shape(shape)
    for pooling, G in GATES_PER_MODE.items():
        gates, c0 = _r(B, T, G * H, seed=4), _r(B, H, seed=5)
        keep = (_u(B, T, H, seed=6) > 0.3).float()
        for init, kw in ((None, {}), (c0, dict(keep=keep, keep_scale=0.75))):
            outs = _both_paths(
                lambda g, c0, kw=kw, pooling=pooling: qrnn_pooling(
                    g, c0, pooling=pooling, lengths=lengths, **kw
                ),
                [gates, init],
            )
            assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H)]
            _assert_state_kept(outs[2], init, T, lengths)


@case("scan", "B0", "T0", "D0", "N0", "size1")
def case_cached_linear(shape: str) -> None:
    from ctrlrnn.ops.cached_linear import cached_linear

    lead, D, N = {
        "B0": ((0, 3), 4, 3), "T0": ((2, 0), 4, 3), "D0": ((2, 3), 0, 3),
        "N0": ((2, 3), 4, 0), "size1": ((1, 1), 1, 1),
    }[shape]  # fmt: skip
    outs = _both_paths(cached_linear, [_r(*lead, D), _r(N, D, seed=1), _r(N, seed=2)])
    assert outs[0].shape == (*lead, N)


@case("cells", *SHAPES)
def case_lstm_gru(shape: str) -> None:
    from ctrlrnn.ops.fused_cells import gru_sequence, lstm_sequence

    B, T, H, lengths = _shape(shape)
    h0, c0 = _r(B, H, seed=1), _r(B, H, seed=2)
    outs = _both_paths(
        lambda *a: lstm_sequence(*a, lengths=lengths),
        [_r(B, T, 4 * H), 0.5 * _r(4 * H, H, seed=3), h0, c0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H), (B, H)]
    _assert_state_kept(outs[2], h0, T, lengths)
    _assert_state_kept(outs[3], c0, T, lengths)
    outs = _both_paths(
        lambda *a: gru_sequence(*a, lengths=lengths),
        [_r(B, T, 3 * H), 0.5 * _r(3 * H, H, seed=3), _r(3 * H, seed=4), h0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, H)]
    _assert_state_kept(outs[1], h0, T, lengths)


@case("cells", *SHAPES)
def case_cas_lstm_ncarnn(shape: str) -> None:
    from ctrlrnn.ops.fused_cells import cas_lstm_sequence, ncarnn_sequence

    B, T, H, lengths = _shape(shape)
    h0, c0 = _r(B, H, seed=1), _r(B, H, seed=2)
    for peephole in (False, True):
        w = 0.5 * _r((4 if peephole else 5) * H, H, seed=3)
        pp = _r(2, H, seed=4) if peephole else None
        lam = 0.25 + 0.5 * _u(H, seed=5)
        outs = _both_paths(
            lambda x, w, low, h0, c0, lam, pp: cas_lstm_sequence(
                x, w, low, h0, c0, lengths, lam, pp
            ),
            [_r(B, T, 5 * H), w, _r(B, T, H, seed=6), h0, c0, lam, pp],
        )
        assert [o.shape for o in outs] == [(B, T, H), (B, T, H), (B, H), (B, H)]
        _assert_state_kept(outs[3], c0, T, lengths)
    outs = _both_paths(
        lambda *a: ncarnn_sequence(*a, lengths=lengths),
        [_r(B, T, 3 * H), 0.5 * _r(2 * H, H, seed=3), _r(B, 2 * H, seed=7), h0],
    )
    assert [o.shape for o in outs] == [(B, T, H), (B, H)]
    _assert_state_kept(outs[1], h0, T, lengths)


@case("metagross", *SHAPES)
def case_metagross_level(shape: str) -> None:
    from ctrlrnn.ops.metagross_level import metagross_level

    B, T, H, lengths = _shape(shape)
    for k in (1, 2):
        s0 = _r(B, k * H, seed=1)
        P, res = _r(B, T, 3, k, H, seed=2), _r(B, T, 1, H, seed=3)
        child = _r(B, T, k, 2, H, seed=4)
        alpha, beta = _u(B, T, k, 1, seed=5), _u(B, T, k, 1, seed=6)
        for h_form in (True, False):
            for kids in ((None, None, None), (child, alpha, beta)):
                for init, r in ((None, None), (s0, res)):
                    outs = _both_paths(
                        lambda P, c, a, b, r, s, h_form=h_form: metagross_level(
                            P, c, a, b, r, s, lengths, h_form
                        ),
                        [P, *kids, r, init],
                    )
                    assert [o.shape for o in outs] == [(B, T, k * H), (B, k * H)]
                    _assert_state_kept(outs[1], init, T, lengths)


# ------------------------------------------------------------------------------------------------
# layers: a batch of size 0 as torch.nn.LSTM
# ------------------------------------------------------------------------------------------------

D, HID = 4, 4


def _layer_factories() -> dict[str, Callable[[], torch.nn.Module]]:
    import ctrlrnn

    kw: dict[str, Any] = dict(batch_first=True)
    return {
        "qrnn": lambda: ctrlrnn.QRNN(D, HID, **kw),
        "qrnn-2-bi": lambda: ctrlrnn.QRNN(D, HID, num_layers=2, bidirectional=True, **kw),
        "rcrn": lambda: ctrlrnn.RCRN(D, HID, **kw),
        "rcrn-gru-bi": lambda: ctrlrnn.RCRN(D, HID, cell="gru", bidirectional=True, **kw),
        "caslstm": lambda: ctrlrnn.CASLSTM(D, HID, num_layers=2, **kw),
        "carnn-n": lambda: ctrlrnn.CARNN(D, HID, 3, variant="n", **kw),
        "carnn-i": lambda: ctrlrnn.CARNN(D, HID, 3, variant="i", **kw),
        "carnn-s": lambda: ctrlrnn.CARNN(D, HID, None, variant="s", **kw),
        "metagross": lambda: ctrlrnn.Metagross(D, HID, depth=2, **kw),
        "metagross-lstm": lambda: ctrlrnn.Metagross(D, HID, depth=2, base="lstm", **kw),
        "metagross-state": lambda: ctrlrnn.Metagross(D, HID, depth=2, gates="state", **kw),
        "metagross-c-bi": lambda: ctrlrnn.Metagross(
            D, HID, depth=2, recurrence="c", bidirectional=True, **kw
        ),
    }


LAYERS = ["qrnn", "qrnn-2-bi", "rcrn", "rcrn-gru-bi", "caslstm", "carnn-n", "carnn-i",
          "carnn-s", "metagross", "metagross-lstm", "metagross-c-bi"]  # fmt: skip


def _lstm_like_batch0(module: torch.nn.Module, call: Callable[..., Any]) -> None:
    """Output ``(0, T, out)`` and every final state ``(L*D, 0, S)``, as torch.nn.LSTM gives;
    backward gives the input an empty gradient and every parameter a zero (or no) gradient."""
    steps = 3
    x = torch.randn(0, steps, D, requires_grad=True)
    out, h_n = call(x)
    lstm = torch.nn.LSTM(D, HID, batch_first=True, num_layers=module.num_layers,
                         bidirectional=module.bidirectional)  # fmt: skip
    lstm_out, (lstm_h, _) = lstm(torch.randn(0, steps, D))
    assert out.shape == (0, steps, module.output_size) and out.dtype == x.dtype
    assert lstm_out.shape[:2] == out.shape[:2]
    for k, s in enumerate([h_n] if isinstance(h_n, Tensor) else list(h_n)):
        assert s.shape == (lstm_h.shape[0], 0, module.state_size(k)), (k, s.shape)
        assert lstm_h.shape[1] == 0
    (out.sum() + sum(s.sum() for s in _flat(h_n))).backward()
    assert x.grad is not None and x.grad.shape == x.shape
    for name, p in module.named_parameters():
        assert p.grad is None or not p.grad.any(), name


@case("layers", *LAYERS)
def case_layer_batch0(name: str) -> None:
    for reference in (False, True):
        if reference:
            os.environ["CTRLRNN_BACKEND"] = "reference"
        try:
            torch.manual_seed(0)
            module = _layer_factories()[name]()
            ctx = torch.randn(0, 3) if name in ("carnn-n", "carnn-i") else None

            def call(x, hx=None, lengths=None, module=module, ctx=ctx):
                if name.startswith("carnn"):
                    return module(x, ctx, hx, lengths=lengths)
                return module(x, hx, lengths=lengths)

            _lstm_like_batch0(module, call)
            # with initial states and lengths of a batch of 0 as well
            x = torch.randn(0, 3, D)
            _, h_n = call(x)
            out, h_again = call(x, h_n, torch.zeros(0, dtype=torch.long))
            assert out.shape == (0, 3, module.output_size)
            assert [s.shape for s in _flat(h_again)] == [s.shape for s in _flat(h_n)]
        finally:
            os.environ.pop("CTRLRNN_BACKEND", None)


@case("layers", *LAYERS)
def case_layer_no_steps_refused(name: str) -> None:
    """Zero time steps stay a ValueError naming ``input`` (the layers' policy)."""
    torch.manual_seed(0)
    module = _layer_factories()[name]()
    for batch in (0, 2):
        args: list[Any] = [torch.randn(batch, 0, D)]
        if name in ("carnn-n", "carnn-i"):
            args.append(torch.randn(batch, 3))
        try:
            module(*args)
        except ValueError as exc:
            assert "input" in str(exc), exc
        else:
            raise AssertionError("a sequence of 0 steps was accepted")


@case("layers", "B0", "size1")
def case_metagross_ffn(shape: str) -> None:
    import ctrlrnn

    torch.manual_seed(0)
    ffn = ctrlrnn.MetagrossFFN(D, depth=2)
    lead = (0, 3) if shape == "B0" else (1, 1)
    outs = _both_paths(lambda x: ffn(x), [torch.randn(*lead, D)])
    assert outs[0].shape == (*lead, D)


# ------------------------------------------------------------------------------------------------
# the subprocess side and the tests
# ------------------------------------------------------------------------------------------------


def run_group(group: str, skip: Sequence[str] = ()) -> None:
    """Run the cases of ``group`` but ``skip``, printing one result line per case as it ends."""
    torch.set_num_threads(2)  # several work items per thread: the kernels' block splitting
    for name, (grp, fn) in CASES.items():
        if grp != group or name in skip:
            continue
        try:
            fn()
            result = {"case": name, "ok": True}
        except Exception:  # noqa: BLE001 - reported to the parent test
            result = {"case": name, "ok": False, "error": traceback.format_exc()[-3000:]}
        print(MARK + json.dumps(result), flush=True)


MAX_CRASHES = 3  # per group: after a crash the group goes on after the case that crashed


@functools.cache
def _group_results(group: str) -> dict[str, dict[str, Any]]:
    """Each case's result; a case that ended its subprocess by a signal (or an exit) gets an
    error naming it, and the next subprocess goes on after it."""
    names = [n for n, (g, _) in CASES.items() if g == group]
    env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_BACKEND"}
    results: dict[str, dict[str, Any]] = {}
    for _ in range(MAX_CRASHES + 1):
        code = (
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('empty_shape_cases', {__file__!r})\n"
            "mod = importlib.util.module_from_spec(spec)\n"
            "sys.modules['empty_shape_cases'] = mod\n"
            "spec.loader.exec_module(mod)\n"
            f"mod.run_group({group!r}, {sorted(results)!r})\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
        )
        for line in proc.stdout.splitlines():
            if line.startswith(MARK):
                r = json.loads(line[len(MARK) :])
                results[r["case"]] = r
        pending = [n for n in names if n not in results]
        if proc.returncode == 0 or not pending:
            break
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else (
            f"exit status {proc.returncode}")  # fmt: skip
        error = f"this case ended its subprocess ({how}); stderr:\n{proc.stderr[-3000:]}"
        results[pending[0]] = {"case": pending[0], "ok": False, "error": error}
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    group = CASES[name][0]
    results = _group_results(group)
    if name not in results:
        pytest.fail(f"not run: the subprocesses of group {group!r} crashed {MAX_CRASHES + 1} "
                    "times before this case")  # fmt: skip
    r = results[name]
    assert r["ok"], r.get("error")
