"""Whatever the padding of a batch holds — NaN and Inf included — every layer's outputs, final
states and all its gradients (weights and the valid part of the input) equal those of the same
sequences with zero padding, and those of each sequence run alone without padding."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import ctrlrnn

D64 = torch.float64
CTX = 3

CONFIGS: dict[str, Callable[[], nn.Module]] = {
    "qrnn": lambda: ctrlrnn.QRNN(4, 5, num_layers=2, bidirectional=True, window=3),
    "qrnn-ifo-dense": lambda: ctrlrnn.QRNN(4, 5, num_layers=2, pooling="ifo", dense=True),
    "qrnn-zoneout-eval": lambda: ctrlrnn.QRNN(4, 5, zoneout=0.3).eval(),
    "rcrn": lambda: ctrlrnn.RCRN(4, 5, bidirectional=True),
    "rcrn-gru": lambda: ctrlrnn.RCRN(4, 5, cell="gru"),
    "cas-lstm": lambda: ctrlrnn.CASLSTM(4, 5, num_layers=2, bidirectional=True),
    "cas-lstm-peephole": lambda: ctrlrnn.CASLSTM(4, 5, num_layers=2, peephole=True),
    "ncarnn": lambda: ctrlrnn.CARNN(4, 5, context_size=CTX, variant="n", bidirectional=True),
    "icarnn": lambda: ctrlrnn.CARNN(4, 5, context_size=CTX, variant="i", num_layers=2),
    "scarnn": lambda: ctrlrnn.CARNN(4, 4, context_size=CTX, variant="s"),
    "metagross-token": lambda: ctrlrnn.Metagross(4, 5, depth=2, bidirectional=True),
    "metagross-static": lambda: ctrlrnn.Metagross(4, 5, depth=2, depth_gate="static",
                                                  causal=False),
    "metagross-scalar-c": lambda: ctrlrnn.Metagross(4, 5, depth=2, depth_gate="scalar",
                                                    recurrence="c"),
    "metagross-lstm-base": lambda: ctrlrnn.Metagross(4, 5, depth=2, base="lstm",
                                                     num_layers=2),
    "metagross-gru-base": lambda: ctrlrnn.Metagross(4, 5, depth=3, base="gru", residual=True),
    "metagross-state": lambda: ctrlrnn.Metagross(4, 5, depth=2, gates="state",
                                                 bidirectional=True),
    "metagross-state-lstm": lambda: ctrlrnn.Metagross(4, 5, depth=2, gates="state",
                                                      base="lstm"),
}


def _run(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor | None, ctx: torch.Tensor):
    """Outputs, final states and the gradients of one loss w.r.t. ``x`` and every weight."""
    extra = (ctx,) if isinstance(model, ctrlrnn.CARNN) else ()
    out, h_n = model(x, *extra, lengths=lengths)
    states = list(h_n) if isinstance(h_n, tuple) else [h_n]
    loss = out.square().sum() + sum(s.square().sum() for s in states)
    leaves = [x, *model.parameters()]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, leaves)]
    return out.detach(), [s.detach() for s in states], grads


@pytest.mark.parametrize("fill", ["nan", "inf", "-inf", "garbage"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_padding_content_reaches_nothing(name: str, fill: str) -> None:
    torch.manual_seed(0)
    model = CONFIGS[name]().to(D64)
    lengths = torch.tensor([6, 3, 1])
    valid = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    base = torch.randn(3, 6, 4, dtype=D64).masked_fill(~valid.unsqueeze(-1), 0.0)
    filler = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
              "garbage": 1e4}[fill]
    dirty = base.masked_fill(~valid.unsqueeze(-1), filler)
    ctx = torch.randn(3, CTX, dtype=D64)
    if not getattr(model, "batch_first", False):
        base, dirty = base.transpose(0, 1), dirty.transpose(0, 1)
    clean = _run(model, base.clone().requires_grad_(), lengths, ctx)
    got = _run(model, dirty.clone().requires_grad_(), lengths, ctx)
    torch.testing.assert_close(got[0], clean[0], rtol=0, atol=0)
    for g, c in zip(got[1], clean[1]):
        torch.testing.assert_close(g, c, rtol=0, atol=0)
    for g, c in zip(got[2], clean[2]):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, c, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["qrnn", "cas-lstm", "icarnn", "metagross-static",
                                  "metagross-lstm-base"])
def test_gradients_equal_the_sequences_run_alone(name: str) -> None:
    torch.manual_seed(1)
    model = CONFIGS[name]().to(D64)
    lengths = torch.tensor([5, 2])
    x = torch.randn(2, 5, 4, dtype=D64)
    x[1, 2:] = float("nan")
    ctx = torch.randn(2, CTX, dtype=D64)
    bf = getattr(model, "batch_first", False)
    batched = x if bf else x.transpose(0, 1)
    out, _states, grads = _run(model, batched.clone().requires_grad_(), lengths, ctx)
    want = [torch.zeros_like(g) for g in grads[1:]]
    for b in range(2):
        xb = x[b : b + 1, : int(lengths[b])]
        ob, _s, gb = _run(model, (xb if bf else xb.transpose(0, 1)).clone().requires_grad_(),
                          None, ctx[b : b + 1])
        ob = ob if bf else ob.transpose(0, 1)
        got_b = out[b : b + 1, : int(lengths[b])] if bf else out.transpose(0, 1)[b : b + 1,
                                                                                 : int(lengths[b])]
        torch.testing.assert_close(got_b, ob, rtol=1e-10, atol=1e-12)
        want = [w + g for w, g in zip(want, gb[1:])]
    for g, w in zip(grads[1:], want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-11)
