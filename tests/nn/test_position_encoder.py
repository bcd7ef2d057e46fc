"""PositionEncoder (CARNN paper section 4.1, eq 9): the position-weighted sum of a sentence's word
embeddings, against the formula written out, with padding."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import PositionEncoder

D64 = torch.float64


def test_position_encoder_formula_and_padding():
    torch.manual_seed(11)
    pe = PositionEncoder()
    x = torch.randn(2, 4, 3, dtype=D64)
    out = pe(x, lengths=torch.tensor([4, 2]))
    for b, J in enumerate([4, 2]):
        ref = torch.zeros(3, dtype=D64)
        for j in range(1, J + 1):
            for k in range(1, 4):
                lkj = (1 - j / J) - (k / 3) * (1 - 2 * j / J)
                ref[k - 1] += lkj * x[b, j - 1, k - 1]
        torch.testing.assert_close(out[b], ref)
    x2 = x.clone()
    x2[1, 2:] = 1e3
    torch.testing.assert_close(pe(x2, lengths=torch.tensor([4, 2])), out)
    torch.testing.assert_close(pe(x[:1]), out[:1])  # full length by default
    with pytest.raises(ValueError, match="lengths"):
        pe(x, lengths=torch.tensor([5, 2]))
