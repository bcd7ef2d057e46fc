"""Ops: the linear scan and QRNN pooling, each with its reference beside the compiled path."""

from ctrlrnn.ops.backend import backend_info
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.linear_scan_ref import linear_scan_ref

__all__ = ["backend_info", "linear_scan", "linear_scan_ref"]
