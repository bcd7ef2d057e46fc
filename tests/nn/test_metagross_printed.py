"""METAGROSS as printed (``gates="state"``) against a recursive step-by-step loop written from
the METAGROSS paper's section 2 (:class:`metagross_loops.PrintedTree`)."""

from __future__ import annotations

import pytest
import torch
from contract import gradcheck
from metagross_loops import PrintedTree, assert_chunks_chain, layer_and_loop, printed_state

from ctrlrnn import Metagross
from ctrlrnn.nn.metagross import MetagrossCell

D64 = torch.float64

pytestmark = pytest.mark.usefixtures("one_thread")

# Every base map reads (x_t, h_{t-1}) and the children are called on the caller's (x_t, h_{t-1}):
# against a recursive loop written from section 2 as printed, gradcheck, and that the recurrence
# is not affine in the previous state.


PRINTED_CASES = [
    ("linear", "token", 1, True),
    ("linear", "token", 2, True),
    ("linear", "scalar", 3, False),
    ("linear", "static", 2, True),
    ("lstm", "token", 2, False),
    ("gru", "scalar", 2, True),
]


@pytest.mark.parametrize("base,depth_gate,depth,residual", PRINTED_CASES)
def test_matches_printed_loop(base, depth_gate, depth, residual):
    torch.manual_seed(0)
    m = Metagross(3, 3, depth=depth, base=base, depth_gate=depth_gate, residual=residual,
                  gates="state", batch_first=True, causal=depth_gate != "static").double()
    x = torch.randn(2, 5, 3, dtype=D64)
    (out, h_n, alpha, beta), (ref, ref_state, ref_base, ra, rb) = layer_and_loop(
        m, PrintedTree, x, printed_state(m, 2))
    torch.testing.assert_close(out, ref)
    tree = h_n if base == "linear" else h_n[0]
    assert tree.shape == (1, 2, 3)  # only the root's h is carried
    torch.testing.assert_close(tree[0], ref_state)
    if base != "linear":
        torch.testing.assert_close(h_n[1][0], ref_base)
    if depth > 1:
        torch.testing.assert_close(alpha[0], ra)
        torch.testing.assert_close(beta[0], rb)


def test_projection_residual_and_no_bias():
    torch.manual_seed(1)
    m = Metagross(4, 3, depth=2, bias=False, gates="state", batch_first=True).double()
    assert m.unit(0).residual_weight is not None and m.unit(0).bias is None
    x = torch.randn(2, 6, 4, dtype=D64)
    out, h_n = m(x)
    ref, ref_state, *_ = PrintedTree(m.unit(0)).run(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n[0], ref_state)


def test_not_affine_in_the_previous_state():
    """As printed the step is nonlinear in the root's h_{t-1}; the input reading is exactly
    affine in it (its gates read x_t only)."""
    torch.manual_seed(2)
    x = torch.randn(2, 1, 4, dtype=D64)
    for gates, affine in (("input", True), ("state", False)):
        m = Metagross(4, 4, depth=2, gates=gates, batch_first=True).double()
        width = m.state_size(0)
        h0, dh = torch.randn(1, 2, width, dtype=D64), torch.zeros(1, 2, width, dtype=D64)
        dh[..., :4] = torch.randn(1, 2, 4, dtype=D64)  # the root's state only
        ys = [m(x, h0 + k * dh)[0][:, 0, :4] for k in (0, 1, 2)]
        second = (ys[2] - 2 * ys[1] + ys[0]).abs().max().item()
        assert (second < 1e-12) == affine, (gates, second)


def test_bidirectional_multilayer_matches_printed_loop():
    torch.manual_seed(3)
    m = Metagross(3, 4, num_layers=2, bidirectional=True, depth=2, gates="state").double()
    x = torch.randn(5, 2, 3, dtype=D64)
    out, h_n = m(x)
    layer_in, finals = x.transpose(0, 1), []
    for layer in range(2):
        outs = []
        for d in range(2):
            inp = layer_in if d == 0 else layer_in.flip(1)
            o, s, *_ = PrintedTree(m.unit(layer, d)).run(inp)
            outs.append(o if d == 0 else o.flip(1))
            finals.append(s)
        layer_in = torch.cat(outs, -1)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    torch.testing.assert_close(h_n, torch.stack(finals))


@pytest.mark.parametrize("base", ["linear", "gru"])
def test_gradcheck_with_lengths_and_reverse(base):
    torch.manual_seed(4)
    big = base == "linear"
    m = Metagross(2, 2, num_layers=2 if big else 1, bidirectional=True, depth=2, base=base,
                  gates="state", batch_first=True).double()  # fmt: skip
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    hx = printed_state(m, 2)
    hx = hx.requires_grad_() if base == "linear" else tuple(h.requires_grad_() for h in hx)
    assert gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


def test_state_carries_across_chunks_and_cell_equals_layer():
    torch.manual_seed(7)
    m = Metagross(3, 3, depth=3, gates="state", batch_first=True).double()
    x = torch.randn(2, 8, 3, dtype=D64)
    out, h_n = assert_chunks_chain(m, x, 5)
    cell = m.cell(0)
    state, steps = None, []
    for t in range(8):
        h, state = cell(x[:, t], state)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps, 1), out)
    torch.testing.assert_close(state, h_n[0])
    with pytest.raises(ValueError, match="state"):
        cell(x[:, 0], torch.zeros(2, 7 * 3, dtype=D64))  # the input reading's width


def test_float32_trains_and_matches_float64():
    torch.manual_seed(8)
    m = Metagross(5, 6, depth=2, gates="state", bidirectional=True, batch_first=True)
    x = torch.randn(4, 7, 5)
    lengths = torch.tensor([7, 3, 5, 1])
    out, h = m(x, lengths=lengths)
    ref, rh = m.double()(x.double(), lengths=lengths)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(h.double(), rh, atol=1e-5, rtol=1e-4)
    m = m.float()
    opt = torch.optim.Adam(m.parameters(), lr=0.02)
    target = torch.randn(4, 7, 12)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((m(x)[0] - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_bad_arguments_of_the_printed_reading():
    with pytest.raises(ValueError, match="gates"):
        Metagross(3, 3, gates="hidden")
    with pytest.raises(ValueError, match="recurrence"):
        Metagross(3, 3, gates="state", recurrence="c")
    with pytest.raises(ValueError, match="recurrence"):
        MetagrossCell(3, 3, gates="state", recurrence="c")
    m = Metagross(3, 3, gates="state")
    assert "gates='state'" in repr(m)
    assert m.unit(0).weight_hh.shape == (9 * 3, 3)
