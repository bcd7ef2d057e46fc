"""Sentence-pair classifier with one shared encoder (no cross-sentence attention).

``features`` selects the model:

* ``"rcrn"`` — RCRN paper 4.2 "Entailment Model": the embeddings pass through a two-layer
  highway network (300 dims) before the encoder; each sentence is the concatenation of the max
  and mean pooling of the encoder outputs; ``[s1, s2, s1 * s2, s1 - s2]`` passes through a
  two-layer highway network and then a softmax layer.
* ``"eq15"`` — CAS-LSTM paper eq 15 (NLI): each sentence is max-pooled (section 3.3),
  ``phi = [s1; s2; |s1 - s2|; s1 * s2]``, then the ReLU MLP and ``W_c`` of eq 14.
* ``"eq16"`` — CAS-LSTM paper eq 16 (paraphrase identification): ``phi = [|s1 - s2|; s1 * s2]``
  (symmetric in the two sentences), then eq 14.

``pooling`` overrides the per-model default (``"max+mean"`` for rcrn, ``"max"`` otherwise).
Both sentences go through the encoder in one call (stacked along the batch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.classifier import HighwayNetwork, SentenceEncoder, mlp_head

FEATURES: tuple[str, ...] = ("rcrn", "eq15", "eq16")
DEFAULT_POOLING = {"rcrn": "max+mean", "eq15": "max", "eq16": "max"}


def pair_features(s1: Tensor, s2: Tensor, features: str) -> Tensor:
    """The comparison vector of two sentence vectors ``(B, d)`` (module docstring)."""
    if features == "rcrn":
        return torch.cat([s1, s2, s1 * s2, s1 - s2], dim=-1)
    if features == "eq15":
        return torch.cat([s1, s2, (s1 - s2).abs(), s1 * s2], dim=-1)
    if features == "eq16":
        return torch.cat([(s1 - s2).abs(), s1 * s2], dim=-1)
    raise ValueError(f"features: expected one of {FEATURES}, got {features!r}")


def _pad_to(x: Tensor, width: int, pad_id: int) -> Tensor:
    if x.shape[1] == width:
        return x
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), pad_id)], dim=1)


class PairClassifier(nn.Module):
    """``forward(s1, len1, s2, len2) -> logits (B, num_classes)``; see the module docstring."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        features: str = "eq15",
        embedding_size: int = 100,
        embeddings: Tensor | None = None,
        freeze_embeddings: bool = False,
        pooling: str = "",
        highway_size: int = 300,
        highway_layers: int = 2,
        mlp_hidden: int = 300,
        mlp_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        if features not in FEATURES:
            raise ValueError(f"features: expected one of {FEATURES}, got {features!r}")
        if num_classes < 2:
            raise ValueError(f"num_classes: expected at least 2, got {num_classes}")
        self.features = features
        self.pad_id = pad_id
        rcrn = features == "rcrn"
        self.sentence = SentenceEncoder(
            vocab_size, encoder=encoder, encoder_args=encoder_args,
            embedding_size=embedding_size, embeddings=embeddings,
            freeze_embeddings=freeze_embeddings, pooling=pooling or DEFAULT_POOLING[features],
            dropout=dropout, pad_id=pad_id,
            highway_layers=highway_layers if rcrn else 0, highway_size=highway_size,
        )
        d = self.sentence.output_size
        width = 2 * d if features == "eq16" else 4 * d
        if rcrn:
            self.compare: nn.Module = HighwayNetwork(width, highway_size, highway_layers)
            self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(highway_size, num_classes))
        else:
            self.compare = nn.Identity()
            self.head = mlp_head(width, mlp_hidden, mlp_layers, num_classes, dropout)

    def encode_pair(
        self, s1: Tensor, len1: Tensor, s2: Tensor, len2: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Both sentence vectors from one encoder call over the stacked batch."""
        width = max(s1.shape[1], s2.shape[1])
        tokens = torch.cat([_pad_to(s1, width, self.pad_id), _pad_to(s2, width, self.pad_id)])
        vectors = self.sentence(tokens, torch.cat([len1, len2]))
        return vectors[: s1.shape[0]], vectors[s1.shape[0] :]

    def forward(self, s1: Tensor, len1: Tensor, s2: Tensor, len2: Tensor) -> Tensor:
        v1, v2 = self.encode_pair(s1, len1, s2, len2)
        return self.head(self.compare(pair_features(v1, v2, self.features)))
