"""Every layer on CUDA (the Triton kernels, natively) against the CPU reference.

Skipped without a CUDA device, and under ``TRITON_INTERPRET=1`` (``tests/gpu/conftest.py`` sets
it unless ``CTRLRNN_TRITON_NATIVE=1``; ``scripts/gpu-check`` runs this file natively). Each
layer is built on CPU in fp32, copied to CUDA (fp32, then bf16), and run forward and backward on
the same padded input with ``lengths`` and as a ``PackedSequence``; outputs, final states and
the gradients of the input and of every parameter are compared with the CPU layer run on the
reference implementations (the CPU extensions are switched off here: they are tested elsewhere,
and building them would cost the GPU check its time budget). The CUDA side must not warn (a
warning would mean a reference fallback).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from ctrlrnn.ops import backend
from ctrlrnn.ops.gpu import interpreting

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or interpreting(),
    reason="needs a CUDA device and native Triton (scripts/gpu-check runs these)",
)

B, T, D, H = 3, 9, 8, 16
LENGTHS = [9, 5, 1]


def _layers() -> dict[str, Callable[[], torch.nn.Module]]:
    import ctrlrnn

    kw = dict(batch_first=True)
    return {
        "qrnn_fo": lambda: ctrlrnn.QRNN(D, H, num_layers=2, **kw),
        "qrnn_ifo_bi": lambda: ctrlrnn.QRNN(D, H, bidirectional=True, pooling="ifo", **kw),
        "rcrn_bi": lambda: ctrlrnn.RCRN(D, H, bidirectional=True, **kw),
        "rcrn_gru": lambda: ctrlrnn.RCRN(D, H, cell="gru", **kw),
        "rcrn_native_bi": lambda: ctrlrnn.RCRN(D, H, bidirectional=True, controllers="native",
                                               **kw),  # fmt: skip
        "rcrn_native_gru": lambda: ctrlrnn.RCRN(D, H, cell="gru", controllers="native", **kw),
        "caslstm_bi": lambda: ctrlrnn.CASLSTM(D, H, num_layers=2, bidirectional=True, **kw),
        "caslstm_peephole": lambda: ctrlrnn.CASLSTM(D, H, num_layers=3, peephole=True,
                                                    lambda_=None, **kw),  # fmt: skip
        "carnn_n": lambda: ctrlrnn.CARNN(D, H, 5, variant="n", **kw),
        "carnn_i": lambda: ctrlrnn.CARNN(D, H, 5, variant="i", bidirectional=True, **kw),
        "carnn_s": lambda: ctrlrnn.CARNN(D, D, 5, variant="s", **kw),
        "metagross_h": lambda: ctrlrnn.Metagross(D, H, depth=3, **kw),
        "metagross_c_bi": lambda: ctrlrnn.Metagross(D, H, depth=2, recurrence="c",
                                                    bidirectional=True, **kw),  # fmt: skip
        "metagross_state": lambda: ctrlrnn.Metagross(D, H, depth=3, gates="state", **kw),
        "metagross_state_bi": lambda: ctrlrnn.Metagross(D, H, num_layers=2, depth=2,
                                                        gates="state", bidirectional=True,
                                                        **kw),  # fmt: skip
    }


NAMES = sorted(_layers())


@pytest.fixture
def cpu_reference(monkeypatch):
    """CPU tensors take the reference implementations (no extension build), and fp32 on CUDA
    is full fp32: torch lets cuDNN's RNNs (RCRN's controllers with controllers="native") use
    TF32 by default, 1e-3 off in relative terms, where the comparison asks for 1e-4."""
    monkeypatch.setattr(backend, "cpu_extension", lambda family: None)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


def _run(layer: torch.nn.Module, name: str, x: torch.Tensor, lengths: torch.Tensor,
         packed: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:  # fmt: skip
    """Output (padded, zero past the lengths) and final states of ``layer`` on ``x``."""
    extra = []
    if name.startswith("carnn"):
        g = torch.Generator().manual_seed(3)
        extra = [torch.randn(B, 5, generator=g).to(x.device, x.dtype)]
    if packed:
        inp = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, hn = layer(inp, *extra)
        assert isinstance(out, PackedSequence)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    else:
        out, hn = layer(x, *extra, lengths=lengths)
    states = list(hn) if isinstance(hn, tuple) else [hn]
    return out, states


@pytest.mark.parametrize("packed", [False, True], ids=["lengths", "packed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_layer_cuda_matches_cpu_reference(name, dtype, packed, cpu_reference):
    torch.manual_seed(0)
    cpu = _layers()[name]()
    gpu = copy.deepcopy(cpu).to("cuda", dtype)
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor(LENGTHS)
    xc = x.clone().requires_grad_()
    xg = x.to("cuda", dtype).requires_grad_()

    out_c, st_c = _run(cpu, name, xc, lengths, packed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a reference fallback warns
        out_g, st_g = _run(gpu, name, xg, lengths, packed)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(out_g.float().cpu(), out_c, **tol)
    for a, b in zip(st_g, st_c):
        torch.testing.assert_close(a.float().cpu(), b, **tol)

    g = torch.Generator().manual_seed(2)
    w_out = torch.randn(out_c.shape, generator=g)
    w_st = [torch.randn(s.shape, generator=g) for s in st_c]

    def loss(out, states, dev, dt):
        total = (out.float() * w_out.to(dev)).sum()
        return total + sum((s.float() * w.to(dev)).sum() for s, w in zip(states, w_st))

    params_c = [p for p in cpu.parameters() if p.requires_grad]
    params_g = [p for p in gpu.parameters() if p.requires_grad]
    grads_c = torch.autograd.grad(loss(out_c, st_c, "cpu", torch.float32), [xc, *params_c])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        grads_g = torch.autograd.grad(loss(out_g, st_g, "cuda", dtype), [xg, *params_g])
    names = ["input"] + [n for n, p in gpu.named_parameters() if p.requires_grad]
    # bf16 gradients of weights sum over B*T products rounded to 8 bits: compare by norm
    for n, a, b in zip(names, grads_g, grads_c):
        a = a.float().cpu()
        if dtype == torch.float32:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3, msg=lambda m, n=n: f"{n}: {m}")
        else:
            err = (a - b).norm() / b.norm().clamp_min(1e-3)
            assert err < 0.08, f"{n}: relative error {err:.3f}"


def test_every_family_runs_triton_on_this_device():
    for family in ("scan", "cells", "metagross"):
        line = backend._cuda_status(family)
        assert "reference" not in line and "kernels" in line, line


def _graph_layer(name: str) -> torch.nn.Module:
    """The layers whose recurrences run on the Triton host's step loops."""
    import ctrlrnn

    if name == "rcrn_fused_bi":
        return ctrlrnn.RCRN(D, H, bidirectional=True, batch_first=True, controllers="fused")
    return _layers()[name]()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["caslstm_bi", "carnn_n", "metagross_state_bi", "rcrn_fused_bi",
                                  "rcrn_gru"])
