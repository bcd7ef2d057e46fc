"""The Triton kernels of ``ctrlrnn.ops.gpu`` against the references, in Triton's CPU interpreter.

``tests/gpu/conftest.py`` sets ``TRITON_INTERPRET=1`` before Triton is imported, so the kernels
run on CPU tensors; the launchers are called directly (automatic selection is for CUDA tensors
and is tested in ``test_gpu_selection.py``). Shapes are tiny and odd (T = 7, not a power of
two; channel counts that leave a partial block) because the interpreter is slow.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

import kernel_routes as cells_triton  # noqa: E402
from kernel_routes import route, triton_cells  # noqa: E402,F401
from triton_tolerances import close  # noqa: E402

from ctrlrnn import linear_scan_ref  # noqa: E402
from ctrlrnn.ops import cells_ref  # noqa: E402
from ctrlrnn.ops.gpu import _common, scan_and_pooling  # noqa: E402
from ctrlrnn.ops.gpu.qrnn_triton import qrnn_pooling_backward, qrnn_pooling_forward  # noqa: E402
from ctrlrnn.ops.gpu.scan_triton import linear_scan_backward, linear_scan_forward  # noqa: E402
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling, qrnn_pooling_ref  # noqa: E402

# the modules (``ctrlrnn.ops.linear_scan`` the attribute is the function of the same name)
linear_scan_mod = importlib.import_module("ctrlrnn.ops.linear_scan")
qrnn_mod = importlib.import_module("ctrlrnn.ops.qrnn_pooling")

pytestmark = pytest.mark.usefixtures("triton_cells")  # the cells on their Triton kernels

B, T = 3, 7




def test_interpreter_is_active():
    assert _common.interpreting()


# ------------------------------------------------------------------------------------------------
# linear scan
# ------------------------------------------------------------------------------------------------

SCAN_CASES = [
    dict(reverse=False, lengths=None, h0=False),
    dict(reverse=True, lengths=None, h0=True),
    dict(reverse=False, lengths=[7, 0, 3], h0=True),
    dict(reverse=True, lengths=[7, 1, 4], h0=True),
]


# every case in fp32, sequential and chunked (chunk = 3 over T = 7: a partial last chunk); the
# length cases also in bf16 (the interpreter is slow)
SCAN_PARAMS = [
    pytest.param(case, dtype, chunk, id=f"rev{case['reverse']}-{case['lengths']}-{dtype}-c{chunk}")
    for case in SCAN_CASES
    for dtype in (torch.float32, torch.bfloat16)
    for chunk in (0, 3)
    if dtype == torch.float32 or case["lengths"] is not None
]


@pytest.mark.parametrize(("case", "dtype", "chunk"), SCAN_PARAMS)
def test_scan_forward_backward(case, dtype, chunk):
    g = torch.Generator().manual_seed(1)
    C = 20  # two blocks of 16 under the interpreter, the second partial
    a = (0.5 + 0.5 * torch.rand(B, T, C, generator=g)).to(dtype)
    b = torch.randn(B, T, C, generator=g).to(dtype)
    h0 = torch.randn(B, C, generator=g).to(dtype) if case["h0"] else None
    lengths = torch.tensor(case["lengths"]) if case["lengths"] else None
    rev = case["reverse"]

    out, last = linear_scan_forward(a, b, h0, lengths, rev, chunk=chunk)
    # the reference in float64, differentiated by autograd
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    h64 = h0.double().requires_grad_() if h0 is not None else None
    ref, ref_last = linear_scan_ref(a64, b64, h64, reverse=rev, lengths=lengths, return_last=True)
    close(out, ref, dtype)
    close(last, ref_last, dtype)

    go = torch.randn(B, T, C, generator=g).to(dtype)
    gl = torch.randn(B, C, generator=g).to(dtype)
    da, db, dh0 = linear_scan_backward(go, gl, a, out, h0, lengths, rev, chunk=chunk)
    params = [p for p in (a64, b64, h64) if p is not None]
    grads = torch.autograd.grad((ref * go.double()).sum() + (ref_last * gl.double()).sum(), params)
    close(da, grads[0], dtype)
    close(db, grads[1], dtype)
    if h0 is not None:
        close(dh0, grads[2], dtype)
    if lengths is not None:  # padded steps: zero outputs and zero gradients
        pad = torch.arange(T)[None, :] >= lengths[:, None]
        assert not out[pad].any() and not da[pad].any() and not db[pad].any()


@pytest.mark.parametrize("which", ["only_grad_out", "only_grad_last"])
def test_scan_backward_with_one_gradient(which):
    """The final-state gradient alone (and the output gradient alone) propagate correctly."""
    g = torch.Generator().manual_seed(2)
    C = 5
    a, b = torch.rand(2, T, C, generator=g), torch.randn(2, T, C, generator=g)
    h0 = torch.randn(2, C, generator=g)
    out, _ = linear_scan_forward(a, b, h0, None, False, chunk=0)
    go = torch.randn(2, T, C, generator=g) if which == "only_grad_out" else None
    gl = torch.randn(2, C, generator=g) if which == "only_grad_last" else None
    da, db, dh0 = linear_scan_backward(go, gl, a, out, h0, None, False, chunk=3)
    a64, b64, h64 = (x.double().requires_grad_() for x in (a, b, h0))
    ref, last = linear_scan_ref(a64, b64, h64, return_last=True)
    loss = (ref * go.double()).sum() if go is not None else (last * gl.double()).sum()
    for got, want in zip((da, db, dh0), torch.autograd.grad(loss, (a64, b64, h64))):
        close(got, want, torch.float32)


def test_scan_float64_and_empty_time():
    g = torch.Generator().manual_seed(3)
    a = torch.rand(2, 5, 3, generator=g, dtype=torch.float64)
    b = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    out, last = linear_scan_forward(a, b, None, torch.tensor([5, 2]), True)
    ref, ref_last = linear_scan_ref(a, b, reverse=True, lengths=torch.tensor([5, 2]),
                                    return_last=True)  # fmt: skip
    close(out, ref, torch.float64)
    close(last, ref_last, torch.float64)
    h0 = torch.randn(2, 3, dtype=torch.float64)
    out, last = linear_scan_forward(a[:, :0], b[:, :0], h0, None, False)
    assert out.shape == (2, 0, 3) and torch.equal(last, h0)


def test_scan_through_the_public_op(monkeypatch):
    """``linear_scan`` (custom op + autograd) dispatching to the Triton module gives the
    reference values and gradients: the launchers fit the op's calls exactly."""
    route(monkeypatch, "scan", scan_and_pooling)
    g = torch.Generator().manual_seed(4)
    a = torch.rand(B, T, 6, generator=g).requires_grad_()
    b = torch.randn(B, T, 6, generator=g).requires_grad_()
    h0 = torch.randn(B, 6, generator=g).requires_grad_()
    lengths = torch.tensor([4, 7, 2])
    out, last = linear_scan_mod.linear_scan(a, b, h0, reverse=True, lengths=lengths,
                                            return_last=True)  # fmt: skip
    ref, ref_last = linear_scan_ref(a, b, h0, reverse=True, lengths=lengths, return_last=True)
    close(out, ref, torch.float32)
    close(last, ref_last, torch.float32)
    go, gl = torch.randn_like(out), torch.randn_like(last)
    got = torch.autograd.grad((out * go).sum() + (last * gl).sum(), (a, b, h0))
    want = torch.autograd.grad((ref * go).sum() + (ref_last * gl).sum(), (a, b, h0))
    for x, y in zip(got, want):
        close(x, y, torch.float32)


