"""Step-by-step loops written from the METAGROSS paper's section 2, one unit calling itself
recursively, in both readings: :class:`PaperTree` (the gates from the input, ``gates="input"``)
and :class:`PrintedTree` (as printed, ``gates="state"``). The tests of both readings check the
layers against them."""

from __future__ import annotations

import torch

D64 = torch.float64


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

    def inputs(self, x, base_state):
        """What every step reads: the base maps over ``x`` and their final states, the depth
        gates, and the residual (None without it)."""
        u = self.u
        base, base_finals = self.base_sequences(x, base_state)
        alpha, beta = self.depth_gates(x)
        res = None
        if u.residual:
            res = x if u.residual_weight is None else x @ u.residual_weight.T
        return base, base_finals, alpha, beta, res

    @staticmethod
    def base_last(base_finals, B):
        """The base RNNs' final states in the layer's layout, or None (the linear base)."""
        if not base_finals:
            return None
        return torch.cat([base_finals[k].reshape(B, -1) for k in sorted(base_finals)], 1)

    def run(self, x, state=None, base_state=None):
        u, H, N = self.u, self.H, self.N
        B, T, _ = x.shape
        base, base_finals, alpha, beta, res = self.inputs(x, base_state)
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
        base_last = self.base_last(base_finals, B)
        return torch.stack(outs, 1), torch.cat(prev, 1), base_last, alpha, beta


def initial_state(m, B, gen=None):
    LD = m.num_layers * m.num_directions
    tree = torch.randn(LD, B, m.state_size(0), dtype=D64, generator=gen)
    if m.base == "linear":
        return tree
    return tree, 0.5 * torch.randn(LD, B, m.state_size(1), dtype=D64, generator=gen)


class PrintedTree(PaperTree):
    """Section 2 as printed, one step at a time: ``Metagross_n(x_t, h_{t-1})`` calls its two
    children on the same ``(x_t, h_{t-1})``; ``F^g_k(x_t, h_{t-1})`` is the base map of ``x_t``
    (linear, or the base RNN over ``x`` of :class:`PaperTree`) plus ``U^g_k h_{t-1}``."""

    def run(self, x, state=None, base_state=None):  # type: ignore[override]
        u, H = self.u, self.H
        B, T, _ = x.shape
        base, base_finals, alpha, beta, res = self.inputs(x, base_state)
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
        base_last = self.base_last(base_finals, B)
        return torch.stack(outs, 1), h, base_last, alpha, beta


def printed_state(m, B, gen=None):
    LD = m.num_layers * m.num_directions
    tree = 0.5 * torch.randn(LD, B, m.state_size(0), dtype=D64, generator=gen)
    if m.base == "linear":
        return tree
    return tree, 0.5 * torch.randn(LD, B, m.state_size(1), dtype=D64, generator=gen)


def layer_and_loop(m, loop, x, hx):
    """One unidirectional layer ``m`` run from ``hx`` (its output, ``h_n`` and depth gates) and
    the step loop ``loop`` (:class:`PaperTree` or :class:`PrintedTree`) on its unit from the same
    states (output, tree state, base state, depth gates)."""
    out, h_n, (alpha, beta) = m(x, hx, return_gates=True)
    linear = m.base == "linear"
    tree0 = hx if linear else hx[0]
    base0 = None if linear else hx[1][0]
    return (out, h_n, alpha, beta), loop(m.unit(0)).run(x, tree0[0], base0)


def assert_chunks_chain(m, x, cut):
    """Two calls of ``m`` chained through ``h_n`` at step ``cut`` equal one call on ``x``
    (every unit's and base RNN's state carried); returns that call's ``(output, h_n)``."""
    out, h_n = m(x)
    o1, s1 = m(x[:, :cut])
    o2, s2 = m(x[:, cut:], s1)
    torch.testing.assert_close(torch.cat([o1, o2], 1), out)
    torch.testing.assert_close(s2, h_n)
    return out, h_n
