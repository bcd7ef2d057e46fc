"""The Position Encoder of end-to-end memory networks (Sukhbaatar et al. 2015, section 4.1).

CARNN's dialog and question-answering models (CARNN paper section 4.1, eq 9, and section 4.3)
encode each utterance ``x_1 .. x_J`` (word embeddings of width ``d``) into one vector

    m = sum_j l_j * x_j,    l_{kj} = (1 - j/J) - (k/d) (1 - 2j/J)

with ``j = 1..J`` the word position, ``k = 1..d`` the embedding coordinate and ``J`` the
utterance's own length: a bag of words that still knows the word order. Since
``l_{kj} = a_j - (k/d) b_j`` with ``a_j = 1 - j/J`` and ``b_j = 1 - 2j/J``, the sum is two
weighted sums over positions, ``m = sum_j a_j x_j - (k/d) * sum_j b_j x_j``: that is how
:class:`PositionEncoder` computes it, without the ``(..., J, d)`` weights
:func:`position_weights` writes out (its reference).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ctrlrnn.nn.torchscript import Traceable


def position_weights(num_words: Tensor | int, dim: int, max_len: int, *, like: Tensor) -> Tensor:
    """The weights ``l_{kj}`` ``(..., max_len, dim)`` for utterances of ``num_words`` words.

    ``num_words`` is an int or an integer tensor of any shape (one ``J`` per utterance);
    positions ``j > J`` get weight 0.
    """
    J = torch.as_tensor(num_words, device=like.device).to(like.dtype).unsqueeze(-1).unsqueeze(-1)
    j = torch.arange(1, max_len + 1, device=like.device, dtype=like.dtype).unsqueeze(-1)
    k = torch.arange(1, dim + 1, device=like.device, dtype=like.dtype)
    weights = (1 - j / J) - (k / dim) * (1 - 2 * j / J)
    return torch.where(j <= J, weights, torch.zeros_like(weights))


def position_coefficients(num_words: Tensor | int, max_len: int, *,
                          like: Tensor) -> Tensor:
    """``(a_j, b_j)`` of ``l_{kj} = a_j - (k/d) b_j`` as ``(..., 2, max_len)``: ``a_j = 1 -
    j/J``, ``b_j = 1 - 2j/J`` for utterances of ``num_words`` words (an int or an integer tensor
    of any shape), 0 at positions ``j > J``."""
    J = torch.as_tensor(num_words, device=like.device).to(like.dtype).unsqueeze(-1)
    j = torch.arange(1, max_len + 1, device=like.device, dtype=like.dtype)
    coefficients = torch.stack([1 - j / J, 1 - 2 * j / J], dim=-2)
    return coefficients * (j <= J).unsqueeze(-2).to(like.dtype)


class PositionEncoder(Traceable, nn.Module):
    """The Position Encoder of Sukhbaatar et al. (section 4.1); it returns one vector ``(...,
    d)`` per utterance of word embeddings ``(..., J, d)``.

    ``forward(embeddings, lengths=None) -> (..., d)``: ``embeddings`` is ``(..., J, d)``;
    ``lengths`` (optional, integer, shape ``...``) gives each utterance's true number of words,
    and padded words past it are ignored. No parameters: the word embeddings are trained by the
    model that owns them.

    Examples:
        >>> import torch
        >>> from ctrlrnn import PositionEncoder
        >>> words = torch.randn(2, 6, 8)  # 2 utterances of up to 6 words, embeddings of width 8
        >>> PositionEncoder()(words, lengths=torch.tensor([6, 3])).shape
        torch.Size([2, 8])
    """

    def forward(self, embeddings: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Encode each utterance as ``m = sum_j l_j * x_j``.

        Args:
            embeddings: the word embeddings, ``(..., J, d)``: any leading shape, then up to
                ``J`` words of width ``d``.
            lengths: each utterance's true number of words, integers in ``[1, J]`` of shape
                ``...``; words past it are ignored. None: every utterance has ``J`` words.

        Returns:
            One vector per utterance, ``(..., d)``.
        """
        if not isinstance(embeddings, Tensor) or embeddings.dim() < 2:
            raise ValueError("embeddings: expected a (..., J, d) tensor of word embeddings")
        if not embeddings.is_floating_point():
            raise ValueError(f"embeddings: expected a floating dtype, got {embeddings.dtype}")
        *batch, max_len, dim = embeddings.shape
        if lengths is None:
            num_words: Tensor | int = max_len
        else:
            if not isinstance(lengths, Tensor) or tuple(lengths.shape) != tuple(batch):
                raise ValueError(f"lengths: expected an integer tensor of shape {tuple(batch)}")
            if lengths.is_floating_point() or lengths.dtype == torch.bool:
                raise ValueError(f"lengths: expected an integer dtype, got {lengths.dtype}")
            if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > max_len):
                raise ValueError(f"lengths: every length must lie in [1, {max_len}]")
            num_words = lengths
        # both weighted sums over positions in one batched product: (..., 2, J) @ (..., J, d)
        sums = position_coefficients(num_words, max_len, like=embeddings) @ embeddings
        k = torch.arange(1, dim + 1, device=embeddings.device, dtype=embeddings.dtype) / dim
        return sums[..., 0, :] - k * sums[..., 1, :]
