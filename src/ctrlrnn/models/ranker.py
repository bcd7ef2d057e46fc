"""Answer-selection ranker (RCRN paper 4.2 "Ranking Model", encoder-only setting) and its metrics.

RCRN paper 4.2 swaps the encoder of AP-BiLSTM (dos Santos et al., 2016) for RCRN; "the
similarity scoring function is the cosine similarity and the objective function is the
pairwise hinge loss with a margin of 0.1. We use negative sampling of n = 6". Table 8 also
reports the setting without attention, which is what :class:`Ranker` implements: question and
answer go through one shared :class:`~ctrlrnn.models.classifier.SentenceEncoder` (max-pooling
over time, as the pooling of AP-BiLSTM without attention), and the score is their cosine.

:func:`pairwise_hinge_loss` follows dos Santos et al. (2016): of the ``n`` sampled negatives,
the highest-scoring one enters the hinge (``reduction="max"``); ``"mean"`` averages the hinge
over all of them instead.

With ``attention="ap"`` the ranker is AP-BiLSTM's (dos Santos et al., 2016), the other
setting of table 8: the encoder's states of question ``Q`` ``(M, d)`` and answer ``A``
``(L, d)`` meet in ``G = tanh(Q U A^T)`` (``U`` ``(d, d)`` trained); the max of each row of
``G`` scores the question's words, the max of each column the answer's, a softmax over each
sentence's words turns them into attention, and the attended sums ``r_q = Q^T a_q`` and
``r_a = A^T a_a`` are compared by their cosine. Padding takes no part (its scores are -inf).

Metrics (:func:`average_precision`, :func:`reciprocal_rank`, :func:`map_mrr`) rank each
question's candidates by descending score; ties keep the candidates' given order. Questions
without a correct answer are left out, as in the usual WikiQA evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.classifier import SentenceEncoder
from ctrlrnn.ops.padding import length_mask

HINGE_REDUCTIONS: tuple[str, ...] = ("max", "mean")
#: the ranker's pooling: "" (the encoder-only setting) or "ap" (attentive pooling)
ATTENTIONS: tuple[str, ...] = ("", "ap")


class Ranker(nn.Module):
    """``forward(q, q_len, a, a_len) -> cosine scores (B,)`` with one shared encoder."""

    def __init__(
        self,
        vocab_size: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        embedding_size: int = 100,
        embeddings: Tensor | None = None,
        freeze_embeddings: bool = False,
        pooling: str = "max",
        dropout: float = 0.0,
        pad_id: int = 0,
        attention: str = "",
    ) -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {ATTENTIONS}, got {attention!r}")
        self.sentence = SentenceEncoder(
            vocab_size, encoder=encoder, encoder_args=encoder_args,
            embedding_size=embedding_size, embeddings=embeddings,
            freeze_embeddings=freeze_embeddings, pooling=pooling, dropout=dropout, pad_id=pad_id,
        )
        #: whether the question's vector depends on the answer (attentive pooling)
        self.attentive = attention == "ap"
        if self.attentive:
            d = self.sentence.encoder.output_size
            self.U = nn.Parameter(torch.empty(d, d))
            nn.init.xavier_uniform_(self.U)

    def encode(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """A sentence's vector alone (without attention: the pooled encoder states)."""
        if self.attentive:
            raise ValueError("attention: with attentive pooling a sentence's vector depends "
                             "on the other sentence; score pairs with forward()")
        return self.sentence(tokens, lengths)

    def attend(self, q: Tensor, q_len: Tensor, a: Tensor, a_len: Tensor
               ) -> tuple[Tensor, Tensor]:
        """The attentive pooling's ``(r_q, r_a)`` ``(B, d)`` of question and answer."""
        Q, _ = self.sentence.states(q, q_len)
        A, _ = self.sentence.states(a, a_len)
        qm = length_mask(q_len.to(Q.device), Q.shape[1])
        am = length_mask(a_len.to(A.device), A.shape[1])
        G = torch.tanh(Q @ self.U @ A.transpose(1, 2))  # (B, M, L)
        G = G.masked_fill(~(qm.unsqueeze(2) & am.unsqueeze(1)), float("-inf"))
        aq = torch.softmax(G.amax(2).masked_fill(~qm, float("-inf")), dim=-1)
        aa = torch.softmax(G.amax(1).masked_fill(~am, float("-inf")), dim=-1)
        return (aq.unsqueeze(-1) * Q).sum(1), (aa.unsqueeze(-1) * A).sum(1)

    def forward(self, q: Tensor, q_len: Tensor, a: Tensor, a_len: Tensor) -> Tensor:
        if self.attentive:
            rq, ra = self.attend(q, q_len, a, a_len)
            return F.cosine_similarity(rq, ra, dim=-1, eps=1e-8)
        return F.cosine_similarity(self.encode(q, q_len), self.encode(a, a_len), dim=-1, eps=1e-8)


def pairwise_hinge_loss(
    positive: Tensor, negatives: Tensor, margin: float = 0.1, reduction: str = "max"
) -> Tensor:
    """Mean over the batch of ``max(0, margin - s(q, a+) + s(q, a-))``.

    ``positive`` ``(B,)``, ``negatives`` ``(B, n)``; ``reduction="max"`` uses the hardest of the
    ``n`` negatives (dos Santos et al., 2016), ``"mean"`` averages over them.
    """
    if negatives.dim() != 2 or negatives.shape[0] != positive.shape[0]:
        raise ValueError(
            f"negatives: expected shape ({positive.shape[0]}, n), got {tuple(negatives.shape)}"
        )
    if reduction == "max":
        return torch.relu(margin - positive + negatives.max(dim=1).values).mean()
    if reduction == "mean":
        return torch.relu(margin - positive.unsqueeze(1) + negatives).mean()
    raise ValueError(f"reduction: expected one of {HINGE_REDUCTIONS}, got {reduction!r}")


def _ranked_labels(scores: Sequence[float], labels: Sequence[int]) -> list[int]:
    if len(scores) != len(labels):
        raise ValueError(f"labels: {len(labels)} labels for {len(scores)} scores")
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep order
    return [int(labels[i]) for i in order]


def average_precision(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Mean of precision@k over the ranks k of the correct answers (0 when none is correct)."""
    ranked = _ranked_labels(scores, labels)
    hits, total = 0, 0.0
    for k, label in enumerate(ranked, 1):
        if label:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def reciprocal_rank(scores: Sequence[float], labels: Sequence[int]) -> float:
    """``1 / rank`` of the first correct answer (0 when none is correct)."""
    for k, label in enumerate(_ranked_labels(scores, labels), 1):
        if label:
            return 1.0 / k
    return 0.0


def map_mrr(groups: Iterable[tuple[Sequence[float], Sequence[int]]]) -> dict[str, float]:
    """MAP and MRR over questions ``(scores, labels)`` that have at least one correct answer;
    also the number of questions counted."""
    aps, rrs = [], []
    for scores, labels in groups:
        if any(labels):
            aps.append(average_precision(scores, labels))
            rrs.append(reciprocal_rank(scores, labels))
    n = len(aps)
    return {
        "map": sum(aps) / n if n else 0.0,
        "mrr": sum(rrs) / n if n else 0.0,
        "questions": float(n),
    }
