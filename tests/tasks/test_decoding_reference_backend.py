"""The translation model's decoders under ``CTRLRNN_BACKEND=reference`` (what a user without a
compiler gets): greedy decoding gives the tokens of a readable loop over ``Seq2Seq.step``, and
greedy and beam search give the tokens the compiled kernels give."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.models.seq2seq import Seq2Seq
from ctrlrnn.ops import _extension


def _model(layers: int, bidirectional: bool) -> Seq2Seq:
    torch.manual_seed(3)
    m = Seq2Seq(30, 25, encoder="qrnn",
                encoder_args={"hidden_size": 16, "num_layers": layers,
                              "bidirectional": bidirectional},
                embedding_size=8).eval()
    with torch.no_grad():  # varied tokens from an untrained model
        for p in m.parameters():
            p.normal_(std=0.6)
    return m


@torch.no_grad()
def _step_loop(model: Seq2Seq, src: torch.Tensor, lengths: torch.Tensor, max_len: int):
    """Greedy decoding at batch 1, one ``model.step`` per token."""
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    token = torch.full((1,), model.bos_id, dtype=torch.long)
    row: list[int] = []
    for _ in range(max_len):
        logp, state = model.step(token, state, enc)
        token = logp.argmax(-1)
        row.append(int(token))
        if row[-1] == model.eos_id:
            return row[:-1]
    return row


@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
def test_decoders_on_the_reference_backend(monkeypatch, layers, bidirectional):
    model = _model(layers, bidirectional)
    g = torch.Generator().manual_seed(6)
    src, lengths = torch.randint(4, 30, (1, 7), generator=g), torch.tensor([7])
    compiled = (model.greedy(src, lengths, 12),
                model.beam_search(src, lengths, beam=3, max_len=12))
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    assert _extension.forced_reference()
    reference = (model.greedy(src, lengths, 12),
                 model.beam_search(src, lengths, beam=3, max_len=12))
    assert reference[0] == [_step_loop(model, src, lengths, 12)]
    assert reference == compiled
    assert len(reference[0][0]) > 1  # the tokens vary: the comparison can fail
