"""Sentence classifier (RCRN paper section 4.2 "Classification Model"; CAS-LSTM paper section 3.3).

Pipeline: word embeddings (optionally pre-trained GloVe rows, optionally frozen) -> any
encoder of :mod:`ctrlrnn.models.encoders` -> pooling over time -> ReLU MLP -> softmax layer.

* RCRN paper 4.2: "we take the concatenation of the max, mean and min pooling of all hidden
  states to form the final feature vector. This feature vector is passed into a single dense
  layer with ReLU activations of 200d dimensions. The output of this layer is then passed into
  a softmax layer"; embeddings are not updated (``pooling="max+mean+min"``, ``mlp_layers=1``,
  ``mlp_hidden=200``, ``freeze_embeddings=True``).
* CAS-LSTM paper 3.3 and eq 14: the sentence vector is the max-pooling of the top layer's
  states over time (of both directions, concatenated, for the bidirectional encoder); the
  classifier is ``softmax(W_c MLP(phi))`` with a ReLU MLP of one or two hidden layers and
  dropout on the word embeddings and the MLP layers (``pooling="max"``).

The building blocks (:func:`masked_pool`, :class:`SentenceEncoder`, :class:`Highway`,
:func:`mlp_head`) are shared by the pair classifier and the ranker.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.ops.padding import length_mask

POOLINGS: tuple[str, ...] = ("max", "mean", "min", "last")


def parse_pooling(spec: str) -> tuple[str, ...]:
    """``"max+mean+min"`` -> ``("max", "mean", "min")``; ``ValueError`` naming ``pooling``."""
    parts = tuple(p.strip() for p in spec.split("+"))
    if any(p not in POOLINGS for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(
            f"pooling: expected distinct names from {POOLINGS} joined by '+', got {spec!r}"
        )
    return parts


def masked_pool(
    out: Tensor, lengths: Tensor | None, modes: tuple[str, ...], final: Tensor | None = None
) -> Tensor:
    """Pool encoder outputs ``(B, T, H)`` over the valid steps; ``(B, H * len(modes))``.

    ``"last"`` needs ``final`` (the encoder's summary state, see
    :class:`~ctrlrnn.models.encoders.SequenceEncoder`). Padded steps never contribute.
    """
    B, T, _ = out.shape
    if lengths is None:
        mask = out.new_ones(B, T, dtype=torch.bool)
        counts = out.new_full((B, 1), float(T))
    else:
        lengths = lengths.to(out.device)
        if bool((lengths < 1).any()):
            raise ValueError("lengths: every sequence must have at least one step")
        mask = length_mask(lengths, T)
        counts = lengths.to(out.dtype).unsqueeze(1)
    valid = mask.unsqueeze(-1)
    pooled = []
    for mode in modes:
        if mode == "max":
            pooled.append(out.masked_fill(~valid, float("-inf")).amax(1))
        elif mode == "min":
            pooled.append(out.masked_fill(~valid, float("inf")).amin(1))
        elif mode == "mean":
            pooled.append(out.masked_fill(~valid, 0.0).sum(1) / counts)
        elif mode == "last":
            if final is None:
                raise ValueError("final: 'last' pooling needs the encoder's final state")
            pooled.append(final)
        else:
            raise ValueError(f"pooling: unknown mode {mode!r} (expected one of {POOLINGS})")
    return torch.cat(pooled, dim=-1)


class Highway(nn.Module):
    """One highway layer (Srivastava et al., 2015): ``t * relu(W_h x) + (1 - t) * x`` with the
    transform gate ``t = sigmoid(W_t x)``; the gate bias starts at -1 (carry by default)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)
        nn.init.constant_(self.gate.bias, -1.0)

    def forward(self, x: Tensor) -> Tensor:
        t = torch.sigmoid(self.gate(x))
        return t * torch.relu(self.transform(x)) + (1.0 - t) * x


class HighwayNetwork(nn.Module):
    """``layers`` highway layers of width ``size``, after a linear projection when the input
    width differs (RCRN paper 4.2: "a two layer highway network of 300 hidden dimensions")."""

    def __init__(self, input_size: int, size: int, layers: int) -> None:
        super().__init__()
        if layers < 1 or size < 1:
            raise ValueError(f"highway: expected layers >= 1 and size >= 1, got {layers}, {size}")
        self.project = nn.Linear(input_size, size) if input_size != size else nn.Identity()
        self.layers = nn.Sequential(*[Highway(size) for _ in range(layers)])
        self.output_size = size

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(self.project(x))


