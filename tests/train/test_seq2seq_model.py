"""The attentional encoder-decoder: incremental decoding equals teacher forcing; beam search."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.models.search import IncrementalDecoding
from ctrlrnn.models.seq2seq import Seq2Seq


@pytest.mark.parametrize("encoder,decoder", [("qrnn", "qrnn"), ("lstm", "lstm"),
                                             ("gru", "qrnn")])
@pytest.mark.parametrize("layers", [1, 2])
def test_incremental_equals_teacher_forcing(encoder, decoder, layers):
    torch.manual_seed(0)
    m = Seq2Seq(12, 10, encoder=encoder, decoder=decoder, embedding_size=8,
                encoder_args={"hidden_size": 8, "num_layers": layers, "bidirectional": True},
                decoder_hidden=6).eval()
    src, lens = torch.randint(4, 12, (3, 5)), torch.tensor([5, 2, 4])
    tgt = torch.randint(4, 10, (3, 6))
    ref = torch.log_softmax(m(src, lens, tgt), -1)
    enc = m.encode(src, lens)
    state = m.init_state(enc)
    steps = []
    for t in range(6):
        logp, state = m.step(tgt[:, t], state, enc)
        steps.append(logp)
    torch.testing.assert_close(torch.stack(steps, 1), ref, rtol=1e-5, atol=1e-5)
    # padding of the source is ignored
    src2 = torch.cat([src, torch.randint(4, 12, (3, 3))], 1)
    torch.testing.assert_close(torch.log_softmax(m(src2, lens, tgt), -1), ref,
                               rtol=1e-5, atol=1e-5)


def test_beam_one_without_normalisation_is_greedy():
    torch.manual_seed(1)
    m = Seq2Seq(12, 12, encoder="qrnn", encoder_args={"hidden_size": 16},
                embedding_size=8).eval()
    src, lens = torch.randint(4, 12, (4, 6)), torch.tensor([6, 3, 5, 1])
    assert m.beam_search(src, lens, beam=1, alpha=0.0, max_len=9) == m.greedy(src, lens, 9)


def test_beam_search_finds_the_most_likely_sequence_when_exhaustive():
    torch.manual_seed(2)
    m = Seq2Seq(7, 6, encoder="lstm", decoder="lstm", encoder_args={"hidden_size": 8},
                embedding_size=4, bos_id=2, eos_id=3).eval()
    src, lens = torch.randint(4, 7, (1, 3)), torch.tensor([3])
    # with a beam as wide as every 2-token prefix, beam search returns the best length-<=2 output
    best = m.beam_search(src, lens, beam=36, alpha=0.0, max_len=2)[0]
    enc = m.encode(src, lens)

    def score(seq):
        state, tok, total = m.init_state(enc), torch.tensor([2]), 0.0
        for t in [*seq, 3][:2]:
            logp, state = m.step(tok, state, enc)
            total += float(logp[0, t])
            tok = torch.tensor([t])
        return total

    candidates = [[]] + [[a] for a in range(6) if a != 3] + [
        [a, b] for a in range(6) for b in range(6) if 3 not in (a, b)]
    assert score(best) == pytest.approx(max(score(c) for c in candidates), abs=1e-5)


# ------------------------------------------------------------------ eq 7, layer by layer

D64 = torch.float64


def _encoder_layer_states(m, src, lens):
    """Every encoder layer's final state from eq 1-4 written as loops, sequence by sequence:
    the QRNN encoder's layer l runs fo-pooling over the masked convolution of width 2 (the
    backward direction on the reversed sequence); its final state is the output where each
    direction's pass ends, the two directions concatenated. Also the top layer's outputs."""
    emb = m.src_embed(src)
    states, memories = [], []
    for b in range(src.shape[0]):
        n = int(lens[b])
        layer_in, per_layer = emb[b, :n], []
        for layer in range(m.encoder.num_layers):
            dirs = []
            for d in range(2):
                cell = m.encoder.rnn.cell(layer, d)
                seq = layer_in if d == 0 else layer_in.flip(0)
                dirs.append(_fo_layer(seq, cell.weight, cell.bias, 2)[0])
            out = torch.cat([dirs[0], dirs[1].flip(0)], -1)
            per_layer.append(torch.cat([dirs[0][-1], dirs[1][-1]]))
            layer_in = out
        states.append(torch.stack(per_layer))
        memories.append(out)
    return torch.stack(states), memories


def _fo_layer(x, weight, bias, window, enc_term=None):
    """fo-pooling (eq 4) over the masked convolution (eq 1-2) of ``x`` ``(T, D)``, plus eq 7's
    ``V h~_T`` when given: ``(h, c, o)`` per step."""
    T, D = x.shape
    H = weight.shape[0] // 3
    c = torch.zeros(H, dtype=x.dtype)
    hs, cs, os_ = [], [], []
    for t in range(T):
        pre = bias.clone()
        for j in range(window):
            s = t - window + 1 + j
            if s >= 0:
                pre = pre + weight[:, j * D : (j + 1) * D] @ x[s]
        if enc_term is not None:
            pre = pre + enc_term
        z, f, o = torch.tanh(pre[:H]), torch.sigmoid(pre[H : 2 * H]), torch.sigmoid(pre[2 * H :])
        c = f * c + (1 - f) * z
        hs.append(o * c)
        cs.append(c)
        os_.append(o)
    return torch.stack(hs), torch.stack(cs), torch.stack(os_)


def _paper_decoder_logits(m, src, lens, tgt):
    """Logits of the QRNN decoder from eq 7-8: decoder layer l adds V^l h~^l_T of encoder layer
    l; the top layer attends with its un-gated c_t over the top encoder layer's outputs."""
    states, memories = _encoder_layer_states(m, src, lens)
    L = m.layers
    cells = [m.lower.cell(layer) for layer in range(L - 1)] + [m.top]
    logits = []
    for b in range(src.shape[0]):
        y = m.tgt_embed(tgt[b])
        for layer, cell in enumerate(cells):
            term = cell.encoder_weight @ states[b, layer]  # eq 7
            h, c, o = _fo_layer(y, cell.weight, cell.bias, cell.window, term)
            y = h
        mem = memories[b]
        alpha = torch.softmax(m.query(c) @ mem.T, -1)  # eq 8
        k = alpha @ mem
        logits.append(m.out(o * (m.w_k(k) + m.w_c(c))))
    return torch.stack(logits), states


