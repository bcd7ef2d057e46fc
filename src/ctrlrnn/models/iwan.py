"""An IWAN-style answer scorer (Shen et al., 2017) with the CARNN paper's cross-context
encoder (CARNN section 4.3, Figure 4, table 3).

IWAN encodes both sentences with a BiLSTM, aligns each word of one sentence with the other
sentence (soft attention over its states), compares every word with its alignment, weighs the
words by how much they differ from what they align to (the inter-weighting), and scores the
pair from the weighted comparisons. The CARNN paper replaces the BiLSTM by a "cross context
CARNN-based sentence encoder": each sentence's CARNN takes the other sentence, encoded by a
Position Encoder, as its controlling context.

Here, in ``forward(q, q_len, a, a_len) -> score (B,)``:

* ``H_q = Enc(q | c = PE(a))``, ``H_a = Enc(a | c = PE(q))`` (a context-free encoder, such as
  the BiLSTM of IWAN, reads its sentence alone);
* ``E = H_q H_a^T``; ``A_q = softmax_rows(E) H_a``, ``A_a = softmax_cols(E)^T H_q``;
* ``C = relu(W [H * A; |H - A|])`` per word; inter-weights ``w = softmax(v^T tanh(U |H - A|))``
  over each sentence's words; ``s = sum_t w_t C_t``;
* ``score = u^T relu(W_o [s_q; s_a; s_q * s_a]) + b``.

This follows IWAN's published description, not its code (which is not public: the CARNN
authors used their own implementation too); its exact layer sizes and its similarity features
beyond these are not reproduced. Padding takes no part anywhere.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.classifier import make_embedding
from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.nn.position_encoder import PositionEncoder
from ctrlrnn.ops.padding import length_mask


class IwanScorer(nn.Module):
    #: the question's vector depends on the answer: pairs are scored together
    attentive = True

    def __init__(self, vocab_size: int, *, encoder: str, encoder_args: dict[str, Any],
                 embedding_size: int = 100, embeddings: Tensor | None = None,
                 freeze_embeddings: bool = False, compare_size: int = 0,
                 dropout: float = 0.0, pad_id: int = 0) -> None:
        super().__init__()
        self.embed = make_embedding(vocab_size, embedding_size, embeddings, freeze_embeddings,
                                    pad_id)
        width = self.embed.embedding_dim
        args = dict(encoder_args)
        self.cross = encoder == "carnn"
        hidden = int(args.get("hidden_size", 128))
        self.project: nn.Module = nn.Identity()
        if self.cross:
            args["context_size"] = width
            if args.get("variant") == "s" and width != hidden:  # sCARNN adds e_m itself
                self.project = nn.Linear(width, hidden)
                width = hidden
        self.position = PositionEncoder()
        self.encoder = SequenceEncoder(encoder, width, args)
        d = self.encoder.output_size
        k = compare_size or d
        self.drop = nn.Dropout(dropout)
        self.compare = nn.Sequential(nn.Linear(2 * d, k), nn.ReLU())
        self.weigh = nn.Sequential(nn.Linear(d, k), nn.Tanh(), nn.Linear(k, 1))
        self.out = nn.Sequential(nn.Linear(3 * k, k), nn.ReLU(), nn.Linear(k, 1))

    def _states(self, x: Tensor, lengths: Tensor, other: Tensor, other_lengths: Tensor
                ) -> Tensor:
        e = self.drop(self.embed(x))
        context = None
        if self.cross:  # the other sentence, Position-Encoded, controls this one's CARNN
            context = self.position(self.embed(other), other_lengths.clamp(min=1))
        out, _, _ = self.encoder(self.project(e), lengths, context=context)
        return out

    def _side(self, H: Tensor, A: Tensor, mask: Tensor) -> Tensor:
        diff = (H - A).abs()
        C = self.compare(self.drop(torch.cat([H * A, diff], dim=-1)))
        w = self.weigh(diff).squeeze(-1).masked_fill(~mask, float("-inf"))
        return (torch.softmax(w, dim=-1).unsqueeze(-1) * C).sum(1)

    def forward(self, q: Tensor, q_len: Tensor, a: Tensor, a_len: Tensor) -> Tensor:
        Hq = self._states(q, q_len, a, a_len)
        Ha = self._states(a, a_len, q, q_len)
        qm = length_mask(q_len.to(Hq.device), Hq.shape[1])
        am = length_mask(a_len.to(Ha.device), Ha.shape[1])
        E = (Hq @ Ha.transpose(1, 2)).masked_fill(~(qm.unsqueeze(2) & am.unsqueeze(1)),
                                                   float("-inf"))
        Aq = torch.softmax(E, dim=2).nan_to_num(0.0) @ Ha  # each question word's alignment
        Aa = torch.softmax(E, dim=1).nan_to_num(0.0).transpose(1, 2) @ Hq
        sq, sa = self._side(Hq, Aq, qm), self._side(Ha, Aa, am)
        return self.out(self.drop(torch.cat([sq, sa, sq * sa], dim=-1))).squeeze(-1)
