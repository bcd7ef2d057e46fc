"""What every layer shares with :class:`torch.nn.LSTM`, for the configurations of
:mod:`contract`: unbatched input, dropout between layers, half precision; and that training
lowers the loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from contract import LAYERS, NAMES, context, make, run, states

D64 = torch.float64
STACKED = [n for n in NAMES if LAYERS[n].kwargs.get("num_layers", 1) > 1]


@pytest.mark.parametrize("name", NAMES)
def test_unbatched_input_and_time_major_shapes(name):
    """Time-major ``(T, B, D)`` input gives ``(T, B, out)`` and states ``(L*D, B, S)``; an
    unbatched ``(T, D)`` input (and context ``(C,)``) equals that sequence in a batch."""
    torch.manual_seed(10)
    m = make(name).double().eval()
    x = torch.randn(6, 2, m.input_size, dtype=D64)
    ctx = context(m, 2, D64)
    out, h_n = run(m, x, ctx)
    assert out.shape == (6, 2, m.output_size)
    LD = m.num_layers * m.num_directions
    assert [s.shape for s in states(h_n)] == [
        (LD, 2, m.state_size(k)) for k in range(len(states(h_n)))]
    o1, h1 = run(m, x[:, 1], None if ctx is None else ctx[1])
    torch.testing.assert_close(o1, out[:, 1])
    for s1, s in zip(states(h1), states(h_n), strict=True):
        torch.testing.assert_close(s1, s[:, 1])


@pytest.mark.parametrize("name", STACKED)
def test_dropout_between_layers_in_training_only(name):
    torch.manual_seed(11)
    m = make(name, dropout=0.5).double()
    x = torch.randn(6, 2, m.input_size, dtype=D64)
    ctx = context(m, 2, D64)
    m.eval()
    a, _ = run(m, x, ctx)
    b, _ = run(m, x, ctx)
    torch.testing.assert_close(a, b)
    m.train()
    c, _ = run(m, x, ctx)
    assert not torch.allclose(a, c)


#: every configuration in bfloat16; one of each layer (and of each CARNN variant with a context
#: matrix) in float16
HALF = [pytest.param(n, torch.bfloat16, id=f"{n}-bf16") for n in NAMES] + [
    pytest.param(n, torch.float16, id=f"{n}-fp16")
    for n in ("qrnn", "rcrn", "caslstm", "ncarnn", "icarnn", "metagross", "metagross-state")
]


@pytest.mark.parametrize(("name", "dtype"), HALF)
def test_half_precision(name, dtype):
    """The float32 layer's weights in ``dtype``: outputs and final states in ``dtype`` within
    its precision of the float32 results (lengths given), gradients in ``dtype``."""
    torch.manual_seed(12)
    m = make(name, 8, 16, batch_first=True)
    x = torch.randn(2, 10, m.input_size)
    ctx = context(m, 2)
    lengths = torch.tensor([10, 7])
    ref, _ = run(m, x, ctx, lengths=lengths)
    mh = make(name, 8, 16, batch_first=True).to(dtype)
    mh.load_state_dict({k: v.to(dtype) for k, v in m.state_dict().items()})
    out, h_n = run(mh, x.to(dtype), None if ctx is None else ctx.to(dtype), lengths=lengths)
    assert out.dtype == dtype and all(s.dtype == dtype for s in states(h_n))
    torch.testing.assert_close(out.float(), ref, rtol=5e-2, atol=5e-2)
    out.float().sum().backward()
    grads = [p.grad for p in mh.parameters() if p.grad is not None]
    assert grads and all(g.dtype == dtype for g in grads)


#: (configuration, its overrides, hidden size, seed)
LEARNERS = [
    pytest.param("rcrn", dict(num_layers=1), 12, 9, id="rcrn"),
    pytest.param("caslstm", dict(bidirectional=False), 16, 7, id="caslstm"),
]


@pytest.mark.parametrize(("name", "overrides", "hidden", "seed"), LEARNERS)
def test_training_loss_falls(name, overrides, hidden, seed):
    """A tiny synthetic task: the sign of the running sum of the input's first feature."""
    torch.manual_seed(seed)
    m = make(name, 2, hidden, batch_first=True, **overrides)
    head = torch.nn.Linear(m.output_size, 1)
    opt = torch.optim.Adam([*m.parameters(), *head.parameters()], lr=0.02)
    x = torch.randn(32, 12, 2)
    y = (x[..., 0].cumsum(1) > 0).float()

    def loss_fn():
        out, _ = m(x)
        return F.binary_cross_entropy_with_logits(head(out)[..., 0], y)

    first = loss_fn().item()
    for _ in range(25):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    assert loss_fn().item() < 0.5 * first
