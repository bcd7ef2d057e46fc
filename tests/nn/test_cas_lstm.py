"""CAS-LSTM against a step-by-step loop written from the paper's equations, and what is specific
to it (lambda, peepholes, the vertical gates, parameter counts, the cell). What every layer shares
(padding, packed input, unbatched input, dropout, half precision, torch.compile, training) is
checked over the configurations of ``contract.py``."""

from __future__ import annotations

import pytest
import torch
from contract import gradcheck

from ctrlrnn import CASLSTM, CASLSTMCell

D64 = torch.float64

# tiny shapes: the compiled kernels run inline, where a second thread would only be waited for
# (conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


def paper_cas_stack(x, layers, lam, peephole, h0=None, c0=None):
    """One CAS-LSTM stack, time-major over a (time, layer) grid, from the CAS-LSTM paper
    (independent).

    ``layers``: per layer ``(W, U, b, p)`` with W's rows in the gate order (i, f, c~, o[, g]);
    ``lam``: per layer ``l > 1`` the lambda of eq 12 (a number or vector), or None for the plain
    sum (variant (ii) and eq 18). Returns the top layer's outputs and the final (h, c) per layer.
    """
    B, T, _ = x.shape
    H = layers[0][1].shape[1]
    L = len(layers)
    h = [torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0[k] for k in range(L)]
    c = [torch.zeros(B, H, dtype=x.dtype) if c0 is None else c0[k] for k in range(L)]
    outs = []
    for t in range(T):
        below_h, below_c = x[:, t], None  # h^0_t = x_t
        for k, (W, U, b, p) in enumerate(layers):
            def gate(j, k=k, W=W, U=U, b=b, below_h=below_h):
                Wj = W[j * H : (j + 1) * H]
                pre = below_h @ Wj.T + (0 if b is None else b[j * H : (j + 1) * H])
                if j < U.shape[0] // H:
                    pre = pre + h[k] @ U[j * H : (j + 1) * H].T
                return pre

            i = torch.sigmoid(gate(0))  # eq 1 / 7
            f = torch.sigmoid(gate(1))  # eq 2 / 8
            c_tilde = torch.tanh(gate(2))  # eq 3 / 10
            o = torch.sigmoid(gate(3))  # eq 4 / 11
            if k == 0:
                c_new = i * c_tilde + f * c[k]  # eq 5
            else:
                if p is None:
                    g = torch.sigmoid(gate(4))  # eq 9
                else:
                    g = torch.sigmoid(gate(4) + p[0] * c[k] + p[1] * below_c)  # eq 17
                if lam[k] is None:
                    c_new = i * c_tilde + f * c[k] + g * below_c  # eq 18 / variant (ii)
                else:
                    c_new = (
                        i * c_tilde + (1 - lam[k]) * f * c[k] + lam[k] * g * below_c
                    )  # eq 12
            h_new = o * torch.tanh(c_new)  # eq 6 / 13
            h[k], c[k] = h_new, c_new
            below_h, below_c = h_new, c_new
        outs.append(below_h)
    return torch.stack(outs, 1), torch.stack(h), torch.stack(c)


def weights(m: CASLSTM, d: int = 0):
    out = []
    for k in range(m.num_layers):
        w = m.layer(k, d)
        out.append((w.weight_ih, w.weight_hh, w.bias, w.peephole))
    return out


def lambdas(m: CASLSTM, d: int, lam):
    """The lambdas the test expects, derived from the constructor argument ``lam``."""
    out = [None]
    for k in range(1, m.num_layers):
        if lam == "trainable":
            out.append(torch.sigmoid(m.layer(k, d).lambda_logit))
        elif lam == "auto":
            out.append(None if m.peephole else 0.5)
        elif isinstance(lam, list):
            out.append(torch.tensor(lam, dtype=D64))
        else:
            out.append(lam)
    return out


LAMBDAS = ["auto", 0.25, 1.7, "trainable", None, [0.1, 0.9, 0.5, 0.3]]


