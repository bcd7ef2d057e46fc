"""CARNN against step-by-step loops from the CARNN paper eq 3, 5, 6, 8, 11-13, and what is specific
to it (the variants, the context, the dialog pipeline and the contextual language model). What
every layer shares (padding, packed input, unbatched input, dropout, half precision, ...) is
checked over the configurations of ``contract.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from contract import gradcheck

from ctrlrnn import CARNN, CARNNCell, ContextualCARNNLM, PositionEncoder

D64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def paper_carnn_direction(x, c, cell, variant, h0=None):
    """One CARNN layer direction, one step at a time (independent code from the paper).

    The parameters are split into the paper's named matrices first.
    """
    B, T, _ = x.shape
    H = cell.hidden_size
    W = cell.weight_ih
    b = cell.bias_ih if cell.bias_ih is not None else torch.zeros(W.shape[0], dtype=x.dtype)
    We_u, We_f = W[:H], W[H : 2 * H]
    b_u, b_f = b[:H], b[H : 2 * H]
    if variant != "s":
        W_e, b_e = W[2 * H :], b[2 * H :]
    if cell.weight_ch is not None:
        Wc_u, Wc_f = cell.weight_ch[:H], cell.weight_ch[H:]
    if variant == "n":
        Wh_u, Wh_f = cell.weight_hh[:H], cell.weight_hh[H:]
    h = torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0
    hs = []
    for m in range(T):
        e = x[:, m]
        pre_u = e @ We_u.T + b_u
        pre_f = e @ We_f.T + b_f
        if cell.weight_ch is not None:
            pre_u = pre_u + c @ Wc_u.T
            pre_f = pre_f + c @ Wc_f.T
        if variant == "n":  # eq 3: the gates also read h_{m-1}
            pre_u = pre_u + h @ Wh_u.T
            pre_f = pre_f + h @ Wh_f.T
        g_u, g_f = torch.sigmoid(pre_u), torch.sigmoid(pre_f)
        e_bar = e if variant == "s" else e @ W_e.T + b_e  # eq 6 vs eq 3/5
        h = g_u * (g_f * e_bar) + (1 - g_u) * h
        hs.append(h)
    return torch.stack(hs, 1), h


@pytest.mark.parametrize("variant", ["n", "i", "s"])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_paper_loop(variant, bias):
    torch.manual_seed(0)
    m = CARNN(5, 5, 3, variant=variant, bias=bias, batch_first=True).double()
    x = torch.randn(3, 7, 5, dtype=D64)
    c = torch.randn(3, 3, dtype=D64)
    h0 = torch.randn(1, 3, 5, dtype=D64)
    out, h_n = m(x, c, h0)
    ref, ref_h = paper_carnn_direction(x, c, m.cell(0), variant, h0[0])
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n[0], ref_h)


@pytest.mark.parametrize("variant", ["n", "i"])
def test_bidirectional_multilayer_matches_paper_loop(variant):
    torch.manual_seed(1)
    m = CARNN(3, 4, 2, variant=variant, num_layers=2, bidirectional=True).double()
    x = torch.randn(5, 2, 3, dtype=D64)  # (T, B, D)
    c = torch.randn(2, 2, dtype=D64)
    out, h_n = m(x, c)
    layer_in, finals = x.transpose(0, 1), []
    for layer in range(2):
        outs = []
        for d in range(2):
            inp = layer_in if d == 0 else layer_in.flip(1)
            o, h = paper_carnn_direction(inp, c, m.cell(layer, d), variant)
            outs.append(o if d == 0 else o.flip(1))
            finals.append(h)
        layer_in = torch.cat(outs, -1)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    torch.testing.assert_close(h_n, torch.stack(finals))


def test_scarnn_stack_and_context_free_ncarnn():
    torch.manual_seed(2)
    m = CARNN(4, 4, 3, variant="s", num_layers=2, batch_first=True).double()
    x = torch.randn(2, 6, 4, dtype=D64)
    c = torch.randn(2, 3, dtype=D64)
    out, _ = m(x, c)
    o1, _ = paper_carnn_direction(x, c, m.cell(0), "s")
    o2, _ = paper_carnn_direction(o1, c, m.cell(1), "s")
    torch.testing.assert_close(out, o2)
    # the context-free nCARNN of section 4.2 (eq 11): no W^c c term, no context argument
    free = CARNN(4, 6, None, variant="n", batch_first=True).double()
    assert free.cell(0).weight_ch is None
    out, h_n = free(x)
    ref, ref_h = paper_carnn_direction(x, None, free.cell(0), "n")
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n[0], ref_h)


def test_context_is_broadcast_over_time_and_matters():
    torch.manual_seed(3)
    for variant in "nis":
        m = CARNN(4, 4, 3, variant=variant, batch_first=True).double()
        x = torch.randn(2, 5, 4, dtype=D64)
        c = torch.randn(2, 3, dtype=D64)
        a, _ = m(x, c)
        b, _ = m(x, c + 1.0)
        assert (a - b).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["n", "i", "s"])
def test_gradcheck(variant):
    torch.manual_seed(4)
    bidir = variant != "s"
    m = CARNN(2, 2, 2, variant=variant, num_layers=2, bidirectional=bidir,
              batch_first=True).double()  # fmt: skip
    D = 2 if bidir else 1
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    c = torch.randn(2, 2, dtype=D64, requires_grad=True)
    h0 = torch.randn(2 * D, 2, 2, dtype=D64, requires_grad=True)
    assert gradcheck(m, x, h0, lengths=torch.tensor([3, 2]), ctx=c)


@pytest.mark.parametrize("variant", ["n", "i", "s"])
def test_cell_equals_layer_and_unbatched(variant):
    torch.manual_seed(7)
    m = CARNN(4, 4, 3, variant=variant).double()
    x = torch.randn(6, 2, 4, dtype=D64)
    c = torch.randn(2, 3, dtype=D64)
    h0 = torch.randn(1, 2, 4, dtype=D64)
    out, h_n = m(x, c, h0)
    cell: CARNNCell = m.cell(0)
    h = h0[0]
    steps = []
    for t in range(6):
        h = cell(x[t], c, h)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps, 0), out)
    torch.testing.assert_close(h, h_n[0])
    o1, h1 = m(x[:, 1], c[1])  # unbatched (T, D) input with a (C,) context
    torch.testing.assert_close(o1, m(x, c)[0][:, 1])
    assert h1.shape == (1, 4)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: m(torch.randn(2, 5, 3)), "context: required"),
        (lambda m: m(torch.randn(2, 5, 3), torch.randn(2, 4)), r"context: expected shape \(2, 2\)"),
        (lambda m: m(torch.randn(2, 5, 3), torch.randn(3, 2)), r"context: expected shape \(2, 2\)"),
        (lambda m: m(torch.randn(2, 5, 3), torch.randn(2, 2, dtype=D64)),
         "context: expected dtype"),
        (lambda m: m(torch.randn(2, 5, 3), [[0.0, 1.0]] * 2), "context: expected a Tensor"),
        (lambda m: m(torch.randn(2, 5, 7), torch.randn(2, 2)), "input: expected feature size"),
        (lambda m: m(torch.randn(2, 5, 3), torch.randn(2, 2), torch.zeros(1, 2, 4)),
         r"hx: expected shape \(4, 2, 4\)"),
        (lambda m: m(torch.randn(2, 5, 3), torch.randn(2, 2), lengths=torch.tensor([6, 1])),
         "lengths"),
    ],
)
def test_bad_inputs(call, match):
    m = CARNN(3, 4, 2, num_layers=2, bidirectional=True, batch_first=True)
    with pytest.raises(ValueError, match=match):
        call(m)


def test_bad_constructor_arguments_and_context_free_refuses_context():
    with pytest.raises(ValueError, match="hidden_size: sCARNN"):
        CARNN(3, 4, 2, variant="s")
    with pytest.raises(ValueError, match="hidden_size: sCARNN"):
        CARNNCell(3, 4, 2, variant="s")
    with pytest.raises(ValueError, match="bidirectional"):
        CARNN(4, 4, 2, variant="s", num_layers=2, bidirectional=True)
    with pytest.raises(ValueError, match="variant"):
        CARNN(3, 4, 2, variant="x")
    with pytest.raises(ValueError, match="context_size"):
        CARNN(3, 4, 0)
    free = CARNN(3, 4, None, batch_first=True)
    with pytest.raises(ValueError, match="context: given"):
        free(torch.randn(2, 5, 3), torch.randn(2, 2))
    with pytest.raises(ValueError, match="context: required"):
        CARNNCell(3, 4, 2)(torch.randn(2, 3))


@pytest.mark.parametrize("variant", ["n", "i", "s"])
def test_learns_context_selected_task(variant):
    """Regress mean_t x_t[k] where k is given only by the context (a one-hot vector)."""
    torch.manual_seed(9)
    D, H, T, B = 4, 4 if variant == "s" else 16, 8, 64
    m = CARNN(D, H, D, variant=variant, batch_first=True)
    head = torch.nn.Linear(H, 1)
    opt = torch.optim.Adam([*m.parameters(), *head.parameters()], lr=2e-2)

    def batch():
        x = torch.randn(B, T, D)
        k = torch.randint(0, D, (B,))
        c = F.one_hot(k, D).float()
        y = x[torch.arange(B), :, k].mean(1, keepdim=True)
        return x, c, y

    def loss_fn(x, c, y):
        out, _ = m(x, c)
        return F.mse_loss(head(out.mean(1)), y)

    torch.manual_seed(10)
    eval_set = [batch() for _ in range(4)]
    start = sum(loss_fn(*b).item() for b in eval_set)
    for _ in range(200):
        loss = loss_fn(*batch())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        end = sum(loss_fn(*b).item() for b in eval_set)
    assert end < 0.35 * start, (start, end)


# ------------------------------------------------------------------ the paper's model pieces


def test_dialog_history_pipeline_end_to_end():
    """Eq 8-10 wired from the pieces: utterances -> Position Encoder -> CARNN -> summary."""
    torch.manual_seed(13)
    d, V = 6, 20
    emb = torch.nn.Embedding(V, d).double()
    pe, carnn = PositionEncoder(), CARNN(d, d, d, variant="i", batch_first=True).double()
    words = torch.randint(0, V, (2, 5, 4))  # (B, M utterances, J words)
    e_all = pe(emb(words))  # (B, M, d)
    e, c = e_all[:, :-1], e_all[:, -1]  # history and the current utterance (the context)
    h, _ = carnn(e, c)
    h_his, _ = history_summary_fn(h, e, c)
    cands = pe(emb(torch.randint(0, V, (3, 4))))  # eq 9: candidate responses
    p = torch.softmax(h_his @ cands.T, -1)  # eq 10
    assert p.shape == (2, 3)
    p[:, 0].sum().backward()
    assert emb.weight.grad.abs().sum() > 0


def history_summary_fn(h, e, c):
    from ctrlrnn.nn.carnn_summary import history_summary

    return history_summary(h, e, c)


def test_contextual_lm_eq11_to_13():
    torch.manual_seed(14)
    lm = ContextualCARNNLM(12, 5, 5, "s", context_size=7, num_latent_labels=3).double()
    prev = torch.randint(0, 12, (2, 6))
    prev_len = torch.tensor([6, 3])
    tok = torch.randint(0, 12, (2, 5))
    tgt = torch.randint(0, 12, (2, 5))
    lens = torch.tensor([5, 4])
    lat = torch.tensor([0, 2])
    logits, latent = lm(tok, prev, lens, prev_len)
    assert logits.shape == (2, 5, 12) and latent.shape == (2, 3)
    # eq 11: the context is the final state of a context-free nCARNN over the previous sentence
    enc = lm.context_encoder.cell(0)
    c_ref = torch.stack([
        paper_carnn_direction(lm.embedding(prev[b : b + 1, : prev_len[b]]), None, enc, "n")[1][0]
        for b in range(2)
    ])  # fmt: skip
    torch.testing.assert_close(lm.encode_context(prev, prev_len), c_ref)
    h_ref, _ = paper_carnn_direction(lm.embedding(tok), c_ref, lm.carnn.cell(0), "s")
    torch.testing.assert_close(logits[:, :4], lm.output(h_ref)[:, :4])
    torch.testing.assert_close(latent, lm.latent_head(c_ref))  # eq 12
    # eq 13 with alpha = 0.5
    lw = (F.cross_entropy(logits[0], tgt[0], reduction="sum")
          + F.cross_entropy(logits[1, :4], tgt[1, :4], reduction="sum")) / 9  # fmt: skip
    ll = F.cross_entropy(latent, lat)
    total = lm.loss(tok, tgt, prev, lens, prev_len, latent_labels=lat)
    torch.testing.assert_close(total, 0.5 * lw + 0.5 * ll)
    torch.testing.assert_close(lm.loss(tok, tgt, prev, lens, prev_len), lw)
    total.backward()
    assert lm.context_encoder.cell(0).weight_ih.grad.abs().sum() > 0
    assert lm.latent_head.weight.grad.abs().sum() > 0
