"""Routing an op family's kernels for CPU tensors, so the tests of this directory run the Triton
kernels (in Triton's CPU interpreter) through the same custom ops a CUDA tensor reaches.

Each op has one custom op with a kernel per device type; a kernel asks the dispatch table
(``ctrlrnn.ops.backend.kernel_for``) for the module implementing its family on its device.
:func:`route` points the CPU entry of one family at another module (the family's Triton module,
a counting :class:`Spy` of it, or None for the reference path), for the whole test: forward
and backward. The cells' functions below have the references' signatures (``cells_ref``) and
run the cell ops on whatever the ``cells`` family is routed to.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from ctrlrnn.ops import backend, cells_ref, gpu
from ctrlrnn.ops.cells import cas_lstm, gru, lstm, metagross_state, ncarnn, shell
from ctrlrnn.ops.cells.checks import cast, compute_dtype, uncast


def triton_module(family: str) -> ModuleType:
    """The Triton module of ``family`` (what a CUDA tensor's kernels call)."""
    return importlib.import_module(gpu.FAMILIES[family])


def route(monkeypatch: pytest.MonkeyPatch, family: str, module: Any) -> Any:
    """Make ``family``'s kernels for CPU tensors those of ``module`` (None: no kernel, the
    reference path) until the test ends; returns ``module``."""
    original = backend.kernel_for

    def table(fam: str, device: torch.device) -> Any:
        if fam == family and device.type == "cpu":
            return module
        return original(fam, device)

    monkeypatch.setattr(backend, "kernel_for", table)
    return module


class Spy:
    """Stands for a family's module and counts the calls of each of its kernel functions (its
    other functions, such as the cells' ``takes_stack`` query, pass through uncounted)."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.module, name)
        if not (name in ("forward", "backward") or name.endswith(("_forward", "_backward"))):
            return fn

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)

        return wrapped


@pytest.fixture
def cuda_and_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with CUDA and an importable Triton, as far as the dispatch can tell."""
    monkeypatch.setattr(gpu, "_TRITON", (True, "triton (mocked)"))
    monkeypatch.setattr(gpu, "_WARNED", set())
    monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def triton_cells(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The ``cells`` family on its Triton kernels for CPU tensors."""
    return route(monkeypatch, "cells", triton_module("cells"))


def _with_reference_signature(cell: ModuleType, reference: Callable[..., Any]) -> Callable:
    signature = inspect.signature(reference)

    def sequence(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = bound.arguments
        x_proj = named["x_proj"]
        inputs = cast([named[n] for n in cell.CELL.args], compute_dtype(x_proj))
        out = shell.sequence(cell.CELL, cell.OP, inputs, named["lengths"])
        return uncast(out, x_proj.dtype)

    sequence.__name__ = reference.__name__.removesuffix("_ref")
    return sequence


lstm_sequence = _with_reference_signature(lstm, cells_ref.lstm_sequence_ref)
gru_sequence = _with_reference_signature(gru, cells_ref.gru_sequence_ref)
cas_lstm_sequence = _with_reference_signature(cas_lstm, cells_ref.cas_lstm_sequence_ref)
ncarnn_sequence = _with_reference_signature(ncarnn, cells_ref.ncarnn_sequence_ref)
metagross_state_sequence = _with_reference_signature(
    metagross_state, cells_ref.metagross_state_sequence_ref
)
