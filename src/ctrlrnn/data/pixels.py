"""Images as pixel sequences (sequential and permuted pixel-by-pixel classification)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


def pixel_permutation(length: int = 784, seed: int = 0) -> torch.Tensor:
    """The fixed permutation of pixel positions for the permuted task (numpy ``seed``)."""
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    return torch.from_numpy(np.random.RandomState(seed).permutation(length)).long()


class PixelSequences(Dataset):
    """``(pixels (T, 1) float in [0, 1], label)`` items, one pixel per step (T = 784 for
    28x28 images); with ``permute=True`` the pixels follow :func:`pixel_permutation`."""

    def __init__(
        self,
        images: np.ndarray | torch.Tensor,
        labels: np.ndarray | torch.Tensor,
        permute: bool = False,
        seed: int = 0,
    ) -> None:
        self.images = torch.as_tensor(np.asarray(images)).reshape(len(images), -1)
        self.labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
        if len(self.images) != len(self.labels):
            raise ValueError(f"labels: {len(self.labels)} labels for {len(self.images)} images")
        self.permutation = pixel_permutation(self.images.shape[1], seed) if permute else None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = self.images[index]
        if self.permutation is not None:
            pixels = pixels[self.permutation]
        return pixels.float().div(255.0).unsqueeze(-1), self.labels[index]
