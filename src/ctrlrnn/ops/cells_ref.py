"""Readable reference implementations of the fused gated cells (each beside its kernels in
:mod:`ctrlrnn.ops.cells`): one step function written straight from its paper's equations plus
a plain Python loop over time (:func:`ctrlrnn.ops.cells.reference.run`) differentiated by torch
autograd. They define what the compiled kernels must compute and serve as the fallback on
devices without a compiled path; the conventions are in :mod:`ctrlrnn.ops.cells.reference`.
"""

import importlib

from ctrlrnn.ops import registry

#: Every cell's ``<cell>_sequence_ref`` and ``<cell>_step``, for every cell of the list of ops
#: (:mod:`ctrlrnn.ops.registry`).
__all__: list[str] = []
for _op in registry.ops_of("cells"):
    _module = importlib.import_module(f"{_op.module}.reference")
    for _name in (f"{_op.name}_sequence_ref", f"{_op.name}_step"):
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
__all__.sort()
