"""``reset_parameters`` for modules built of submodules that each initialise their own weights.

:class:`torch.nn.LSTM` and :class:`torch.nn.LSTMCell` offer ``reset_parameters()``, which code
written for them calls, for example after building a model on the ``meta`` device and giving it
memory with ``to_empty()``. ctrlrnn's layers and cells hold their weights in submodules that
each define it; :func:`reset_submodules` calls theirs.
"""

from __future__ import annotations

from torch import nn


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
