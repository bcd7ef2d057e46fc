"""HistorySummary (CARNN paper eq 8): attention of the current utterance over the dialog history,
against the formula written out, with lengths."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import HistorySummary

D64 = torch.float64


def test_history_summary_eq8():
    torch.manual_seed(12)
    h, e = torch.randn(2, 4, 3, dtype=D64), torch.randn(2, 4, 3, dtype=D64)
    c = torch.randn(2, 3, dtype=D64)
    h_his, alpha = HistorySummary()(h, e, c, lengths=torch.tensor([4, 2]))
    for b, M in enumerate([4, 2]):
        ht = [h[b, m] + e[b, m] for m in range(M)]
        w = torch.softmax(torch.stack([t @ c[b] for t in ht]), 0)
        torch.testing.assert_close(h_his[b], sum(w[m] * ht[m] for m in range(M)))
        torch.testing.assert_close(alpha[b, :M], w)
        assert alpha[b, M:].abs().sum() == 0
    with pytest.raises(ValueError, match="c: expected shape"):
        HistorySummary()(h, e, torch.randn(2, 4, dtype=D64))
