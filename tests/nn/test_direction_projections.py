"""The two directions of a bidirectional layer on the fused-cell engine make their input
projections in one op (``run_directions`` in nn/base.py, ``cached_linear_each``), whose block
the engine takes as its stack; the outputs and gradients are those of one projection each."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ctrlrnn
from ctrlrnn.nn import base

D64 = torch.float64


def _models() -> dict[str, Any]:
    return {
        "ncarnn": lambda: ctrlrnn.CARNN(5, 6, context_size=3, variant="n", num_layers=2,
                                        bidirectional=True, batch_first=True),
        "metagross_printed": lambda: ctrlrnn.Metagross(5, 6, num_layers=2, bidirectional=True,
                                                       batch_first=True, gates="state"),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_directions_project_in_one_op(monkeypatch, name):
    torch.manual_seed(0)
    m = _models()[name]().to(D64)
    x = torch.randn(4, 7, 5, dtype=D64, requires_grad=True)
    lengths = torch.tensor([7, 3, 5, 1])
    kwargs = {"context": torch.randn(4, 3, dtype=D64)} if name == "ncarnn" else {}

    def loss() -> tuple[torch.Tensor, ...]:
        out = m(x, lengths=lengths, **kwargs)[0]
        return torch.autograd.grad((out * out).sum(), [x, *m.parameters()])

    joint: list[int] = []
    real = base.cached_linear_each
    monkeypatch.setattr(base, "cached_linear_each",
                        lambda *a: joint.append(len(a[0])) or real(*a))
    got = loss()
    assert joint == [2, 2]  # one op per layer, for both directions
    # one projection each (what the layer did before): the same values and gradients
    monkeypatch.setattr(base, "cached_linear_each",
                        lambda xs, ws, bs: [base.cached_linear(*a) for a in zip(xs, ws, bs)])
    want = loss()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