@pytest.mark.parametrize("peephole", [False, True])
@pytest.mark.parametrize("lam", LAMBDAS)
def test_matches_paper_loop(lam, peephole):
    torch.manual_seed(0)
    m = CASLSTM(3, 4, num_layers=3, batch_first=True, lambda_=lam, peephole=peephole).double()
    if lam == "trainable":
        with torch.no_grad():
            for k in (1, 2):
                m.layer(k).lambda_logit.normal_()
    x = torch.randn(2, 5, 3, dtype=D64)
    h0, c0 = torch.randn(3, 2, 4, dtype=D64), torch.randn(3, 2, 4, dtype=D64)
    out, (h_n, c_n) = m(x, (h0, c0))
    ref, ref_h, ref_c = paper_cas_stack(x, weights(m), lambdas(m, 0, lam), peephole, h0, c0)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n, ref_h)
    torch.testing.assert_close(c_n, ref_c)


def test_lambda_auto_resolves_to_paper_choices():
    assert CASLSTM(3, 4).lambda_ == 0.5  # section 3.2: lambda_i = 0.5
    assert CASLSTM(3, 4, peephole=True).lambda_ is None  # eq 18 has no lambda


def test_bidirectional_is_two_independent_stacks():
    torch.manual_seed(1)
    m = CASLSTM(3, 4, num_layers=2, bidirectional=True, lambda_="trainable").double()
    with torch.no_grad():
        m.layer(1, 0).lambda_logit.normal_()
        m.layer(1, 1).lambda_logit.normal_()
    x = torch.randn(6, 2, 3, dtype=D64)  # (T, B, D)
    out, (h_n, c_n) = m(x)
    xb = x.transpose(0, 1)
    fw, hf, cf = paper_cas_stack(xb, weights(m, 0), lambdas(m, 0, "trainable"), False)
    bw, hb, cb = paper_cas_stack(xb.flip(1), weights(m, 1), lambdas(m, 1, "trainable"), False)
    torch.testing.assert_close(out, torch.cat([fw, bw.flip(1)], -1).transpose(0, 1))
    # layer-major (layer, direction) order as torch.nn.LSTM
    torch.testing.assert_close(h_n, torch.stack([hf[0], hb[0], hf[1], hb[1]]))
    torch.testing.assert_close(c_n, torch.stack([cf[0], cb[0], cf[1], cb[1]]))
    assert m.layer(1, 0).weight_ih.shape == (20, 4)  # upper layers read their own stack only


def test_first_layer_is_torch_lstm():
    torch.manual_seed(2)
    m = CASLSTM(3, 4, batch_first=True).double()
    ref = torch.nn.LSTM(3, 4, batch_first=True).double()
    with torch.no_grad():
        w = m.layer(0)
        ref.weight_ih_l0.copy_(w.weight_ih)
        ref.weight_hh_l0.copy_(w.weight_hh)
        ref.bias_ih_l0.copy_(w.bias)
        ref.bias_hh_l0.zero_()
    x = torch.randn(2, 5, 3, dtype=D64)
    out, (h, c) = m(x)
    r_out, (rh, rc) = ref(x)
    torch.testing.assert_close(out, r_out)
    torch.testing.assert_close((h, c), (rh, rc))


@pytest.mark.parametrize(
    "lam,peephole", [("auto", False), ("trainable", False), (None, False), ("auto", True)]
)
def test_gradcheck(lam, peephole):
    torch.manual_seed(3)
    m = CASLSTM(2, 2, num_layers=2, bidirectional=True, batch_first=True, lambda_=lam,
                peephole=peephole).double()  # fmt: skip
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    hx = tuple(torch.randn(4, 2, 2, dtype=D64, requires_grad=True) for _ in range(2))
    assert gradcheck(m, x, hx, torch.tensor([3, 2]))


