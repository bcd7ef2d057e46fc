"""The smoke suite: what must hold on every torch ctrlrnn declares (``scripts/compat-check`` runs
it in one virtual environment per torch version; CI runs it too).

Every layer forward and backward on the compiled kernels equal to the reference path; gradcheck
of the linear scan; ``torch.compile`` (full graph) and ``torch.export`` of a QRNN; a trace
(``torch.jit.trace``) run at another batch and length, and ``torch.jit.script`` refused; a
``torch.compile`` that is the first call of a fresh process; every layer under bfloat16
autocast; ``torch.func.grad``; ``nn.LSTM``/``nn.GRU`` over variable lengths on the fused cells
equal to torch's packed run. Under ``CTRLRNN_BACKEND=reference`` all but the first two check
the reference path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

import ctrlrnn
from ctrlrnn.ops._extension import forced_reference
from ctrlrnn.ops.backend import has_kernel

D64 = torch.float64

#: the tests that compare the compiled kernels with the reference cannot run when
#: ``CTRLRNN_BACKEND=reference`` forces the reference path (the compatibility check runs the
#: suite both ways; the rest of it then checks the reference path alone)
needs_compiled = pytest.mark.skipif(forced_reference(), reason="CTRLRNN_BACKEND=reference")

LAYERS: dict[str, Callable[[], torch.nn.Module]] = {
    "qrnn": lambda: ctrlrnn.QRNN(4, 5, num_layers=2, bidirectional=True, window=2,
                                 pooling="ifo"),
    "qrnn-zoneout": lambda: ctrlrnn.QRNN(4, 5, zoneout=0.2, pooling="fo"),
    "rcrn": lambda: ctrlrnn.RCRN(4, 5, bidirectional=True),
    "cas-lstm": lambda: ctrlrnn.CASLSTM(4, 5, num_layers=2, bidirectional=True,
                                        lambda_="trainable"),
    "ncarnn": lambda: ctrlrnn.CARNN(4, 5, context_size=3, variant="n"),
    "icarnn": lambda: ctrlrnn.CARNN(4, 5, context_size=3, variant="i", bidirectional=True),
    "metagross": lambda: ctrlrnn.Metagross(4, 5, depth=2, bidirectional=True),
    "metagross-lstm-c": lambda: ctrlrnn.Metagross(4, 5, depth=2, base="lstm", recurrence="c"),
    "metagross-state": lambda: ctrlrnn.Metagross(4, 5, depth=2, gates="state",
                                                 bidirectional=True),
    "metagross-ffn": lambda: ctrlrnn.MetagrossFFN(4, depth=2),
}


def _run(model: torch.nn.Module, x: torch.Tensor, lengths: torch.Tensor, ctx: torch.Tensor,
         train: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.train(train)
    torch.manual_seed(5)  # the same zoneout masks on both paths
    if isinstance(model, ctrlrnn.MetagrossFFN):
        out = model(x)
    elif isinstance(model, ctrlrnn.CARNN):
        out = model(x, ctx, lengths=lengths)[0]
    else:
        out = model(x, lengths=lengths)[0]
    leaves = [x, *model.parameters()]
    grads = torch.autograd.grad(out.square().sum(), leaves, allow_unused=True)
    return out.detach(), [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves)]


@needs_compiled
def test_compiled_kernels_are_in_use() -> None:
    cpu = torch.device("cpu")
    assert all(has_kernel(family, cpu) for family in ("scan", "cells", "metagross"))


@needs_compiled
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_compiled_equals_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = LAYERS[name]().to(D64)
    x = torch.randn(3, 6, 4, dtype=D64, requires_grad=True).transpose(0, 1)  # (T, B, D)
    lengths, ctx = torch.tensor([6, 4, 1]), torch.randn(3, 3, dtype=D64)
    results = {}
    for backend in ("compiled", "reference"):
        if backend == "reference":
            monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
        assert has_kernel("scan", torch.device("cpu")) == (backend == "compiled")
        results[backend] = _run(model, x, lengths, ctx, train=name.endswith("zoneout"))
    (out_c, grads_c), (out_r, grads_r) = results["compiled"], results["reference"]
    assert torch.isfinite(out_c).all()
    torch.testing.assert_close(out_c, out_r, rtol=1e-10, atol=1e-10)
    for gc, gr in zip(grads_c, grads_r):
        torch.testing.assert_close(gc, gr, rtol=1e-9, atol=1e-10)


def test_linear_scan_gradcheck() -> None:
    torch.manual_seed(1)
    a = torch.rand(2, 5, 3, dtype=D64, requires_grad=True)
    b = torch.randn(2, 5, 3, dtype=D64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=D64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    for reverse in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, h0, r=reverse: ctrlrnn.linear_scan(a, b, h0, reverse=r, lengths=lengths,
                                                            return_last=True),
            (a, b, h0),
        )


def test_qrnn_torch_compile_full_graph() -> None:
    torch.manual_seed(2)
    model = ctrlrnn.QRNN(4, 8, num_layers=2, window=2, batch_first=True)
    x = torch.randn(3, 7, 4)
    lengths = torch.tensor([7, 5, 2])

    def loss(x: torch.Tensor) -> torch.Tensor:
        out, c_n = model(x, lengths=lengths)
        return out.square().sum() + c_n.sum()

    compiled = torch.compile(loss, fullgraph=True)
    got = torch.autograd.grad(compiled(x.clone().requires_grad_()), list(model.parameters()))
    want = torch.autograd.grad(loss(x.clone().requires_grad_()), list(model.parameters()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_qrnn_torch_export() -> None:
    torch.manual_seed(3)
    model = ctrlrnn.QRNN(4, 8, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = torch.randn(2, 6, 4)
    program = torch.export.export(model, (x,))
    out, c_n = program.module()(x)
    want_out, want_c = model(x)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(c_n, want_c)
    other = torch.randn(2, 6, 4)  # the program is not a recording of one input
    torch.testing.assert_close(program.module()(other)[0], model(other)[0])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch 2.13 deprecates TorchScript
def test_a_trace_runs_at_another_batch_and_length() -> None:
    torch.manual_seed(4)
    layers = [ctrlrnn.QRNN(4, 8, bidirectional=True, batch_first=True),
              ctrlrnn.Metagross(4, 8, depth=2, batch_first=True)]
    if not forced_reference():  # without the kernels the fused cells refuse a trace
        layers.append(ctrlrnn.CASLSTM(4, 8, num_layers=2, batch_first=True))

    class Call(torch.nn.Module):
        def __init__(self, layer: torch.nn.Module) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return self.layer(x, lengths=lengths)[0]

    for layer in layers:
        call = Call(layer.eval())
        traced = torch.jit.trace(call, (torch.randn(3, 7, 4), torch.tensor([7, 5, 2])))
        x, lengths = torch.randn(5, 11, 4), torch.tensor([11, 1, 6, 11, 3])
        torch.testing.assert_close(traced(x, lengths), call(x, lengths))
    with pytest.raises(RuntimeError, match=r"^QRNN: torch\.jit\.script"):
        torch.jit.script(layers[0])


FIRST_CALL_COMPILED = """
import torch, ctrlrnn
x = torch.randn(5, 2, 4)
for m, extra in ((ctrlrnn.RCRN(4, 6), ()), (ctrlrnn.CASLSTM(4, 6, num_layers=2), ()),
                 (ctrlrnn.CARNN(4, 6, context_size=3, variant="n"), (torch.randn(2, 3),)),
                 (ctrlrnn.QRNN(4, 6), ()), (ctrlrnn.Metagross(4, 6), ())):
    fn = torch.compile(lambda x: m(x, *extra)[0].sum(), fullgraph=True, backend="eager")
    torch.testing.assert_close(fn(x), m(x, *extra)[0].sum())
