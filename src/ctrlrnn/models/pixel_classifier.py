"""Pixel-by-pixel sequential image classifier (METAGROSS paper section 3.2, table 3).

A 28x28 image is read as a sequence of 784 steps of one pixel each (in [0, 1]); in the
permuted variant the steps follow one fixed random permutation of the pixel positions (see
:class:`ctrlrnn.data.pixels.PixelSequences`). The encoder (METAGROSS paper: "3 layered
METAGROSS of 128 hidden units each", with recurrent base units of depth 2 per table 9) reads
the whole sequence; its final state (``pooling="last"``, the protocol of the sequential MNIST
literature) or a pooling of all its outputs feeds a linear softmax layer.

``forward(pixels (B, T, C)) -> logits (B, num_classes)``; every sequence has the same length.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ctrlrnn.models.classifier import masked_pool, parse_pooling
from ctrlrnn.models.encoders import SequenceEncoder


class PixelClassifier(nn.Module):
    """Encoder over pixel steps, pooled, then a linear layer to the class logits."""

    def __init__(
        self,
        num_classes: int = 10,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        input_size: int = 1,
        pooling: str = "last",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes: expected at least 2, got {num_classes}")
        self.input_size = input_size
        self.encoder = SequenceEncoder(encoder, input_size, encoder_args)
        self.pooling = parse_pooling(pooling)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(self.encoder.output_size * len(self.pooling), num_classes)

    def forward(self, pixels: Tensor) -> Tensor:
        if pixels.dim() != 3 or pixels.shape[-1] != self.input_size:
            raise ValueError(
                f"pixels: expected (B, T, {self.input_size}), got {tuple(pixels.shape)}"
            )
        out, final, _ = self.encoder(pixels)
        return self.out(self.dropout(masked_pool(out, None, self.pooling, final)))
