"""The helpers of padded, batch-first variable-length batches (ops/padding.py), against their
definitions written out by hand."""

from __future__ import annotations

import torch

from ctrlrnn.ops.padding import (
    last_valid,
    length_mask,
    reverse_index,
    reverse_padded,
    zero_padding,
)

LENGTHS = torch.tensor([4, 0, 2])


def _x() -> torch.Tensor:
    """``(3, 4, 2)`` with ``x[b, t] = [10 b + t, -(10 b + t)]``: each entry names its place."""
    v = (10 * torch.arange(3).view(3, 1) + torch.arange(4).view(1, 4)).float()
    return torch.stack([v, -v], -1)


def test_length_mask():
    assert length_mask(LENGTHS, 4).tolist() == [
        [True, True, True, True], [False] * 4, [True, True, False, False]]


def test_zero_padding_zeroes_values_and_gradients_past_each_length():
    x = _x()
    x[1, :] = float("nan")
    x[2, 3] = float("inf")
    x.requires_grad_()
    y = zero_padding(x, LENGTHS)
    assert y[0].tolist() == _x()[0].tolist()
    assert y[1].tolist() == [[0.0, 0.0]] * 4
    assert y[2].tolist() == _x()[2, :2].tolist() + [[0.0, 0.0]] * 2
    y.sum().backward()
    assert x.grad[:, :, 0].tolist() == [[1.0] * 4, [0.0] * 4, [1.0, 1.0, 0.0, 0.0]]
    assert zero_padding(x, None) is x


def test_reverse_index_and_reverse_padded():
    assert reverse_index(LENGTHS, 4).tolist() == [[3, 2, 1, 0], [0, 1, 2, 3], [1, 0, 2, 3]]
    x = _x()
    r = reverse_padded(x, LENGTHS)
    assert r[0, :, 0].tolist() == [3.0, 2.0, 1.0, 0.0]
    assert r[1, :, 0].tolist() == [10.0, 11.0, 12.0, 13.0]  # length 0: padding stays in place
    assert r[2, :, 0].tolist() == [21.0, 20.0, 22.0, 23.0]
    assert torch.equal(r[..., 1], -r[..., 0])  # the trailing dimensions follow
    assert torch.equal(reverse_padded(r, LENGTHS), x)  # an involution
    assert torch.equal(reverse_padded(x, None), x.flip(1))


def test_last_valid():
    x = _x()
    assert last_valid(x, LENGTHS)[:, 0].tolist() == [3.0, 10.0, 21.0]  # length 0: step 0
    assert torch.equal(last_valid(x, None), x[:, -1])
    assert last_valid(x[..., 0], torch.tensor([1, 2, 3])).tolist() == [0.0, 11.0, 22.0]