def test_trainable_lambda_bounded_and_learns():
    torch.manual_seed(4)
    m = CASLSTM(3, 4, num_layers=2, batch_first=True, lambda_="trainable")
    lam = m.lambda_value(1)
    assert torch.all((lam > 0) & (lam < 1))
    torch.testing.assert_close(lam, torch.full((4,), 0.5))
    out, _ = m(torch.randn(2, 5, 3))
    out.sum().backward()
    assert m.layer(1).lambda_logit.grad.abs().sum() > 0
    with torch.no_grad():
        m.layer(1).lambda_logit.fill_(1e3)
    assert torch.all(m.lambda_value(1) <= 1)


def _count(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("d0,d,layers", [(7, 5, 1), (7, 5, 2), (3, 6, 4), (300, 300, 3)])
def test_parameter_counts_follow_footnote_1(d0, d, layers):
    # footnote 1: layer 1 (d_0 + d_1 + 1) 4 d_1, layers l > 1 (d_{l-1} + d_l + 1) 5 d_l
    expected = (d0 + d + 1) * 4 * d + (layers - 1) * (d + d + 1) * 5 * d
    assert _count(CASLSTM(d0, d, layers)) == expected
    assert _count(CASLSTM(d0, d, layers, bidirectional=True)) == 2 * expected
    # a plain stacked LSTM with one bias per layer has (d_{l-1} + d_l + 1) 4 d_l at every layer
    plain = (d0 + d + 1) * 4 * d + (layers - 1) * (d + d + 1) * 4 * d
    assert expected - plain == (layers - 1) * (2 * d + 1) * d  # the fifth gate block, g
    if layers > 1:
        w = CASLSTM(d0, d, layers).layer(1)
        assert w.weight_ih.shape == (5 * d, d) and w.weight_hh.shape == (5 * d, d)
        p = CASLSTM(d0, d, layers, peephole=True).layer(1)  # eq 17: no U_g, two peepholes
        assert p.weight_hh.shape == (4 * d, d) and p.peephole.shape == (2, d)
        assert _count(CASLSTM(d0, d, layers, peephole=True)) == expected - (layers - 1) * (
            d * d - 2 * d
        )
    trainable = CASLSTM(d0, d, layers, lambda_="trainable")
    assert _count(trainable) == expected + (layers - 1) * d


@pytest.mark.parametrize(
    "layers,bidirectional,mlp_hidden_layers,millions",
    [(2, False, 1, 2.9), (3, False, 2, 4.8), (2, True, 2, 6.8), (3, True, 2, 8.6)],
)
def test_parameter_counts_of_table_1(layers, bidirectional, mlp_hidden_layers, millions):
    # SNLI (section 4.1): 300D GloVe (fixed, not counted), 300D encoder, features (eq 15) of
    # width 4 * |s|, a 1024D MLP with "one or two hidden layers", 3 classes.
    enc = CASLSTM(300, 300, layers, bidirectional=bidirectional)
    s = 300 * (2 if bidirectional else 1)
    mlp = (4 * s + 1) * 1024 + (mlp_hidden_layers - 1) * (1024 + 1) * 1024 + (1024 + 1) * 3
    assert round((_count(enc) + mlp) / 1e6, 1) == millions


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(hidden_size=[4, 5], num_layers=2), r"hidden_size: CAS-LSTM layers l > 1"),
        (dict(hidden_size=[4, 4, 6], num_layers=3), r"need d_l = d_\(l-1\)"),
        (dict(hidden_size=[4, 4], num_layers=3), "hidden_size: expected an int or 3"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(lambda_="learned"), "lambda_"),
        (dict(lambda_=[0.5, 0.5]), r"lambda_: expected a number or a vector of hidden_size=4"),
        (dict(lambda_=float("nan")), "lambda_: expected finite"),
        (dict(lambda_=True), "lambda_"),
        (dict(num_layers=0), "num_layers"),
        (dict(dropout=2.0), "dropout"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = dict(input_size=3, hidden_size=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        CASLSTM(**args)


def test_lambda_forms_and_no_bias():
    torch.manual_seed(10)
    x = torch.randn(2, 4, 3, dtype=D64)
    outs = []
    for lam in (0.3, torch.tensor(0.3), [0.3] * 4, torch.full((4,), 0.3)):
        torch.manual_seed(11)
        outs.append(CASLSTM(3, 4, 2, batch_first=True, lambda_=lam).double()(x)[0])
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0])
    m = CASLSTM(3, 4, 2, bias=False, batch_first=True).double()
    assert m.layer(1).bias is None and _count(m) == (3 + 4) * 16 + (4 + 4) * 20
    ref, _, _ = paper_cas_stack(x, weights(m), lambdas(m, 0, "auto"), False)
    torch.testing.assert_close(m(x)[0], ref)


