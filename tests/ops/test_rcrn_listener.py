"""rcrn_listener (RCRN paper eq 15-16, both directions in one op): the compiled path against the
reference written from the equations, float64 gradcheck, strided inputs read in place and their
gradients in the inputs' strides, the fallback backward, opcheck, the eager path, errors.

Its Triton kernels are tested in ``tests/gpu/test_triton_rcrn_listener.py``; the RCRN layer on
it in ``tests/nn/test_rcrn.py``.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from ctrlrnn.ops import compiled_op
from ctrlrnn.ops.backend import kernel_for
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref
from ctrlrnn.ops.rcrn_listener.reference import rcrn_listener_ref_backward

listener_mod = importlib.import_module("ctrlrnn.ops.rcrn_listener")
rcrn_listener = listener_mod.rcrn_listener
rcrn_listener_ref = listener_mod.rcrn_listener_ref

B, T, C = 4, 7, 6


def _inputs(dtype=torch.float64, time_major=False, seed=0):
    """``h1, h2, h3`` (leaves; with ``time_major`` transposed views of ``(T, B, C)`` tensors, as
    torch's batch-first LSTM outputs are) and ``c0``."""
    g = torch.Generator().manual_seed(seed)
    if time_major:
        hs = [torch.randn(T, B, C, generator=g, dtype=dtype).transpose(0, 1) for _ in range(3)]
    else:
        hs = [torch.randn(B, T, C, generator=g, dtype=dtype) for _ in range(3)]
    hs = [h.requires_grad_() for h in hs]
    c0 = torch.randn(B, C, generator=g, dtype=dtype).requires_grad_()
    return hs, c0


def _by_hand(h1, h2, h3, c0, lengths, output_gate, split):
    """Eq 15-16 step by step, each direction on its own: the forward channels from step 0, the
    backward ones from each sequence's last valid step; zeros past the length."""
    h4 = torch.zeros_like(h1)
    last = torch.zeros_like(c0)
    for b in range(h1.shape[0]):
        L = h1.shape[1] if lengths is None else int(lengths[b])
        for lo, hi, order in ((0, split, range(L)), (split, h1.shape[2], range(L - 1, -1, -1))):
            c = c0[b, lo:hi]
            for t in order:
                f = torch.sigmoid(h1[b, t, lo:hi])
                c = f * c + (1 - f) * h3[b, t, lo:hi]  # eq 15
                x2 = h2[b, t, lo:hi]
                gate = torch.sigmoid(x2) if output_gate == "sigmoid" else x2
                h4[b, t, lo:hi] = gate * c  # eq 16
            last[b, lo:hi] = c
    return h4, last


@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
@pytest.mark.parametrize("split", [C, 3, 0])
@pytest.mark.parametrize("lengths", [None, [7, 3, 0, 5]])
def test_reference_is_the_equations(output_gate, split, lengths):
    (h1, h2, h3), c0 = _inputs()
    lens = None if lengths is None else torch.tensor(lengths)
    h4, _c4, last = rcrn_listener_ref(h1, h2, h3, c0, lengths=lens, output_gate=output_gate,
                                      split=split)
    want = _by_hand(h1, h2, h3, c0, lens, output_gate, split)
    torch.testing.assert_close(h4, want[0], rtol=0, atol=1e-13)
    torch.testing.assert_close(last, want[1], rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("time_major", [False, True], ids=["dense", "transposed-views"])
@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
@pytest.mark.parametrize("split", [C, 3, 0])
@pytest.mark.parametrize("lengths", [None, [7, 3, 0, 5]])
def test_matches_reference(dtype, time_major, output_gate, split, lengths):
    (h1, h2, h3), c0 = _inputs(dtype, time_major)
    lens = None if lengths is None else torch.tensor(lengths)
    kw = dict(lengths=lens, output_gate=output_gate, split=split)
    outs = rcrn_listener(h1, h2, h3, c0, **kw)
    ref = rcrn_listener_ref(h1, h2, h3, c0, **kw)
    ref = (ref[0], ref[2])
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=1e-12)
    for x, y in zip(outs, ref, strict=True):
        assert x.dtype == dtype
        torch.testing.assert_close(x, y, **tol)
    g = torch.Generator().manual_seed(1)
    ws = [torch.randn(x.shape, generator=g, dtype=dtype) for x in outs]
    got = torch.autograd.grad(outs, (h1, h2, h3, c0), ws)
    want = torch.autograd.grad(ref, (h1, h2, h3, c0), ws)
    for x, y, leaf in zip(got, want, (h1, h2, h3, c0), strict=True):
        torch.testing.assert_close(x, y, **tol)
        assert x.stride() == leaf.stride()  # the gradient in the input's layout


def test_gradcheck():
    (h1, h2, h3), c0 = _inputs(time_major=True)
    lens = torch.tensor([7, 2, 0, 4])
    for gate in ("sigmoid", "identity"):
        assert torch.autograd.gradcheck(
            lambda a, b, c, d, gate=gate: rcrn_listener(a, b, c, d, lengths=lens,
                                                        output_gate=gate, split=2),
            (h1, h2, h3, c0))


def test_padding_is_never_read():
    """NaN past each length changes nothing: outputs and gradients of the valid steps."""
    (h1, h2, h3), c0 = _inputs()
    lens = torch.tensor([7, 3, 0, 5])
    poisoned = []
    for h in (h1, h2, h3):
        p = h.detach().clone()
        for b, L in enumerate(lens.tolist()):
            p[b, L:] = float("nan")
        poisoned.append(p.requires_grad_())
    a = rcrn_listener(*poisoned, c0, lengths=lens, split=3)
    b = rcrn_listener(h1, h2, h3, c0, lengths=lens, split=3)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    ga = torch.autograd.grad(a[0].sum() + a[1].sum(), poisoned)
    gb = torch.autograd.grad(b[0].sum() + b[1].sum(), (h1, h2, h3))
    for x, y in zip(ga, gb, strict=True):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_reference_backward_equals_compiled():
    """The fallback backward (autograd through the reference) equals the compiled kernel's."""
    (h1, h2, h3), c0 = _inputs(time_major=True)
    hs = [h.detach() for h in (h1, h2, h3)]
    lens = torch.tensor([7, 3, 0, 5])
    ext = kernel_for("scan", h1.device)
    _h4, c4, _last = ext.rcrn_listener_forward(*hs, c0.detach(), lens, 2, True)
    g = torch.Generator().manual_seed(2)
    grad_out = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    grad_last = torch.randn(B, C, generator=g, dtype=torch.float64)
    for grads in ((grad_out, grad_last), (grad_out, None), (None, grad_last)):
        args = (*grads, *hs, c4, c0.detach(), lens, 2, True)
        for x, y in zip(ext.rcrn_listener_backward(*args), rcrn_listener_ref_backward(*args),
                        strict=True):  # fmt: skip
            torch.testing.assert_close(x, y, rtol=0, atol=1e-12)


def test_export_route_composes_the_public_scan(monkeypatch):
    """Under an ONNX export the listener is the equations on ``linear_scan`` (which exports)."""
    from ctrlrnn.ops import backend

    calls = []

    def scan(*args, **kw):
        calls.append(kw["reverse"])
        return linear_scan_ref(*args, **kw)

    monkeypatch.setattr(backend, "path", lambda family, device: backend.EXPORT)
    monkeypatch.setattr(listener_mod, "linear_scan", scan)
    (h1, h2, h3), c0 = _inputs()
    out = rcrn_listener(h1, h2, h3, c0, split=3)
    assert calls == [False, True]
    monkeypatch.undo()
    torch.testing.assert_close(out, rcrn_listener(h1, h2, h3, c0, split=3))


def test_opcheck():
    (h1, h2, h3), c0 = _inputs(torch.float32)
    for args in ((h1, h2, h3, c0, torch.tensor([7, 3, 0, 5]), 3, True),
                 (h1, h2, h3, None, None, C, False)):
        torch.library.opcheck(torch.ops.ctrlrnn.rcrn_listener.default, args)


def test_compile():
    (h1, h2, h3), c0 = _inputs(torch.float32, time_major=True)
    lens = torch.tensor([7, 3, 0, 5])

    def f(a, b, c, d):
        return rcrn_listener(a, b, c, d, lengths=lens, split=3)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(h1, h2, h3, c0)
    want = f(h1, h2, h3, c0)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y)
    gx = torch.autograd.grad(got[0].sum() + got[1].sum(), (h1, h2, h3, c0))
    gy = torch.autograd.grad(want[0].sum() + want[1].sum(), (h1, h2, h3, c0))
    for x, y in zip(gx, gy, strict=True):
        torch.testing.assert_close(x, y)


