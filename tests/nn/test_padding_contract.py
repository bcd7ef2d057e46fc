"""Padding reaches nothing, for every layer configuration of :mod:`contract`.

Whatever the padding of a batch holds (NaN and Inf included) a layer's outputs, final states and
all its gradients (weights, context and the valid part of the input) equal those of the same
sequences with zero padding and those of each sequence run alone without padding; outputs and
input gradients are zero past each length; more padding changes nothing; a packed batch gives
the padded batch's results in the same batch order.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
from contract import NAMES, context, make, run, states
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# the layers are tiny: one thread runs torch's ops inline instead of waking a second one
pytestmark = pytest.mark.usefixtures("one_thread")

D64 = torch.float64
FILLS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "garbage": 1e4}


def _run(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor | None,
         ctx: torch.Tensor | None):  # fmt: skip
    """Outputs, final states and the gradients of one loss w.r.t. ``x``, the context (when the
    layer takes one) and every weight."""
    out, h_n = run(model, x, ctx, lengths=lengths)
    finals = states(h_n)
    loss = out.square().sum() + sum(s.square().sum() for s in finals)
    leaves = [x, *([ctx] if ctx is not None else []), *model.parameters()]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves)]
    return out.detach(), [s.detach() for s in finals], grads


@cache
def _zero_padded(name: str, backend: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor,
                                                   torch.Tensor | None, tuple]:  # fmt: skip
    """Configuration ``name``, a time-major batch of lengths 6, 3 and 1 with zeros in its
    padding, the padding's mask and the context, and :func:`_run`'s results on that batch:
    what each fill of the padding is compared with, computed once per layer and backend."""
    torch.manual_seed(0)
    model = make(name).to(D64)
    lengths = torch.tensor([6, 3, 1])
    padding = ~(torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)
    base = torch.randn(3, 6, model.input_size, dtype=D64).masked_fill(padding, 0.0)
    ctx = context(model, 3, D64)
    if ctx is not None:
        ctx.requires_grad_()
    clean = _run(model, base.transpose(0, 1).clone().requires_grad_(), lengths, ctx)
    return model, base, padding, ctx, clean


@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("name", NAMES)
def test_padding_content_reaches_nothing(name: str, fill: str, ctrlrnn_backend: str) -> None:
    """Time-major input: padding holding ``fill`` gives bit for bit the results of zeros."""
    model, base, padding, ctx, clean = _zero_padded(name, ctrlrnn_backend)
    dirty = base.masked_fill(padding, FILLS[fill]).transpose(0, 1)
    got = _run(model, dirty.clone().requires_grad_(), torch.tensor([6, 3, 1]), ctx)
    torch.testing.assert_close(got[0], clean[0], rtol=0, atol=0)
    for g, c in zip(got[1], clean[1]):
        torch.testing.assert_close(g, c, rtol=0, atol=0)
    for g, c in zip(got[2], clean[2]):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, c, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_each_sequence_alone(name: str) -> None:
    """A padded batch (NaN in its padding) equals each sequence run alone: outputs (zero past
    each length), final states, the input's and the context's gradients (zero past each
    length), and the weights' gradients (the sum of the sequences' own)."""
    torch.manual_seed(1)
    model = make(name, batch_first=True).to(D64)
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, model.input_size, dtype=D64)
    x[1, 2:] = float("nan")
    ctx = context(model, 3, D64)
    leaf_ctx = None if ctx is None else ctx.clone().requires_grad_()
    out, finals, grads = _run(model, x.clone().requires_grad_(), lengths, leaf_ctx)
    gx, gctx = grads[0], (grads[1] if ctx is not None else None)
    want = [torch.zeros_like(g) for g in grads[1 + (ctx is not None):]]
    for b in range(3):
        n = int(lengths[b])
        cb = None if ctx is None else ctx[b : b + 1].clone().requires_grad_()
        ob, sb, gb = _run(model, x[b : b + 1, :n].clone().requires_grad_(), None, cb)
        torch.testing.assert_close(out[b : b + 1, :n], ob, rtol=1e-10, atol=1e-12)
        assert out[b, n:].abs().sum() == 0
        for s, s_alone in zip(finals, sb, strict=True):
            torch.testing.assert_close(s[:, b : b + 1], s_alone, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gx[b, :n], gb[0][0], rtol=1e-9, atol=1e-11)
        assert gx[b, n:].abs().sum() == 0
        if ctx is not None:
            torch.testing.assert_close(gctx[b], gb[1][0], rtol=1e-9, atol=1e-11)
        want = [w + g for w, g in zip(want, gb[1 + (ctx is not None):])]
    for g, w in zip(grads[1 + (ctx is not None):], want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", NAMES)
def test_more_padding_and_packed_input(name: str) -> None:
    """Three more steps of padding (holding 1e3) change nothing; a packed batch gives the
    padded batch's outputs and final states, in the same batch order."""
    torch.manual_seed(2)
    model = make(name, batch_first=True).to(D64)
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, model.input_size, dtype=D64)
    ctx = context(model, 3, D64)
    out, h_n = run(model, x, ctx, lengths=lengths)
    x2 = torch.cat([x, torch.randn(3, 3, model.input_size, dtype=D64)], 1)
    x2[1, 2:] = 1e3
    out2, h_n2 = run(model, x2, ctx, lengths=lengths)
    torch.testing.assert_close(out2[:, :5], out)
    torch.testing.assert_close(h_n2, h_n)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out_p, h_p = run(model, packed, ctx)
    padded, lens = pad_packed_sequence(out_p, batch_first=True)
    torch.testing.assert_close(padded, out)
    assert lens.tolist() == lengths.tolist()
    torch.testing.assert_close(h_p, h_n)