def test_equal_per_layer_widths_are_accepted():
    m = CASLSTM(3, [4, 4, 4], num_layers=3)
    assert m.hidden_size == 4 and m.layer(2).weight_ih.shape == (20, 4)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: m(torch.randn(2, 5, 7)), "input: expected feature size input_size=3"),
        (lambda m: m(torch.randn(2, 5, 3, dtype=D64)), "input: expected dtype"),
        (lambda m: m(torch.randn(2, 5, 3), lengths=torch.tensor([6, 1])), "lengths"),
        (lambda m: m(torch.randn(2, 5, 3), torch.zeros(4, 2, 4)),
         r"hx: CASLSTM carries 2 state\(s\), expected a tuple of 2"),
        (lambda m: m(torch.randn(2, 5, 3), (torch.zeros(4, 2, 4), torch.zeros(4, 2, 5))),
         r"hx\[1\] \(c\): expected shape \(4, 2, 4\)"),
    ],
)
def test_bad_inputs(call, match):
    m = CASLSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    with pytest.raises(ValueError, match=match):
        call(m)


def test_vertical_gates_match_a_step_loop_and_ignore_padding():
    import torch.nn.functional as F

    from ctrlrnn.ops import cells_ref

    torch.manual_seed(21)
    m = CASLSTM(3, 4, num_layers=2, batch_first=True, lambda_=0.3).double()
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    (g,) = m.vertical_gates(x)
    assert g.shape == (1, 2, 6, 4)
    w1, w2 = m.layer(0), m.layer(1)
    zeros = torch.zeros(2, 4, dtype=torch.float64)
    h1, c1, _, _ = cells_ref.lstm_sequence_ref(
        F.linear(x, w1.weight_ih, w1.bias), w1.weight_hh, zeros, zeros, None)
    xp = F.linear(h1, w2.weight_ih, w2.bias)
    h, c, ref = zeros, zeros, []
    scale_f = torch.full((4,), 0.7, dtype=torch.float64)
    scale_g = torch.full((4,), 0.3, dtype=torch.float64)
    for t in range(6):
        ref.append(torch.sigmoid(xp[:, t, 16:] + h @ w2.weight_hh[16:].t()))  # eq 9
        h, c = cells_ref.cas_lstm_step(xp[:, t], w2.weight_hh, c1[:, t], h, c, scale_f, scale_g)
    torch.testing.assert_close(g[0], torch.stack(ref, 1))
    (gl,) = m.vertical_gates(x, lengths=torch.tensor([6, 3]))
    torch.testing.assert_close(gl[0, 0], g[0, 0])
    assert gl[0, 1, 3:].abs().max() == 0


# ------------------------------------------------------------------ the cell
# CASLSTMCell: stepping a stack's cells gives CASLSTM's outputs and final states.


CELL_SETTINGS = [
    {"lambda_": 0.25},
    {"lambda_": [0.1, 0.9, 0.3, 0.5, 0.7]},
    {"lambda_": "trainable"},
    {"peephole": True},  # "auto": None, eq 18 as printed
    {"lambda_": None},
]


def _step_stack(m: CASLSTM, x: torch.Tensor, direction: int, hx=None):
    """The direction's stack stepped cell by cell, time-major over (time, layer): the top
    layer's outputs ``(B, T, H)`` and each layer's final ``(h, c)``."""
    L, D = m.num_layers, m.num_directions
    cells = [m.cell(layer, direction) for layer in range(L)]
    states = [None if hx is None else (hx[0][k * D + direction], hx[1][k * D + direction])
              for k in range(L)]
    outs = []
    for t in range(x.shape[1]):
        below, lower_c = x[:, t], None
        for k, cell in enumerate(cells):
            below, states[k] = cell(below, lower_c, states[k])
            lower_c = states[k][1]
        outs.append(below)
    return torch.stack(outs, 1), states


