"""QRNN against a step-by-step loop written from the paper's equations, and what is specific to
it (windows, the unmasked convolution, dense connections, the encoder state, zoneout, stateful
chunks). What every layer shares (padding, packed input, unbatched input, dropout, half precision,
torch.compile, ...) is checked over the configurations of ``contract.py``."""

from __future__ import annotations

import pytest
import torch
from contract import gradcheck

from ctrlrnn import QRNN, QRNNCell

D64 = torch.float64


def paper_qrnn_direction(x, weight, bias, pooling, window, c0=None, keep=None, keep_scale=1.0,
                         enc=None, enc_weight=None, before=None):
    """One QRNN layer direction, one step at a time, from the QRNN paper eq 1-7 (independent code).

    The convolution of eq 1 is written as the sum over the window of W_j x_{t-before+j}: the
    masked convolution has ``before = window - 1`` (taps x_{t-k+1} .. x_t), the unmasked one of
    section 3.3 ``before = (window - 1) // 2`` (taps up to x_{t+ceil((k-1)/2)}). Taps outside
    0 .. T-1 (T: this sequence's length) contribute nothing.
    """
    before = window - 1 if before is None else before
    B, T, D = x.shape
    H = weight.shape[0] // {"f": 2, "fo": 3, "ifo": 4}[pooling]
    c = torch.zeros(B, H, dtype=x.dtype) if c0 is None else c0
    hs = []
    for t in range(T):
        pre = torch.zeros(B, weight.shape[0], dtype=x.dtype) if bias is None else bias.expand(B, -1)
        for j in range(window):
            src = t - before + j
            if 0 <= src < T:
                pre = pre + x[:, src] @ weight[:, j * D : (j + 1) * D].T
        if enc is not None:
            pre = pre + enc @ enc_weight.T  # eq 7: V h~_T added at every step
        z = torch.tanh(pre[:, :H])
        f = torch.sigmoid(pre[:, H : 2 * H])
        if keep is not None:
            f = 1 - keep[:, t] * keep_scale * (1 - f)  # eq 6
        elif keep_scale != 1.0:
            f = 1 - keep_scale * (1 - f)
        if pooling == "ifo":
            i = torch.sigmoid(pre[:, 3 * H :])
            c = f * c + i * z  # eq 5
        else:
            c = f * c + (1 - f) * z  # eq 3, 4
        h = c if pooling == "f" else torch.sigmoid(pre[:, 2 * H : 3 * H]) * c
        hs.append(h)
    return torch.stack(hs, 1), c


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
@pytest.mark.parametrize("window", [1, 2, 3])
def test_matches_paper_loop(pooling, window):
    torch.manual_seed(0)
    m = QRNN(4, 5, window=window, pooling=pooling, batch_first=True).double()
    x = torch.randn(3, 6, 4, dtype=D64)
    c0 = torch.randn(1, 3, 5, dtype=D64)
    out, c_n = m(x, c0)
    cell = m.cell(0)
    ref, ref_c = paper_qrnn_direction(x, cell.weight, cell.bias, pooling, window, c0[0])
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(c_n[0], ref_c)


def test_bidirectional_multilayer_matches_paper_loop():
    torch.manual_seed(1)
    m = QRNN(3, 4, num_layers=2, bidirectional=True, window=2, pooling="ifo").double()
    x = torch.randn(5, 2, 3, dtype=D64)  # (T, B, D)
    out, c_n = m(x)
    xb = x.transpose(0, 1)
    layer_in, finals = xb, []
    for layer in range(2):
        outs = []
        for d in range(2):
            cell = m.cell(layer, d)
            inp = layer_in if d == 0 else layer_in.flip(1)
            o, c = paper_qrnn_direction(inp, cell.weight, cell.bias, "ifo", 2)
            outs.append(o if d == 0 else o.flip(1))
            finals.append(c)
        layer_in = torch.cat(outs, -1)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    torch.testing.assert_close(c_n, torch.stack(finals))


