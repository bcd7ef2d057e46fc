"""METAGROSS against a recursive step-by-step loop written from the METAGROSS paper section 2."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctrlrnn import Metagross, MetagrossFFN
from ctrlrnn.nn.metagross import MetagrossCell

D64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These shapes are tiny: run the compiled kernels inline. On a loaded machine a 2-thread
    at::parallel_for region over a few elements can wait milliseconds for its second thread,
    which makes the many small calls of gradcheck slow (the results are the same)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


CASES = [
    (base, rec, gate)
    for base in ("linear", "lstm", "gru")
    for rec in ("h", "c")
    for gate in ("token", "static", "scalar")
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


def _gradcheck(m, x, hx, lengths=None):
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in m.named_parameters())
    hx = (hx,) if isinstance(hx, torch.Tensor) else tuple(hx)

    def f(x, *rest):
        states, ps = rest[: len(hx)], rest[len(hx) :]
        state = states[0] if len(states) == 1 else tuple(states)
        out, h_n = torch.func.functional_call(
            m, dict(zip(names, ps)), (x, state), dict(lengths=lengths)
        )
        return (out, h_n) if isinstance(h_n, torch.Tensor) else (out, *h_n)

    full = torch.autograd.gradcheck(lambda x, *s: f(x, *s, *params), (x, *hx))
    return full and torch.autograd.gradcheck(f, (x, *hx, *params), fast_mode=True)


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
    assert _gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


@pytest.mark.parametrize(
    "base,recurrence,depth_gate",
    [("linear", "h", "token"), ("linear", "c", "static"), ("lstm", "c", "token"),
     ("gru", "h", "static")],
)  # fmt: skip
def test_packed_equals_padded_and_ignores_padding(base, recurrence, depth_gate):
    torch.manual_seed(5)
    m = Metagross(3, 3, num_layers=2, bidirectional=True, depth=2, base=base,
                  recurrence=recurrence, depth_gate=depth_gate,
                  batch_first=True).double()  # fmt: skip
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, 3, dtype=D64)
    out, h_n, (alpha, beta) = m(x, lengths=lengths, return_gates=True)
    tree = h_n if base == "linear" else h_n[0]
    for b in range(3):
        ob, hb, (ab, bb) = m(x[b : b + 1, : lengths[b]], return_gates=True)
        torch.testing.assert_close(out[b : b + 1, : lengths[b]], ob)
        torch.testing.assert_close(tree[:, b : b + 1], hb if base == "linear" else hb[0])
        torch.testing.assert_close(alpha[:, b : b + 1, : lengths[b]], ab)
        torch.testing.assert_close(beta[:, b : b + 1, : lengths[b]], bb)
        assert out[b, lengths[b] :].abs().sum() == 0
        assert alpha[:, b, lengths[b] :].abs().sum() == 0
    x2 = torch.cat([x, torch.randn(3, 3, 3, dtype=D64)], 1)
    x2[1, 2:] = 1e3
    out2, h_n2 = m(x2, lengths=lengths)
    torch.testing.assert_close(out2[:, :5], out)
    torch.testing.assert_close(h_n2, h_n)
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out_p, h_p = m(packed)
    padded, lens = pad_packed_sequence(out_p, batch_first=True)
    torch.testing.assert_close(padded, out)
    assert lens.tolist() == lengths.tolist()
    torch.testing.assert_close(h_p, h_n)


def test_gradients_do_not_depend_on_padding():
    torch.manual_seed(6)
    m = Metagross(3, 3, bidirectional=True, depth=2, recurrence="c", batch_first=True).double()
    lengths = torch.tensor([5, 3])
    x = torch.randn(2, 5, 3, dtype=D64, requires_grad=True)
    out, h = m(x, lengths=lengths)
    (out.sum() + h.sum()).backward()
    assert x.grad[1, 3:].abs().max() == 0
    x1 = x[1:2, :3].detach().clone().requires_grad_(True)
    o1, h1 = m(x1)
    (o1.sum() + h1.sum()).backward()
    torch.testing.assert_close(x.grad[1, :3], x1.grad[0])


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


def test_eval_dropout_and_half_precision():
    torch.manual_seed(10)
    m = Metagross(4, 8, num_layers=2, dropout=0.5, batch_first=True)
    x = torch.randn(2, 6, 4)
    m.eval()
    torch.testing.assert_close(m(x)[0], m(x)[0])
    m.train()
    assert not torch.allclose(m.eval()(x)[0], m.train()(x)[0])
    mh = Metagross(4, 8, batch_first=True)
    ref, _ = mh(x)
    mh = mh.to(torch.bfloat16)
    out, _ = mh(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=5e-2, atol=5e-2)


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


# ------------------------------------------------------------------ parallel variant (2.3)


def paper_ffn(m, x):
    """Section 2.3 for one position vector x (d,), recursively, from the module's weights."""
    d, N, I = m.d_model, m.num_nodes, m.num_internal
    W, b = m.weight, m.bias

    def F_(gate, node):
        k = gate * N + node
        return W[k * d : (k + 1) * d] @ x + b[k * d : (k + 1) * d]

    if m.depth_gate == "token":
        g = torch.sigmoid(W[3 * N * d :] @ x + b[3 * N * d :])
    else:
        g = torch.sigmoid(m.depth_logit) if I else None

    def unit(node, level):
        if level < m.depth:
            a, bt = g[node], g[I + node]
            f = torch.sigmoid(a * unit(2 * node + 1, level + 1) + (1 - a) * F_(0, node))
            o = torch.sigmoid(bt * unit(2 * node + 2, level + 1) + (1 - bt) * F_(1, node))
        else:
            f, o = torch.sigmoid(F_(0, node)), torch.sigmoid(F_(1, node))
        z = torch.tanh(F_(2, node))
        h = f * x + o * z
        return h + x if m.residual else h

    return unit(0, 1)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("depth_gate,residual", [("token", True), ("scalar", False)])
def test_ffn_matches_paper(depth, depth_gate, residual):
    torch.manual_seed(13)
    m = MetagrossFFN(4, depth, depth_gate=depth_gate, residual=residual).double()
    x = torch.randn(2, 3, 4, dtype=D64)
    out = m(x)
    assert out.shape == x.shape
    for i in range(2):
        for j in range(3):
            torch.testing.assert_close(out[i, j], paper_ffn(m, x[i, j]))
    torch.testing.assert_close(m(x[0, 0]), out[0, 0])  # any leading shape, position-wise


def test_ffn_gradcheck_and_transformer_drop_in():
    torch.manual_seed(14)
    m = MetagrossFFN(3, 2).double()
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in m.named_parameters())
    x = torch.randn(2, 2, 3, dtype=D64, requires_grad=True)

    def f(x, *ps):
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(lambda x: f(x, *params), (x,))
    assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)

    class Block(torch.nn.Module):  # a pre-norm Transformer layer with METAGROSS as its FFN
        def __init__(self, d):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(d, 2, batch_first=True)
            self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.ffn = MetagrossFFN(d, 2, residual=False)

        def forward(self, x):
            y = self.n1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.ffn(self.n2(x))

    blk = Block(8)
    y = blk(torch.randn(2, 5, 8))
    assert y.shape == (2, 5, 8)
    y.sum().backward()
    assert blk.ffn.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="x: expected"):
        m(torch.randn(2, 4, dtype=D64))
    with pytest.raises(ValueError, match="depth_gate"):
        MetagrossFFN(3, 2, depth_gate="static")
