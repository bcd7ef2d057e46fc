"""Ops: the recurrences of ctrlrnn's layers, each with its reference beside its kernels.

One folder per op, the same files in each (the list of ops and how the other tables follow
from it: :mod:`.registry`):

* ``reference.py``: the readable reference, from the paper's equations;
* ``__init__.py``: the autograd op and the public function;
* ``<op>.cpp``: the CPU kernels; ``triton_kernels.py``: the CUDA kernels.

The ops (public entry point, then its folder):

* :func:`~ctrlrnn.ops.linear_scan.linear_scan` (:mod:`.linear_scan`): ``h_t = a_t h_{t-1} +
  b_t``.
* :func:`~ctrlrnn.ops.qrnn_pooling.qrnn_pooling` (:mod:`.qrnn_pooling`): QRNN f/fo/ifo pooling
  (QRNN paper eq 3-5) with the gate activations and zoneout (eq 6).
* :func:`~ctrlrnn.ops.conv_windows.shifted_windows` (:mod:`.conv_windows`): the windows of the
  QRNN's convolution (eq 1); CPU kernels only.
* :func:`~ctrlrnn.ops.rcrn_listener.rcrn_listener` (:mod:`.rcrn_listener`): RCRN's listener
  (eq 15-16), gates, scan and output of both directions in one op.
* :func:`~ctrlrnn.ops.metagross_level.metagross_level` (:mod:`.metagross_level`): one
  METAGROSS tree level, gates and scan fused; its gates (``gates.py``), its tree layout
  (``layout.py``) and a whole linear-base tree as one node (``input_tree.py``) beside it.
* The fused gated cells, one folder each in :mod:`.cells` (LSTM, GRU, CAS-LSTM, nCARNN,
  METAGROSS as printed), sharing :mod:`.cells.shell` (ops, fakes, autograd, dispatch),
  :mod:`.cells.triton_host` (the Triton host loop) and ``csrc/cells_time.h`` (the CPU loops
  over time); :mod:`.fused_cells` and :mod:`.cells_ref` re-export their functions and
  references.
* :func:`~ctrlrnn.ops.cached_linear.cached_linear` (:mod:`.cached_linear`): a linear layer
  writing into the output cache of :mod:`.output_cache`.

Shared by all of them:

* ``csrc/runtime/``: the CPU runtime every extension carries, behind one header the kernels
  include (``runtime.h``: an output, a bulk GEMM, a step GEMM, the activations, the stores of
  large outputs), tuned or plain (:mod:`.runtime`): the output cache ``pool.h``, the GEMM
  paths ``gemm_paths.h`` and ``tiny_gemm.h`` with :mod:`.gemm_path`, ``step_gemm.h``,
  ``streaming.h``, ``vector_math.h``, ``cached_linear.h``, and their bindings in
  ``runtime.cpp``. ``csrc/`` beside it: the kernels' shared helpers (``kernel_common.h``) and
  the cells' shared headers.
* :mod:`.backend`: the dispatch table (which path a call takes: kernel, reference or export;
  which module implements a family's kernels on a device) and ``ctrlrnn info``'s report.
* :mod:`.kernel_op`: one custom op per op, with its CPU and CUDA kernels registered on it, its
  fake and its autograd; :mod:`.compiled_op`: the eager twin of a custom op (less dispatch);
  :mod:`.double_backward`: the error a second backward through a kernel gets.
* :mod:`.scan_export`: every loop over time as one ``torch`` scan, while an ONNX export runs.
* :mod:`._extension`: caching and loading the C++ extensions (``scan``, ``cells``,
  ``metagross``) and handing them their settings; :mod:`._build`: one compile;
  :mod:`.gpu`: the Triton kernels' selection and common pieces.
* :mod:`.autocast`, :mod:`.validation`, :mod:`.padding`: argument handling.
"""

from ctrlrnn.ops.backend import backend_info
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref
from ctrlrnn.ops.output_cache import empty_cache, output_cache_info, set_output_cache_limit

__all__ = [
    "backend_info",
    "empty_cache",
    "linear_scan",
    "linear_scan_ref",
    "output_cache_info",
    "set_output_cache_limit",
]
