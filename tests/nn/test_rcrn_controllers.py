"""RCRN's controllers on torch's own LSTM/GRU (``controllers="native"``) against the fused-cell
engine (``"fused"``): the same outputs, final states and gradients, for every option that
changes how the layer is run, and the cases where the native engine must step aside."""

from __future__ import annotations

import itertools

import pytest
import torch

from ctrlrnn import RCRN
from ctrlrnn.ops import scan_export

D64 = torch.float64


def _pair(**kw):
    torch.manual_seed(3)
    native = RCRN(6, 5, batch_first=True, **kw).double()
    fused = RCRN(6, 5, batch_first=True, controllers="fused", **kw).double()
    fused.load_state_dict(native.state_dict())
    return native, fused


def _everything(m, x, hx, lengths):
    out, h_n = m(x, hx, lengths=lengths)
    loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=D64)).sum()
    loss = loss + sum((s * (i + 1)).sum() for i, s in enumerate(h_n))
    grads = torch.autograd.grad(loss, [x, *m.parameters()])
    return [out, *h_n, *grads]


CASES = list(itertools.product(
    ("lstm", "gru"), ("per_direction", "concat_forward"), (False, True), (1, 2)))


@pytest.mark.parametrize("cell,listener,bidirectional,num_layers", CASES)
@pytest.mark.parametrize("lengths", [None, [7, 3, 5, 1], [7, 7, 7, 7]])
@pytest.mark.parametrize("with_state", [False, True])
def test_native_equals_fused(cell, listener, bidirectional, num_layers, lengths, with_state,
                             ctrlrnn_backend):
    if ctrlrnn_backend == "reference":
        pytest.skip("a forced reference backend runs the controllers on the reference cells")
    native, fused = _pair(cell=cell, listener=listener, bidirectional=bidirectional,
                          num_layers=num_layers)
    x = torch.randn(4, 7, 6, dtype=D64, requires_grad=True)
    lens = None if lengths is None else torch.tensor(lengths)
    D = 2 if bidirectional else 1
    hx = None
    if with_state:
        hx = tuple(torch.randn(num_layers * D, 4, 5, dtype=D64) for _ in native.state_names)
    assert native.native_applies(x, lens) and not fused.native_applies(x, lens)
    for a, b in zip(_everything(native, x, hx, lens), _everything(fused, x, hx, lens)):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)


def test_native_equals_fused_float32_no_bias_weight_drop_eval():
    native, fused = _pair(bidirectional=True, bias=False, weight_drop=0.3)
    native.float().eval()
    fused.float().eval()
    x = torch.randn(3, 9, 6)
    for a, b in zip(native(x), fused(x)):
        if isinstance(a, tuple):
            for u, v in zip(a, b):
                torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_weight_drop_draws_the_same_masks_on_both_engines():
    native, fused = _pair(bidirectional=True, weight_drop=0.5)
    x = torch.randn(2, 5, 6, dtype=D64)
    torch.manual_seed(11)
    a, _ = native(x)
    torch.manual_seed(11)
    b, _ = fused(x)
    torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
    torch.manual_seed(12)
    c, _ = native(x)
    assert not torch.allclose(a, c)  # a fresh mask per call: the check above could fail


def test_gradcheck_native_with_lengths(ctrlrnn_backend):
    if ctrlrnn_backend == "reference":
        pytest.skip("a forced reference backend runs the controllers on the reference cells")
    torch.manual_seed(0)
    m = RCRN(3, 2, bidirectional=True, batch_first=True).double()
    x = torch.randn(2, 4, 3, dtype=D64, requires_grad=True)
    lens = torch.tensor([4, 2])
    assert m.native_applies(x, lens)
    assert torch.autograd.gradcheck(lambda x: m(x, lengths=lens)[0], (x,))


@pytest.mark.parametrize("why", ["empty_batch", "fused", "reference", "export"])
def test_falls_back_where_native_does_not_apply(why, monkeypatch):
    native, fused = _pair(bidirectional=True)
    x = torch.randn(3, 5, 6, dtype=D64)
    lens = None
    if why == "empty_batch":
        x = x[:0]
    elif why == "reference":
        monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    m = fused if why == "fused" else native
    if why == "export":
        with scan_export.scan_mode():
            assert not m.native_applies(x, lens)
        return
    assert not m.native_applies(x, lens)
    out, _ = m(x, lengths=lens)
    ref, _ = fused(x, lengths=lens)
    torch.testing.assert_close(out, ref)


def test_controllers_is_checked_and_shown():
    with pytest.raises(ValueError, match="controllers"):
        RCRN(4, 4, controllers="cudnn")
    assert "controllers='fused'" in repr(RCRN(4, 4, controllers="fused"))
    assert "controllers" not in repr(RCRN(4, 4))
