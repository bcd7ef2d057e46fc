"""Ops: the linear scan and QRNN pooling, each with its reference beside the compiled path."""

from ctrlrnn.ops.backend import backend_info
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.linear_scan_ref import linear_scan_ref
from ctrlrnn.ops.output_cache import empty_cache, output_cache_info, set_output_cache_limit

__all__ = [
    "backend_info",
    "empty_cache",
    "linear_scan",
    "linear_scan_ref",
    "output_cache_info",
    "set_output_cache_limit",
]
