"""How ctrlrnn's modules are built and initialised as torch's own are.

:class:`torch.nn.LSTM` and :class:`torch.nn.LSTMCell` take the factory arguments ``device`` and
``dtype`` and offer ``reset_parameters()``, which code written for them uses, for example to
build a model on the ``meta`` device and give it memory with ``to_empty()``:

* :func:`factory_arguments` gives a module's constructor ``device`` and ``dtype``;
* :func:`reset_submodules` is ``reset_parameters()`` for a module whose weights are held by
  submodules that each initialise their own.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

Init = TypeVar("Init", bound=Callable[..., None])


def factory_arguments(init: Init) -> Init:
    """Decorates a module's ``__init__`` with the keyword-only arguments ``device`` and ``dtype``
    of torch's modules (``nn.LSTM(..., device="cuda", dtype=torch.float64)``).

    The constructor runs under ``torch.device(device)``, so that every parameter and buffer is
    made on ``device`` (``"meta"`` allocates nothing) and the random initialisation draws there,
    as torch's modules do; then the module's floating-point parameters and buffers are cast to
    ``dtype``. Either left at None changes nothing."""

    @functools.wraps(init)
    def wrapped(self: nn.Module, *args: Any, device: Any = None, dtype: Any = None,
                **kwargs: Any) -> None:  # fmt: skip
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
        if device is None:
            init(self, *args, **kwargs)
        else:
            try:
                where = torch.device(device)
            except (RuntimeError, TypeError) as exc:
                raise ValueError(f"device: expected a torch.device or its name, got {device!r}"
                                 ) from exc  # fmt: skip
            with where:
                init(self, *args, **kwargs)
        if dtype is not None:
            self.to(dtype=dtype)

    signature = inspect.signature(init)
    factory = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation="torch.device | str | None" if name == "device"
                                 else "torch.dtype | None")  # fmt: skip
               for name in ("device", "dtype")]
    parameters = list(signature.parameters.values())
    variadic = [p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD]
    plain = [p for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
    wrapped.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*plain, *factory, *variadic])
    return wrapped  # type: ignore[return-value]


def reset_submodules(module: nn.Module) -> None:
    """Calls ``reset_parameters()`` of the outermost submodules of ``module`` that define it, in
    the order they were registered (the order a constructor builds them in), so that under the
    same seed the weights are those the constructor drew; submodules without it are searched
    in the same way. A module on that path that holds parameters of its own (which no
    submodule's ``reset_parameters`` reaches) raises ``NotImplementedError`` naming them, rather
    than leaving them as they are."""
    own = [name for name, _ in module.named_parameters(recurse=False)]
    if own:
        raise NotImplementedError(
            f"{type(module).__name__}.reset_parameters: the parameters {own} belong to the "
            "module itself, not to a submodule with its own reset_parameters(); define "
            f"reset_parameters() on {type(module).__name__} to initialise them"
        )
    for child in module.children():
        reset = getattr(child, "reset_parameters", None)
        if callable(reset):
            reset()
        else:
            reset_submodules(child)