def mlp_head(
    input_size: int, hidden: int, layers: int, num_classes: int, dropout: float = 0.0
) -> nn.Sequential:
    """``W_c MLP(x)`` of the CAS-LSTM paper eq 14: ``layers`` ReLU layers of width ``hidden``
    (dropout before each), then the linear map to the class logits (``layers=0``: linear only)."""
    if layers < 0 or (layers and hidden < 1):
        raise ValueError(f"mlp: expected layers >= 0 and hidden >= 1, got {layers}, {hidden}")
    modules: list[nn.Module] = []
    width = input_size
    for _ in range(layers):
        modules += [nn.Dropout(dropout), nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    modules += [nn.Dropout(dropout), nn.Linear(width, num_classes)]
    return nn.Sequential(*modules)


def make_embedding(
    vocab_size: int,
    embedding_size: int,
    embeddings: Tensor | None,
    freeze: bool,
    pad_id: int,
) -> nn.Embedding:
    """A trainable embedding, or one initialised from ``embeddings`` ``(V, E)`` (e.g. the
    matrix of :meth:`ctrlrnn.data.sources.glove.GloveVectors.lookup`), frozen when ``freeze``."""
    if embeddings is not None:
        if embeddings.dim() != 2 or embeddings.shape[0] != vocab_size:
            raise ValueError(
                f"embeddings: expected a ({vocab_size}, E) matrix, got {tuple(embeddings.shape)}"
            )
        return nn.Embedding.from_pretrained(
            embeddings.float(), freeze=freeze, padding_idx=pad_id
        )
    return nn.Embedding(vocab_size, embedding_size, padding_idx=pad_id)


class SentenceEncoder(nn.Module):
    """Token ids ``(B, T)`` and lengths -> a sentence vector ``(B, output_size)``.

    Embedding (dropout ``dropout``) -> optional highway network -> encoder ``encoder`` ->
    :func:`masked_pool` with ``pooling``.
    """

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
        highway_layers: int = 0,
        highway_size: int = 300,
    ) -> None:
        super().__init__()
        self.embed = make_embedding(vocab_size, embedding_size, embeddings, freeze_embeddings,
                                    pad_id)
        width = self.embed.embedding_dim
        self.highway = (HighwayNetwork(width, highway_size, highway_layers)
                        if highway_layers else None)
        if self.highway is not None:
            width = self.highway.output_size
        self.dropout = nn.Dropout(dropout)
        self.encoder = SequenceEncoder(encoder, width, encoder_args)
        self.pooling = parse_pooling(pooling)
        self.output_size = self.encoder.output_size * len(self.pooling)

    def states(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder's outputs ``(B, T, H)`` (zeros past each length) and final states."""
        x = self.dropout(self.embed(tokens))
        if self.highway is not None:
            x = self.highway(x)
        out, final, _ = self.encoder(x, lengths)
        return out, final

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        out, final = self.states(tokens, lengths)
        return masked_pool(out, lengths, self.pooling, final)


class SentenceClassifier(nn.Module):
    """Sentence classifier of the RCRN paper 4.2 / CAS-LSTM paper 3.3 + eq 14 (module docstring).

    ``forward(tokens (B, T), lengths (B,)) -> logits (B, num_classes)``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        embedding_size: int = 100,
        embeddings: Tensor | None = None,
        freeze_embeddings: bool = False,
        pooling: str = "max+mean+min",
        mlp_hidden: int = 200,
        mlp_layers: int = 1,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes: expected at least 2, got {num_classes}")
        self.sentence = SentenceEncoder(
            vocab_size, encoder=encoder, encoder_args=encoder_args,
            embedding_size=embedding_size, embeddings=embeddings,
            freeze_embeddings=freeze_embeddings, pooling=pooling, dropout=dropout, pad_id=pad_id,
        )
        self.head = mlp_head(self.sentence.output_size, mlp_hidden, mlp_layers, num_classes,
                             dropout)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.head(self.sentence(tokens, lengths))
