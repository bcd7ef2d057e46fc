"""The Triton QRNN pooling (``ctrlrnn.ops.qrnn_pooling.triton_kernels``: f-, fo- and ifo-pooling
with zoneout, QRNN paper eq 3-6) against the reference, in Triton's CPU interpreter: forward and
backward, sequential and chunked, half precision, the public op and a QRNN layer dispatching to
it, NaN and Inf parity, empty shapes.

As ``test_triton_linear_scan.py``: ``conftest.py`` sets ``TRITON_INTERPRET=1``, the launchers
run on CPU tensors and are compared with the references differentiated by autograd.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import route  # noqa: E402
from triton_tolerances import INF, NAN, Poke, close, parity, poke, weights  # noqa: E402

from ctrlrnn.ops.gpu import scan_and_pooling  # noqa: E402
from ctrlrnn.ops.qrnn_pooling import (  # noqa: E402
    GATES_PER_MODE,
    POOLING_MODES,
    qrnn_pooling,
    qrnn_pooling_ref,
)
from ctrlrnn.ops.qrnn_pooling.triton_kernels import qrnn_pooling_backward, qrnn_pooling_forward  # noqa: E402

# the module (``ctrlrnn.ops.qrnn_pooling`` the attribute is the function of the same name)
qrnn_mod = importlib.import_module("ctrlrnn.ops.qrnn_pooling")

#: five steps: chunks of 3 leave a partial last one
B, T = 3, 5


QRNN_CASES = [
    dict(pooling="f", dtype=torch.float32, extras=False, chunk=0),
    dict(pooling="fo", dtype=torch.float32, extras=False, chunk=0),
    dict(pooling="ifo", dtype=torch.float32, extras=False, chunk=0),
    dict(pooling="f", dtype=torch.float32, extras=True, chunk=3),
    dict(pooling="fo", dtype=torch.float32, extras=True, chunk=0),
    dict(pooling="ifo", dtype=torch.float32, extras=True, chunk=3),
    dict(pooling="fo", dtype=torch.float16, extras=True, chunk=3),
    dict(pooling="ifo", dtype=torch.bfloat16, extras=True, chunk=0),
]


@pytest.mark.parametrize(
    "case", QRNN_CASES,
    ids=lambda c: f"{c['pooling']}-{str(c['dtype'])[6:]}-extras{c['extras']}-chunk{c['chunk']}",
)  # fmt: skip
def test_forward_backward(case):
    """f/fo/ifo against the reference; ``extras``: c0, zoneout keep mask and scale, lengths."""
    pooling, dtype, extras = case["pooling"], case["dtype"], case["extras"]
    mode = list(qrnn_mod.POOLING_MODES).index(pooling)
    G, H = qrnn_mod.GATES_PER_MODE[pooling], 10
    g = torch.Generator().manual_seed(5)
    gates = (2 * torch.randn(B, T, G * H, generator=g)).to(dtype)
    c0 = torch.randn(B, H, generator=g).to(dtype) if extras else None
    keep = (torch.rand(B, T, H, generator=g) > 0.3).to(dtype) if extras else None
    keep_scale = 0.75 if extras else 1.0
    lengths = torch.tensor([5, 0, 4]) if extras else None

    h, c, last = qrnn_pooling_forward(gates, c0, keep, keep_scale, lengths, mode,
                                      chunk=case["chunk"])  # fmt: skip
    g64 = gates.double().requires_grad_()
    c64 = c0.double() if c0 is not None else torch.zeros(B, H, dtype=torch.float64)
    c64.requires_grad_()
    keep64 = keep.double() if keep is not None else None
    ref = qrnn_pooling_ref(g64, c64, pooling=pooling, keep=keep64, keep_scale=keep_scale,
                           lengths=lengths)  # fmt: skip
    for got, want in zip((h, c, last), ref):
        close(got, want, dtype)

    grads = [torch.randn(B, T, H, generator=g), torch.randn(B, T, H, generator=g),
             torch.randn(B, H, generator=g)]  # fmt: skip
    grads = [x.to(dtype) for x in grads]
    dgates, dc0, dbias = qrnn_pooling_backward(*grads, gates, c, c0, keep, keep_scale, lengths,
                                               mode, chunk=case["chunk"])  # fmt: skip
    assert dbias.numel() == 0
    want = torch.autograd.grad(ref, (g64, c64), [x.double() for x in grads])
    close(dgates, want[0], dtype)
    close(dc0, want[1], dtype)


def test_only_last_cell_gradient():
    g = torch.Generator().manual_seed(6)
    gates = torch.randn(2, T, 3 * 4, generator=g)
    c0 = torch.randn(2, 4, generator=g)
    h, c, last = qrnn_pooling_forward(gates, c0, None, 1.0, None, 1)
    gl = torch.randn(2, 4, generator=g)
    dgates, dc0, _ = qrnn_pooling_backward(None, None, gl, gates, c, c0, None, 1.0, None, 1,
                                           chunk=3)  # fmt: skip
    g64, c64 = gates.double().requires_grad_(), c0.double().requires_grad_()
    _, _, ref_last = qrnn_pooling_ref(g64, c64, pooling="fo")
    want = torch.autograd.grad(ref_last, (g64, c64), gl.double())
    close(dgates, want[0], torch.float32)
    close(dc0, want[1], torch.float32)


@pytest.mark.parametrize("chunk", [0, 3])
@pytest.mark.parametrize("pooling", ["f", "ifo"])
def test_bias(pooling, chunk):
    """``bias`` (eq 1-2's ``b``): the pooling of ``gates + bias``, and the bias's gradient,
    ``dgates`` summed over batch and steps (zero past the lengths)."""
    mode = list(qrnn_mod.POOLING_MODES).index(pooling)
    G, H = qrnn_mod.GATES_PER_MODE[pooling], 6
    g = torch.Generator().manual_seed(8)
    gates = torch.randn(B, T, G * H, generator=g)
    bias = torch.randn(G * H, generator=g)
    c0 = torch.randn(B, H, generator=g)
    lengths = torch.tensor([5, 0, 4])
    h, c, last = qrnn_pooling_forward(gates, c0, None, 1.0, lengths, mode, bias, chunk=chunk)
    g64, b64 = gates.double().requires_grad_(), bias.double().requires_grad_()
    ref = qrnn_pooling_ref(g64 + b64, c0.double(), pooling=pooling, lengths=lengths)
    for got, want in zip((h, c, last), ref):
        close(got, want, torch.float32)
    gh = torch.randn(B, T, H, generator=g)
    dgates, _dc0, dbias = qrnn_pooling_backward(gh, None, None, gates, c, c0, None, 1.0, lengths,
                                                mode, bias, chunk=chunk)  # fmt: skip
    want = torch.autograd.grad(ref[0], (g64, b64), gh.double())
    close(dgates, want[0], torch.float32)
    close(dbias, want[1], torch.float32)


def test_through_the_public_op(monkeypatch):
    route(monkeypatch, "scan", scan_and_pooling)
    g = torch.Generator().manual_seed(7)
    gates = torch.randn(B, T, 4 * 5, generator=g).requires_grad_()
    c0 = torch.randn(B, 5, generator=g).requires_grad_()
    keep = (torch.rand(B, T, 5, generator=g) > 0.5).float()
    lengths = torch.tensor([3, 5, 4])
    kw = dict(pooling="ifo", keep=keep, keep_scale=0.5, lengths=lengths)
    outs = qrnn_pooling(gates, c0, **kw)
    ref = qrnn_pooling_ref(gates, c0, **kw)
    for x, y in zip(outs, ref):
        close(x, y, torch.float32)
    ws = [torch.randn_like(x) for x in outs]
    got = torch.autograd.grad(outs, (gates, c0), ws)
    want = torch.autograd.grad(ref, (gates, c0), ws)
    for x, y in zip(got, want):
        close(x, y, torch.float32)


def _taps_reference(m, x, lengths):
    """A QRNN stack in float64 from eq 1-2 written as a loop over the taps (each sequence alone
    at its own length, the backward direction on the reversed sequence), pooled by
    :func:`qrnn_pooling_ref`: the outputs, one ``(n_b, width)`` per sequence."""
    outs = []
    for b in range(x.shape[0]):
        n = int(lengths[b])
        layer_in = x[b : b + 1, :n].double()
        for layer in range(m.num_layers):
            k = m.windows[layer]
            before = k - 1 if m.causal else (k - 1) // 2
            dirs = []
            for d in range(m.num_directions):
                cell = m.cell(layer, d)
                w, bias = cell.weight.double(), cell.bias.double()
                inp = layer_in if d == 0 else layer_in.flip(1)
                D = inp.shape[-1]
                pre = bias.expand(1, n, -1).clone()
                for t in range(n):
                    for j in range(k):
                        s = t - before + j
                        if 0 <= s < n:
                            pre[:, t] += inp[:, s] @ w[:, j * D : (j + 1) * D].T
                h, _, _ = qrnn_pooling_ref(pre, pooling=m.pooling)
                dirs.append(h if d == 0 else h.flip(1))
            layer_in = torch.cat(dirs, -1)
        outs.append(layer_in[0])
    return outs


@pytest.mark.parametrize("causal", [True, False])
def test_qrnn_layer_with_per_layer_windows_on_the_triton_pooling(monkeypatch, causal):
    """A bidirectional QRNN with a width per layer (6, 2), masked and unmasked, on lengths: the
    convolution is built in Python (one GEMM), the pooling runs the Triton kernels; outputs
    equal the loop over taps, and gradients equal the reference path's."""
    import ctrlrnn

    calls = {"forward": 0, "backward": 0}

    class Counting:
        def qrnn_pooling_forward(self, *args, **kw):
            calls["forward"] += 1
            return scan_and_pooling.qrnn_pooling_forward(*args, **kw)

        def qrnn_pooling_backward(self, *args, **kw):
            calls["backward"] += 1
            return scan_and_pooling.qrnn_pooling_backward(*args, **kw)

    torch.manual_seed(11)
    m = ctrlrnn.QRNN(3, 5, num_layers=2, bidirectional=True, window=(6, 2), causal=causal,
                     pooling="ifo", batch_first=True)
    lengths = torch.tensor([7, 4, 2])  # the first row longer than the widest window
    x = torch.randn(B, 7, 3)
    x[1, 4:] = 1e3  # padding the result must not depend on

    def run():
        xg = x.clone().requires_grad_()
        out, c_n = m(xg, lengths=lengths)
        grads = torch.autograd.grad((out * torch.cos(out)).sum() + c_n.sum(),
                                    [xg, *m.parameters()])  # fmt: skip
        return out.detach(), grads

    route(monkeypatch, "scan", None)
    ref_out, ref_grads = run()
    route(monkeypatch, "scan", Counting())
    out, grads = run()
    assert calls["forward"] == 4 and calls["backward"] == 4  # 2 layers x 2 directions
    for b, want in enumerate(_taps_reference(m, x, lengths)):
        n = int(lengths[b])
        close(out[b, :n], want, torch.float32)
        assert out[b, n:].abs().sum() == 0
    close(out, ref_out, torch.float32)
    for got, want in zip(grads, ref_grads, strict=True):
        close(got, want, torch.float32)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    ("pooling", "chunk"), [("f", 3), ("fo", 0), ("ifo", 0), ("ifo", 3)],
    ids=["f-chunked", "fo-sequential", "ifo-sequential", "ifo-chunked"],
)  # fmt: skip
def test_nonfinite(pooling, chunk):
    """NaN, +-Inf and +-1e4 in every gate and in the initial cell, sequential and chunked (the
    decays lie in [0, 1]: the chunked variant takes every special value)."""
    H = 5
    g = torch.Generator().manual_seed(2)
    G = GATES_PER_MODE[pooling]
    pokes: list[Poke] = [
        ((0, 1, 0), NAN), ((2, 0, 2), INF), ((2, 3, 3), -1e4),  # Z
        ((1, 2, H + 1), INF), ((1, 3, H + 2), -INF), ((0, 4, H + 3), 1e4),  # F
        ((2, 4, G * H - 1), -INF),  # O (or F for f-pooling)
    ]  # fmt: skip
    gates = poke(2 * torch.randn(B, T, G * H, generator=g), pokes)
    c0 = poke(torch.randn(B, H, generator=g), [((1, 4), INF), ((2, 0), NAN)])
    keep = (torch.rand(B, T, H, generator=g) > 0.3).float()
    mode = POOLING_MODES[pooling]
    h, c, last = qrnn_pooling_forward(gates, c0, keep, 0.8, None, mode, chunk=chunk)
    leaves = [x.clone().requires_grad_() for x in (gates, c0)]
    ref = qrnn_pooling_ref(*leaves, pooling=pooling, keep=keep, keep_scale=0.8)
    for name, x, y in zip(("h", "c", "last"), (h, c, last), ref, strict=True):
        parity(x, y.detach(), name)
    ws = weights(h, c, last)
    dgates, dc0, _ = qrnn_pooling_backward(*ws, gates, c, c0, keep, 0.8, None, mode, chunk=chunk)
    want = torch.autograd.grad(ref, leaves, ws)
    parity(dgates, want[0], "dgates")
    parity(dc0, want[1], "dc0")


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_empty_shapes(batch, steps):
    """Right shapes, final cell = initial cell, no launch failure."""
    H = 5
    g = torch.Generator().manual_seed(4)
    h0 = torch.randn(batch, H, generator=g)
    gates = torch.randn(batch, steps, 3 * H, generator=g)
    h, c, c_last = qrnn_pooling_forward(gates, h0, None, 1.0, None, 1)
    assert h.shape == c.shape == (batch, steps, H)
    assert c_last.shape == (batch, H) and (steps > 0 or torch.equal(c_last, h0))
    dgates, dc0, _ = qrnn_pooling_backward(h, None, h0, gates, c, h0, None, 1.0, None, 1)
    assert dgates.shape == gates.shape and dc0.shape == (batch, H)
