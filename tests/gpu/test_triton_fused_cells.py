"""The Triton kernels of the fused cells (LSTM, GRU, CAS-LSTM, nCARNN) against the references,
in Triton's CPU interpreter.

As ``test_triton_linear_scan.py``: ``conftest.py`` sets ``TRITON_INTERPRET=1``; the cell ops run
their Triton kernels on CPU tensors (``kernel_routes.py``) and are compared with
:mod:`ctrlrnn.ops.cells_ref` in float64 differentiated by autograd: forward outputs, final
states and the gradients of every input; NaN and Inf parity; empty shapes. The layer tests
route the cell ops' CPU kernels to the Triton module (what a CUDA tensor gets) and check that
the CASLSTM and CARNN layers reach the kernels and equal the reference path. Shapes are tiny
(B = 3, T = 3, H = 8 or 5: a partial block of 16 under the interpreter) because the
interpreter's cost grows with every row and step (one launch a step). The METAGROSS cell of the
same module is ``test_triton_metagross_state.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch import Tensor

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

import kernel_routes as cells_triton  # noqa: E402
from kernel_routes import Spy, route, triton_cells, triton_module  # noqa: E402,F401
from triton_tolerances import INF, NAN, close, parity, poke, weights  # noqa: E402

from ctrlrnn.nn.carnn import CARNN  # noqa: E402
from ctrlrnn.nn.cas_lstm import CASLSTM  # noqa: E402
from ctrlrnn.ops import cells_ref, fused_cells  # noqa: E402
from ctrlrnn.ops.cells import gru as gru_mod  # noqa: E402
from ctrlrnn.ops.cells import lstm as lstm_mod  # noqa: E402
from ctrlrnn.ops.cells import ncarnn as ncarnn_mod  # noqa: E402

pytestmark = pytest.mark.usefixtures("triton_cells")

B, T, H = 3, 3, 8
#: a full row, an empty one and a partial one
LENGTHS = [3, 0, 2]


def _compare(
    fn: Callable[..., Sequence[Tensor]],
    ref_fn: Callable[..., Sequence[Tensor]],
    args: Sequence[Tensor | None],
    lengths: Tensor | None,
    dtype: torch.dtype,
    seed: int,
) -> tuple[list[Tensor], list[Tensor | None]]:
    """Run both on ``args`` (``dtype`` vs float64 copies), compare outputs and all gradients."""
    leaves = [a.to(dtype).requires_grad_() if a is not None else None for a in args]
    leaves64 = [a.double().requires_grad_() if a is not None else None for a in args]
    outs = fn(*leaves, lengths=lengths)
    ref = ref_fn(*leaves64, lengths=lengths)
    for k, (x, y) in enumerate(zip(outs, ref, strict=True)):
        close(x, y, dtype, f"output {k}")
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(x.shape, generator=g) for x in outs]
    inputs = [a for a in leaves if a is not None]
    got = torch.autograd.grad(outs, inputs, [w.to(dtype) for w in ws])
    want = torch.autograd.grad(ref, [a for a in leaves64 if a is not None],
                               [w.double() for w in ws])  # fmt: skip
    for k, (x, y) in enumerate(zip(got, want, strict=True)):
        close(x, y, dtype, f"gradient {k}")
    return list(outs), list(got)


# ------------------------------------------------------------------------------------------------
# LSTM and GRU (torch GEMMs + Triton pointwise kernels)
# ------------------------------------------------------------------------------------------------


def _cell_inputs(kind: str, dtype: torch.dtype, H: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    G = 4 if kind == "lstm" else 3
    x = torch.randn(B, T, G * H, generator=g)
    w = 0.4 * torch.randn(G * H, H, generator=g)
    h0 = torch.randn(B, H, generator=g)
    third = torch.randn(B, H, generator=g) if kind == "lstm" else torch.randn(G * H, generator=g)
    # argument order of the references: lstm (x, w, h0, c0), gru (x, w, bias_hh, h0)
    args = [x, w, h0, third] if kind == "lstm" else [x, w, third, h0]
    return [t.to(dtype).requires_grad_() for t in args]


# cell, dtype and lengths cross pairwise (each value of one meets each value of another)
CELL_PARAMS = [
    pytest.param("lstm", torch.float32, None, id="lstm-fp32"),
    pytest.param("lstm", torch.bfloat16, LENGTHS, id="lstm-bf16-lengths"),
    pytest.param("gru", torch.float32, LENGTHS, id="gru-fp32-lengths"),
    pytest.param("gru", torch.bfloat16, None, id="gru-bf16"),
]


@pytest.mark.parametrize(("kind", "dtype", "lengths"), CELL_PARAMS)
def test_lstm_gru_forward_backward(kind, dtype, lengths):
    args = _cell_inputs(kind, dtype, H=10, seed=8)
    lens = torch.tensor(lengths) if lengths is not None else None
    fn = cells_triton.lstm_sequence if kind == "lstm" else cells_triton.gru_sequence
    ref_fn = cells_ref.lstm_sequence_ref if kind == "lstm" else cells_ref.gru_sequence_ref
    outs = fn(*args, lens)
    args64 = [a.detach().double().requires_grad_() for a in args]
    ref = ref_fn(*args64, lens)
    for x, y in zip(outs, ref):
        close(x, y, dtype)
    ws = [torch.randn(x.shape, generator=torch.Generator().manual_seed(9)) for x in outs]
    got = torch.autograd.grad(outs, args, [w.to(dtype) for w in ws])
    want = torch.autograd.grad(ref, args64, [w.double() for w in ws])
    for x, y in zip(got, want):
        close(x, y, dtype)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_lstm_gru_gradcheck_float64(kind):
    g = torch.Generator().manual_seed(10)
    H, G = 2, (4 if kind == "lstm" else 3)
    x = torch.randn(2, 3, G * H, generator=g, dtype=torch.float64).requires_grad_()
    w = (0.5 * torch.randn(G * H, H, generator=g, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(2, H, generator=g, dtype=torch.float64).requires_grad_()
    lens = torch.tensor([3, 2])
    if kind == "lstm":
        c0 = torch.randn(2, H, generator=g, dtype=torch.float64).requires_grad_()
        assert torch.autograd.gradcheck(
            lambda *a: cells_triton.lstm_sequence(*a, lens), (x, w, h0, c0), fast_mode=True
        )
    else:
        bias = torch.randn(G * H, generator=g, dtype=torch.float64).requires_grad_()
        assert torch.autograd.gradcheck(
            lambda *a: cells_triton.gru_sequence(*a, lens), (x, w, bias, h0), fast_mode=True
        )


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_lstm_gru_nonfinite(kind):
    B, H = 3, 5
    g = torch.Generator().manual_seed(3)
    G = 4 if kind == "lstm" else 3
    x = poke(torch.randn(B, T, G * H, generator=g),
              [((0, 2, 1), NAN), ((1, 1, H), INF), ((1, 2, 2 * H + 2), -INF),
               ((2, 0, 3), 1e4), ((2, 1, 0), -1e4)])  # fmt: skip
    w = 0.4 * torch.randn(G * H, H, generator=g)
    h0 = poke(torch.randn(B, H, generator=g), [((2, 3), -INF)])
    third = poke(torch.randn(B, H, generator=g), [((1, 1), INF)]) if kind == "lstm" else (
        torch.randn(G * H, generator=g))  # fmt: skip
    args = [x, w, h0, third] if kind == "lstm" else [x, w, third, h0]
    fn = cells_triton.lstm_sequence if kind == "lstm" else cells_triton.gru_sequence
    ref_fn = cells_ref.lstm_sequence_ref if kind == "lstm" else cells_ref.gru_sequence_ref
    leaves = [t.clone().requires_grad_() for t in args]
    ref_leaves = [t.clone().requires_grad_() for t in args]
    outs, ref = fn(*leaves), ref_fn(*ref_leaves)
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        parity(o.detach(), r.detach(), f"output {k}")
    ws = weights(*outs)
    got = torch.autograd.grad(outs, leaves, ws)
    want = torch.autograd.grad(ref, ref_leaves, ws)
    for k, (x_, y_) in enumerate(zip(got, want, strict=True)):
        parity(x_, y_, f"gradient {k}")


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_lstm_empty_shapes(batch, steps):
    """Right shapes, final states = initial states, no launch failure."""
    H = 5
    g = torch.Generator().manual_seed(4)
    h0 = torch.randn(batch, H, generator=g)
    w = torch.randn(4 * H, H, generator=g).requires_grad_()
    x = torch.randn(batch, steps, 4 * H, generator=g).requires_grad_()
    h_seq, c_seq, h_n, c_n = cells_triton.lstm_sequence(x, w, h0, h0)
    assert h_seq.shape == (batch, steps, H) and h_n.shape == (batch, H)
    assert steps > 0 or (torch.equal(h_n, h0) and torch.equal(c_n, h0))
    (h_seq.sum() + h_n.sum() + c_n.sum()).backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and not w.grad.any()


# ------------------------------------------------------------------------------------------------
# CAS-LSTM (eq 7-13; peepholes eq 17-18)
# ------------------------------------------------------------------------------------------------


def _cas_args(lam: str, peephole: bool, seed: int, hidden: int = H) -> list[Tensor | None]:
    """(x_proj, weight_hh, lower_c, h0, c0, scale_f, scale_g, peephole) as the reference takes
    them; ``lam``: "const" (0.5), "vector" (a per-channel lambda in (0, 1)) or "none" (plain sum,
    ones)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, 5 * hidden, generator=g)
    w = 0.4 * torch.randn((4 if peephole else 5) * hidden, hidden, generator=g)
    low = torch.randn(B, T, hidden, generator=g)
    h0, c0 = torch.randn(B, hidden, generator=g), torch.randn(B, hidden, generator=g)
    if lam == "const":
        sg = torch.full((hidden,), 0.5)
    elif lam == "vector":
        sg = torch.rand(hidden, generator=g)
    else:
        sg = torch.ones(hidden)
    sf = torch.ones(hidden) if lam == "none" else 1 - sg
    pp = 0.5 * torch.randn(2, hidden, generator=g) if peephole else None
    return [x, w, low, h0, c0, sf, sg, pp]


