"""The Triton linear scan, QRNN pooling and RCRN listener: the GPU counterpart of the CPU
extension ``scan``, the same six functions with the same signatures.

:func:`ctrlrnn.ops.backend.kernel_for` returns this module for CUDA tensors when Triton is
available, and the CUDA kernels of the custom ops of :mod:`ctrlrnn.ops.linear_scan`,
:mod:`ctrlrnn.ops.qrnn_pooling` and :mod:`ctrlrnn.ops.rcrn_listener` call its functions
(:mod:`ctrlrnn.ops.kernel_op`).
"""

from __future__ import annotations

from ctrlrnn.ops.gpu.listener_triton import rcrn_listener_backward, rcrn_listener_forward
from ctrlrnn.ops.gpu.qrnn_triton import qrnn_pooling_backward, qrnn_pooling_forward
from ctrlrnn.ops.gpu.scan_triton import linear_scan_backward, linear_scan_forward

__all__ = [
    "linear_scan_backward",
    "linear_scan_forward",
    "qrnn_pooling_backward",
    "qrnn_pooling_forward",
    "rcrn_listener_backward",
    "rcrn_listener_forward",
]
