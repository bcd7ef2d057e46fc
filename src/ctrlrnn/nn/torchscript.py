"""TorchScript and ctrlrnn's modules: traced, not scripted.

``torch.jit.trace`` records the ops a call runs, and every layer and cell traces: the compiled
ops enter the trace as single nodes (``ctrlrnn::...`` custom ops, which ``import ctrlrnn``
registers, so a saved trace loads after it), so a trace runs at any batch size, sequence length
and ``lengths`` (tests/nn/test_torchscript.py; docs/from-nn-lstm.md has the usage).

``torch.jit.script`` compiles Python source instead, and ctrlrnn's modules are written in the
Python that TorchScript's compiler does not take (keyword arguments, f-strings in their input
checks, ``tuple[int, ...]`` annotations, custom ops chosen at run time). Torch itself deprecates
both in favour of ``torch.export`` and ``torch.compile``.

:class:`Traceable`, a mixin of every public module, does the two things this needs:

* ``__prepare_scriptable__``, which ``torch.jit.script`` calls on a module and on each of its
  submodules before compiling, raises an error that names the module and what to use instead,
  where the compiler would stop at the first construct it cannot read;
* a call made while a trace is taken runs with the tracer's warnings about ctrlrnn's own code
  silenced (:func:`quiet_checks`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

import torch


def script_refused(name: str) -> str:
    """The error of ``torch.jit.script`` over the module class ``name``."""
    return (
        f"{name}: torch.jit.script cannot compile ctrlrnn's modules; trace it instead, "
        f"torch.jit.trace(model, example_inputs) (the trace runs at any batch size and length, "
        f"and a saved trace loads after `import ctrlrnn`), or use torch.export, torch.compile "
        f"or ctrlrnn.export_onnx"
    )


@contextlib.contextmanager
def quiet_checks() -> Iterator[None]:
    """While a trace is taken, the tracer's warnings about ctrlrnn's own code are silenced.

    The tracer warns wherever Python reads a tensor's size or value ("might cause the trace to
    be incorrect"): in ctrlrnn that is the input checks (shapes, lengths in range) and the
    choice of a kernel's path by size, about thirty places a layer passes. What a trace records
    is checked at other batch sizes, lengths and sequence lengths than the traced ones, in every
    configuration (tests/nn/test_torchscript.py). Warnings from the caller's code and from torch
    keep their filters. Entered only where a trace is taken (:class:`Traceable`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"ctrlrnn\.")
        yield


class Traceable:
    """Mixin of ctrlrnn's public modules (module docstring): ``torch.jit.script`` refused with
    an error naming the alternatives, and a traced call quiet about ctrlrnn's own checks.

    The second overrides ``nn.Module._slow_forward``, the path torch's ``Module.__call__`` takes
    instead of ``forward`` while, and only while, TorchScript traces (torch 2.4 to 2.15): eager
    calls, ``torch.compile`` and ``torch.export`` never reach it, where a wrapper around each
    ``forward`` would run in every call, eager and compiled, for what only a trace needs.
    """

    def _slow_forward(self, *args: Any, **kwargs: Any) -> Any:
        with quiet_checks():
            return super()._slow_forward(*args, **kwargs)  # type: ignore[misc]

    def __prepare_scriptable__(self) -> NoReturn:
        raise RuntimeError(script_refused(type(self).__name__))
