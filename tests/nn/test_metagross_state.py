"""METAGROSS as printed (``gates="state"``): against a recursive loop written from section 2.

Every base map reads ``(x_t, h_{t-1})`` and the children are called on the caller's
``(x_t, h_{t-1})``; the tests below check the layer (compiled kernel and reference path, by the
nn conftest), its contract (lengths, packed input, reverse direction, chunks, the cell), float64
``gradcheck``, and that the recurrence is not affine in the previous state.
"""

from __future__ import annotations

import pytest
import torch
from test_metagross import PaperTree, _gradcheck
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctrlrnn import Metagross
from ctrlrnn.nn.metagross import MetagrossCell

D64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class PrintedTree(PaperTree):
    """Section 2 as printed, one step at a time: ``Metagross_n(x_t, h_{t-1})`` calls its two
    children on the same ``(x_t, h_{t-1})``; ``F^g_k(x_t, h_{t-1})`` is the base map of ``x_t``
    (linear, or the base RNN over ``x`` of :class:`PaperTree`) plus ``U^g_k h_{t-1}``."""

    def run(self, x, state=None, base_state=None):  # type: ignore[override]
        u, H = self.u, self.H
        B, T, _ = x.shape
        base, base_finals = self.base_sequences(x, base_state)
        alpha, beta = self.depth_gates(x)
        res = None
        if u.residual:
            res = x if u.residual_weight is None else x @ u.residual_weight.T
        h = torch.zeros(B, H, dtype=x.dtype) if state is None else state
        outs = []
        for t in range(T):

            def F(gate, node, t=t, h=h):  # F^gate_node(x_t, h_{t-1})
                return base[gate, node][:, t] + h @ u.weight_hh[self.rows(gate, node, H)].T

            def metagross(node, level, t=t, h=h):  # Metagross_n(x_t, h_{t-1})
                pf, po, pz = F(0, node), F(1, node), F(2, node)
                if level < u.depth:
                    m_f = metagross(2 * node + 1, level + 1)
                    m_o = metagross(2 * node + 2, level + 1)
                    a, b = alpha[:, t, node : node + 1], beta[:, t, node : node + 1]
                    f = torch.sigmoid(a * m_f + (1 - a) * pf)  # (2-1)
                    o = torch.sigmoid(b * m_o + (1 - b) * po)  # (2-2)
                else:
                    f, o = torch.sigmoid(pf), torch.sigmoid(po)
                z = torch.tanh(pz)  # (2-3), reading the previous state
                c = (1 - f) * h + f * z  # (2-4)
                out = o * c  # (2-5)
                return out if res is None else out + res[:, t]  # (2-6)

            h = metagross(0, 1)
            outs.append(h)
        base_last = None
        if base_finals:
            base_last = torch.cat([base_finals[k].reshape(B, -1) for k in sorted(base_finals)], 1)
        return torch.stack(outs, 1), h, base_last, alpha, beta


def _state(m, B, gen=None):
    LD = m.num_layers * m.num_directions
    tree = 0.5 * torch.randn(LD, B, m.state_size(0), dtype=D64, generator=gen)
    if m.base == "linear":
        return tree
    return tree, 0.5 * torch.randn(LD, B, m.state_size(1), dtype=D64, generator=gen)


CASES = [
    ("linear", "token", 1, True),
    ("linear", "token", 2, True),
    ("linear", "scalar", 3, False),
    ("linear", "static", 2, True),
    ("lstm", "token", 2, False),
    ("gru", "scalar", 2, True),
]


@pytest.mark.parametrize("base,depth_gate,depth,residual", CASES)
def test_matches_printed_loop(base, depth_gate, depth, residual):
    torch.manual_seed(0)
    m = Metagross(3, 3, depth=depth, base=base, depth_gate=depth_gate, residual=residual,
                  gates="state", batch_first=True, causal=depth_gate != "static").double()
    x = torch.randn(2, 5, 3, dtype=D64)
    hx = _state(m, 2)
    out, h_n, (alpha, beta) = m(x, hx, return_gates=True)
    tree0 = hx if base == "linear" else hx[0]
    base0 = None if base == "linear" else hx[1][0]
    ref, ref_state, ref_base, ra, rb = PrintedTree(m.unit(0)).run(x, tree0[0], base0)
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
    hx = _state(m, 2)
    hx = hx.requires_grad_() if base == "linear" else tuple(h.requires_grad_() for h in hx)
    assert _gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


def test_packed_equals_padded_and_ignores_padding():
    torch.manual_seed(5)
    m = Metagross(3, 3, num_layers=2, bidirectional=True, depth=2, gates="state",
                  batch_first=True).double()  # fmt: skip
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, 3, dtype=D64, requires_grad=True)
    out, h_n = m(x, lengths=lengths)
    for b in range(3):
        ob, hb = m(x[b : b + 1, : lengths[b]])
        torch.testing.assert_close(out[b : b + 1, : lengths[b]], ob)
        torch.testing.assert_close(h_n[:, b : b + 1], hb)
        assert out[b, lengths[b] :].abs().sum() == 0
    x2 = torch.cat([x.detach(), torch.randn(3, 3, 3, dtype=D64)], 1)
    x2[1, 2:] = float("nan")
    out2, h_n2 = m(x2, lengths=lengths)
    torch.testing.assert_close(out2[:, :5], out)
    torch.testing.assert_close(h_n2, h_n)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out_p, h_p = m(packed)
    padded, lens = pad_packed_sequence(out_p, batch_first=True)
    torch.testing.assert_close(padded, out)
    torch.testing.assert_close(h_p, h_n)
    (out.sum() + h_n.sum()).backward()
    assert x.grad[1, 2:].abs().max() == 0


def test_state_carries_across_chunks_and_cell_equals_layer():
    torch.manual_seed(7)
    m = Metagross(3, 3, depth=3, gates="state", batch_first=True).double()
    x = torch.randn(2, 8, 3, dtype=D64)
    out, h_n = m(x)
    o1, s1 = m(x[:, :5])
    o2, s2 = m(x[:, 5:], s1)
    torch.testing.assert_close(torch.cat([o1, o2], 1), out)
    torch.testing.assert_close(s2, h_n)
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


def test_bad_arguments():
    with pytest.raises(ValueError, match="gates"):
        Metagross(3, 3, gates="hidden")
    with pytest.raises(ValueError, match="recurrence"):
        Metagross(3, 3, gates="state", recurrence="c")
    with pytest.raises(ValueError, match="recurrence"):
        MetagrossCell(3, 3, gates="state", recurrence="c")
    m = Metagross(3, 3, gates="state")
    assert "gates='state'" in repr(m)
    assert m.unit(0).weight_hh.shape == (9 * 3, 3)
