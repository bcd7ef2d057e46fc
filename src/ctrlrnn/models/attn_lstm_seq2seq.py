"""The attentional LSTM encoder-decoder of the CAS-LSTM paper section 4.4, with CAS-LSTM cells.

CAS-LSTM paper 4.4 translates IWSLT'14 with "a 2-layer 256D sequence-to-sequence LSTM model with
the attentional decoder" (as Wiseman and Rush, 2016, run with fairseq) and replaces "the encoder
and the decoder network" with CAS-LSTM stacks; decoding is beam search with ``B = 10``.

The decoder is the Luong-style attentional decoder of that baseline:

* ``h_t`` — top-layer output of a stacked LSTM or CAS-LSTM (CAS-LSTM paper eq 7-13) whose input
  at step ``t`` is the target embedding ``y_t`` and, with *input feeding* (Luong et al., 2015;
  Wiseman and Rush, 2016; fairseq's LSTM decoder), the previous attentional output
  ``h~_{t-1}``;
* ``a_ts = softmax_s((W_a h_t) . h^enc_s)``, ``k_t = sum_s a_ts h^enc_s`` (global attention
  over the encoder outputs, padding masked);
* ``h~_t = tanh(W_c [k_t; h_t])`` and ``p(y_{t+1}) = softmax(W_o h~_t)``.

The decoder's ``(h, c)`` of every layer start from the encoder's summary state through a
learned bridge ``tanh(W_b h^enc_final)``, so any encoder (uni- or bidirectional, any width) can
be used. Without input feeding the decoder runs over the whole target in one call; with it,
step by step.

Greedy decoding and the length-normalised beam search (QRNN paper eq 9) are shared with
:class:`~ctrlrnn.models.seq2seq.Seq2Seq` through the same incremental protocol
(``encode`` / ``init_state`` / ``step`` / ``_select``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.models.search import IncrementalDecoding
from ctrlrnn.models.torch_rnn_lengths import run_full
from ctrlrnn.nn.cas_lstm import CASLSTM

DECODER_CELLS = ("lstm", "caslstm")


def decoder_stack(
    cell: str, input_size: int, hidden_size: int, num_layers: int, dropout: float,
    cell_args: dict[str, Any] | None = None,
) -> nn.Module:
    """A batch-first stacked ``nn.LSTM`` or CAS-LSTM: ``rnn(x, (h, c)) -> (out, (h, c))``."""
    if cell == "lstm":
        return nn.LSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True,
                       dropout=dropout if num_layers > 1 else 0.0)
    if cell == "caslstm":
        return CASLSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True,
                       dropout=dropout, **(cell_args or {}))
    raise ValueError(f"decoder: expected one of {DECODER_CELLS}, got {cell!r}")


def _at(features: Tensor, positions: Tensor | None) -> Tensor:
    """``features`` ``(B, T, D)`` at the true entries of ``positions`` (all when None); the
    dropout before it ran over every position, so its draws do not depend on the mask."""
    return features if positions is None else features[positions]


class AttnLSTMSeq2Seq(IncrementalDecoding, nn.Module):
    """Attentional encoder-decoder of the CAS-LSTM paper 4.4 (see the module docstring).

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        encoder, encoder_args: the encoder by name (``"caslstm"`` for the paper's model,
            ``"lstm"`` for its baseline) and its ``model.*`` options.
        decoder: the decoder cell, ``"lstm"`` or ``"caslstm"`` (default: ``"caslstm"`` when
            the encoder is CAS-LSTM, else ``"lstm"``).
        decoder_args: CAS-LSTM options of the decoder (``lambda_``, ``peephole``).
        embedding_size: source and target embedding width.
        decoder_hidden, decoder_layers: decoder size (default: the encoder's).
        input_feeding: feed ``h~_{t-1}`` to the decoder input (the fairseq baseline does).
        dropout: on embeddings, between decoder layers and before the output layer.
        pad_id, bos_id, eos_id: special token ids (shared by both vocabularies).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        encoder: str = "caslstm",
        encoder_args: dict[str, Any] | None = None,
        decoder: str | None = None,
        decoder_args: dict[str, Any] | None = None,
        embedding_size: int = 64,
        decoder_hidden: int | None = None,
        decoder_layers: int | None = None,
        input_feeding: bool = True,
        dropout: float = 0.0,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
    ) -> None:
        super().__init__()
        decoder = decoder or ("caslstm" if encoder == "caslstm" else "lstm")
        if decoder not in DECODER_CELLS:
            raise ValueError(f"decoder: expected one of {DECODER_CELLS}, got {decoder!r}")
        self.src_embed = nn.Embedding(src_vocab, embedding_size, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, embedding_size, padding_idx=pad_id)
        self.encoder = SequenceEncoder(encoder, embedding_size, dict(encoder_args or {}))
        enc = self.encoder.output_size
        H = decoder_hidden or self.encoder.hidden_size
        L = decoder_layers or self.encoder.num_layers
        self.decoder_kind = decoder
        self.hidden, self.layers = H, L
        self.input_feeding = bool(input_feeding)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.dropout = nn.Dropout(dropout)
        self.bridge = nn.Linear(enc, 2 * L * H)
        rnn_in = embedding_size + (H if self.input_feeding else 0)
        self.rnn = decoder_stack(decoder, rnn_in, H, L, dropout, decoder_args)
        self.attn = nn.Linear(H, enc, bias=False)  # W_a
        self.mix = nn.Linear(enc + H, H, bias=False)  # W_c
        self.out = nn.Linear(H, tgt_vocab)  # W_o

    # ------------------------------------------------------------------ encoder
    def encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        x = self.dropout(self.src_embed(src))
        out, final, _ = self.encoder(x, src_lengths)
        lengths = src_lengths.to(src.device)
        mask = torch.arange(src.shape[1], device=src.device)[None] < lengths[:, None]
        return {"memory": out, "final": final, "mask": mask, "lengths": src_lengths}

    def _attentional(self, h: Tensor, enc: dict[str, Tensor]) -> Tensor:
        """``h~_t = tanh(W_c [k_t; h_t])`` for decoder outputs ``h`` ``(B, T, H)``."""
        scores = torch.bmm(self.attn(h), enc["memory"].transpose(1, 2))
        scores = scores.masked_fill(~enc["mask"].unsqueeze(1), float("-inf"))
        k = torch.bmm(torch.softmax(scores, dim=-1), enc["memory"])
        return torch.tanh(self.mix(torch.cat([k, h], dim=-1)))

    def _initial(self, final: Tensor) -> tuple[Tensor, Tensor]:
        B = final.shape[0]
        hc = torch.tanh(self.bridge(final)).view(B, 2, self.layers, self.hidden)
        return hc[:, 0].transpose(0, 1).contiguous(), hc[:, 1].transpose(0, 1).contiguous()

    # ------------------------------------------------------------------ teacher forcing
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                positions: Tensor | None = None) -> Tensor:
        """Logits ``(B, T_tgt, V)`` for the target prefix ``tgt_in`` (teacher forcing); with a
        bool mask ``positions`` ``(B, T_tgt)``, ``(N, V)`` at its ``N`` true entries only (the
        output layer skips the padding)."""
        enc = self.encode(src, src_lengths)
        y = self.dropout(self.tgt_embed(tgt_in))
        if not self.input_feeding:
            hs, _ = run_full(self.rnn, y, self._initial(enc["final"]))
            return self.out(_at(self.dropout(self._attentional(hs, enc)), positions))
        state = self.init_state(enc)
        outs = []
        for t in range(y.shape[1]):
            h_att, state = self._advance(y[:, t], state, enc)
            outs.append(h_att)
        return self.out(_at(self.dropout(torch.stack(outs, dim=1)), positions))

    # ------------------------------------------------------------------ incremental decoding
    def init_state(self, enc: dict[str, Tensor]) -> list[Tensor]:
        """``[h (L, B, H), c (L, B, H), h~ (B, H)]`` (``h~_0 = 0``)."""
        h0, c0 = self._initial(enc["final"])
        return [h0, c0, h0.new_zeros(h0.shape[1], self.hidden)]

    def _advance(
        self, y: Tensor, state: list[Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """One decoder step on embedded ``y`` ``(B, E)``: ``h~_t`` and the new state."""
        h, c, feed = state
        x = torch.cat([y, feed], dim=-1) if self.input_feeding else y
        out, (h_new, c_new) = self.rnn(x.unsqueeze(1), (h, c))
        h_att = self._attentional(out, enc)[:, 0]
        return h_att, [h_new, c_new, h_att]

    def step(
        self, token: Tensor, state: list[Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """Log-probabilities ``(B, V)`` of the next token after ``token`` ``(B,)``."""
        h_att, new = self._advance(self.tgt_embed(token), state, enc)
        return F.log_softmax(self.out(h_att), -1), new

    def _select(self, state: list[Tensor], index: Tensor) -> list[Tensor]:
        h, c, feed = state
        return [h.index_select(1, index), c.index_select(1, index), feed.index_select(0, index)]