def test_eager_path_equals_the_custom_op(monkeypatch):
    def run():
        (h1, h2, h3), c0 = _inputs(time_major=True)
        h4, last = rcrn_listener(h1, h2, h3, c0, lengths=torch.tensor([7, 3, 0, 5]), split=3)
        (h4.square().sum() + last.sum()).backward()
        return h4, last, h1.grad, h2.grad, h3.grad, c0.grad

    eager = run()
    monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    through_op = run()
    for x, y in zip(eager, through_op, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(h2=torch.zeros(2, 5, 7)), "h2: expected the shape of h1"),
        (dict(h3=torch.zeros(2, 5, 6, dtype=torch.float64)), "h3: expected the dtype of h1"),
        (dict(h1=torch.zeros(2, 6), h2=torch.zeros(2, 6), h3=torch.zeros(2, 6)), "h1: expected"),
        (dict(c0=torch.zeros(2, 5)), r"c0: expected a tensor of shape \(2, 6\)"),
        (dict(c0=torch.zeros(2, 6, dtype=torch.float64)), "c0: expected dtype"),
        (dict(output_gate="tanh"), "output_gate: expected one of"),
        (dict(split=7), r"split: expected an integer in \[0, 6\]"),
        (dict(split=True), "split: expected an integer"),
        (dict(lengths=torch.tensor([6, 1])), "lengths"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(h1=torch.zeros(2, 5, 6), h2=torch.zeros(2, 5, 6), h3=torch.zeros(2, 5, 6))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rcrn_listener(args.pop("h1"), args.pop("h2"), args.pop("h3"), **args)