print("ok")
"""


def test_torch_compile_as_the_first_call_of_a_process() -> None:
    """Tracing must not reach the extension loader (its locks and files), even before any
    eager call has loaded the kernels."""
    proc = subprocess.run([sys.executable, "-c", FIRST_CALL_COMPILED], env=dict(os.environ),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_under_bfloat16_autocast(name: str) -> None:
    torch.manual_seed(4)
    model = LAYERS[name]()
    x = torch.randn(6, 3, 4)
    lengths, ctx = torch.tensor([6, 4, 1]), torch.randn(3, 3)
    want, _ = _run(model, x.clone().requires_grad_(), lengths, ctx, train=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _run(model, x.clone().requires_grad_(), lengths, ctx, train=False)
    assert out.dtype == torch.bfloat16
    assert (out.float() - want).abs().max() <= 3e-2 * want.abs().max().clamp(min=1e-3)
    assert all(torch.isfinite(g).all() for g in grads)


def test_torch_func_grad() -> None:
    torch.manual_seed(6)
    for model in (LAYERS["qrnn"](), LAYERS["cas-lstm"](), LAYERS["metagross"]()):
        params = {k: v.detach() for k, v in model.named_parameters()}
        x = torch.randn(5, 2, 4)

        def loss(p: dict[str, torch.Tensor], model: torch.nn.Module = model,
                 x: torch.Tensor = x) -> torch.Tensor:
            return torch.func.functional_call(model, p, (x,))[0].square().sum()

        got = torch.func.grad(loss)(params)
        want = torch.autograd.grad(model(x)[0].square().sum(), list(model.parameters()))
        for k, w in zip(params, want):
            torch.testing.assert_close(got[k], w, rtol=1e-4, atol=1e-5)


@needs_compiled
@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.GRU])
def test_torch_rnn_over_lengths_equals_the_packed_run(kind: type[torch.nn.Module]) -> None:
    """The task models' ``nn.LSTM``/``nn.GRU`` run on the fused cells over variable lengths:
    outputs, final states and gradients equal torch's own packed run."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from ctrlrnn.models.torch_rnn_lengths import fused_path, run_with_lengths

    torch.manual_seed(7)
    rnn = kind(4, 5, num_layers=2, bidirectional=True, batch_first=True).to(D64)
    x = torch.randn(3, 6, 4, dtype=D64, requires_grad=True)
    lengths = torch.tensor([6, 2, 4])
    assert fused_path(rnn, x)
    got, got_h = run_with_lengths(rnn, x, lengths)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    want, want_h = rnn(packed)
    want = pad_packed_sequence(want, batch_first=True, total_length=6)[0]
    flat = [got, *(got_h if isinstance(got_h, tuple) else [got_h])]
    flat_want = [want, *(want_h if isinstance(want_h, tuple) else [want_h])]
    for g, w in zip(flat, flat_want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
    leaves = [x, *rnn.parameters()]
    for g, w in zip(torch.autograd.grad(sum(t.square().sum() for t in flat), leaves),
                    torch.autograd.grad(sum(t.square().sum() for t in flat_want), leaves),
                    strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-11)
