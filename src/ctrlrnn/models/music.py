"""Polyphonic music model (METAGROSS paper section 3.5, table 7; Boulanger-Lewandowski et al.,
2012): 88-key multi-label next-frame prediction.

A piece is a binary piano roll ``(T, 88)``. The model reads frames ``x_1 .. x_{T-1}`` and
predicts each next frame ``x_{t+1}`` as 88 independent Bernoulli variables (a sigmoid per key
over a linear map of the encoder output). The reported negative log-likelihood is per time
step: the Bernoulli NLL summed over the 88 keys, averaged over all predicted frames of all
pieces (:func:`frame_nll`), the convention of the polyphonic-music tables (Bai et al., 2018).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.ops.padding import length_mask

N_KEYS = 88


class MusicModel(nn.Module):
    """``forward(frames (B, T, K), lengths (B,)) -> logits (B, T, K)`` of the next frames
    (``dropout`` acts on the encoder output; between layers use the encoder's own option)."""

    def __init__(
        self,
        n_keys: int = N_KEYS,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if encoder_args.get("bidirectional"):
            raise ValueError("model.bidirectional: next-frame prediction cannot read the future")
        self.n_keys = n_keys
        self.encoder = SequenceEncoder(encoder, n_keys, encoder_args, causal_only=True)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(self.encoder.output_size, n_keys)

    def forward(self, frames: Tensor, lengths: Tensor | None = None) -> Tensor:
        if frames.dim() != 3 or frames.shape[-1] != self.n_keys:
            raise ValueError(f"frames: expected (B, T, {self.n_keys}), got {tuple(frames.shape)}")
        out, _, _ = self.encoder(frames, lengths)
        return self.out(self.dropout(out))


def frame_nll(logits: Tensor, targets: Tensor, lengths: Tensor | None = None
              ) -> tuple[Tensor, int]:
    """``(sum of the Bernoulli NLL over keys and valid frames, number of valid frames)``;
    their ratio is the NLL per time step."""
    if logits.shape != targets.shape:
        raise ValueError(f"targets: expected shape {tuple(logits.shape)}, got "
                         f"{tuple(targets.shape)}")
    per_frame = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1)
    if lengths is None:
        return per_frame.sum(), per_frame.numel()
    mask = length_mask(lengths.to(logits.device), logits.shape[1])
    return torch.where(mask, per_frame, torch.zeros_like(per_frame)).sum(), int(mask.sum())