def _qrnn_model(layers=3, seed=0, **kw):
    torch.manual_seed(seed)
    return Seq2Seq(12, 10, encoder="qrnn", decoder="qrnn", embedding_size=5,
                   encoder_args={"hidden_size": 4, "num_layers": layers, "bidirectional": True},
                   decoder_hidden=6, **kw).double().eval()


def test_qrnn_decoder_reads_each_encoder_layer_eq7():
    m = _qrnn_model()
    src, lens = torch.randint(4, 12, (3, 6)), torch.tensor([6, 2, 4])
    tgt = torch.randint(4, 10, (3, 5))
    with torch.no_grad():
        want, states = _paper_decoder_logits(m, src, lens, tgt)
        torch.testing.assert_close(m(src, lens, tgt), want)
        enc = m.encode(src, lens)
    torch.testing.assert_close(enc["layers"], states)
    torch.testing.assert_close(enc["layers"][:, -1], enc["final"])
    assert not torch.allclose(states[:, 0], states[:, -1])  # the layers' states differ


def _record_encoder_states(m):
    """Wrap every decoder cell so that each call records (layer, encoder_state, gates)."""
    seen = []
    cells = [m.lower.cell(layer) for layer in range(m.layers - 1)] + [m.top]
    for layer, cell in enumerate(cells):
        def whole(x, encoder_state=None, *args, fn=cell.gate_preactivations, layer=layer, **kw):
            gates = fn(x, encoder_state, *args, **kw)
            seen.append((layer, encoder_state, gates))
            return gates

        def step(x, history, encoder_state=None, fn=cell.step_preactivations, layer=layer):
            gates, history = fn(x, history, encoder_state)
            seen.append((layer, encoder_state, gates))
            return gates, history

        cell.gate_preactivations = whole
        cell.step_preactivations = step
    return seen


