"""The CUDA kernels of the op family ``scan`` gathered in one module: the GPU counterpart of the
CPU extension ``scan``, with the same functions and signatures.

The family's ops come from the list of ops (:mod:`ctrlrnn.ops.registry`); each op's kernels live
in its own ``triton_kernels`` module (:mod:`ctrlrnn.ops.linear_scan.triton_kernels`, ...), and this
module takes each op's functions from there. :func:`ctrlrnn.ops.backend.kernel_for` returns it
for CUDA tensors when Triton is available.
"""

from __future__ import annotations

import importlib

from ctrlrnn.ops import registry

FAMILY = "scan"

__all__: list[str] = []

for _op in registry.ops_of(FAMILY):
    if _op.cpu_only:
        continue
    _kernels = importlib.import_module(f"{_op.module}.triton_kernels")
    for _name in _op.functions:
        globals()[_name] = getattr(_kernels, _name)
        __all__.append(_name)
