"""A module's parameters read for the fused step paths, which run at every decoding step.

``module.weight`` goes through :meth:`torch.nn.Module.__getattr__`, several dictionary lookups
per name; one ``operator.itemgetter`` on ``module._parameters`` reads them all in one call. A
parametrization (:func:`torch.nn.utils.parametrize.register_parametrization`: orthogonal,
spectral norm, weight norm, or a user's own) moves its parameter out of ``_parameters`` and
computes the tensor in a property instead, so a name absent there is read through the
attribute: the step then uses the parametrized tensor, as the module's other paths do. A name
registered as ``None`` (a module built without that parameter) reads as ``None``.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from torch import Tensor, nn

#: one getter per tuple of names asked for (a handful in the package)
_GETTERS: dict[tuple[str, ...], Any] = {}


def parameters(module: nn.Module, *names: str) -> tuple[Tensor | None, ...]:
    """``module``'s tensors ``names``, in order (module docstring); ``None`` for a name the
    module registered as ``None`` or does not have."""
    getter = _GETTERS.get(names)
    if getter is None:
        getter = _GETTERS.setdefault(names, itemgetter(*names))
    try:
        got = getter(module._parameters)
    except KeyError:  # a parametrized (or absent) name: through the attributes
        return tuple(getattr(module, name, None) for name in names)
    return got if len(names) > 1 else (got,)