def test_changing_one_encoder_layer_moves_only_its_decoder_layer():
    """Encoder layer l's final state changed alone (in the encoding the decoder reads): the
    decoder layers below l compute the same gates, layer l's gates move, and every layer above
    still receives its own, unchanged encoder state (its gates move only through its input)."""
    m = _qrnn_model(seed=1)
    seen = _record_encoder_states(m)
    src, lens = torch.randint(4, 12, (2, 5)), torch.tensor([5, 3])
    tgt = torch.randint(4, 10, (2, 4))
    encode = m.encode
    with torch.no_grad():
        m(src, lens, tgt)
        base = {layer: (e.clone(), g.clone()) for layer, e, g in seen}
        for changed in range(3):
            def perturbed(s, n, changed=changed):
                enc = encode(s, n)
                layers = enc["layers"].clone()
                layers[:, changed] += 0.5
                return {**enc, "layers": layers}

            m.encode = perturbed
            seen.clear()
            m(src, lens, tgt)
            for layer, e, g in seen:
                moved = not torch.equal(e, base[layer][0])
                assert moved == (layer == changed), (changed, layer)
                if layer < changed:
                    torch.testing.assert_close(g, base[layer][1], rtol=0, atol=0)
                elif layer == changed:
                    assert not torch.allclose(g, base[layer][1])
            m.encode = encode


def _record_encoder_terms(m, seen):
    """Wrap every decoder cell's eq 7 term ``V^l h~^l_T`` so that each call records (layer,
    encoder_state, None) in ``seen``: the decoders' step makes it once per decode
    (ctrlrnn.models.qrnn_decoding), not through ``step_preactivations``."""
    cells = [m.lower.cell(layer) for layer in range(m.layers - 1)] + [m.top]
    for layer, cell in enumerate(cells):
        def term(encoder_state, fn=cell._encoder_term, layer=layer):
            seen.append((layer, encoder_state, None))
            return fn(encoder_state)

        cell._encoder_term = term


def test_step_and_beam_search_read_the_same_layer_states():
    m = _qrnn_model(seed=2)
    src, lens = torch.randint(4, 12, (2, 5)), torch.tensor([5, 2])
    with torch.no_grad():
        layers = m.encode(src, lens)["layers"]
    seen = _record_encoder_states(m)
    _record_encoder_terms(m, seen)
    m.greedy(src, lens, 4)
    assert seen and {layer for layer, _, _ in seen} == {0, 1, 2}
    for layer, e, _ in seen:
        torch.testing.assert_close(e, layers[:, layer])
    seen.clear()
    m.beam_search(src, lens, beam=3, alpha=0.6, max_len=4)
    for layer, e, _ in seen:
        torch.testing.assert_close(e, layers[:, layer].repeat_interleave(3, 0))


@pytest.mark.parametrize("encoder", ["lstm", "gru", "qrnn"])
def test_encoder_layer_states(encoder):
    """forward_layers: every layer's final state, the last one ``final``; for nn.LSTM/GRU layer
    0's equals a one-layer network with its weights (forward at the last valid step, backward
    at step 0)."""
    from ctrlrnn.models.encoders import SequenceEncoder

    torch.manual_seed(3)
    enc = SequenceEncoder(encoder, 3, {"hidden_size": 4, "num_layers": 2,
                                       "bidirectional": True}).double().eval()
    x, lens = torch.randn(3, 6, 3, dtype=D64), torch.tensor([6, 2, 4])
    out, final, states = enc.forward_layers(x, lens)
    assert states.shape == (3, 2, 8)
    torch.testing.assert_close(states[:, -1], final)
    ref_out, ref_final, _ = enc(x, lens)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(final, ref_final)
    if encoder == "qrnn":
        first = ctrlrnn_qrnn_first_layer(enc.rnn)
        o1, _ = first(x, lengths=lens)
        want = torch.cat([o1[torch.arange(3), lens - 1, :4], o1[:, 0, 4:]], -1)
    else:
        cls = torch.nn.LSTM if encoder == "lstm" else torch.nn.GRU
        one = cls(3, 4, batch_first=True, bidirectional=True).double()
        one.load_state_dict({k: v for k, v in enc.rnn.state_dict().items() if "_l0" in k})
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, batch_first=True,
                                                         enforce_sorted=False)
        o1, _ = one(packed)
        o1, _ = torch.nn.utils.rnn.pad_packed_sequence(o1, batch_first=True)
        want = torch.cat([o1[torch.arange(3), lens - 1, :4], o1[:, 0, 4:]], -1)
    torch.testing.assert_close(states[:, 0], want)