def test_chunk_heuristic():
    sms = 132
    # few programs, long sequence: chunked, at least two chunks of >= 64 steps
    length = _common.chunk_length(1, 64, 4096, sms)
    assert length >= 64 and -(-4096 // length) >= 2
    # a batch that fills the GPU, or a short sequence: sequential
    assert _common.chunk_length(256, 1024, 4096, sms) == 0
    assert _common.chunk_length(1, 64, 100, sms) == 0
    # more parallel programs -> fewer (longer) chunks
    assert _common.chunk_length(4, 64, 4096, sms) >= length


# ------------------------------------------------------------------------------------------------
# QRNN pooling
# ------------------------------------------------------------------------------------------------

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
def test_qrnn_forward_backward(case):
    """f/fo/ifo against the reference; ``extras``: c0, zoneout keep mask and scale, lengths."""
    pooling, dtype, extras = case["pooling"], case["dtype"], case["extras"]
    mode = list(qrnn_mod.POOLING_MODES).index(pooling)
    G, H = qrnn_mod.GATES_PER_MODE[pooling], 10
    g = torch.Generator().manual_seed(5)
    gates = (2 * torch.randn(B, T, G * H, generator=g)).to(dtype)
    c0 = torch.randn(B, H, generator=g).to(dtype) if extras else None
    keep = (torch.rand(B, T, H, generator=g) > 0.3).to(dtype) if extras else None
    keep_scale = 0.75 if extras else 1.0
    lengths = torch.tensor([7, 0, 4]) if extras else None

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
    dgates, dc0 = qrnn_pooling_backward(*grads, gates, c, c0, keep, keep_scale, lengths, mode,
                                        chunk=case["chunk"])  # fmt: skip
    want = torch.autograd.grad(ref, (g64, c64), [x.double() for x in grads])
    close(dgates, want[0], dtype)
    close(dc0, want[1], dtype)


def test_qrnn_only_last_cell_gradient():
    g = torch.Generator().manual_seed(6)
    gates = torch.randn(2, T, 3 * 4, generator=g)
    c0 = torch.randn(2, 4, generator=g)
    h, c, last = qrnn_pooling_forward(gates, c0, None, 1.0, None, 1)
    gl = torch.randn(2, 4, generator=g)
    dgates, dc0 = qrnn_pooling_backward(None, None, gl, gates, c, c0, None, 1.0, None, 1, chunk=3)
    g64, c64 = gates.double().requires_grad_(), c0.double().requires_grad_()
    _, _, ref_last = qrnn_pooling_ref(g64, c64, pooling="fo")
    want = torch.autograd.grad(ref_last, (g64, c64), gl.double())
    close(dgates, want[0], torch.float32)
    close(dc0, want[1], torch.float32)


def test_qrnn_through_the_public_op(monkeypatch):
    route(monkeypatch, "scan", scan_and_pooling)
    g = torch.Generator().manual_seed(7)
    gates = torch.randn(B, T, 4 * 5, generator=g).requires_grad_()
    c0 = torch.randn(B, 5, generator=g).requires_grad_()
    keep = (torch.rand(B, T, 5, generator=g) > 0.5).float()
    lengths = torch.tensor([3, 7, 5])
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


# ------------------------------------------------------------------------------------------------
# fused cells: LSTM and GRU (torch GEMMs + Triton pointwise kernels)
# ------------------------------------------------------------------------------------------------


def _cell_inputs(kind: str, dtype: torch.dtype, H: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    G = 4 if kind == "lstm" else 3
    x = torch.randn(B, 5, G * H, generator=g)
    w = 0.4 * torch.randn(G * H, H, generator=g)
    h0 = torch.randn(B, H, generator=g)
    third = torch.randn(B, H, generator=g) if kind == "lstm" else torch.randn(G * H, generator=g)
    # argument order of the references: lstm (x, w, h0, c0), gru (x, w, bias_hh, h0)
    args = [x, w, h0, third] if kind == "lstm" else [x, w, third, h0]
    return [t.to(dtype).requires_grad_() for t in args]


CELL_PARAMS = [
    (kind, dtype, lengths)
    for kind in ("lstm", "gru")
    for dtype, lengths in (
        (torch.float32, None),
        (torch.float32, [5, 0, 2]),
        (torch.bfloat16, [5, 0, 2]),
    )  # fmt: skip
]


@pytest.mark.parametrize(("kind", "dtype", "lengths"), CELL_PARAMS)
def test_cells_forward_backward(kind, dtype, lengths):
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
def test_cells_gradcheck_float64(kind):
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
    lengths = torch.tensor([7, 4, 2])
    x = torch.randn(B, T, 3)
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
