"""Attentional encoder-decoder (QRNN paper section 2.1, eq 7-8) with length-normalised beam search.

The encoder is any :class:`~ctrlrnn.models.encoders.SequenceEncoder`. Two decoders:

* ``"qrnn"`` — the paper's QRNN decoder. Every decoder layer adds ``V h~_T`` of the encoder's
  final state to its gate pre-activations at every step (eq 7); the last layer attends with its
  *un-gated* cell ``c_t`` over the encoder outputs and applies the output gate after mixing
  (eq 8): ``alpha_st = softmax_s(c_t . h~_s)``, ``k_t = sum_s alpha_st h~_s``,
  ``h_t = o_t * (W_k k_t + W_c c_t)``. No input feeding, so training runs in parallel over time.
* ``"lstm"`` — the usual baseline: an ``nn.LSTM`` decoder started from the encoder's final
  state, with global dot attention without input feeding (Luong et al.; the variant eq 8 is
  said to be closest to): ``h_t' = tanh(W [k_t; h_t])``.

When the encoder and decoder widths differ, ``c_t`` (or ``h_t``) is projected to the encoder
width before the dot product.

Decoding (greedy and the length-normalised beam search of the appendix) comes from
:class:`ctrlrnn.models.search.IncrementalDecoding`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.models.search import IncrementalDecoding
from ctrlrnn.nn.qrnn import QRNN, QRNNCell
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling

DECODERS = ("qrnn", "lstm")


def _masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


class Seq2Seq(IncrementalDecoding, nn.Module):
    """Encoder-decoder with attention; see the module docstring."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        decoder: str = "qrnn",
        embedding_size: int = 64,
        decoder_hidden: int | None = None,
        decoder_layers: int | None = None,
        dropout: float = 0.0,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
        window: int = 2,
    ) -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"decoder: expected one of {DECODERS}, got {decoder!r}")
        self.src_embed = nn.Embedding(src_vocab, embedding_size, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, embedding_size, padding_idx=pad_id)
        self.encoder = SequenceEncoder(encoder, embedding_size, encoder_args)
        enc = self.encoder.output_size
        H = decoder_hidden or self.encoder.hidden_size
        L = decoder_layers or self.encoder.num_layers
        self.decoder_kind = decoder
        self.hidden = H
        self.layers = L
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.dropout = nn.Dropout(dropout)
        self.query = nn.Linear(H, enc, bias=False) if H != enc else nn.Identity()
        if decoder == "qrnn":
            self.lower = (
                QRNN(embedding_size, H, num_layers=L - 1, batch_first=True, window=window,
                     dropout=dropout, encoder_state_size=enc)
                if L > 1 else None
            )
            self.top = QRNNCell(
                embedding_size if L == 1 else H, H, window=window, pooling="fo",
                encoder_state_size=enc,
            )
            self.w_k = nn.Linear(enc, H, bias=False)  # eq 8: W_k
            self.w_c = nn.Linear(H, H)  # eq 8: W_c
        else:
            self.bridge = nn.Linear(enc, 2 * L * H)
            self.rnn = nn.LSTM(embedding_size, H, num_layers=L, batch_first=True,
                               dropout=dropout if L > 1 else 0.0)
            self.mix = nn.Linear(enc + H, H)
        self.out = nn.Linear(H, tgt_vocab)

    # ------------------------------------------------------------------ encoder
    def encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        x = self.dropout(self.src_embed(src))
        out, final, _ = self.encoder(x, src_lengths)
        mask = torch.arange(src.shape[1], device=src.device)[None] < src_lengths.to(src.device)[
            :, None
        ]
        return {"memory": out, "final": final, "mask": mask, "lengths": src_lengths}

    def _attend(self, query: Tensor, enc: dict[str, Tensor]) -> Tensor:
        """``k_t`` of eq 8 for queries ``(B, T, H)`` over the encoder outputs."""
        scores = torch.bmm(self.query(query), enc["memory"].transpose(1, 2))
        return torch.bmm(_masked_softmax(scores, enc["mask"]), enc["memory"])

    # ------------------------------------------------------------------ teacher forcing
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Logits ``(B, T_tgt, V)`` for the target prefix ``tgt_in`` (teacher forcing)."""
        enc = self.encode(src, src_lengths)
        y = self.dropout(self.tgt_embed(tgt_in))
        if self.decoder_kind == "qrnn":
            if self.lower is not None:
                y, _ = self.lower(y, encoder_state=enc["final"])
                y = self.dropout(y)
            gates = self.top.gate_preactivations(y, enc["final"])  # eq 7
            _h, c, _ = qrnn_pooling(gates, pooling="fo")
            o = torch.sigmoid(gates[..., 2 * self.hidden : 3 * self.hidden])
            k = self._attend(c, enc)
            h = o * (self.w_k(k) + self.w_c(c))  # eq 8
        else:
            h0 = self._lstm_init(enc["final"])
            hs, _ = self.rnn(y, h0)
            k = self._attend(hs, enc)
            h = torch.tanh(self.mix(torch.cat([k, hs], dim=-1)))
        return self.out(self.dropout(h))

    def _lstm_init(self, final: Tensor) -> tuple[Tensor, Tensor]:
        B = final.shape[0]
        hc = torch.tanh(self.bridge(final)).view(B, 2, self.layers, self.hidden)
        return hc[:, 0].transpose(0, 1).contiguous(), hc[:, 1].transpose(0, 1).contiguous()

    # ------------------------------------------------------------------ incremental decoding
    def init_state(self, enc: dict[str, Tensor]) -> list[Tensor]:
        B = enc["final"].shape[0]
        if self.decoder_kind == "lstm":
            h0, c0 = self._lstm_init(enc["final"])
            return [h0, c0]
        state: list[Tensor] = []
        emb = self.tgt_embed.embedding_dim
        ref = enc["final"]
        if self.lower is not None:
            for layer in range(self.layers - 1):
                cell = self.lower.cell(layer)
                state += [ref.new_zeros(B, self.hidden),
                          ref.new_zeros(B, cell.window - 1, cell.input_size)]
        top_in = emb if self.layers == 1 else self.hidden
        state += [ref.new_zeros(B, self.hidden), ref.new_zeros(B, self.top.window - 1, top_in)]
        return state

    def step(
        self, token: Tensor, state: list[Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """Log-probabilities ``(B, V)`` of the next token after ``token`` ``(B,)``."""
        y = self.tgt_embed(token)
        if self.decoder_kind == "lstm":
            hs, (h, c) = self.rnn(y.unsqueeze(1), (state[0], state[1]))
            k = self._attend(hs, enc)
            out = torch.tanh(self.mix(torch.cat([k, hs], dim=-1)))[:, 0]
            return F.log_softmax(self.out(out), -1), [h, c]
        new: list[Tensor] = []
        if self.lower is not None:
            for layer in range(self.layers - 1):
                y, (c, hist) = self.lower.cell(layer)(
                    y, (state[2 * layer], state[2 * layer + 1]), encoder_state=enc["final"]
                )
                new += [c, hist]
        c_prev, hist = state[-2], state[-1]
        gates, hist = self.top.step_preactivations(y, hist, enc["final"])
        _h, c_seq, c_new = qrnn_pooling(gates, c_prev, pooling="fo")
        o = torch.sigmoid(gates[..., 2 * self.hidden : 3 * self.hidden])
        k = self._attend(c_seq, enc)
        h = (o * (self.w_k(k) + self.w_c(c_seq)))[:, 0]
        new += [c_new, hist]
        return F.log_softmax(self.out(h), -1), new

    def _select(self, state: list[Tensor], index: Tensor) -> list[Tensor]:
        """Reorder decoder states along the batch (LSTM states are ``(L, B, H)``)."""
        dim = 1 if self.decoder_kind == "lstm" else 0
        return [s.index_select(dim, index) for s in state]