def ctrlrnn_qrnn_first_layer(qrnn):
    from ctrlrnn import QRNN

    one = QRNN(qrnn.input_size, qrnn.hidden_size, bidirectional=True, batch_first=True,
               window=qrnn.windows[0], causal=qrnn.causal).double()
    one.cells[0].load_state_dict(qrnn.cell(0, 0).state_dict())
    one.cells[1].load_state_dict(qrnn.cell(0, 1).state_dict())
    return one


def test_unequal_depths_and_encoders_without_layer_states_are_refused():
    with pytest.raises(ValueError, match="decoder_layers: the QRNN decoder adds encoder layer"):
        Seq2Seq(9, 9, encoder="qrnn", encoder_args={"hidden_size": 4, "num_layers": 2},
                decoder="qrnn", decoder_layers=3)
    with pytest.raises(ValueError, match="decoder: the QRNN decoder reads every encoder layer"):
        Seq2Seq(9, 9, encoder="rcrn", encoder_args={"hidden_size": 4, "num_layers": 2},
                decoder="qrnn")
    # the LSTM decoder starts from the top state: any depth; a one-layer encoder of any kind
    Seq2Seq(9, 9, encoder="qrnn", encoder_args={"hidden_size": 4, "num_layers": 2},
            decoder="lstm", decoder_layers=3)
    Seq2Seq(9, 9, encoder="rcrn", encoder_args={"hidden_size": 4}, decoder="qrnn")
    with pytest.raises(ValueError, match="window: expected a positive integer or 2"):
        Seq2Seq(9, 9, encoder="qrnn", encoder_args={"hidden_size": 4, "num_layers": 2},
                window=(2, 2, 2))


def test_decoder_is_causal_behind_an_unmasked_encoder():
    """An encoder with the unmasked convolution (causal=False, a width per layer) and the
    decoder: logits at step t never depend on later target tokens, and decoding step by step
    equals teacher forcing (the decoder's own convolutions are masked, one width per layer)."""
    torch.manual_seed(4)
    m = Seq2Seq(12, 10, encoder="qrnn", embedding_size=5, decoder_hidden=6, window=(3, 2),
                encoder_args={"hidden_size": 4, "num_layers": 2, "window": [6, 2],
                              "causal": False}).double().eval()
    assert m.encoder.rnn.windows == (6, 2) and not m.encoder.rnn.causal
    assert m.lower.windows == (3,) and m.top.window == 2 and m.top.causal
    src, lens = torch.randint(4, 12, (2, 6)), torch.tensor([6, 3])
    tgt = torch.randint(4, 10, (2, 5))
    with torch.no_grad():
        ref = m(src, lens, tgt)
        for t in range(4):
            other = tgt.clone()
            other[:, t + 1 :] = torch.randint(4, 10, other[:, t + 1 :].shape)
            torch.testing.assert_close(m(src, lens, other)[:, : t + 1], ref[:, : t + 1])
        enc = m.encode(src, lens)
        state, steps = m.init_state(enc), []
        for t in range(5):
            logp, state = m.step(tgt[:, t], state, enc)
            steps.append(logp)
    torch.testing.assert_close(torch.stack(steps, 1), torch.log_softmax(ref, -1))


