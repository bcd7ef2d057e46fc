"""Run every Triton kernel of this directory in Triton's CPU interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when ``ctrlrnn.ops.gpu.*_triton``
is first imported; pytest imports this conftest before the test modules of the directory, and
``import ctrlrnn`` never imports Triton, so setting it here is early enough.

``CTRLRNN_TRITON_NATIVE=1`` leaves it unset: ``scripts/gpu-check`` runs the CUDA tests of this
directory (``test_cuda_layers.py``, ``test_cuda_dispatch.py``, ``test_cuda_training.py``) with
the compiled kernels on a GPU.
"""

import os

if os.environ.get("CTRLRNN_TRITON_NATIVE", "") in {"", "0"}:
    os.environ["TRITON_INTERPRET"] = "1"

import functools  # noqa: E402

import pytest  # noqa: E402

#: Test modules whose kernels loop over a kernel argument (``for j in range(0, CHUNK)``).
_LOOPING_MODULES = {
    "test_triton_linear_scan.py",
    "test_triton_metagross_level.py",
    "test_triton_qrnn_pooling.py",
    "test_triton_rcrn_listener.py",
}


@functools.cache
def interpreter_loop_error() -> str | None:
    """Why Triton's interpreter cannot run a loop bounded by a kernel argument, or None.

    Triton 3.6's interpreter converts such a bound with ``int(ndarray)`` of a 1-element array,
    which NumPy 2.4 and later refuse ("only 0-dimensional arrays can be converted to Python
    scalars"); later Triton releases squeeze the array first. Under that combination every
    looping kernel fails before computing anything, so its interpreter tests are skipped with
    this reason instead of failing for a bug outside ctrlrnn.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def _count(out_ptr, n):
        acc = tl.zeros([1], tl.float32)
        for _ in range(0, n):
            acc += 1.0
        tl.store(out_ptr + tl.arange(0, 1), acc)

    out = torch.zeros(1)
    try:
        _count[(1,)](out, 3)
    except Exception as exc:  # the interpreter wraps the cause in its own error type
        import numpy

        version = f"Triton {triton.__version__}'s interpreter"
        return (f"{version} cannot run a loop bounded by a kernel argument under NumPy "
                f"{numpy.__version__} ({exc}); a later Triton can")  # fmt: skip
    if float(out[0]) != 3.0:
        return f"Triton {triton.__version__}'s interpreter counted a 3-step loop as {out[0]}"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in _LOOPING_MODULES:
            reason = interpreter_loop_error()
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
