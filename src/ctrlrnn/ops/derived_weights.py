"""Tensors made from parameters (a joint weight, a block-diagonal layout), kept between calls
while none of the parameters changes: for steps that run where no autograd graph is recorded
(decoding one token at a time), which would otherwise make them again at every step.

:func:`derived` keys each tensor by its sources' identities and, for each source, what changes
when it is written or replaced: its version counter (every in-place write on the tensor
bumps it: an optimizer's step, ``load_state_dict``, ``nn.init``, ``p.copy_`` under
``torch.no_grad()``), its storage's address, dtype, device and shape. A write through
``p.data`` (``p.data.copy_(...)``) is not seen: ``.data`` is a tensor with a version counter of
its own, by PyTorch's design; assigning ``p.data = new`` is seen (a new storage). A kept tensor
is never handed out after any of the seen changes, and never where a graph may be recorded
(the caller's rule: there the tensor must be made from the parameters inside the graph, so that
their gradients flow). The entries hold weak references to their sources, so a dropped module
frees its entries at the next insertion. A source made under ``torch.inference_mode`` has no
version counter: its tensors are made at every call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from torch import Tensor

__all__ = ["derived"]

T = TypeVar("T")

#: ``(name, id of the first source) -> (weak references to the sources, their keys, value)``
_KEPT: dict[tuple[str, int], tuple[list[Any], tuple[Any, ...], Any]] = {}


def _key(t: Tensor | None) -> tuple[Any, ...] | None:
    """What changes with ``t`` (module docstring); None for a tensor without a version counter
    (made under ``torch.inference_mode``), whose changes cannot be seen."""
    if t is None:
        return ()
    if t.is_inference():
        return None
    return (t._version, t.data_ptr(), t.dtype, t.device, tuple(t.shape))


def derived(name: str, sources: Sequence[Tensor | None], make: Callable[[], T]) -> T:
    """``make()``, or the value it gave for the same ``sources`` (the same tensor objects) under
    ``name`` while none of them has changed (module docstring). ``sources[0]`` is a tensor."""
    first = sources[0]
    assert first is not None
    slot = (name, id(first))
    key = tuple(_key(s) for s in sources)
    if None in key:  # a source without a version counter: made at every call, never kept
        return make()
    entry = _KEPT.get(slot)
    if entry is not None and entry[1] == key and all(
            (r is None and s is None) or (r is not None and r() is s)
            for r, s in zip(entry[0], sources, strict=True)):  # fmt: skip
        return entry[2]  # type: ignore[no-any-return]
    for dead in [k for k, e in _KEPT.items() if e[0][0]() is None]:
        del _KEPT[dead]
    value = make()
    _KEPT[slot] = ([None if s is None else weakref.ref(s) for s in sources], key, value)
    return value