def _bahdanau(layers_enc=1, layers_dec=1, metagross=False):
    encoder, args = ("lstm", {"hidden_size": 8, "num_layers": layers_enc, "bidirectional": True})
    if metagross:
        encoder, args = "metagross", {"hidden_size": 8, "bidirectional": True}
    return Seq2Seq(12, 10, encoder=encoder, decoder="lstm", embedding_size=8, encoder_args=args,
                   decoder_hidden=6, decoder_layers=layers_dec, attention="bahdanau").eval()


@pytest.mark.parametrize("layers_dec", [1, 2])
def test_bahdanau_attention_is_the_additive_score_before_the_step(layers_dec):
    """Teacher forcing against the equations written out: e_ts = v^T tanh(W_a s_{t-1} +
    U_a h~_s), k_t = sum_s softmax(e_t)_s h~_s, s_t = LSTM([y_{t-1}; k_t], s_{t-1}),
    logits = W_o tanh(W [k_t; s_t]); incremental decoding gives the same."""
    torch.manual_seed(3)
    m = _bahdanau(layers_dec=layers_dec)
    src, lens = torch.randint(4, 12, (3, 5)), torch.tensor([5, 2, 4])
    tgt = torch.randint(4, 10, (3, 6))
    logits = m(src, lens, tgt)
    enc = m.encode(src, lens)
    memory, mask = enc["memory"], enc["mask"]
    h, c = m._lstm_init(enc)
    rows = []
    for t in range(6):
        s_prev = h[-1]
        e = torch.stack([
            (m.att_v.weight @ torch.tanh(m.att_query(s_prev) + memory[:, s] @ m.att_keys.weight.T
                                          ).unsqueeze(-1)).squeeze(-1).squeeze(-1)
            for s in range(memory.shape[1])], 1)  # fmt: skip
        e = e.masked_fill(~mask, float("-inf"))
        k = (torch.softmax(e, 1).unsqueeze(-1) * memory).sum(1)
        y = m.tgt_embed(tgt[:, t])
        out, (h, c) = m.rnn(torch.cat([y, k], -1).unsqueeze(1), (h, c))
        rows.append(m.out(torch.tanh(m.mix(torch.cat([k, out[:, 0]], -1)))))
    torch.testing.assert_close(logits, torch.stack(rows, 1), rtol=1e-5, atol=1e-5)
    state, steps = m.init_state(enc), []
    for t in range(6):
        logp, state = m.step(tgt[:, t], state, enc)
        steps.append(logp)
    torch.testing.assert_close(torch.stack(steps, 1), torch.log_softmax(logits, -1),
                               rtol=1e-5, atol=1e-5)
    hyp = m.beam_search(src, lens, beam=3, max_len=7)
    assert len(hyp) == 3


def test_one_decoder_whatever_the_encoder_depth():
    """decoder_layers fixes the decoder, so arms that differ in their encoder share it: the
    decoders' parameters are the same in number and shape."""
    shallow, deep = _bahdanau(layers_enc=1), _bahdanau(layers_enc=3)
    meta = _bahdanau(metagross=True)

    def decoder_shapes(m):
        return {n: tuple(p.shape) for n, p in m.named_parameters()
                if not n.startswith(("encoder.", "src_embed."))}

    assert deep.rnn.num_layers == 1
    assert decoder_shapes(shallow) == decoder_shapes(deep) == decoder_shapes(meta)
    with pytest.raises(ValueError, match="attention"):
        Seq2Seq(12, 10, encoder="qrnn", decoder="qrnn", encoder_args={"hidden_size": 8},
                attention="bahdanau")
    with pytest.raises(ValueError, match="attention"):
        Seq2Seq(12, 10, encoder="lstm", decoder="lstm", encoder_args={"hidden_size": 8},
                attention="luong")
    with pytest.raises(ValueError, match="decoder_layers"):
        Seq2Seq(12, 10, encoder="lstm", decoder="lstm", encoder_args={"hidden_size": 8},
                decoder_layers=0)


