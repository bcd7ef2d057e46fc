"""Ops: the recurrences of ctrlrnn's layers, each with its reference beside its kernels.

A map (public entry point, then where its parts live):

* :func:`~ctrlrnn.ops.linear_scan.linear_scan` (:mod:`.linear_scan`): ``h_t = a_t h_{t-1} +
  b_t``; reference and written-out backward in :mod:`.linear_scan_ref`; kernels in
  ``csrc/scan.cpp`` (CPU) and :mod:`.gpu.scan_triton` (CUDA).
* :func:`~ctrlrnn.ops.qrnn_pooling.qrnn_pooling` (:mod:`.qrnn_pooling`): QRNN f/fo/ifo pooling
  with the gate activations and zoneout; reference in :mod:`.qrnn_pooling_ref`; kernels in
  ``csrc/scan.cpp`` and :mod:`.gpu.qrnn_triton`.
* :func:`~ctrlrnn.ops.rcrn_listener.rcrn_listener` (:mod:`.rcrn_listener`): RCRN's listener
  (eq 15-16), gates, scan and output of both directions in one op; reference in
  :mod:`.rcrn_listener_ref`; kernels in ``csrc/rcrn_listener.cpp`` and
  :mod:`.gpu.listener_triton`.
* :func:`~ctrlrnn.ops.metagross_level.metagross_level` (:mod:`.metagross_level`): one
  METAGROSS tree level, gates and scan fused; its gates in :mod:`.metagross_gates`; kernels in
  ``csrc/metagross*.cpp`` and :mod:`.gpu.metagross_triton`.
* The fused gated cells (:mod:`.fused_cells` re-exports them): LSTM, GRU, CAS-LSTM, nCARNN and
  METAGROSS as printed, one folder each in :mod:`.cells` (reference, Triton step kernels,
  description, public function; CPU kernels in ``csrc/<cell>.cpp``), sharing
  :mod:`.cells.shell` (ops, fakes, autograd, dispatch), :mod:`.cells.triton_host` (the Triton
  host loop, which runs a stack of LSTM, GRU or nCARNN recurrences as one batch of rows) and
  ``csrc/cells_time.h`` (the CPU loops over time); :mod:`.cells_ref` re-exports
  the references.
* :func:`~ctrlrnn.ops.cached_linear.cached_linear` (:mod:`.cached_linear`): a linear layer
  writing into the output cache of :mod:`.output_cache` (``csrc/output_pool.h``).
* :mod:`.gemm_path`: which GEMM library (BLAS or oneDNN) the compiled CPU kernels' float32
  products take, per shape class (``csrc/gemm_path.h``).

Shared by all of them:

* :mod:`.backend`: the dispatch table (which path a call takes: kernel, reference or export;
  which module implements a family's kernels on a device) and ``ctrlrnn info``'s report.
* :mod:`.kernel_op`: one custom op per op, with its CPU and CUDA kernels registered on it, its
  fake and its autograd; :mod:`.compiled_op`: the eager twin of a custom op (less dispatch);
  :mod:`.double_backward`: the error a second backward through a kernel gets.
* :mod:`.scan_export`: every loop over time as one ``torch`` scan, while an ONNX export runs.
* :mod:`._extension`: building, caching and loading the C++ extensions (``scan``, ``cells``,
  ``metagross``); :mod:`.gpu`: the Triton kernels' selection and common pieces.
* :mod:`.autocast`, :mod:`.validation`, :mod:`.padding`: argument handling.
"""

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
