"""The GPU counterpart of the CPU extension ``scan``: the same four functions, same signatures.

:func:`ctrlrnn.ops.backend.kernel_for` returns this module for CUDA tensors when Triton is
available, so :mod:`ctrlrnn.ops.linear_scan` and :mod:`ctrlrnn.ops.qrnn_pooling` call
``ext.linear_scan_forward(...)`` etc. without knowing which device they run on.
"""

from __future__ import annotations

from ctrlrnn.ops.gpu.qrnn_triton import qrnn_pooling_backward, qrnn_pooling_forward
from ctrlrnn.ops.gpu.scan_triton import linear_scan_backward, linear_scan_forward

__all__ = [
    "linear_scan_backward",
    "linear_scan_forward",
    "qrnn_pooling_backward",
    "qrnn_pooling_forward",
]