class _Scripted(IncrementalDecoding):
    """A decoder whose step emits a fixed token per (row, step): greedy decoding's bookkeeping
    alone (eos = 2)."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, script: list[list[int]]) -> None:
        self.script = torch.tensor(script)  # (B, steps)

    def encode(self, src, src_lengths):
        return {"lengths": src_lengths}

    def init_state(self, enc):
        return [torch.zeros((), dtype=torch.long)]

    def step(self, token, state, enc):
        t = int(state[0])
        logp = torch.nn.functional.one_hot(self.script[:, t], 5).float().log()
        return logp, [state[0] + 1]


@pytest.mark.parametrize(("script", "max_len", "want"), [
    # ends at each row's first eos; a row without one runs to the last step taken; the loop
    # stops once every row has ended
    ([[3, 4, 2, 3], [2, 3, 3, 3], [4, 4, 4, 4]], 4, [[3, 4], [], [4, 4, 4, 4]]),
    ([[3, 2, 4, 4], [4, 3, 2, 4]], 4, [[3], [4, 3]]),
    ([[3, 4, 2], [4, 3, 4]], 2, [[3, 4], [4, 3]]),  # max_len reached first
    ([[3], [4]], 0, [[], []]),  # no step at all: an empty hypothesis per row, not shared
])
def test_greedy_keeps_each_rows_tokens_before_its_first_eos(script, max_len, want):
    m = _Scripted(script)
    src = torch.zeros(len(script), 1, dtype=torch.long)
    got = m.greedy(src, torch.ones(len(script), dtype=torch.long), max_len)
    assert got == want
    got[0].append(9)
    assert all(9 not in row for row in got[1:])


@pytest.mark.parametrize("decoder,attention", [("qrnn", "dot"), ("lstm", "dot"),
                                               ("lstm", "bahdanau")])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("decoder_hidden", [6, None])
def test_every_parameter_gets_a_gradient(decoder, attention, bidirectional, decoder_hidden):
    """No parameter sits unused in any mode, so the parameter counts on the pages are the
    model's: the additive attention has no dot-product query projection (it once did)."""
    torch.manual_seed(0)
    m = Seq2Seq(12, 10, encoder="lstm", decoder=decoder, embedding_size=8, attention=attention,
                encoder_args={"hidden_size": 8, "bidirectional": bidirectional},
                decoder_hidden=decoder_hidden)
    src, lens = torch.randint(4, 12, (3, 5)), torch.tensor([5, 2, 4])
    m(src, lens, torch.randint(4, 10, (3, 6))).square().mean().backward()
    unused = [n for n, p in m.named_parameters() if p.grad is None]
    assert not unused
    assert hasattr(m, "query") == (attention == "dot")


def test_additive_mode_keeps_the_initial_values_of_the_runs_before_it_lost_query():
    """The dropped projection's draw is still made, so a seed gives every parameter built
    after it (the bridge first) the values it had: the bridge is drawn right after the query
    in both modes, and the dot mode still builds the query."""
    def build(attention):
        torch.manual_seed(5)
        return Seq2Seq(12, 10, encoder="lstm", decoder="lstm", embedding_size=8,
                       encoder_args={"hidden_size": 8, "bidirectional": True},
                       decoder_hidden=6, attention=attention)

    dot, additive = build("dot"), build("bahdanau")
    torch.testing.assert_close(additive.bridge.weight, dot.bridge.weight, rtol=0, atol=0)
    torch.testing.assert_close(additive.bridge.bias, dot.bridge.bias, rtol=0, atol=0)


def test_state_dict_with_the_former_unused_query_loads():
    m = _bahdanau()
    state = m.state_dict()
    state["query.weight"] = torch.zeros(16, 6)  # what earlier versions saved
    fresh = _bahdanau()
    fresh.load_state_dict(state)  # strict
    for k, v in m.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[k], v, rtol=0, atol=0)
    assert "query.weight" in state  # the caller's dict is left as it was
    dot = Seq2Seq(12, 10, encoder="lstm", decoder="lstm", embedding_size=8,
                  encoder_args={"hidden_size": 8, "bidirectional": True}, decoder_hidden=6)
    with pytest.raises(RuntimeError, match="query.weight"):  # the dot mode still needs it
        dot.load_state_dict({k: v for k, v in dot.state_dict().items() if k != "query.weight"})