CAS_PARAMS = [
    pytest.param(torch.float32, None, "const", False, id="fp32-const"),
    pytest.param(torch.float32, LENGTHS, "vector", False, id="fp32-lengths-vector"),
    pytest.param(torch.float32, [2, 3, 1], "none", True, id="fp32-lengths-plain-peephole"),
    pytest.param(torch.bfloat16, LENGTHS, "vector", True, id="bf16-lengths-vector-peephole"),
]


@pytest.mark.parametrize(("dtype", "lengths", "lam", "peephole"), CAS_PARAMS)
def test_cas_lstm_forward_backward(dtype, lengths, lam, peephole):
    lens = torch.tensor(lengths) if lengths is not None else None
    args = _cas_args(lam, peephole, seed=1)
    outs, grads = _compare(cells_triton.cas_lstm_sequence, cells_ref.cas_lstm_sequence_ref, args,
                           lens, dtype, seed=2)  # fmt: skip
    if lens is not None:  # padded steps: zero outputs, zero gradients of x_proj and lower_c
        pad = torch.arange(T)[None, :] >= lens[:, None]
        assert not outs[0][pad].any() and not outs[1][pad].any()
        assert not grads[0][pad].any() and not grads[2][pad].any()


def test_cas_lstm_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    hid = 2
    x = torch.randn(2, 3, 5 * hid, generator=g, dtype=torch.float64)
    w = 0.5 * torch.randn(4 * hid, hid, generator=g, dtype=torch.float64)
    low = torch.randn(2, 3, hid, generator=g, dtype=torch.float64)
    h0, c0 = (torch.randn(2, hid, generator=g, dtype=torch.float64) for _ in range(2))
    lam = torch.rand(hid, generator=g, dtype=torch.float64)
    pp = torch.randn(2, hid, generator=g, dtype=torch.float64)
    args = [a.requires_grad_() for a in (x, w, low, h0, c0, 1 - lam, lam, pp)]
    lens = torch.tensor([3, 2])
    assert torch.autograd.gradcheck(
        lambda *a: cells_triton.cas_lstm_sequence(*a, lengths=lens), args, fast_mode=True
    )