@pytest.mark.parametrize("setting", CELL_SETTINGS, ids=str)
def test_cells_step_as_the_layer_runs(setting) -> None:
    torch.manual_seed(3)
    m = CASLSTM(4, 5, num_layers=3, batch_first=True, **setting).double()
    if m.lambda_ == "trainable":
        with torch.no_grad():
            for layer in range(1, 3):
                m.layer(layer).lambda_logit.uniform_(-2, 2)
    x = torch.randn(2, 4, 4, dtype=D64)
    hx = (torch.randn(3, 2, 5, dtype=D64), torch.randn(3, 2, 5, dtype=D64))
    out, (h_n, c_n) = m(x, hx)
    steps, finals = _step_stack(m, x, 0, hx)
    torch.testing.assert_close(steps, out)
    for k, (h, c) in enumerate(finals):
        torch.testing.assert_close(h, h_n[k])
        torch.testing.assert_close(c, c_n[k])


def test_one_step_of_the_layer() -> None:
    """A one-step sequence through a 2-layer CASLSTM is one step of each layer's cell."""
    torch.manual_seed(4)
    m = CASLSTM(3, 4, num_layers=2).double()
    x = torch.randn(1, 2, 3, dtype=D64)  # (T=1, B, D)
    hx = (torch.randn(2, 2, 4, dtype=D64), torch.randn(2, 2, 4, dtype=D64))
    out, (h_n, c_n) = m(x, hx)
    h1, (_, c1) = m.cell(0)(x[0], None, (hx[0][0], hx[1][0]))
    h2, (_, c2) = m.cell(1)(h1, c1, (hx[0][1], hx[1][1]))
    torch.testing.assert_close(h2, out[0])
    torch.testing.assert_close(torch.stack([c1, c2]), c_n)
    # unbatched
    h, (_, c) = m.cell(1)(h1[0], c1[0], (hx[0][1][0], hx[1][1][0]))
    torch.testing.assert_close(h, h2[0])


def test_backward_direction_and_gradients() -> None:
    torch.manual_seed(5)
    m = CASLSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=D64, requires_grad=True)
    out, _ = m(x)
    steps, _ = _step_stack(m, x.flip(1), 1)
    torch.testing.assert_close(steps.flip(1), out[..., 4:])
    steps.sum().backward()
    assert m.layer(1, 1).weight_hh.grad is not None  # the cell shares the layer's weights


def test_a_cell_of_its_own_and_its_checks() -> None:
    torch.manual_seed(6)
    cell = CASLSTMCell(4, 5)
    assert cell.vertical and cell.lambda_value() == 0.5
    assert dict(cell.named_parameters()).keys() == {"weights.weight_ih", "weights.weight_hh",
                                                     "weights.bias"}
    h, (h2, c) = cell(torch.randn(2, 4), torch.randn(2, 5))
    assert h.shape == c.shape == (2, 5) and h is h2
    with pytest.raises(ValueError, match="lower_c: a layer above the first"):
        cell(torch.randn(2, 4))
    with pytest.raises(ValueError, match="lower_c: the first layer's cell"):
        CASLSTMCell(4, 5, vertical=False)(torch.randn(2, 4), torch.randn(2, 5))
    with pytest.raises(ValueError, match="state: expected h of shape"):
        cell(torch.randn(2, 4), torch.randn(2, 5), (torch.zeros(3, 5), torch.zeros(2, 5)))
    with pytest.raises(ValueError, match="input: expected input_size=4"):
        cell(torch.randn(2, 3), torch.randn(2, 5))
    peep = CASLSTMCell(4, 5, peephole=True)
    assert peep.lambda_value() is None and peep.weights.weight_hh.shape == (20, 5)
