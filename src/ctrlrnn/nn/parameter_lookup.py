"""A module's parameters read for the fused step paths, which run at every decoding step.

``module.weight`` goes through :meth:`torch.nn.Module.__getattr__`, several dictionary lookups
per name; ``module._parameters[name]`` is one. A parametrization
(:func:`torch.nn.utils.parametrize.register_parametrization`: orthogonal, spectral norm, weight
norm, or a user's own) moves its parameter out of ``_parameters`` and computes the tensor in a
property instead, so a name absent there is read through the attribute: the step then uses the
parametrized tensor, as the module's other paths do. A name registered as ``None`` (a module
built without that parameter) or set to ``None`` as a plain attribute reads as ``None``.
"""

from __future__ import annotations

from torch import Tensor, nn


def parameters(module: nn.Module, *names: str) -> tuple[Tensor | None, ...]:
    """``module``'s tensors ``names``, in order (module docstring); ``None`` for a name the
    module registered as ``None`` or does not have."""
    own = module._parameters
    return tuple([own[name] if name in own else getattr(module, name, None) for name in names])
