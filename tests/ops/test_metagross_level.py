"""metagross_level: the compiled METAGROSS level (gates + scan, METAGROSS paper eq 2-1..2-6) against
the reference composition level_gates + linear_scan, gradients, lengths, dtypes, torch.compile."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import Metagross
from ctrlrnn.ops import backend
from ctrlrnn.ops import metagross_level as ml
from ctrlrnn.ops.backend import backend_info, kernel_for
from ctrlrnn.ops.metagross_level import (
    metagross_level,
    metagross_level_reference,
)

D64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def _ext():
    ext = kernel_for("metagross", torch.device("cpu"))
    assert ext is not None
    return ext


def _inputs(B=3, T=5, k=2, H=7, *, child=True, res=True, s0=True, dtype=D64, seed=0):
    """(P, child, alpha, beta, res, s0), each requiring grad (None where absent)."""
    g = torch.Generator().manual_seed(seed)
    P = torch.randn(B, T, 3, k, H, generator=g, dtype=dtype)
    ch = torch.randn(B, T, k, 2, H, generator=g, dtype=dtype) if child else None
    al = torch.rand(B, T, k, 1, generator=g, dtype=dtype) if child else None
    be = torch.rand(B, T, k, 1, generator=g, dtype=dtype) if child else None
    r = torch.randn(B, T, 1, H, generator=g, dtype=dtype) if res else None
    s = torch.randn(B, k * H, generator=g, dtype=dtype) if s0 else None
    return [None if x is None else x.requires_grad_(True) for x in (P, ch, al, be, r, s)]


def _run_both(xs, lengths, h_form, seed=1):
    """Outputs and input gradients of the compiled op and of the reference, for one loss that
    reads the outputs and the final states."""
    out, last = metagross_level(*xs, lengths, h_form)
    ref, _s, ref_last = metagross_level_reference(*xs, lengths, h_form)
    g = torch.Generator().manual_seed(seed)
    go = torch.randn(out.shape, generator=g, dtype=out.dtype)
    gl = torch.randn(last.shape, generator=g, dtype=out.dtype)
    leaves = [x for x in xs if x is not None]
    g1 = torch.autograd.grad((out * go).sum() + (last * gl).sum(), leaves)
    g2 = torch.autograd.grad((ref * go).sum() + (ref_last * gl).sum(), leaves)
    return (out, last, g1), (ref, ref_last, g2)


def _assert_close_all(a, b, **tol):
    torch.testing.assert_close(a[0], b[0], **tol)
    torch.testing.assert_close(a[1], b[1], **tol)
    assert len(a[2]) == len(b[2])
    for x, y in zip(a[2], b[2]):
        torch.testing.assert_close(x, y, **tol)


def test_compiled_backend_active():
    fam = backend_info()["families"]["metagross"]
    assert fam["cpu"] == "compiled", fam["reason"]
    assert "METAGROSS" in fam["cuda"] or fam["cuda"].startswith("reference"), fam["cuda"]


LEVELS = [  # (child, res, s0): internal levels with residual, leaves, no residual, no state
    (True, True, True),
    (False, True, False),
    (True, False, False),
    (False, False, True),
]


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
@pytest.mark.parametrize("level", LEVELS, ids=["internal", "leaf", "nores", "leaf-s0"])
@pytest.mark.parametrize("lengths", [None, [5, 0, 3]], ids=["full", "lengths"])
@pytest.mark.parametrize("dtype", [torch.float32, D64])
def test_matches_reference(h_form, level, lengths, dtype):
    child, res, s0 = level
    xs = _inputs(child=child, res=res, s0=s0, dtype=dtype)
    lens = None if lengths is None else torch.tensor(lengths)
    got, want = _run_both(xs, lens, h_form)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    _assert_close_all(got, want, **tol)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
@pytest.mark.parametrize("level", LEVELS, ids=["internal", "leaf", "nores", "leaf-s0"])
@pytest.mark.parametrize("lengths", [None, [5, 0, 3]], ids=["full", "lengths"])
@pytest.mark.parametrize("dtype", [torch.float32, D64])
def test_bias_added_inside(h_form, level, lengths, dtype):
    """``bias`` (the base maps' ``b``, section 2.2) is the level on ``P + bias``: values and every
    gradient, the bias's own (``dP`` summed over batch and steps, zero past the lengths)
    included, against the reference and against the op run on ``P + bias`` itself."""
    child, res, s0 = level
    xs = _inputs(child=child, res=res, s0=s0, dtype=dtype)
    k, H = xs[0].shape[3], xs[0].shape[4]
    bias = torch.randn(3 * k * H, generator=torch.Generator().manual_seed(4), dtype=dtype)
    bias.requires_grad_(True)
    lens = None if lengths is None else torch.tensor(lengths)
    out, last = metagross_level(*xs, lens, h_form, bias=bias)
    ref, _s, ref_last = metagross_level_reference(*xs, lens, h_form, bias)
    shifted = [xs[0] + bias.view(3, k, H), *xs[1:]]
    out2, last2 = metagross_level(*shifted, lens, h_form)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for a, b in ((out, ref), (last, ref_last), (out, out2), (last, last2)):
        torch.testing.assert_close(a, b, **tol)
    g = torch.Generator().manual_seed(9)
    go = torch.randn(out.shape, generator=g, dtype=dtype)
    leaves = [x for x in xs if x is not None] + [bias]
    got = torch.autograd.grad((out * go).sum() + last.sum(), leaves)
    want = torch.autograd.grad((ref * go).sum() + ref_last.sum(), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)
    torch.testing.assert_close(got[-1], got[0].sum((0, 1)).reshape(-1), **tol)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_bias_gradcheck_and_opcheck(h_form):
    xs = _inputs(B=2, T=4, k=2, H=3)
    bias = torch.randn(3 * 2 * 3, dtype=D64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    assert torch.autograd.gradcheck(
        lambda *t: metagross_level(*t[:6], lengths, h_form, bias=t[6]), (*xs, bias)
    )
    torch.library.opcheck(ml._level.op, (*xs, lengths, h_form, bias))
    with pytest.raises(ValueError, match="bias"):
        metagross_level(*xs, lengths, h_form, bias=bias[:-1])


def test_bias_with_channel_blocks_and_one_thread_per_row():
    """Batch 1 splits the channels into blocks (each block's bias sums are its own); batch 5
    on 2 threads gives each thread whole rows: the bias gradient is the same sum either way."""
    torch.set_num_threads(2)
    try:
        for B, H in ((1, 40), (5, 24)):
            xs = _inputs(B=B, T=6, k=2, H=H, dtype=torch.float32)
            bias = torch.randn(3 * 2 * H, requires_grad=True)
            out, last = metagross_level(*xs, None, True, bias=bias)
            ref, _s, ref_last = metagross_level_reference(*xs, None, True, bias)
            got = torch.autograd.grad(out.sum() + last.sum(), [xs[0], bias])
            want = torch.autograd.grad(ref.sum() + ref_last.sum(), [xs[0], bias])
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(1)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_padding_semantics(h_form):
    """Past a length: output zero (residual included), state kept, gradients zero; an empty
    sequence returns s0 and passes the final-state gradient to it."""
    P, ch, al, be, r, s0 = _inputs(B=2, T=4, k=1, H=5)
    lengths = torch.tensor([2, 0])
    out, last = metagross_level(P, ch, al, be, r, s0, lengths, h_form)
    assert out[0, 2:].abs().max() == 0 and out[1].abs().max() == 0
    torch.testing.assert_close(last[1], s0[1], rtol=0, atol=0)
    gl = torch.randn_like(last)
    dP, dch, ds0 = torch.autograd.grad((out.sum() + (last * gl).sum()), [P, ch, s0])
    assert dP[0, 2:].abs().max() == 0 and dP[1].abs().max() == 0
    assert dch[0, 2:].abs().max() == 0
    torch.testing.assert_close(ds0[1], gl[1], rtol=0, atol=0)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
@pytest.mark.parametrize("child", [True, False], ids=["internal", "leaf"])
def test_gradcheck(h_form, child):
    xs = _inputs(B=2, T=4, k=2, H=3, child=child, res=True, s0=True)
    lengths = torch.tensor([4, 2])
    present = [i for i, x in enumerate(xs) if x is not None]

    def f(*leaves):
        full = list(xs)
        for i, x in zip(present, leaves):
            full[i] = x
        return metagross_level(*full, lengths, h_form)

    assert torch.autograd.gradcheck(f, tuple(xs[i] for i in present))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_low_precision_against_float32_reference(dtype, h_form):
    xs = _inputs(B=2, T=6, k=2, H=24, dtype=torch.float32)
    low = [x.detach().to(dtype).requires_grad_(True) for x in xs]
    lengths = torch.tensor([6, 3])
    out, last = metagross_level(*low, lengths, h_form)
    assert out.dtype == dtype and last.dtype == dtype
    ref, _s, ref_last = metagross_level_reference(*xs, lengths, h_form)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=3e-3, atol=3e-3)
    torch.testing.assert_close(out.float(), ref, **tol)
    torch.testing.assert_close(last.float(), ref_last, **tol)
    go = torch.randn_like(ref)
    g_low = torch.autograd.grad((out.float() * go).sum() + last.float().sum(), low)
    g_ref = torch.autograd.grad((ref * go).sum() + ref_last.sum(), xs)
    for a, b in zip(g_low, g_ref):
        scale = b.abs().max().clamp(min=1.0)
        assert (a.float() - b).abs().max() / scale < (3e-2 if dtype == torch.bfloat16 else 5e-3)


@pytest.mark.usefixtures("tuned_runtime")  # streaming stores are the tuned runtime's
def test_channel_blocks_streaming_and_strided_P():
    """Batch 1 splits the channels into blocks (partial d alpha sums); streaming and ordinary
    stores agree; P may be a column slice of a wider tensor (the root's projection)."""
    ext = _ext()
    B, T, k, H = 1, 6, 2, 40
    xs = _inputs(B=B, T=T, k=k, H=H, dtype=torch.float32)
    wide = torch.randn(B, T, 3 * k * H + 3, requires_grad=True)
    P_view = wide[..., : 3 * k * H].view(B, T, 3, k, H)
    assert not P_view.is_contiguous()
    results = []
    default = ext.streaming_threshold()
    for threshold in (-1, 0):
        ext.set_streaming_threshold(threshold)
        try:
            results.append(_run_both(xs, torch.tensor([5]), True)[0])
            out, last = metagross_level(P_view, *xs[1:], None, False)
            (dwide,) = torch.autograd.grad(out.sum() + last.sum(), [wide])
            ref, _s, ref_last = metagross_level_reference(P_view.contiguous(), *xs[1:], None, False)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
            assert dwide[..., 3 * k * H :].abs().max() == 0
        finally:
            ext.set_streaming_threshold(default)
    _assert_close_all(results[0], results[1], rtol=0, atol=0)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_reference_fallback(monkeypatch, h_form):
    """Without the extension (CUDA, CTRLRNN_BACKEND=reference, failed build) the public
    function runs the composition, and the custom ops themselves fall back to it too."""
    xs = _inputs(B=2, T=4, k=2, H=5)
    leaves = [x for x in xs if x is not None]
    lengths = torch.tensor([4, 2])
    want = _run_both(xs, lengths, h_form)[0]
    monkeypatch.setattr(backend, "kernel_for", lambda family, device: None)
    _assert_close_all(_run_both(xs, lengths, h_form)[0], want, rtol=1e-12, atol=1e-12)
    out, _c, last = ml._level.op(*xs, lengths, h_form)
    ref, _s, ref_last = metagross_level_reference(*xs, lengths, h_form)
    for loss, ref_loss in (
        ((out * out).sum() + last.sum(), (ref * ref).sum() + ref_last.sum()),
        (last.square().sum(), ref_last.square().sum()),  # no gradient reaches `out`
    ):
        g = torch.autograd.grad(loss, leaves, retain_graph=True)
        g_ref = torch.autograd.grad(ref_loss, leaves, retain_graph=True, allow_unused=True)
        for a, b in zip(g, g_ref):
            b = torch.zeros_like(a) if b is None else b
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_one_output_used(h_form):
    """Only the final state, or only the output, reaches the loss (the other gradient is None)."""
    xs = _inputs(B=2, T=4, k=2, H=5)
    leaves = [x for x in xs if x is not None]
    lengths = torch.tensor([3, 4])
    out, last = metagross_level(*xs, lengths, h_form)
    ref, _s, ref_last = metagross_level_reference(*xs, lengths, h_form)
    for pick in (1, 0):
        g = torch.autograd.grad((out, last)[pick].square().sum(), leaves, retain_graph=True)
        g_ref = torch.autograd.grad(
            (ref, ref_last)[pick].square().sum(), leaves, retain_graph=True, allow_unused=True
        )
        for a, b in zip(g, g_ref):
            torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b)


@pytest.mark.parametrize("h_form", [True, False], ids=["h", "c"])
def test_opcheck(h_form):
    xs = _inputs(B=2, T=3, k=2, H=4)
    lengths = torch.tensor([3, 1])
    torch.library.opcheck(ml._level.op, (*xs, lengths, h_form))
    P = xs[0]
    torch.library.opcheck(ml._level.op, (P, None, None, None, None, None, None, h_form))


def test_bad_arguments():
    P, ch, al, be, r, s0 = _inputs(B=2, T=3, k=2, H=4)
    with pytest.raises(ValueError, match="P"):
        metagross_level(P[0], ch, al, be, r, s0, None, True)
    with pytest.raises(ValueError, match="together"):
        metagross_level(P, ch, None, be, r, s0, None, True)
    with pytest.raises(ValueError, match="child"):
        metagross_level(P, ch[:, :, :1], al, be, r, s0, None, True)
    with pytest.raises(ValueError, match="res"):
        metagross_level(P, ch, al, be, r.float(), s0, None, True)
    with pytest.raises(ValueError, match="s0"):
        metagross_level(P, ch, al, be, r, s0[:, :-1], None, True)
    with pytest.raises(ValueError, match="lengths"):
        metagross_level(P, ch, al, be, r, s0, torch.tensor([4, 1]), True)


@pytest.mark.parametrize("recurrence", ["h", "c"])
def test_torch_compile_of_metagross(recurrence):
    torch.manual_seed(0)
    m = Metagross(6, 6, depth=2, batch_first=True, recurrence=recurrence)
    x = torch.randn(3, 5, 6, requires_grad=True)
    lengths = torch.tensor([5, 3, 2])

    def run(mod):
        out, h_n = mod(x, lengths=lengths)
        grads = torch.autograd.grad(out.square().sum() + h_n.sum(), [x, *m.parameters()])
        return out, h_n, grads

    eager = run(m)
    compiled = run(torch.compile(m))
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(compiled[2], eager[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