def test_dense_connections():
    torch.manual_seed(2)
    m = QRNN(3, 4, num_layers=3, dense=True, batch_first=True).double()
    assert [m.cell(i).input_size for i in range(3)] == [3, 7, 11]
    x = torch.randn(2, 5, 3, dtype=D64)
    out, _ = m(x)
    assert out.shape == (2, 5, 4)  # the last layer's output alone
    layer_in = x
    for layer in range(3):
        cell = m.cell(layer)
        o, _ = paper_qrnn_direction(layer_in, cell.weight, cell.bias, "fo", 2)
        layer_in = torch.cat([layer_in, o], -1)
    torch.testing.assert_close(out, o)


def test_encoder_state_term_eq7():
    torch.manual_seed(3)
    m = QRNN(3, 4, num_layers=2, encoder_state_size=6, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=D64)
    enc = torch.randn(2, 2, 6, dtype=D64)
    out, _ = m(x, encoder_state=enc)
    layer_in = x
    for layer in range(2):
        cell = m.cell(layer)
        layer_in, _ = paper_qrnn_direction(
            layer_in, cell.weight, cell.bias, "fo", 2, enc=enc[layer],
            enc_weight=cell.encoder_weight,
        )
    torch.testing.assert_close(out, layer_in)
    with pytest.raises(ValueError, match="encoder_state: required"):
        m(x)
    with pytest.raises(ValueError, match="encoder_state: expected shape"):
        m(x, encoder_state=torch.randn(3, 2, 6, dtype=D64))
    with pytest.raises(ValueError, match="encoder_state: given"):
        QRNN(3, 4).double()(x, encoder_state=enc)


def test_zoneout_training_is_eq6_without_rescaling():
    torch.manual_seed(4)
    m = QRNN(3, 4, zoneout=0.4, pooling="fo", batch_first=True).double()
    x = torch.randn(2, 6, 3, dtype=D64)
    torch.manual_seed(99)
    out, _ = m(x)
    torch.manual_seed(99)
    keep = torch.bernoulli(torch.full((2, 6, 4), 0.6, dtype=D64))
    cell = m.cell(0)
    ref, _ = paper_qrnn_direction(x, cell.weight, cell.bias, "fo", 2, keep=keep)
    torch.testing.assert_close(out, ref)
    # evaluation: the expectation of the mask, 1 - p, multiplies (1 - f)
    m.eval()
    out_eval, _ = m(x)
    ref_eval, _ = paper_qrnn_direction(x, cell.weight, cell.bias, "fo", 2, keep_scale=0.6)
    torch.testing.assert_close(out_eval, ref_eval)
    m_id = QRNN(3, 4, zoneout=0.4, zoneout_eval="identity", batch_first=True).double().eval()
    m_id.load_state_dict(m.state_dict())
    ref_id, _ = paper_qrnn_direction(x, cell.weight, cell.bias, "fo", 2)
    torch.testing.assert_close(m_id(x)[0], ref_id)