# ------------------------------------------------------------------------------------------------
# nCARNN (CARNN eq 3)
# ------------------------------------------------------------------------------------------------


def _ncarnn_args(seed: int, hidden: int = H) -> list[Tensor | None]:
    """(x_proj, weight_hh, context_proj, h0) as the reference takes them."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(B, T, 3 * hidden, generator=g),
        0.4 * torch.randn(2 * hidden, hidden, generator=g),
        torch.randn(B, 2 * hidden, generator=g),
        torch.randn(B, hidden, generator=g),
    ]


@pytest.mark.parametrize(
    ("dtype", "lengths"),
    [(torch.float32, None), (torch.float32, LENGTHS), (torch.bfloat16, [2, 3, 1])],
    ids=["fp32", "fp32-lengths", "bf16-lengths"],
)
def test_ncarnn_forward_backward(dtype, lengths):
    lens = torch.tensor(lengths) if lengths is not None else None
    outs, grads = _compare(cells_triton.ncarnn_sequence, cells_ref.ncarnn_sequence_ref,
                           _ncarnn_args(seed=4), lens, dtype, seed=5)  # fmt: skip
    if lens is not None:
        pad = torch.arange(T)[None, :] >= lens[:, None]
        assert not outs[0][pad].any() and not grads[0][pad].any()


def test_ncarnn_gradcheck_float64():
    g = torch.Generator().manual_seed(6)
    hid = 2
    args = [
        torch.randn(2, 3, 3 * hid, generator=g, dtype=torch.float64),
        0.5 * torch.randn(2 * hid, hid, generator=g, dtype=torch.float64),
        torch.randn(2, 2 * hid, generator=g, dtype=torch.float64),
        torch.randn(2, hid, generator=g, dtype=torch.float64),
    ]
    lens = torch.tensor([3, 1])
    assert torch.autograd.gradcheck(
        lambda *a: cells_triton.ncarnn_sequence(*a, lengths=lens),
        [a.requires_grad_() for a in args],
        fast_mode=True,
    )


# ------------------------------------------------------------------------------------------------
# CAS-LSTM and nCARNN: NaN / +-Inf parity and empty shapes
# ------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("kind", ["cas", "cas-peephole", "ncarnn"])
def test_cas_ncarnn_nonfinite(kind):
    h = 5
    if kind == "ncarnn":
        args = _ncarnn_args(seed=7, hidden=h)
        fn, ref_fn = cells_triton.ncarnn_sequence, cells_ref.ncarnn_sequence_ref
        x_pokes = [((0, 2, 1), NAN), ((1, 1, h), INF), ((1, 2, 2 * h + 2), -INF),
                   ((2, 0, 3), 1e4), ((2, 1, 2 * h), -1e4)]  # fmt: skip
        args[2] = poke(args[2], [((2, 1), -INF)])  # the context projection
    else:
        args = _cas_args("vector", kind == "cas-peephole", seed=7, hidden=h)
        fn, ref_fn = cells_triton.cas_lstm_sequence, cells_ref.cas_lstm_sequence_ref
        x_pokes = [((0, 2, 1), NAN), ((1, 1, h), INF), ((1, 2, 2 * h + 2), -INF),
                   ((2, 0, 4 * h + 3), 1e4), ((2, 1, 4 * h), -1e4)]  # fmt: skip
        args[2] = poke(args[2], [((0, 1, 2), INF), ((2, 2, 0), NAN)])  # lower_c
        args[4] = poke(args[4], [((1, 1), INF)])  # c0
    args[0] = poke(args[0], x_pokes)
    args[3] = poke(args[3], [((2, 3), -INF)])  # h0
    leaves = [a.clone().requires_grad_() if a is not None else None for a in args]
    ref_leaves = [a.clone().requires_grad_() if a is not None else None for a in args]
    outs, ref = fn(*leaves), ref_fn(*ref_leaves)
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        parity(o.detach(), r.detach(), f"output {k}")
    g = torch.Generator().manual_seed(8)
    ws = [torch.randn(o.shape, generator=g) for o in outs]
    got = torch.autograd.grad(outs, [a for a in leaves if a is not None], ws)
    want = torch.autograd.grad(ref, [a for a in ref_leaves if a is not None], ws)
    for k, (x, y) in enumerate(zip(got, want, strict=True)):
        parity(x, y, f"gradient {k}")
    assert torch.isnan(outs[0]).any() and torch.isfinite(outs[0]).any()


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_cas_ncarnn_empty_shapes(batch, steps):
    g = torch.Generator().manual_seed(9)
    h0, c0 = torch.randn(batch, H, generator=g), torch.randn(batch, H, generator=g)
    x = torch.randn(batch, steps, 5 * H, generator=g).requires_grad_()
    w = torch.randn(5 * H, H, generator=g).requires_grad_()
    low = torch.randn(batch, steps, H, generator=g).requires_grad_()
    sg = torch.full((H,), 0.5).requires_grad_()
    h_seq, c_seq, h_n, c_n = cells_triton.cas_lstm_sequence(x, w, low, h0, c0, 1 - sg, sg)
    assert h_seq.shape == c_seq.shape == (batch, steps, H) and h_n.shape == (batch, H)
    assert steps > 0 or (torch.equal(h_n, h0) and torch.equal(c_n, c0))
    (h_seq.sum() + h_n.sum() + c_n.sum()).backward()
    assert x.grad.shape == x.shape and low.grad.shape == low.shape and not w.grad.any()
    assert sg.grad is not None and not sg.grad.any()

    xn = torch.randn(batch, steps, 3 * H, generator=g).requires_grad_()
    wn = torch.randn(2 * H, H, generator=g).requires_grad_()
    ctx = torch.randn(batch, 2 * H, generator=g).requires_grad_()
    hn_seq, hn_last = cells_triton.ncarnn_sequence(xn, wn, ctx, h0)
    assert hn_seq.shape == (batch, steps, H) and (steps > 0 or torch.equal(hn_last, h0))
    (hn_seq.sum() + hn_last.sum()).backward()
    assert xn.grad.shape == xn.shape and ctx.grad.shape == ctx.shape and not ctx.grad.any()


# ------------------------------------------------------------------------------------------------
# the public ops and the layers reach the kernels (the dispatch a CUDA tensor gets)
# ------------------------------------------------------------------------------------------------


def _force(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> Spy:
    """Route the cell ops as for CUDA tensors: their Triton kernels (``gpu``, counted) or no
    kernel (the reference path)."""
    spy = Spy(triton_module("cells"))
    route(monkeypatch, "cells", spy if gpu else None)
    return spy


def _layer_run(model: torch.nn.Module, call: Callable[[], Tensor]) -> list[Tensor]:
    """The output and the gradients of every parameter for a fixed random weighting."""
    model.zero_grad()
    out = call()
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(10))
    (out * w).sum().backward()
    return [out.detach()] + [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("peephole", [False, True], ids=["trainable-lambda", "peephole"])
def test_caslstm_layer_runs_the_kernels(monkeypatch, peephole):
    torch.manual_seed(11)
    lam = None if peephole else "trainable"
    model = CASLSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True, lambda_=lam,
                    peephole=peephole)  # fmt: skip
    x = torch.randn(B, T, 4)
    lengths = torch.tensor([3, 1, 2])

    def call() -> Tensor:
        out, (h_n, c_n) = model(x, lengths=lengths)
        return torch.cat([out.flatten(), h_n.flatten(), c_n.flatten()])

    spy = _force(monkeypatch, gpu=True)
    got = _layer_run(model, call)
    # layer 1 on the LSTM kernel, both directions as one stack (one batch of rows); layer 2 on
    # the CAS-LSTM kernel, one call per direction (its lambda is per recurrence)
    assert spy.calls == {"lstm_forward": 1, "lstm_backward": 1, "cas_lstm_forward": 2,
                         "cas_lstm_backward": 2}  # fmt: skip
    _force(monkeypatch, gpu=False)
    want = _layer_run(model, call)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        close(a, b, torch.float32, f"tensor {k}")


def test_carnn_layer_runs_the_kernels(monkeypatch):
    torch.manual_seed(12)
    model = CARNN(4, 6, context_size=3, variant="n", num_layers=2, batch_first=True)
    x, context = torch.randn(B, T, 4), torch.randn(B, 3)
    lengths = torch.tensor([3, 1, 2])

    def call() -> Tensor:
        out, h_n = model(x, context, lengths=lengths)
        return torch.cat([out.flatten(), h_n.flatten()])

    spy = _force(monkeypatch, gpu=True)
    got = _layer_run(model, call)
    assert spy.calls == {"ncarnn_forward": 2, "ncarnn_backward": 2}
    _force(monkeypatch, gpu=False)
    want = _layer_run(model, call)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        close(a, b, torch.float32, f"tensor {k}")


def test_public_op_scalar_lambda_half(monkeypatch):
    """``fused_cells.cas_lstm_sequence`` with a 0-d trainable lambda (expanded to (H,) before
    the kernel) and fp16 inputs: outputs in fp16, the gradient reaches lambda."""
    spy = _force(monkeypatch, gpu=True)
    x, w, low, h0, c0, _, _, _ = _cas_args("const", False, seed=13)
    lam = torch.tensor(0.3, requires_grad=True)
    xh, lowh = x.half().requires_grad_(), low.half()
    outs = fused_cells.cas_lstm_sequence(xh, w.half(), lowh, h0.half(), c0.half(), lambda_=lam)
    assert spy.calls == {"cas_lstm_forward": 1} and all(o.dtype == torch.float16 for o in outs)
    got = torch.autograd.grad(outs[0].float().sum(), (xh, lam))
    ref = cells_ref.cas_lstm_sequence_ref(
        xh.detach().double(), w.half().double(), lowh.double(), h0.half().double(),
        c0.half().double(), 1 - lam.double().expand(H), lam.double().expand(H),
    )  # fmt: skip
    close(outs[0], ref[0], torch.float16)
    want = torch.autograd.grad(ref[0].sum(), lam)[0]
    torch.testing.assert_close(got[1], want, rtol=3e-2, atol=3e-2)


def _stack_inputs(cell: str, R: int, seed: int) -> list[Tensor]:
    """The op inputs of R recurrences of ``cell`` stacked on a leading dimension (float64)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, scale: float = 1.0) -> Tensor:
        return scale * torch.randn(R, *shape, generator=g, dtype=torch.float64)

    if cell == "lstm":
        return [r(B, T, 4 * H), r(4 * H, H, scale=0.3), r(B, H), r(B, H)]
    if cell == "gru":
        return [r(B, T, 3 * H), r(3 * H, H, scale=0.3), r(3 * H), r(B, H)]
    return [r(B, T, 3 * H), r(2 * H, H, scale=0.3), r(B, 2 * H), r(B, H)]  # ncarnn


