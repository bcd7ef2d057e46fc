"""The examples of the layers' docstrings run: every module of :mod:`ctrlrnn.nn` through
:mod:`doctest`. Every public class of :mod:`ctrlrnn.nn` has an example, and the parameter list of
its ``Attributes:`` section names every parameter the layer holds (the names of
``named_parameters()``, ``[k]`` standing for an index), as :class:`torch.nn.LSTM`'s docstring
does.

The examples use small shapes and print shapes, not values, so that they hold on every machine.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest
import torch

import ctrlrnn
import ctrlrnn.nn

MODULES = sorted(m.name for m in pkgutil.walk_packages(ctrlrnn.nn.__path__, "ctrlrnn.nn."))
PUBLIC = sorted(n for n in ctrlrnn.nn.__all__ if inspect.isclass(getattr(ctrlrnn.nn, n)))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in finder.find(module, name, globs=dict(vars(module))):
        torch.manual_seed(0)
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_forward_examples_are_run() -> None:
    """The examples of the public classes' ``forward`` docstrings are among the tests
    :func:`test_docstring_examples_run` runs. (The walk finds a method's examples under its
    class, in the module the class names as ``__module__``; a class re-homed there from
    another module, as ``QRNNCell`` is, would hide the examples of its methods.)"""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {test.name for name in MODULES
             for test in finder.find(importlib.import_module(name), name)}  # fmt: skip
    classes = [getattr(ctrlrnn.nn, name) for name in PUBLIC]
    with_examples = [cls for cls in classes
                     if "forward" in vars(cls) and ">>> " in (cls.forward.__doc__ or "")]
    assert len(with_examples) >= 5, "the layers' forward docstrings have examples"
    for cls in with_examples:
        assert f"{cls.__module__}.{cls.__qualname__}.forward" in found, cls.__name__


@pytest.mark.parametrize("name", PUBLIC)
def test_public_class_has_an_example(name: str) -> None:
    doc = inspect.getdoc(getattr(ctrlrnn.nn, name)) or ""
    assert "Examples:" in doc and ">>> " in doc, f"{name}: no Examples section"


def documented_parameters(cls: type) -> list[str]:
    """The names of the ``Attributes:`` section of ``cls``'s docstring (``name: text`` entries,
    one indentation level in)."""
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    if "Attributes:" not in lines:
        return []
    names = []
    for line in lines[lines.index("Attributes:") + 1 :]:
        if line and not line.startswith(" "):
            break  # the next section
        m = re.match(r"^ {4}(\S+):(?:\s|$)", line)
        if m:
            names.append(m.group(1))
    return names


def _pattern(name: str) -> re.Pattern[str]:
    """``cells[k].weight`` matches ``cells.0.weight``, ``cells.13.weight``, ...;
    ``{weight,bias}`` matches ``weight`` and ``bias``."""
    parts = re.split(r"(\[k\]|\{[^}]*\})", name)
    regex = "".join(
        r"\.\d+" if p == "[k]"
        else "(?:" + "|".join(map(re.escape, p[1:-1].split(","))) + ")" if p.startswith("{")
        else re.escape(p)
        for p in parts
    )  # fmt: skip
    return re.compile(regex + "$")


#: per public class, constructions that between them hold every optional parameter
INSTANCES = {
    "QRNN": lambda: [ctrlrnn.QRNN(3, 4, num_layers=2, bidirectional=True,
                                  encoder_state_size=2)],  # fmt: skip
    "QRNNCell": lambda: [ctrlrnn.QRNNCell(3, 4, encoder_state_size=2)],
    "RCRN": lambda: [ctrlrnn.RCRN(3, 4, num_layers=2, bidirectional=True),
                     ctrlrnn.RCRN(3, 4, cell="gru")],  # fmt: skip
    "RCRNCell": lambda: [ctrlrnn.RCRNCell(3, 4), ctrlrnn.RCRNCell(3, 4, cell="gru")],
    "CARNN": lambda: [ctrlrnn.CARNN(3, 4, 2, num_layers=2, bidirectional=True),
                      ctrlrnn.CARNN(3, 4, None, variant="i")],  # fmt: skip
    "CARNNCell": lambda: [ctrlrnn.CARNNCell(3, 4, 2), ctrlrnn.CARNNCell(3, 3, 2, variant="s")],
    "CASLSTM": lambda: [ctrlrnn.CASLSTM(3, 4, num_layers=2, lambda_="trainable"),
                        ctrlrnn.CASLSTM(3, 4, num_layers=2, peephole=True)],  # fmt: skip
    "CASLSTMCell": lambda: [ctrlrnn.CASLSTMCell(3, 4, lambda_="trainable"),
                            ctrlrnn.CASLSTMCell(3, 4, peephole=True),
                            ctrlrnn.CASLSTMCell(3, 4, vertical=False)],
    "Metagross": lambda: [
        ctrlrnn.Metagross(3, 4, num_layers=2, bidirectional=True),
        ctrlrnn.Metagross(3, 4, depth_gate="scalar"),
        ctrlrnn.Metagross(3, 4, base="lstm", gates="state"),
        ctrlrnn.Metagross(3, 4, base="gru"),
    ],
    "MetagrossCell": lambda: [ctrlrnn.MetagrossCell(3, 4),
                              ctrlrnn.MetagrossCell(3, 4, depth_gate="scalar"),
                              ctrlrnn.MetagrossCell(3, 4, base="gru", gates="state")],
    "MetagrossFFN": lambda: [ctrlrnn.MetagrossFFN(4), ctrlrnn.MetagrossFFN(4, 2,
                                                                         depth_gate="scalar")],
    "ContextualCARNNLM": lambda: [ctrlrnn.ContextualCARNNLM(12, 5, 5, "s", context_size=7,
                                                            num_latent_labels=3),
                                  ctrlrnn.ContextualCARNNLM(12, 5, 6, "n")],
}


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_attributes_name_every_parameter(name: str) -> None:
    documented = documented_parameters(getattr(ctrlrnn.nn, name))
    assert documented, f"{name}: no Attributes section"
    patterns = [_pattern(d) for d in documented]
    seen = set()
    for module in INSTANCES[name]():
        for param, _ in module.named_parameters():
            hits = [d for d, p in zip(documented, patterns) if p.match(param)]
            assert hits, f"{name}: parameter {param!r} is not in the Attributes section"
            seen.update(hits)
    assert set(documented) == seen, f"{name}: documented but never held: {set(documented) - seen}"


def test_every_public_class_with_parameters_is_checked() -> None:
    """A public class that holds parameters is in :data:`INSTANCES` (the check above)."""
    for name in PUBLIC:
        cls = getattr(ctrlrnn.nn, name)
        if name in INSTANCES or name == "RecurrentBase":  # the base: its subclasses hold them
            continue
        try:
            module = cls()
        except TypeError:  # needs arguments: it must be listed
            raise AssertionError(f"{name}: not in INSTANCES") from None
        assert not list(module.parameters()), f"{name}: holds parameters, not in INSTANCES"
