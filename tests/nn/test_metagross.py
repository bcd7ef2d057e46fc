"""METAGROSS against recursive step-by-step loops written from the METAGROSS paper section 2, in
both readings (gates from the input, ``gates="input"``, and as printed, ``gates="state"``), and
what is specific to it (bases, recurrences, depth gates, the gate backend). What every layer
shares (padding, packed input, unbatched input, dropout, half precision, ...) is checked over the
configurations of ``contract.py``; the position-wise variant (section 2.3) is
``test_metagross_ffn.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from contract import gradcheck

from ctrlrnn import Metagross
from ctrlrnn.nn import metagross_gates
from ctrlrnn.nn.metagross import MetagrossCell
from ctrlrnn.ops import backend

D64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


class PaperTree:
    """One METAGROSS tree run one step at a time, the unit calling itself recursively.

    Written from section 2 with the module's parameters split per unit and gate; the base RNNs
    are torch's own LSTMCell / GRUCell, so nothing is shared with the implementation.
    """

    def __init__(self, unit):
        self.u = unit
        self.N, self.I, self.H = unit.num_nodes, unit.num_internal, unit.hidden_size

    @staticmethod
    def index(gate, node):
        """The documented level-major layout: level by level, [F | O | Z] of its units."""
        level = 1
        while node >= 2**level - 1:
            level += 1
        first, count = 2 ** (level - 1) - 1, 2 ** (level - 1)
        return 3 * first + gate * count + (node - first)

    def rows(self, gate, node, width):
        k = self.index(gate, node)  # base function k: gate (F, O, Z) of node
        return slice(k * width, (k + 1) * width)

    def base_sequences(self, x, base_state=None):
        """F^*_k(x_t) for every gate and node, as a dict (gate, node) -> (B, T, H)."""
        u, H, B, T = self.u, self.H, x.shape[0], x.shape[1]
        out, finals = {}, {}
        for gate in range(3):
            for node in range(self.N):
                if u.base == "linear":
                    r = self.rows(gate, node, H)
                    b = u.bias[r] if u.bias is not None else 0.0
                    out[gate, node] = x @ u.weight[r].T + b  # section 2.2: W_n x_t + b_n
                    continue
                k = self.index(gate, node)
                G = 4 if u.base == "lstm" else 3
                cls = torch.nn.LSTMCell if u.base == "lstm" else torch.nn.GRUCell
                cell = cls(x.shape[-1], H).double()
                with torch.no_grad():
                    cell.weight_ih.copy_(u.base_weight_ih[k * G * H : (k + 1) * G * H])
                    cell.weight_hh.copy_(u.base_weight_hh[k])
                    cell.bias_ih.copy_(u.base_bias_ih[k * G * H : (k + 1) * G * H])
                    cell.bias_hh.copy_(u.base_bias_hh[k] if u.base == "gru" else 0.0)
                per = 2 if u.base == "lstm" else 1
                st = None
                if base_state is not None:
                    s = base_state.view(B, 3 * self.N, per, H)[:, k]
                    st = (s[:, 0], s[:, 1]) if u.base == "lstm" else s[:, 0]
                hs = []
                for t in range(T):
                    st = cell(x[:, t], st)
                    hs.append(st[0] if u.base == "lstm" else st)
                out[gate, node] = torch.stack(hs, 1)
                finals[k] = torch.stack(st, 1) if u.base == "lstm" else st.unsqueeze(1)
        return out, finals

    def depth_gates(self, x):
        """alpha_t, beta_t per internal node (section 2.1), bounded by a sigmoid."""
        u, I = self.u, self.I
        if I == 0:
            return None, None
        if u.depth_gate == "scalar":
            g = torch.sigmoid(u.depth_logit).expand(x.shape[0], x.shape[1], 2 * I)
        else:
            src = x if u.depth_gate == "token" else x.sum(1, keepdim=True).expand_as(x)
            b = u.depth_bias if u.depth_bias is not None else 0.0
            g = torch.sigmoid(src @ u.depth_weight.T + b)
        return g[..., :I], g[..., I:]

    def run(self, x, state=None, base_state=None):
        u, H, N = self.u, self.H, self.N
        B, T, _ = x.shape
        base, base_finals = self.base_sequences(x, base_state)
        alpha, beta = self.depth_gates(x)
        res = None
        if u.residual:
            res = x if u.residual_weight is None else x @ u.residual_weight.T
        prev = [
            torch.zeros(B, H, dtype=x.dtype) if state is None else state[:, k * H : (k + 1) * H]
            for k in range(N)
        ]
        outs = []
        for t in range(T):
            new = list(prev)

            def metagross(node, level, t=t, prev=prev, new=new):  # Metagross_n(x_t, h_{t-1})
                pf, po, pz = (base[g, node][:, t] for g in range(3))
                if level < u.depth:
                    m_f = metagross(2 * node + 1, level + 1)  # the forget gate's own child
                    m_o = metagross(2 * node + 2, level + 1)  # the output gate's own child
                    a, b = alpha[:, t, node : node + 1], beta[:, t, node : node + 1]
                    f = torch.sigmoid(a * m_f + (1 - a) * pf)
                    o = torch.sigmoid(b * m_o + (1 - b) * po)
                else:
                    f, o = torch.sigmoid(pf), torch.sigmoid(po)
                z = torch.tanh(pz)
                if u.recurrence == "h":
                    c = (1 - f) * prev[node] + f * z  # c_t = (1 - f) h_{t-1} + f z
                    h = o * c
                    if res is not None:
                        h = h + res[:, t]  # h_t = h_t + x_t
                    new[node] = h
                else:
                    c = (1 - f) * prev[node] + f * z  # c_t = (1 - f) c_{t-1} + f z
                    h = o * c
                    if res is not None:
                        h = h + res[:, t]
                    new[node] = c
                return h

            outs.append(metagross(0, 1))
            prev = new
        base_last = None
        if base_finals:
            base_last = torch.cat([base_finals[k].reshape(B, -1) for k in sorted(base_finals)], 1)
        return torch.stack(outs, 1), torch.cat(prev, 1), base_last, alpha, beta


def _hx(m, B, gen=None):
    LD = m.num_layers * m.num_directions
    tree = torch.randn(LD, B, m.state_size(0), dtype=D64, generator=gen)
    if m.base == "linear":
        return tree
    return tree, 0.5 * torch.randn(LD, B, m.state_size(1), dtype=D64, generator=gen)


# every base with every depth gate, and each of them with both recurrences (pairwise)
CASES = [
    (base, rec, gate)
    for base, recs in (("linear", "hch"), ("lstm", "chc"), ("gru", "hch"))
    for rec, gate in zip(recs, ("token", "static", "scalar"), strict=True)
]


@pytest.mark.parametrize("base,recurrence,depth_gate", CASES)
def test_matches_paper_loop(base, recurrence, depth_gate):
    torch.manual_seed(0)
    m = Metagross(3, 3, depth=3, base=base, recurrence=recurrence, depth_gate=depth_gate,
                  batch_first=True, causal=depth_gate != "static").double()  # fmt: skip
    x = torch.randn(2, 5, 3, dtype=D64)
    hx = _hx(m, 2)
    out, h_n, (alpha, beta) = m(x, hx, return_gates=True)
    tree0 = hx if base == "linear" else hx[0]
    base0 = None if base == "linear" else hx[1][0]
    ref, ref_state, ref_base, ra, rb = PaperTree(m.unit(0)).run(x, tree0[0], base0)
    torch.testing.assert_close(out, ref)
    if base == "linear":
        torch.testing.assert_close(h_n[0], ref_state)
    else:
        torch.testing.assert_close(h_n[0][0], ref_state)
        torch.testing.assert_close(h_n[1][0], ref_base)
    torch.testing.assert_close(alpha[0], ra)
    torch.testing.assert_close(beta[0], rb)


@pytest.mark.parametrize("residual,input_size", [(False, 3), (True, 4), (False, 4)])
@pytest.mark.parametrize("recurrence", ["h", "c"])
def test_residual_options_and_bias(residual, input_size, recurrence):
    torch.manual_seed(1)
    m = Metagross(input_size, 3, depth=2, residual=residual, recurrence=recurrence, bias=False,
                  batch_first=True).double()  # fmt: skip
    assert (m.unit(0).residual_weight is not None) == (residual and input_size != 3)
    x = torch.randn(2, 6, input_size, dtype=D64)
    out, h_n = m(x)
    ref, ref_state, *_ = PaperTree(m.unit(0)).run(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n[0], ref_state)


def test_printed_form_is_the_scan_of_the_design_table():
    """Without residual, h_t = a_t h_{t-1} + b_t with a = o (1 - f), b = o f z (depth 1)."""
    torch.manual_seed(2)
    m = Metagross(3, 4, depth=1, residual=False, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=D64)
    out, _ = m(x)
    u = m.unit(0)
    pf, po, pz = (x @ w.T + b for w, b in zip(u.weight.chunk(3), u.bias.chunk(3)))
    f, o, z = torch.sigmoid(pf), torch.sigmoid(po), torch.tanh(pz)
    h, hs = torch.zeros(2, 4, dtype=D64), []
    for t in range(5):
        h = o[:, t] * (1 - f[:, t]) * h + o[:, t] * f[:, t] * z[:, t]
        hs.append(h)
    torch.testing.assert_close(out, torch.stack(hs, 1))


@pytest.mark.parametrize("base", ["linear", "gru"])
def test_bidirectional_multilayer_matches_paper_loop(base):
    torch.manual_seed(3)
    m = Metagross(3, 4, num_layers=2, bidirectional=True, depth=2, base=base).double()
    x = torch.randn(5, 2, 3, dtype=D64)  # (T, B, D)
    out, h_n, (alpha, _beta) = m(x, return_gates=True)
    assert alpha.shape == (4, 5, 2, 1)  # (L*D, T, B, I), time-major like the output
    layer_in, finals, alphas = x.transpose(0, 1), [], []
    for layer in range(2):
        outs = []
        for d in range(2):
            inp = layer_in if d == 0 else layer_in.flip(1)
            o, s, _, a, _ = PaperTree(m.unit(layer, d)).run(inp)
            outs.append(o if d == 0 else o.flip(1))
            finals.append(s)
            alphas.append(a if d == 0 else a.flip(1))
        layer_in = torch.cat(outs, -1)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    tree = h_n if base == "linear" else h_n[0]
    torch.testing.assert_close(tree, torch.stack(finals))
    torch.testing.assert_close(alpha, torch.stack(alphas).transpose(1, 2))


@pytest.mark.parametrize(
    "base,recurrence,depth_gate",
    [("linear", "h", "token"), ("linear", "c", "static"), ("lstm", "h", "scalar"),
     ("gru", "c", "static")],
)  # fmt: skip
def test_gradcheck(base, recurrence, depth_gate):
    torch.manual_seed(4)
    # RNN bases carry 3 * (2^depth - 1) RNN states each: one layer direction keeps the full
    # Jacobian w.r.t. them small; the linear base runs the whole bidirectional stack.
    big = base == "linear"
    m = Metagross(2, 2, num_layers=2 if big else 1, bidirectional=big, depth=2, base=base,
                  recurrence=recurrence, depth_gate=depth_gate, causal=False,
                  batch_first=True).double()  # fmt: skip
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    hx = _hx(m, 2)
    hx = hx.requires_grad_() if base == "linear" else tuple(h.requires_grad_() for h in hx)
    assert gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


@pytest.mark.parametrize(
    "base,recurrence,depth_gate",
    [("linear", "h", "token"), ("linear", "c", "static"), ("lstm", "c", "token"),
     ("gru", "h", "static")],
)  # fmt: skip
def test_depth_gates_of_a_padded_batch(base, recurrence, depth_gate):
    """``return_gates`` with lengths: each sequence's alpha and beta are those it has alone, and
    zero past its length."""
    torch.manual_seed(5)
    m = Metagross(3, 3, num_layers=2, bidirectional=True, depth=2, base=base,
                  recurrence=recurrence, depth_gate=depth_gate,
                  batch_first=True).double()  # fmt: skip
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, 3, dtype=D64)
    _out, _h_n, (alpha, beta) = m(x, lengths=lengths, return_gates=True)
    for b in range(3):
        _ob, _hb, (ab, bb) = m(x[b : b + 1, : lengths[b]], return_gates=True)
        torch.testing.assert_close(alpha[:, b : b + 1, : lengths[b]], ab)
        torch.testing.assert_close(beta[:, b : b + 1, : lengths[b]], bb)
        assert alpha[:, b, lengths[b] :].abs().sum() == 0
        assert beta[:, b, lengths[b] :].abs().sum() == 0


@pytest.mark.parametrize("base,recurrence", [("linear", "h"), ("linear", "c"), ("lstm", "h")])
def test_state_carries_across_chunks(base, recurrence):
    """Two calls chained through h_n equal one call (every unit's and base RNN's state)."""
    torch.manual_seed(7)
    m = Metagross(3, 3, depth=3, base=base, recurrence=recurrence, batch_first=True).double()
    x = torch.randn(2, 8, 3, dtype=D64)
    out, h_n = m(x)
    o1, s1 = m(x[:, :5])
    o2, s2 = m(x[:, 5:], s1)
    torch.testing.assert_close(torch.cat([o1, o2], 1), out)
    torch.testing.assert_close(s2, h_n)


@pytest.mark.parametrize("base,recurrence", [("linear", "h"), ("gru", "c")])
def test_cell_equals_layer(base, recurrence):
    torch.manual_seed(15)
    m = Metagross(3, 3, depth=2, base=base, recurrence=recurrence).double()
    x = torch.randn(6, 2, 3, dtype=D64)
    out, h_n = m(x)
    cell = m.cell(0)
    state, steps = None, []
    for t in range(6):
        h, state = cell(x[t], state)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps), out)
    if base == "linear":
        torch.testing.assert_close(state, h_n[0])
    else:
        torch.testing.assert_close(state[0], h_n[0][0])
        torch.testing.assert_close(state[1], h_n[1][0])
    h1, _ = cell(x[0, 1])  # unbatched
    torch.testing.assert_close(h1, out[0, 1])
    with pytest.raises(ValueError, match="depth_gate: 'static'"):
        MetagrossCell(3, 3, depth_gate="static")
    with pytest.raises(ValueError, match="state"):
        cell(x[0], torch.zeros(2, 5, dtype=D64))


def test_gates_are_bounded_and_unbatched_time_major():
    torch.manual_seed(8)
    m = Metagross(3, 4, num_layers=2, depth=3).double()
    x = 10 * torch.randn(6, 2, 3, dtype=D64)
    out, h_n, (alpha, beta) = m(x, return_gates=True)
    assert alpha.shape == beta.shape == (2, 6, 2, 3)
    assert 0 <= alpha.min() and alpha.max() <= 1 and 0 <= beta.min() and beta.max() <= 1
    o1, h1, (a1, _) = m(x[:, 1], return_gates=True)
    torch.testing.assert_close(o1, out[:, 1])
    torch.testing.assert_close(h1, h_n[:, 1])
    torch.testing.assert_close(a1, alpha[:, :, 1])
    one = Metagross(3, 4, depth=1).double()
    assert one.unit(0).num_internal == 0
    assert one(x, return_gates=True)[2][0].shape == (1, 6, 2, 0)


def test_static_gate_uses_the_whole_sequence():
    torch.manual_seed(9)
    m = Metagross(3, 3, depth=2, depth_gate="static", causal=False, batch_first=True).double()
    x = torch.randn(1, 6, 3, dtype=D64)
    out, _ = m(x)
    x2 = x.clone()
    x2[:, -1] += 1.0  # changing the last step changes earlier outputs: it is not causal
    out2, _ = m(x2)
    assert (out2[:, 0] - out[:, 0]).abs().max() > 1e-6
    tok = Metagross(3, 3, depth=2, batch_first=True).double()
    a, _ = tok(x)
    b, _ = tok(x2)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])  # the token gate is causal


def test_bad_arguments():
    with pytest.raises(ValueError, match="causal: depth_gate='static'"):
        Metagross(3, 4, depth_gate="static")  # unidirectional: causal by default
    with pytest.raises(ValueError, match="causal: depth_gate='static'"):
        Metagross(3, 4, depth_gate="static", causal=True)
    with pytest.raises(ValueError, match="causal"):
        Metagross(3, 4, bidirectional=True, causal=True)
    Metagross(3, 4, depth_gate="static", bidirectional=True)  # an encoder: allowed
    for kwargs, name in [
        (dict(base="rnn"), "base"),
        (dict(depth_gate="dynamic"), "depth_gate"),
        (dict(recurrence="x"), "recurrence"),
        (dict(depth=0), "depth"),
        (dict(num_layers=0), "num_layers"),
    ]:
        with pytest.raises(ValueError, match=name):
            Metagross(3, 4, **kwargs)
    m = Metagross(3, 4, num_layers=2, base="lstm", batch_first=True)
    with pytest.raises(ValueError, match="hx"):
        m(torch.randn(2, 5, 3), torch.zeros(2, 2, 12))  # needs (tree, base)
    with pytest.raises(ValueError, match=r"hx\[0\] \(tree\): expected shape \(2, 2, 12\)"):
        m(torch.randn(2, 5, 3), (torch.zeros(2, 2, 4), torch.zeros(2, 2, 72)))
    with pytest.raises(ValueError, match="input: expected feature size"):
        m(torch.randn(2, 5, 4))


def test_depth3_lstm_base_learns_delayed_copy():
    """Output t must reproduce input t-2: needs the recurrence; loss falls well below start."""
    torch.manual_seed(11)
    m = Metagross(2, 8, depth=3, base="lstm", batch_first=True)
    head = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam([*m.parameters(), *head.parameters()], lr=2e-2)

    def loss_fn(x):
        out, _ = m(x)
        return F.mse_loss(head(out[:, 2:]).squeeze(-1), x[:, :-2, 0])

    torch.manual_seed(12)
    held = torch.randn(32, 10, 2)
    start = loss_fn(held).item()
    for _ in range(120):
        loss = loss_fn(torch.randn(32, 10, 2))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        end = loss_fn(held).item()
    assert end < 0.3 * start, (start, end)


# ------------------------------------------------------------------ as printed: gates="state"
# Every base map reads (x_t, h_{t-1}) and the children are called on the caller's (x_t, h_{t-1}):
# against a recursive loop written from section 2 as printed, gradcheck, and that the recurrence
# is not affine in the previous state.


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


def _printed_state(m, B, gen=None):
    LD = m.num_layers * m.num_directions
    tree = 0.5 * torch.randn(LD, B, m.state_size(0), dtype=D64, generator=gen)
    if m.base == "linear":
        return tree
    return tree, 0.5 * torch.randn(LD, B, m.state_size(1), dtype=D64, generator=gen)


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
    hx = _printed_state(m, 2)
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
    hx = _printed_state(m, 2)
    hx = hx.requires_grad_() if base == "linear" else tuple(h.requires_grad_() for h in hx)
    assert gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


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


# ------------------------------------------------------------------ the level gates' backend
# The level gates are the reference composition of ctrlrnn.ops.metagross_level (used on CUDA and
# without the compiled extension); their torch.compile path equals the eager path (float32).
# These tests force that path on CPU.


@pytest.fixture
def compiled_gates(monkeypatch):
    # the composition path: no compiled level kernel (the scan keeps its kernel)
    has_kernel = backend.has_kernel
    monkeypatch.setattr(backend, "has_kernel",
                        lambda family, device: family != "metagross" and has_kernel(family, device))
    metagross_gates.set_gate_backend("compiled")
    yield
    metagross_gates.set_gate_backend("auto")


def test_gate_backend_choice_is_reported():
    assert metagross_gates.gate_backend(torch.zeros(4, dtype=torch.float64)) == "eager"
    big = torch.zeros(metagross_gates.COMPILE_MIN_NUMEL)
    assert metagross_gates.gate_backend(big).startswith(("compiled", "eager (torch.compile"))
    with pytest.raises(ValueError, match="mode"):
        metagross_gates.set_gate_backend("fast")


def test_compiled_gates_equal_eager(compiled_gates):
    torch.manual_seed(0)
    m = Metagross(8, 8, depth=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 6, 8, requires_grad=True)
    lengths = torch.tensor([6, 4, 2])

    def run():
        out, h_n, (alpha, _) = m(x, lengths=lengths, return_gates=True)
        loss = out.square().sum() + h_n.sum() + alpha.sum()
        grads = torch.autograd.grad(loss, [x, *m.parameters()])
        return out, h_n, grads

    out_c, h_c, g_c = run()
    assert metagross_gates.gate_backend(torch.zeros(1)) == "compiled"
    metagross_gates.set_gate_backend("eager")
    out_e, h_e, g_e = run()
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_c, h_e, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
