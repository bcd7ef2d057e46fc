"""What a user meets first in Python (issue 75): ``help(ctrlrnn.QRNN.forward)`` shows the
layer's own ``forward`` docstring, not torch's generic "Should be overridden by all subclasses".

Every public module (each ``nn.Module`` of ``ctrlrnn.__all__`` and ``ctrlrnn.nn.__all__``)
defines ``forward`` itself, with a docstring that names each argument under ``Args:`` and what
it returns under ``Returns:``. The layers say in the first paragraph of the class docstring and
of ``forward``'s what they return, and those whose state is not ``nn.LSTM``'s ``(h_n, c_n)``
say so there. What each says of its state holds (:func:`test_the_state_is_as_documented`).
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from torch import nn

import ctrlrnn
import ctrlrnn.nn
from ctrlrnn.nn.registry import unit_exports

MODULES = sorted(
    {n for mod in (ctrlrnn, ctrlrnn.nn) for n in mod.__all__
     if inspect.isclass(getattr(mod, n)) and issubclass(getattr(mod, n), nn.Module)}
)  # fmt: skip
LAYERS = sorted(n for n in MODULES if issubclass(getattr(ctrlrnn, n), ctrlrnn.RecurrentBase)
                and n != "RecurrentBase")  # fmt: skip


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n", 1)[0].split())


def _section(doc: str, title: str) -> list[str]:
    """The entry names of a Google-style section (``name: text`` lines one level in)."""
    lines = doc.splitlines()
    if f"{title}:" not in lines:
        return []
    names = []
    for line in lines[lines.index(f"{title}:") + 1 :]:
        if line and not line.startswith(" "):
            break
        m = re.match(r"^ {4}(\*{0,2}\w+)(?: \([^)]*\))?:(?:\s|$)", line)
        if m:
            names.append(m.group(1))
    return names


def test_the_public_modules_are_found() -> None:
    assert {"QRNN", "QRNNCell", "CARNN", "ContextualCARNNLM", "HistorySummary", "MetagrossFFN",
            "PositionEncoder", "RecurrentBase"} <= set(MODULES)  # fmt: skip
    assert set(LAYERS) == {n for n in unit_exports() if not n.endswith("Cell")}


@pytest.mark.parametrize("name", MODULES)
def test_forward_has_its_own_docstring(name: str) -> None:
    cls = getattr(ctrlrnn, name)
    assert "forward" in vars(cls), f"{name}: forward is inherited; help() shows another's"
    doc = inspect.getdoc(cls.forward) or ""
    assert "Should be overridden" not in doc, f"{name}.forward: torch's generic docstring"
    assert cls.forward.__doc__, f"{name}.forward: no docstring of its own"


@pytest.mark.parametrize("name", MODULES)
def test_forward_names_its_arguments_and_returns(name: str) -> None:
    forward = getattr(ctrlrnn, name).forward
    doc = inspect.getdoc(forward) or ""
    parameters = [("**" if p.kind is p.VAR_KEYWORD else "") + p.name
                  for p in list(inspect.signature(forward).parameters.values())[1:]]
    assert _section(doc, "Args") == parameters, f"{name}.forward: Args: must name {parameters}"
    assert "Returns:" in doc.splitlines(), f"{name}.forward: no Returns: section"
    returns = doc.split("\nReturns:\n", 1)[1]
    assert re.search(r"\(B, |\(\.\.\., ", returns), f"{name}.forward: no shape in Returns:"


@pytest.mark.parametrize("name", MODULES)
def test_class_docstring_says_what_it_returns(name: str) -> None:
    summary = _first_paragraph(inspect.getdoc(getattr(ctrlrnn, name)) or "")
    assert "return" in summary, f"{name}: the class docstring's first lines say what it returns"


@pytest.mark.parametrize("name", LAYERS)
def test_layers_compare_their_state_with_nn_lstm(name: str) -> None:
    cls = getattr(ctrlrnn, name)
    for doc in (inspect.getdoc(cls), inspect.getdoc(cls.forward)):
        first = _first_paragraph(doc or "")
        assert "nn.LSTM" in first and "(h_n, c_n)" in first, f"{name}: {first}"
        assert "returns" in first, f"{name}: {first}"


def _call(name: str, layer: nn.Module, x: torch.Tensor):
    return layer(x, torch.randn(x.shape[1], 3)) if name == "CARNN" else layer(x)


@pytest.mark.parametrize("name", LAYERS)
def test_the_state_is_as_documented(name: str) -> None:
    """What the docstrings say of the returned state: CAS-LSTM's is nn.LSTM's pair, RCRN's a
    tuple of 7, the others one tensor, which ``output, (h, c) = layer(x)`` splits by layer at two
    layers (why the docstrings warn about it) and refuses at one."""
    extra = {"context_size": 3} if name == "CARNN" else {}
    x = torch.randn(5, 2, 4)
    two = getattr(ctrlrnn, name)(4, 6, num_layers=2, **extra)
    _, state = _call(name, two, x)
    if name == "CASLSTM":
        assert isinstance(state, tuple) and [s.shape for s in state] == [(2, 2, 6)] * 2
        return
    if name == "RCRN":
        assert isinstance(state, tuple) and len(state) == 7
        return
    assert isinstance(state, torch.Tensor) and state.shape[:2] == (2, 2)
    h, c = state  # the misuse the docstrings name: no error, one layer each
    assert torch.equal(h, state[0]) and torch.equal(c, state[1])
    one = getattr(ctrlrnn, name)(4, 6, **extra)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        _, (h, c) = _call(name, one, x)