def test_zoneout_keeps_previous_cell_exactly():
    torch.manual_seed(5)
    m = QRNN(8, 64, zoneout=0.5, pooling="f", batch_first=True)
    x = torch.randn(4, 50, 8)
    out, _ = m(x)  # f-pooling: h = c
    same = (out[:, 1:] == out[:, :-1]).float().mean().item()
    assert 0.4 < same < 0.6  # half the units copy c_{t-1} unchanged (F = 1)


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
def test_gradcheck(pooling):
    torch.manual_seed(6)
    m = QRNN(2, 2, num_layers=2, bidirectional=True, pooling=pooling, window=2,
             batch_first=True).double()
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    c0 = torch.randn(4, 2, 2, dtype=D64, requires_grad=True)
    assert gradcheck(m, x, c0, lengths=torch.tensor([3, 2]))


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
def test_cell_equals_layer(pooling):
    torch.manual_seed(9)
    m = QRNN(3, 4, window=3, pooling=pooling, batch_first=True, encoder_state_size=2).double()
    x = torch.randn(2, 6, 3, dtype=D64)
    enc = torch.randn(2, 2, dtype=D64)
    c0 = torch.randn(1, 2, 4, dtype=D64)
    out, c_n = m(x, c0, encoder_state=enc)
    cell: QRNNCell = m.cell(0)
    state = (c0[0], torch.zeros(2, 2, 3, dtype=D64))
    steps = []
    for t in range(6):
        h, state = cell(x[:, t], state, encoder_state=enc)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps, 1), out)
    torch.testing.assert_close(state[0], c_n[0])


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: m(torch.randn(2, 3, 4, 5)), "input: expected a 3-D"),
        (lambda m: m(torch.randn(2, 5, 7)), "input: expected feature size input_size=3"),
        (lambda m: m(torch.randn(2, 5, 3, dtype=torch.float64)), "input: expected dtype"),
        (lambda m: m(torch.randint(0, 3, (2, 5, 3))), "input: expected a floating dtype"),
        (lambda m: m(torch.randn(2, 5, 3, device="meta")), "input: expected device"),
        (lambda m: m(torch.randn(2, 5, 3), lengths=torch.tensor([5, 0])), "lengths: every length"),
        (lambda m: m(torch.randn(2, 5, 3), lengths=torch.tensor([6, 1])), "lengths: every length"),
        (lambda m: m(torch.randn(2, 5, 3), lengths=torch.tensor([5, 1, 2])), "lengths: expected 2"),
        (lambda m: m(torch.randn(2, 5, 3), torch.zeros(2, 2, 4)),
         r"hx: expected shape \(4, 2, 4\)"),
        (lambda m: m(torch.randn(2, 5, 3), torch.zeros(4, 2, 4, dtype=torch.float64)),
         "hx: expected dtype"),
        (lambda m: m(torch.randn(2, 5, 3), (torch.zeros(4, 2, 4), torch.zeros(4, 2, 4))),
         r"hx: QRNN carries 1 state\(s\), expected a Tensor"),
        (lambda m: m(torch.randn(2, 0, 3)), "input: expected at least one time step"),
    ],
)
def test_bad_inputs(call, match):
    m = QRNN(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    with pytest.raises(ValueError, match=match):
        call(m)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(pooling="fio"), "pooling"),
        (dict(window=0), "window"),
        (dict(zoneout=1.0), "zoneout"),
        (dict(zoneout_eval="mean"), "zoneout_eval"),
        (dict(dropout=1.5), "dropout"),
        (dict(num_layers=0), "num_layers"),
        (dict(hidden_size=0), "hidden_size"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = dict(input_size=3, hidden_size=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        QRNN(**args)


@pytest.mark.parametrize("window", [1, 2, 4])
def test_forward_stateful_chunks_equal_one_call(window):
    torch.manual_seed(14)
    m = QRNN(3, 4, num_layers=2, window=window, dense=True, batch_first=True).double()
    x = torch.randn(2, 11, 3, dtype=D64)
    out, c_n = m(x)
    state, parts = None, []
    for k in range(0, 11, 3):
        o, state = m.forward_stateful(x[:, k : k + 3], state)
        parts.append(o)
    torch.testing.assert_close(torch.cat(parts, 1), out)
    torch.testing.assert_close(state[0], c_n)
    assert [h.shape for h in state[1]] == [(2, window - 1, 3), (2, window - 1, 7)]
    # with lengths, the history is taken at each sequence's own end
    lengths = torch.tensor([3, 2])
    _, s = m.forward_stateful(x[:, :3], None, lengths)
    o_next, _ = m.forward_stateful(x[1:, 5:7], (s[0][:, 1:], [h[1:] for h in s[1]]))
    ref, _ = m(torch.cat([x[1:, :2], x[1:, 5:7]], 1))
    torch.testing.assert_close(o_next, ref[:, 2:])
    with pytest.raises(ValueError, match="state: history"):
        m.forward_stateful(x, (c_n, [torch.zeros(2, 5, 3, dtype=D64)] * 2))
    with pytest.raises(ValueError, match="unidirectional"):
        QRNN(3, 4, bidirectional=True).forward_stateful(x.transpose(0, 1).float())


# ------------------------------------------------------------------ per-layer windows, causal=False
# (every test of this directory runs on the compiled kernels and on CTRLRNN_BACKEND=reference:
# tests/nn/conftest.py)


def paper_qrnn_stack(m, x, lengths, causal):
    """The whole QRNN ``m`` on batch-first ``x``, each sequence alone at its own length, from
    the paper loop: layer l convolves with its own width; the unmasked convolution (section
    3.3) takes (k-1)//2 taps before t; the backward direction is the same loop on the reversed
    sequence. Returns the outputs (a list of (n_b, width)) and c_n ``(L*D, B, H)``."""
    outs, finals = [], []
    for b in range(x.shape[0]):
        n = x.shape[1] if lengths is None else int(lengths[b])
        layer_in, cs = x[b : b + 1, :n], []
        for layer in range(m.num_layers):
            k = m.windows[layer]
            before = k - 1 if causal else (k - 1) // 2
            dirs = []
            for d in range(m.num_directions):
                cell = m.cell(layer, d)
                inp = layer_in if d == 0 else layer_in.flip(1)
                o, c = paper_qrnn_direction(inp, cell.weight, cell.bias, m.pooling, k,
                                            before=before)
                dirs.append(o if d == 0 else o.flip(1))
                cs.append(c)
            o = torch.cat(dirs, -1)
            layer_in = torch.cat([layer_in, o], -1) if m.dense else o
        outs.append(o[0])
        finals.append(torch.stack(cs))
    return outs, torch.cat(finals, 1)


CONV_CASES = [
    pytest.param(causal, bi, dense, id=f"causal{causal}-bi{bi}-dense{dense}")
    for causal in (True, False)
    for bi, dense in ((False, False), (True, False), (True, True))
]


@pytest.mark.parametrize(("causal", "bidirectional", "dense"), CONV_CASES)
def test_per_layer_windows_and_unmasked_convolution_match_paper_loop(causal, bidirectional,
                                                                      dense):
    """window=(6, 2, 3) (even and odd widths, one wider than a sequence) with padding that holds
    garbage: equal to the paper loop on each sequence alone; zeros past each length."""
    torch.manual_seed(20)
    m = QRNN(3, 4, num_layers=3, bidirectional=bidirectional, window=(6, 2, 3), causal=causal,
             pooling="ifo", dense=dense, batch_first=True).double()
    assert m.windows == (6, 2, 3) and [m.cell(i, 0).window for i in range(3)] == [6, 2, 3]
    lengths = torch.tensor([7, 4, 2])
    x = torch.randn(3, 7, 3, dtype=D64)
    x[1, 4:] = 1e3
    x[2, 2:] = float("nan")
    out, c_n = m(x, lengths=lengths)
    ref, ref_c = paper_qrnn_stack(m, x, lengths, causal)
    for b in range(3):
        n = int(lengths[b])
        torch.testing.assert_close(out[b, :n], ref[b])
        assert out[b, n:].abs().sum() == 0
    torch.testing.assert_close(c_n, ref_c)


@pytest.mark.parametrize("window", [1, 2, 3, 4, 5, 6])
def test_unmasked_convolution_taps(window):
    """What ``causal=False`` reads, from the Jacobian: z_t depends on x_{t-a} .. x_{t+b}, a =
    floor((k-1)/2), b = ceil((k-1)/2) (an even width's extra tap after t); the backward
    direction, on the reversed sequence, reads x_{t-b} .. x_{t+a}."""
    torch.manual_seed(21)
    T, a, b = 9, (window - 1) // 2, window // 2
    for bidirectional in (False, True):
        m = QRNN(1, 1, window=window, causal=False, pooling="f", bidirectional=bidirectional,
                 batch_first=True).double()
        for d in range(m.num_directions):  # f-pooling with f = 0: h_t = z_t, the taps alone
            with torch.no_grad():
                m.cell(0, d).bias[1] = -1e4
        x = torch.randn(1, T, 1, dtype=D64)
        jac = torch.autograd.functional.jacobian(lambda x, m=m: m(x)[0], x)[0, :, :, 0, :, 0]
        for d in range(m.num_directions):
            lo, hi = (a, b) if d == 0 else (b, a)  # taps before and after t, original time
            for t in range(T):
                read = {s for s in range(T) if jac[t, d, s] != 0}
                assert read == set(range(max(0, t - lo), min(T, t + hi + 1))), (d, t, read)


def test_causal_convolution_never_reads_ahead():
    torch.manual_seed(22)
    m = QRNN(2, 3, num_layers=2, window=(4, 3), batch_first=True).double()
    x = torch.randn(1, 6, 2, dtype=D64)
    jac = torch.autograd.functional.jacobian(lambda x: m(x)[0], x)[0, :, :, 0]
    for t in range(6):
        assert jac[t, :, t + 1 :].abs().sum() == 0
        assert jac[t, :, t].abs().sum() > 0


def test_unmasked_convolution_gradcheck():
    torch.manual_seed(23)
    m = QRNN(2, 2, num_layers=2, bidirectional=True, window=(4, 3), causal=False,
             batch_first=True).double()
    x = torch.randn(2, 4, 2, dtype=D64, requires_grad=True)
    c0 = torch.randn(4, 2, 2, dtype=D64, requires_grad=True)
    assert gradcheck(m, x, c0, lengths=torch.tensor([4, 3]))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_layers=3, window=(6, 2)), "window: expected a positive integer or 3"),
        (dict(num_layers=2, window=(6, 0)), "window"),
        (dict(num_layers=2, window=[2, 2.0]), "window"),
        (dict(num_layers=2, window=(True, 2)), "window"),
        (dict(num_layers=2, window=()), "window"),
        (dict(window="2"), "window"),
        (dict(causal="no"), "causal"),
    ],
)
def test_bad_window_and_causal(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QRNN(3, 4, **kwargs)


def test_window_list_and_repr():
    m = QRNN(3, 4, num_layers=2, window=[6, 2], causal=False)
    assert m.window == (6, 2) and m.windows == (6, 2)
    assert "window=(6, 2)" in repr(m) and "causal=False" in repr(m)
    assert "causal=False" in repr(m.cell(0)) and "window=6" in repr(m.cell(0))
    plain = QRNN(3, 4, num_layers=2, window=3)
    assert plain.window == 3 and plain.windows == (3, 3) and "causal" not in repr(plain)


def test_unmasked_layer_refuses_causal_uses():
    m = QRNN(3, 4, num_layers=2, window=(6, 2), causal=False, batch_first=True)
    x = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="causal: forward_stateful needs a causal QRNN"):
        m.forward_stateful(x)
    with pytest.raises(ValueError, match="causal: a history"):
        m(x, _history=[torch.zeros(2, 5, 3), torch.zeros(2, 1, 4)])
    cell = m.cell(0)
    with pytest.raises(ValueError, match="causal: this QRNN layer was built with causal=False"):
        cell(x[:, 0])
    with pytest.raises(ValueError, match="causal: this QRNN layer"):
        cell.step_preactivations(x[:, 0], torch.zeros(2, 5, 3))
    with pytest.raises(ValueError, match="history: given to a non-causal"):
        cell.gate_preactivations(x, history=torch.zeros(2, 5, 3))
    with pytest.raises(ValueError, match="causal"):
        QRNNCell(3, 4, causal=False)(x[:, 0])


