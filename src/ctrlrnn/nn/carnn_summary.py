"""The residual-plus-attention history summary of CARNN's dialog model (CARNN paper eq 8).

    h_1 .. h_{M-1} = CARNN(e_1 .. e_{M-1}, c)
    h~_m = h_m + e_m                                   (residual to the input)
    alpha_1 .. alpha_{M-1} = softmax(h~_1^T c, ..., h~_{M-1}^T c)
    h_his = sum_m alpha_m h~_m

``c = e_M`` (the current utterance) is the CARNN's context and the attention query, so ``h``,
``e`` and ``c`` must share one width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.ops.padding import length_mask


def history_summary(
    h: Tensor, e: Tensor, c: Tensor, lengths: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Eq 8 on batch-first ``h``, ``e`` ``(B, M, d)`` and ``c`` ``(B, d)``.

    Returns ``(h_his (B, d), alpha (B, M))``; steps past ``lengths`` get zero attention.
    """
    if h.shape != e.shape or h.dim() != 3:
        raise ValueError(
            f"e: expected the shape of h (B, M, d) = {tuple(h.shape)} (the residual h + e), "
            f"got {tuple(e.shape)}"
        )
    if tuple(c.shape) != (h.shape[0], h.shape[2]):
        raise ValueError(
            f"c: expected shape {(h.shape[0], h.shape[2])} (the attention query of eq 8), "
            f"got {tuple(c.shape)}"
        )
    h_res = h + e
    scores = (h_res * c.unsqueeze(1)).sum(-1)
    if lengths is not None:
        mask = length_mask(lengths.to(h.device), h.shape[1])
        scores = scores.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(scores, dim=-1)
    return (alpha.unsqueeze(-1) * h_res).sum(1), alpha


class HistorySummary(Traceable, nn.Module):
    """Module form of :func:`history_summary` (eq 8); no parameters of its own. It returns
    ``(h_his, alpha)``: the summary and the attention weights.

    Examples:
        >>> import torch
        >>> from ctrlrnn import HistorySummary
        >>> h, e = torch.randn(2, 4, 8), torch.randn(2, 4, 8)  # CARNN outputs and inputs
        >>> c = torch.randn(2, 8)  # the current utterance
        >>> h_his, alpha = HistorySummary()(h, e, c, lengths=torch.tensor([4, 2]))
        >>> h_his.shape, alpha.shape
        (torch.Size([2, 8]), torch.Size([2, 4]))
    """

    def forward(
        self, h: Tensor, e: Tensor, c: Tensor, lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Eq 8: the attention-weighted sum of ``h + e`` with ``c`` as the query.

        Args:
            h: the CARNN's outputs ``h_1 .. h_{M-1}``, batch-first ``(B, M, d)``.
            e: its inputs ``e_1 .. e_{M-1}`` (the residual), of the shape of ``h``.
            c: the current utterance ``e_M``, the attention query, ``(B, d)``.
            lengths: ``(B,)`` true lengths; steps past them get zero attention.

        Returns:
            h_his: the history summary, ``(B, d)``.
            alpha: the attention weights, ``(B, M)``, each row summing to 1.
        """
        return history_summary(h, e, c, lengths)
