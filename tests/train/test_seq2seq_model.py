"""The attentional encoder-decoder: incremental decoding equals teacher forcing; beam search."""

from __future__ import annotations

import pytest
import torch

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
