"""Building and initialising a layer as :class:`torch.nn.LSTM` and :class:`torch.nn.LSTMCell`
are built: the factory arguments ``device`` and ``dtype``, and ``reset_parameters()``.

Every layer configuration of :data:`contract.LAYERS` (and the position-wise METAGROSS) and every
registered unit's cell, built on the ``meta`` device (by ``device="meta"`` or under
``torch.device("meta")``), given memory by ``to_empty()`` and reset under a seed, holds the
weights (and buffers) a module built directly under that seed holds, and computes the same
outputs; built with ``dtype=torch.float64`` it holds what ``.double()`` of it holds."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest
import torch
from contract import FFN, NAMES, context, make, run
from torch import nn

import ctrlrnn
from ctrlrnn.nn.registry import UNITS

# the layers are tiny: one thread runs torch's ops inline instead of waking a second one
pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 3


def _built_on_meta(build: Callable[..., nn.Module], how: str = "context") -> nn.Module:
    """``build`` on the meta device (``how``: under ``torch.device("meta")`` or with the factory
    argument ``device="meta"``), given memory on the CPU and reset under :data:`SEED`."""
    if how == "argument":
        module = build(device="meta")
    else:
        with torch.device("meta"):
            module = build()
    assert all(b.is_meta for b in module.buffers())
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


@pytest.mark.parametrize("how", ["context", "argument"])
@pytest.mark.parametrize("name", [*NAMES, FFN])
def test_a_layer_built_on_meta_and_reset_is_the_layer_built_directly(name: str, how: str
                                                                      ) -> None:  # fmt: skip
    torch.manual_seed(SEED)
    direct = make(name)
    rebuilt = _built_on_meta(lambda **device: make(name, **device), how).train(direct.training)
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
    rebuilt = _built_on_meta(lambda **f: ctrlrnn.CASLSTM(4, 5, num_layers=2, lambda_=lambdas,
                                                         **f), "argument")
    assert rebuilt.lambda_vector is not None
    torch.testing.assert_close(rebuilt.lambda_vector, torch.tensor(lambdas))
    _assert_same_state(direct, rebuilt)
    cell = _built_on_meta(lambda: ctrlrnn.CASLSTMCell(4, 5, lambda_=lambdas))
    torch.testing.assert_close(cell.lambda_vector, torch.tensor(lambdas))


#: a cell of every registered unit, at input 4, hidden 5 (and context 3)
CELLS: dict[type, Callable[..., nn.Module]] = {
    ctrlrnn.QRNNCell: lambda **f: ctrlrnn.QRNNCell(4, 5, window=2, pooling="ifo", **f),
    ctrlrnn.RCRNCell: lambda **f: ctrlrnn.RCRNCell(4, 5, **f),
    ctrlrnn.CASLSTMCell: lambda **f: ctrlrnn.CASLSTMCell(4, 5, lambda_="trainable", **f),
    ctrlrnn.CARNNCell: lambda **f: ctrlrnn.CARNNCell(4, 5, 3, variant="i", **f),
    ctrlrnn.MetagrossCell: lambda **f: ctrlrnn.MetagrossCell(4, 5, depth=3, base="gru", **f),
}


def test_every_registered_cell_is_checked() -> None:
    assert {u.cell for u in UNITS.values() if u.cell is not None} <= set(CELLS)


@pytest.mark.parametrize("how", ["context", "argument"])
@pytest.mark.parametrize("cls", list(CELLS), ids=lambda c: c.__name__)
def test_a_cell_built_on_meta_and_reset_is_the_cell_built_directly(cls: type, how: str) -> None:
    torch.manual_seed(SEED)
    direct = CELLS[cls]()
    _assert_same_state(direct, _built_on_meta(CELLS[cls], how))


@pytest.mark.parametrize("name", [*NAMES, FFN])
def test_dtype_builds_what_a_cast_of_the_default_build_holds(name: str) -> None:
    torch.manual_seed(SEED)
    cast = make(name).double()
    torch.manual_seed(SEED)
    built = make(name, dtype=torch.float64, device="cpu")
    assert {p.dtype for p in built.parameters()} == {torch.float64}
    _assert_same_state(cast, built)
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    out = built(x) if name == FFN else run(built, x, context(built, 6, torch.float64))[0]
    assert out.dtype == torch.float64


@pytest.mark.parametrize("cls", list(CELLS), ids=lambda c: c.__name__)
def test_a_cell_takes_the_factory_arguments(cls: type) -> None:
    torch.manual_seed(SEED)
    cast = CELLS[cls]().double()
    torch.manual_seed(SEED)
    _assert_same_state(cast, CELLS[cls](dtype=torch.float64))


#: every exported module with weights: the registered units' layers and cells, and the rest
WITH_WEIGHTS = sorted({*(c for u in UNITS.values() for c in (u.cls, u.cell) if c is not None),
                       ctrlrnn.MetagrossFFN, ctrlrnn.ContextualCARNNLM}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", WITH_WEIGHTS, ids=lambda c: c.__name__)
def test_every_module_with_weights_declares_the_factory_arguments(cls: type) -> None:
    parameters = inspect.signature(cls).parameters
    for name in ("device", "dtype"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default is None


@pytest.mark.parametrize(("arguments", "message"), [
    (dict(dtype=torch.int64), "dtype: expected a floating-point torch.dtype, got torch.int64"),
    (dict(dtype="float64"), "dtype: expected a floating-point torch.dtype, got 'float64'"),
    (dict(device="elsewhere"), "device: expected a torch.device or its name, got 'elsewhere'"),
])  # fmt: skip
def test_bad_factory_arguments_name_themselves(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ctrlrnn.QRNN(4, 5, **arguments)


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
