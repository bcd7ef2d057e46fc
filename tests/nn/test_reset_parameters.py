"""``reset_parameters()`` as :class:`torch.nn.LSTM` and :class:`torch.nn.LSTMCell` have it, and
building on the ``meta`` device: every layer configuration of :data:`contract.LAYERS` (and the
position-wise METAGROSS) and every registered unit's cell, built under ``torch.device("meta")``,
given memory by ``to_empty()`` and reset under a seed, holds the weights (and buffers) a module
built directly under that seed holds, and computes the same outputs."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from contract import FFN, NAMES, context, make, run
from torch import nn

import ctrlrnn
from ctrlrnn.nn.registry import UNITS

SEED = 3


def _built_on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"):
        module = build()
    assert all(p.is_meta for p in module.parameters())
    module.to_empty(device="cpu")
    torch.manual_seed(SEED)
    module.reset_parameters()
    return module


def _assert_same_state(direct: nn.Module, rebuilt: nn.Module) -> None:
    ours, theirs = direct.state_dict(), rebuilt.state_dict()
    assert list(ours) == list(theirs)
    for key, value in ours.items():
        assert torch.equal(value, theirs[key]), key


@pytest.mark.parametrize("name", [*NAMES, FFN])
def test_a_layer_built_on_meta_and_reset_is_the_layer_built_directly(name: str) -> None:
    torch.manual_seed(SEED)
    direct = make(name)
    rebuilt = _built_on_meta(lambda: make(name)).train(direct.training)
    _assert_same_state(direct, rebuilt)
    x = torch.randn(3, 6, 4)
    if name == FFN:
        torch.testing.assert_close(rebuilt(x), direct(x), rtol=0, atol=0)
        return
    ctx = context(direct, 6)
    torch.testing.assert_close(run(rebuilt, x, ctx)[0], run(direct, x, ctx)[0], rtol=0, atol=0)


@pytest.mark.parametrize("name", [*NAMES, FFN])
def test_reset_parameters_draws_new_weights_and_keeps_none_of_the_old(name: str) -> None:
    module = make(name)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(float("nan"))
    module.reset_parameters()
    for key, value in module.named_parameters():
        assert torch.isfinite(value).all(), key
        # a weight drawn at random differs from the first draw (zero-initialised ones do not)
        if value.numel() > 1 and before[key].unique().numel() > 1:
            assert not torch.equal(value, before[key]), key


def test_a_constant_lambda_vector_comes_back_after_to_empty() -> None:
    lambdas = [0.1 * i for i in range(5)]
    torch.manual_seed(SEED)
    direct = ctrlrnn.CASLSTM(4, 5, num_layers=2, lambda_=lambdas)
    rebuilt = _built_on_meta(lambda: ctrlrnn.CASLSTM(4, 5, num_layers=2, lambda_=lambdas))
    assert rebuilt.lambda_vector is not None
    torch.testing.assert_close(rebuilt.lambda_vector, torch.tensor(lambdas))
    _assert_same_state(direct, rebuilt)
    cell = _built_on_meta(lambda: ctrlrnn.CASLSTMCell(4, 5, lambda_=lambdas))
    torch.testing.assert_close(cell.lambda_vector, torch.tensor(lambdas))


#: a cell of every registered unit, at input 4, hidden 5 (and context 3)
CELLS: dict[type, Callable[[], nn.Module]] = {
    ctrlrnn.QRNNCell: lambda: ctrlrnn.QRNNCell(4, 5, window=2, pooling="ifo"),
    ctrlrnn.RCRNCell: lambda: ctrlrnn.RCRNCell(4, 5),
    ctrlrnn.CASLSTMCell: lambda: ctrlrnn.CASLSTMCell(4, 5, lambda_="trainable"),
    ctrlrnn.CARNNCell: lambda: ctrlrnn.CARNNCell(4, 5, 3, variant="i"),
    ctrlrnn.MetagrossCell: lambda: ctrlrnn.MetagrossCell(4, 5, depth=3, base="gru"),
}


def test_every_registered_cell_is_checked() -> None:
    assert {u.cell for u in UNITS.values() if u.cell is not None} <= set(CELLS)


@pytest.mark.parametrize("cls", list(CELLS), ids=lambda c: c.__name__)
def test_a_cell_built_on_meta_and_reset_is_the_cell_built_directly(cls: type) -> None:
    torch.manual_seed(SEED)
    direct = CELLS[cls]()
    _assert_same_state(direct, _built_on_meta(CELLS[cls]))


class _OwnWeight(ctrlrnn.RecurrentBase):
    """A unit holding a parameter on the layer itself, which no submodule initialises."""

    def __init__(self) -> None:
        super().__init__(4, 5)
        self.decay = nn.Parameter(torch.zeros(5))
        self.proj = nn.Linear(4, 5)


class _Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(5))


class _NestedOwnWeight(ctrlrnn.RecurrentBase):
    """A unit whose submodule holds a parameter without a ``reset_parameters`` of its own."""

    def __init__(self) -> None:
        super().__init__(4, 5)
        self.parts = nn.ModuleList([nn.Linear(4, 5), _Holder()])


@pytest.mark.parametrize(("cls", "names"), [(_OwnWeight, "['decay']"),
                                            (_NestedOwnWeight, "['scale']")])
def test_parameters_no_reset_reaches_raise_instead_of_staying_as_they_are(
        cls: type, names: str) -> None:  # fmt: skip
    with pytest.raises(NotImplementedError, match=rf"{re.escape(names)}.*define reset_parameters"):
        cls().reset_parameters()
