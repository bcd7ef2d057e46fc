"""Run every Triton kernel of this directory in Triton's CPU interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when ``ctrlrnn.ops.gpu.*_triton``
is first imported; pytest imports this conftest before the test modules of the directory, and
``import ctrlrnn`` never imports Triton, so setting it here is early enough.

``CTRLRNN_TRITON_NATIVE=1`` leaves it unset: ``scripts/gpu-check`` runs the CUDA tests of this
directory (``test_cuda_layers.py``, ``test_cuda_dispatch.py``) with the compiled kernels on a GPU.
"""

import os

if os.environ.get("CTRLRNN_TRITON_NATIVE", "") in {"", "0"}:
    os.environ["TRITON_INTERPRET"] = "1"