def test_step_loops_as_cuda_graphs_equal_launched_loops(name, dtype, monkeypatch):
    """``CTRLRNN_CUDA_GRAPHS`` (on by default): three calls with new inputs each (eager,
    capture, replay) give what the loops launched per step give, outputs and gradients, in
    fp32 and bf16, and graphs were captured."""
    from ctrlrnn.ops.gpu import step_graphs

    torch.manual_seed(0)
    layer = _graph_layer(name).to("cuda", dtype)
    lengths = torch.tensor(LENGTHS)

    def calls(on: bool) -> list[list[torch.Tensor]]:
        graphs = step_graphs.StepGraphs(force=on)
        monkeypatch.setattr(step_graphs, "GRAPHS", graphs)
        results = []
        for seed in range(3):
            x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))
            x = x.to("cuda", dtype).requires_grad_()
            out, states = _run(layer, name, x, lengths, packed=False)
            grads = torch.autograd.grad(out.float().square().sum()
                                        + sum(s.float().sum() for s in states),
                                        [x, *layer.parameters()])  # fmt: skip
            results.append([out.detach(), *(s.detach() for s in states), *grads])
        assert (graphs.captures > 0) is on
        return results

    tol = 1e-6 if dtype == torch.float32 else 1e-2  # the same kernels: bf16 within an ulp
    for got, want in zip(calls(True), calls(False), strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
@pytest.mark.parametrize("name", ["qrnn_fo", "caslstm_bi", "metagross_h", "rcrn_bi"])
def test_a_layer_on_the_second_gpu_runs_there(name, cpu_reference):
    """A layer on ``cuda:1`` while ``cuda:0`` is current: the kernels run on the inputs'
    device (the ops' device guard) and give what the first GPU gives."""
    torch.manual_seed(0)
    layer = _layers()[name]().to("cuda:0")
    other = copy.deepcopy(layer).to("cuda:1")
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor(LENGTHS)
    torch.cuda.set_device(0)
    out0, _ = _run(layer, name, x.to("cuda:0"), lengths, packed=False)
    out1, _ = _run(other, name, x.to("cuda:1"), lengths, packed=False)
    assert out1.device == torch.device("cuda", 1)
    torch.testing.assert_close(out1.cpu(), out0.cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_a_trace_on_cuda_computes_the_layer_at_another_shape(name):
    """``torch.jit.trace`` on CUDA (the Triton kernels inside the custom ops the trace records,
    tests/nn/test_torchscript.py on CPU): traced at one batch, length and lengths, run at
    others, the trace gives what the layer gives."""
    torch.manual_seed(0)
    layer = _layers()[name]().to("cuda").eval()
    carnn = name.startswith("carnn")

    class Call(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x, lengths, *ctx):
            out, hn = self.layer(x, *ctx, lengths=lengths)
            return (out, *(hn if isinstance(hn, tuple) else (hn,)))

    def inputs(batch, steps, lengths):
        g = torch.Generator().manual_seed(batch * steps)
        x = torch.randn(batch, steps, D, generator=g).cuda()
        ctx = (torch.randn(batch, 5, generator=g).cuda(),) if carnn else ()
        return (x, torch.tensor(lengths), *ctx)

    call = Call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(call, inputs(B, T, LENGTHS), check_trace=False)
    for batch, steps, lengths in ((5, 6, [6, 1, 3, 6, 2]), (2, 12, [12, 12])):
        given = inputs(batch, steps, lengths)
        for a, b in zip(traced(*given), call(*given), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
