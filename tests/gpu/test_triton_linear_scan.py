"""The Triton linear scan (``ctrlrnn.ops.linear_scan.triton_kernels``) against the reference, in
Triton's
CPU interpreter: forward and backward, sequential and chunked, lengths, reverse, bfloat16 and
float64, the public op dispatching to it, NaN and Inf parity, empty shapes.

``conftest.py`` sets ``TRITON_INTERPRET=1`` before Triton is imported, so the kernels run on CPU
tensors; the launchers are called directly (automatic selection is for CUDA tensors and is
tested in ``test_gpu_selection.py``). Shapes are tiny and odd (T = 5, not a power of two;
channel counts that leave a partial block) because the interpreter is slow.

The chunked scans (summary pass, scan over chunk carries, apply pass) combine chunks as
``h_in(k+1) = P_k h_in(k) + S_k`` from a zero start inside each chunk, which is exact for finite
values and for NaN anywhere, but not IEEE-exact when a decay factor ``a`` is infinite (``inf * 0``
of the zero start, or the sign of ``inf * h``): the chunked non-finite case puts the infinities
in ``b`` and ``h0`` only (see the docstring of :mod:`ctrlrnn.ops.linear_scan.triton_kernels`).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import route  # noqa: E402
from triton_tolerances import INF, NAN, Poke, close, parity, poke, weights  # noqa: E402

from ctrlrnn import linear_scan_ref  # noqa: E402
from ctrlrnn.ops.gpu import _common, scan_and_pooling  # noqa: E402
from ctrlrnn.ops.linear_scan.triton_kernels import linear_scan_backward, linear_scan_forward  # noqa: E402

# the module (``ctrlrnn.ops.linear_scan`` the attribute is the function of the same name)
linear_scan_mod = importlib.import_module("ctrlrnn.ops.linear_scan")

B, T = 3, 5


def test_interpreter_is_active():
    assert _common.interpreting()


def _case(reverse: bool, lengths: list[int] | None, h0: bool, dtype: torch.dtype,
          chunk: int) -> Any:  # fmt: skip
    name = f"{'rev' if reverse else 'fwd'}-{'lengths' if lengths else 'full'}-"
    name += f"{'h0' if h0 else 'zero'}-{'bf16' if dtype == torch.bfloat16 else 'fp32'}-"
    name += f"chunk{chunk}" if chunk else "sequential"
    return pytest.param(dict(reverse=reverse, lengths=lengths, h0=h0), dtype, chunk, id=name)


# direction, lengths (a zero or a one among them), h0, dtype and sequential or chunked (chunk
# = 3 over T = 5: a partial last chunk) cross pairwise: each value of one meets each value of
# another in some case
SCAN_PARAMS = [
    _case(False, None, False, torch.float32, 0),
    _case(True, [5, 0, 3], False, torch.float32, 3),
    _case(True, None, True, torch.float32, 3),
    _case(True, None, False, torch.bfloat16, 0),
    _case(False, [5, 1, 4], True, torch.bfloat16, 3),
    _case(False, [5, 0, 3], True, torch.bfloat16, 0),
]


@pytest.mark.parametrize(("case", "dtype", "chunk"), SCAN_PARAMS)
def test_forward_backward(case, dtype, chunk):
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
def test_backward_with_one_gradient(which):
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


def test_float64_and_empty_time():
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


def test_through_the_public_op(monkeypatch):
    """``linear_scan`` (custom op + autograd) dispatching to the Triton module gives the
    reference values and gradients: the launchers fit the op's calls exactly."""
    route(monkeypatch, "scan", scan_and_pooling)
    g = torch.Generator().manual_seed(4)
    a = torch.rand(B, T, 6, generator=g).requires_grad_()
    b = torch.randn(B, T, 6, generator=g).requires_grad_()
    h0 = torch.randn(B, 6, generator=g).requires_grad_()
    lengths = torch.tensor([4, 5, 2])
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


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("chunk", [0, 3], ids=["sequential", "chunked"])
def test_nonfinite(chunk, reverse):
    """NaN, +-Inf and +-1e4 in the decays, the inputs and the initial state: the NaN and Inf
    masks of the reference (the chunked variant takes no infinite decay: module docstring)."""
    H = 5
    g = torch.Generator().manual_seed(1)
    a_pokes: list[Poke] = [((0, 1, 0), NAN), ((2, 2, 3), 1e4)]
    if chunk == 0:  # infinite decays: sequential only (module docstring)
        a_pokes += [((1, 3, 1), INF), ((2, 3, 4), -INF)]
    a = poke(0.5 + 0.5 * torch.rand(B, T, H, generator=g), a_pokes)
    b = poke(torch.randn(B, T, H, generator=g),
              [((0, 3, 1), INF), ((1, 2, 2), -INF), ((2, 4, 0), -1e4), ((1, 4, 4), NAN)])
    h0 = poke(torch.randn(B, H, generator=g), [((1, 3), -INF), ((2, 1), NAN)])
    out, last = linear_scan_forward(a, b, h0, None, reverse, chunk=chunk)
    leaves = [x.clone().requires_grad_() for x in (a, b, h0)]
    ref, ref_last = linear_scan_ref(*leaves, reverse=reverse, return_last=True)
    parity(out, ref.detach(), "out")
    parity(last, ref_last.detach(), "last")
    go, gl = weights(out, last)
    da, db, dh0 = linear_scan_backward(go, gl, a, out, h0, None, reverse, chunk=chunk)
    want = torch.autograd.grad((ref, ref_last), leaves, (go, gl))
    for name, x, y in zip(("da", "db", "dh0"), (da, db, dh0), want, strict=True):
        parity(x, y, name)
    assert torch.isnan(out).any() and torch.isinf(out).any() and torch.isfinite(out).any()


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_empty_shapes(batch, steps):
    """Right shapes, final state = initial state, no launch failure."""
    H = 5
    g = torch.Generator().manual_seed(4)
    a, b = torch.rand(batch, steps, H, generator=g), torch.randn(batch, steps, H, generator=g)
    h0 = torch.randn(batch, H, generator=g)
    out, last = linear_scan_forward(a, b, h0, None, True, chunk=3)
    assert out.shape == (batch, steps, H) and last.shape == (batch, H)
    assert steps > 0 or torch.equal(last, h0)
    da, db, dh0 = linear_scan_backward(None, h0, a, out, h0, None, False, chunk=3)
    assert da.shape == db.shape == (batch, steps, H)
    assert dh0.shape == (batch, H) and (steps > 0 or torch.equal(dh0, h0))