def test_state_dict_records_window_and_causal():
    torch.manual_seed(26)
    m = QRNN(3, 4, num_layers=2, window=(6, 2), causal=False)
    sd = m.state_dict()
    assert sd["cells.0._extra_state"].tolist() == [6, 0]
    assert sd["cells.1._extra_state"].tolist() == [2, 0]
    same = QRNN(3, 4, num_layers=2, window=(6, 2), causal=False)
    same.load_state_dict(sd)
    x = torch.randn(5, 2, 3)
    torch.testing.assert_close(same(x)[0], m(x)[0])
    with pytest.raises(ValueError, match="causal: the state dict was saved from a layer with "
                                         "causal=False"):
        QRNN(3, 4, num_layers=2, window=(6, 2)).load_state_dict(sd)
    # a state dict saved before the record existed (no _extra_state) loads as before
    old = {k: v for k, v in sd.items() if not k.endswith("_extra_state")}
    QRNN(3, 4, num_layers=2, window=(6, 2)).load_state_dict(old)
    cell_sd = QRNNCell(3, 4, window=2).state_dict()
    cell_sd["weight"] = torch.zeros(12, 9)
    with pytest.raises(ValueError, match="window: the state dict was saved from a layer of "
                                         "window 2"):
        QRNNCell(3, 4, window=3).load_state_dict(cell_sd, strict=False)


