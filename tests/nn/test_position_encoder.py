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


@pytest.mark.parametrize("batch", [(), (5,), (3, 4)])
def test_the_two_weighted_sums_equal_the_written_out_weights(batch):
    """The encoder's factored sums equal ``sum_j l_j * x_j`` with every weight ``l_{kj}``
    written out (:func:`position_weights`), in float64, values and gradients."""
    from ctrlrnn.nn.position_encoder import position_weights

    torch.manual_seed(12)
    x = torch.randn(*batch, 7, 6, dtype=D64, requires_grad=True)
    lengths = torch.randint(1, 8, batch) if batch else None
    got = PositionEncoder()(x, lengths=lengths)
    num_words = 7 if lengths is None else lengths
    want = (position_weights(num_words, 6, 7, like=x) * x).sum(-2)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    weights = torch.randn_like(want)
    grads = [torch.autograd.grad((out * weights).sum(), x)[0] for out in (got, want)]
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-13)


def test_gradcheck():
    torch.manual_seed(13)
    x = torch.randn(3, 5, 4, dtype=D64, requires_grad=True)
    lengths = torch.tensor([5, 1, 3])
    assert torch.autograd.gradcheck(lambda x: PositionEncoder()(x, lengths=lengths), (x,))
