"""The fused METAGROSS level's Triton kernels against the reference, in Triton's interpreter.

``ctrlrnn.ops.metagross_level.triton_kernels.forward`` / ``backward`` (METAGROSS paper eq
2-1..2-6: gates and scan in one pass) are compared, forward and every gradient, with
:func:`ctrlrnn.ops.metagross_level.metagross_level_reference` in float64 differentiated by
autograd: both forms, internal levels (children and depth gates) and leaves, residual, initial
state, lengths (including an empty sequence), reverse, fp32 and bf16 (fp32 state). Shapes are
tiny: ``k = 3`` units (a unit tile padded to 4) and ``H = 20`` channels (two blocks of 16 under
the interpreter, the second partial).
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

from kernel_routes import route  # noqa: E402

from ctrlrnn.ops.metagross_level import metagross_level_reference  # noqa: E402
from ctrlrnn.ops.metagross_level import triton_kernels as mt  # noqa: E402
from ctrlrnn.ops.padding import reverse_padded  # noqa: E402

level_mod = importlib.import_module("ctrlrnn.ops.metagross_level")

B, T, K, H = 3, 5, 3, 20


def _tol(dtype: torch.dtype) -> dict[str, float]:
    if dtype == torch.bfloat16:
        return dict(rtol=4e-2, atol=4e-2)
    return dict(rtol=1e-5, atol=1e-5)


def _inputs(child: bool, res: bool, s0: bool, dtype: torch.dtype, seed: int, k: int = K):
    g = torch.Generator().manual_seed(seed)
    P = 1.5 * torch.randn(B, T, 3, k, H, generator=g)
    ch = torch.randn(B, T, k, 2, H, generator=g) if child else None
    al = torch.rand(B, T, k, 1, generator=g) if child else None
    be = torch.rand(B, T, k, 1, generator=g) if child else None
    x = torch.randn(B, T, 1, H, generator=g) if res else None
    h0 = torch.randn(B, k * H, generator=g) if s0 else None
    return [None if t is None else t.to(dtype) for t in (P, ch, al, be, x, h0)]


def _reference(xs, lengths, h_form: bool, reverse: bool):
    """The float64 reference; ``reverse`` runs it on the inputs reversed within each length."""
    P, ch, al, be, x, h0 = xs
    if not reverse:
        out, _s, last = metagross_level_reference(P, ch, al, be, x, h0, lengths, h_form)
        return out, last
    rev = [None if t is None else reverse_padded(t, lengths) for t in (P, ch, al, be, x)]
    out, _s, last = metagross_level_reference(*rev, h0, lengths, h_form)
    return reverse_padded(out, lengths), last


CASES = [  # (h_form, child, res, s0, lengths, reverse, dtype)
    (True, True, True, True, None, False, torch.float32),
    (False, True, True, True, [5, 0, 3], False, torch.float32),
    (True, False, True, False, [5, 2, 4], True, torch.float32),
    (False, False, False, True, [5, 1, 4], True, torch.float32),
    (True, True, False, False, [5, 0, 3], False, torch.bfloat16),
    (False, True, True, True, [4, 5, 1], True, torch.bfloat16),
]


@pytest.mark.parametrize(
    ("h_form", "child", "res", "s0", "lengths", "reverse", "dtype"), CASES,
    ids=lambda v: str(v).replace("torch.", "") if not isinstance(v, bool) else str(int(v)),
)  # fmt: skip
def test_level_forward_backward(h_form, child, res, s0, lengths, reverse, dtype):
    xs = _inputs(child, res, s0, dtype, seed=hash((h_form, child, res, s0)) % 1000)
    lens = torch.tensor(lengths) if lengths is not None else None
    out, c, last = mt.forward(*xs, lens, h_form, reverse=reverse)
    x64 = [None if t is None else t.double().requires_grad_() for t in xs]
    ref, ref_last = _reference(x64, lens, h_form, reverse)
    tol = _tol(dtype)
    assert out.dtype == dtype and last.dtype == dtype
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    torch.testing.assert_close(last.double(), ref_last.detach(), **tol)
    assert (c.numel() == 0) == h_form

    g = torch.Generator().manual_seed(11)
    go = torch.randn(out.shape, generator=g).to(dtype)
    gl = torch.randn(last.shape, generator=g).to(dtype)
    saved = out if h_form else c
    grads = mt.backward(go, gl, xs[0], xs[1], xs[2], xs[3], xs[5], lens, saved, h_form, res,
                        reverse=reverse)  # fmt: skip
    leaves = [t for t in x64 if t is not None]
    want = torch.autograd.grad((ref * go.double()).sum() + (ref_last * gl.double()).sum(), leaves)
    got = [gr for gr, t in zip(grads, x64) if t is not None]
    assert len(got) == len(want)
    for a, w in zip(got, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), w, **tol)
    for absent, t in zip(grads[:5], x64[:5]):  # ds0 is always returned, like the CPU op's
        if t is None:
            assert absent.numel() == 0
    if lens is not None:  # padded steps: zero outputs and zero gradients of P
        pad = torch.arange(T)[None, :] >= lens[:, None]
        assert not out[pad].any() and not grads[0][pad].any()


def test_only_final_state_gradient_and_empty_time():
    xs = _inputs(True, True, True, torch.float32, seed=3, k=2)
    out, c, last = mt.forward(*xs, None, False)
    gl = torch.randn(last.shape)
    grads = mt.backward(None, gl, xs[0], xs[1], xs[2], xs[3], xs[5], None, c, False, True)
    x64 = [t.double().requires_grad_() for t in xs]
    _ref, ref_last = _reference(x64, None, False, False)
    want = torch.autograd.grad((ref_last * gl.double()).sum(), x64, allow_unused=True)
    for a, w in zip(grads, want):
        torch.testing.assert_close(a.double(), w if w is not None else torch.zeros_like(a.double()),
                                   rtol=1e-5, atol=1e-5)  # fmt: skip
    # T = 0: no steps, the final state is s0
    empty = [t[:, :0] if t is not None and t.dim() > 2 else t for t in xs]
    out, _c, last = mt.forward(*empty, None, True)
    assert out.shape == (B, 0, 2 * H) and torch.equal(last, xs[5])


def test_level_through_the_public_op(monkeypatch):
    """``metagross_level`` (custom ops + autograd) on the Triton module gives the reference's
    values and gradients: the launchers fit the op's calls exactly (P a column slice)."""
    route(monkeypatch, "metagross", mt)
    g = torch.Generator().manual_seed(5)
    wide = torch.randn(2, T, 4 * 2 * H, generator=g)
    P = wide[..., : 3 * 2 * H].view(2, T, 3, 2, H).requires_grad_()  # non-contiguous rows
    ch = torch.randn(2, T, 2, 2, H, generator=g).requires_grad_()
    al = torch.rand(2, T, 2, 1, generator=g).requires_grad_()
    be = torch.rand(2, T, 2, 1, generator=g).requires_grad_()
    x = torch.randn(2, T, 1, H, generator=g).requires_grad_()
    lengths = torch.tensor([5, 3])
    xs = (P, ch, al, be, x, None)
    out, last = level_mod.metagross_level(*xs, lengths, False)
    ref, _s, ref_last = metagross_level_reference(*xs, lengths, False)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(last, ref_last)
    go, gl = torch.randn_like(out), torch.randn_like(last)
    leaves = (P, ch, al, be, x)
    got = torch.autograd.grad((out * go).sum() + (last * gl).sum(), leaves)
    want = torch.autograd.grad((ref * go).sum() + (ref_last * gl).sum(), leaves)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bias_added_in_the_kernels(h_form, dtype):
    """``bias`` (the base maps' ``b``): the level on ``P + bias``, and the bias's gradient, the
    per-row sums over steps of ``dP`` added over the batch (zero past the lengths)."""
    xs = _inputs(True, True, True, dtype, seed=13)
    bias = torch.randn(3 * K * H, generator=torch.Generator().manual_seed(14)).to(dtype)
    lens = torch.tensor([5, 0, 3])
    out, c, last = mt.forward(*xs, lens, h_form, bias)
    x64 = [t.double().requires_grad_() for t in xs]
    b64 = bias.double().requires_grad_()
    ref, _s, ref_last = metagross_level_reference(*x64, lens, h_form, b64)
    tol = _tol(dtype)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    torch.testing.assert_close(last.double(), ref_last.detach(), **tol)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(15)).to(dtype)
    grads = mt.backward(go, None, xs[0], xs[1], xs[2], xs[3], xs[5], lens, out if h_form else c,
                        h_form, True, bias)  # fmt: skip
    want = torch.autograd.grad((ref * go.double()).sum(), [*x64, b64])
    assert len(grads) == 7
    for a, w in zip(grads, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), w, **tol)


def test_single_unit_root_level():
    """``k = 1`` (the root level): a unit tile of one row."""
    xs = _inputs(True, True, True, torch.float32, seed=7, k=1)
    lens = torch.tensor([5, 2, 0])
    out, _c, last = mt.forward(*xs, lens, True)
    x64 = [t.double().requires_grad_() for t in xs]
    ref, ref_last = _reference(x64, lens, True, False)
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last.double(), ref_last.detach(), rtol=1e-5, atol=1e-5)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(8))
    grads = mt.backward(go, None, xs[0], xs[1], xs[2], xs[3], xs[5], lens, out, True, True)
    want = torch.autograd.grad((ref * go.double()).sum(), x64)
    for a, w in zip(grads, want):
        torch.testing.assert_close(a.double(), w, rtol=1e-5, atol=1e-5)