class _Launches:
    """Stands for a step kernel and records the grid of every launch."""

    def __init__(self, kernel) -> None:
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


@pytest.mark.parametrize("cell", ["lstm", "gru", "ncarnn"])
def test_triton_host_batches_a_stack_of_recurrences(cell, monkeypatch):
    """A stack of R recurrences of a cell whose step kernels read nothing per recurrence but U
    runs as one batch of R * B rows: one step kernel launch per step (forward and backward)
    for all of them, each recurrence's rows with its own U (and GRU's own recurrent bias), with
    the results of one call each, outputs and every gradient."""
    from ctrlrnn.ops.cells import triton_host

    R = 2
    kernels = triton_host._KERNELS[cell]
    assert triton_host.takes_stack(cell)
    args = _stack_inputs(cell, R, seed=21)
    lengths = torch.tensor([T, 0, 2])
    forward = getattr(triton_host, f"{cell}_forward")
    backward = getattr(triton_host, f"{cell}_backward")
    launches = _Launches(kernels.step_forward)
    monkeypatch.setattr(kernels, "step_forward", launches)
    out = forward(*args, lengths, True)
    assert [grid[0] for grid in launches.grids] == [R * B] * T  # one launch a step, all rows
    monkeypatch.undo()
    n_states = 2 if cell == "lstm" else 1
    g = torch.Generator().manual_seed(3)
    grads = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in out[: 2 * n_states]]
    named = {"x_proj": args[0], "weight_hh": args[1], "h0": args[2 if cell == "lstm" else 3],
             "c0": args[3], "h_seq": out[0], "c_seq": out[1] if cell == "lstm" else None,
             "acts": out[-1]}  # fmt: skip
    cell_module = {"lstm": lstm_mod, "gru": gru_mod, "ncarnn": ncarnn_mod}[cell]
    saved = [named[n] for n in cell_module.CELL.saved]
    launches = _Launches(kernels.step_backward)
    monkeypatch.setattr(kernels, "step_backward", launches)
    back = backward(*grads, *saved, lengths)
    assert [grid[0] for grid in launches.grids] == [R * B] * T
    monkeypatch.undo()
    for r in range(R):
        one = forward(*(a[r] for a in args), lengths, True)
        for x, y in zip(out, one, strict=True):
            torch.testing.assert_close(x[r], y, rtol=0, atol=1e-12)
        one_back = backward(*(x[r] for x in grads), *(s[r] for s in saved), lengths)
        for x, y in zip(back, one_back, strict=True):
            torch.testing.assert_close(x[r], y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", ["cas_lstm", "metagross_state"])
def test_triton_host_runs_other_stacks_one_after_another(cell):
    """Cells whose step kernels read per-recurrence parameters (CAS-LSTM's lambda, the
    METAGROSS tree) are not batched: the caller makes one call per recurrence."""
    from ctrlrnn.ops.cells import triton_host

    assert not triton_host.takes_stack(cell)


def test_triton_host_takes_a_stack_of_recurrences():
    """The cell op takes stacked recurrences on every device: the Triton host runs a stack as
    each recurrence's own call would, forward and backward."""
    g = torch.Generator().manual_seed(21)
    args = [torch.randn(2, B, T, 4 * H, generator=g), 0.3 * torch.randn(2, 4 * H, H, generator=g),
            torch.randn(2, B, H, generator=g), torch.randn(2, B, H, generator=g)]  # fmt: skip
    lengths = torch.tensor([T, 0, 2])
    kernels = triton_module("cells")
    out = kernels.lstm_forward(*args, lengths, True)
    for r in range(2):
        one = kernels.lstm_forward(*(a[r] for a in args), lengths, True)
        for a, b in zip(out, one, strict=True):
            torch.testing.assert_close(a[r], b, rtol=1e-5, atol=1e-6)
    grads = [torch.randn_like(out[0]), None, torch.randn_like(out[2]), None]
    saved = [args[1], args[2], args[3], out[0], out[1], out[4]]
    back = kernels.lstm_backward(*grads, *saved, lengths)
    for r in range(2):
        one = kernels.lstm_backward(grads[0][r], None, grads[2][r], None,
                                    *(s[r] for s in saved), lengths)  # fmt: skip
        for a, b in zip(back, one, strict=True):
            torch.testing.assert_close(a[r], b, rtol=1e-5, atol=1e-5)


def test_layer_directions_reach_the_triton_host_as_one_stack(monkeypatch):
    """An RCRN on the fused engine (six LSTMs a layer, both directions) sends its recurrences to
    the Triton host as one stacked call, with the CPU kernels' results."""
    import ctrlrnn
    from ctrlrnn.ops.cells import triton_host

    torch.manual_seed(0)
    m = ctrlrnn.RCRN(4, 6, bidirectional=True, batch_first=True, controllers="fused").double()
    x = torch.randn(3, T, 4, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([T, 2, 1])
    monkeypatch.undo()  # the CPU kernels for the expected values
    want = m(x, lengths=lens)[0]
    want_grads = torch.autograd.grad(want.square().sum(), (x, *m.parameters()))
    route(monkeypatch, "cells", triton_host)
    calls = []
    real = triton_host.lstm_forward

    def counted(*args):
        calls.append(args[1].shape)
        return real(*args)

    monkeypatch.setattr(triton_host, "lstm_forward", counted)
    got = m(x, lengths=lens)[0]
    got_grads = torch.autograd.grad(got.square().sum(), (x, *m.parameters()))
    assert calls == [torch.Size([6, 4 * 6, 6])]
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b)