def test_window_layouts():
    """causal_windows: [x_{t-3} .. x_t] for k = 4; centred_windows: [x_{t-1} .. x_{t+2}] (the
    even width's extra tap after t), taps at or past each sequence's length reading 0 whatever
    the padding holds (here 99), both oldest first."""
    from ctrlrnn.nn.qrnn import causal_windows, centred_taps, centred_windows

    assert [centred_taps(k) for k in (1, 2, 3, 4, 5, 6)] == [
        (0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (2, 3)]
    x = torch.arange(1.0, 6.0).view(1, 5, 1).repeat(2, 1, 1)
    x[1, 3:] = 99.0
    w = centred_windows(x, 4, torch.tensor([5, 3]))
    assert w[0].tolist() == [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 0],
                             [4, 5, 0, 0]]
    assert w[1, :3].tolist() == [[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 0]]
    assert causal_windows(x[:1], 4)[0].tolist() == [[0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 2, 3],
                                                     [1, 2, 3, 4], [2, 3, 4, 5]]


@pytest.mark.parametrize("pooling", ["f", "ifo"])
def test_bias_in_the_pooling_equals_bias_in_the_gemm(monkeypatch, pooling):
    """On CPU with the compiled kernels the layer leaves eq 1-2's bias out of its GEMM and the
    pooling kernel adds it (``fuses_bias``); the output and every gradient, the bias's included,
    equal those of the bias in the GEMM (bidirectional, two layers, lengths, zoneout)."""
    import ctrlrnn.nn.qrnn as qrnn_layer
    from ctrlrnn.ops.qrnn_pooling import fuses_bias

    if not fuses_bias(torch.device("cpu")):
        pytest.skip("the reference backend keeps the bias in the GEMM")
    torch.manual_seed(3)
    m = QRNN(4, 5, num_layers=2, pooling=pooling, bidirectional=True, batch_first=True,
             zoneout=0.2).double()  # fmt: skip
    x = torch.randn(3, 6, 4, dtype=D64, requires_grad=True)
    lengths = torch.tensor([6, 2, 4])

    def run():
        torch.manual_seed(7)  # the same zoneout masks
        out, c_n = m(x, lengths=lengths)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=D64).view_as(out)).sum()
        return out, c_n, torch.autograd.grad(loss + c_n.sum(), [x, *m.parameters()])

    fused = run()
    monkeypatch.setattr(qrnn_layer, "fuses_bias", lambda device: False)
    unfused = run()
    torch.testing.assert_close(fused[0], unfused[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused[1], unfused[1], rtol=1e-12, atol=1e-12)
    for a, b in zip(fused[2], unfused[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
