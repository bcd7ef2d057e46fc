"""The one dispatch point: which implementation runs an op for a given tensor.

CPU tensors use the compiled C++ extensions when they can be built (see :mod:`._extension`),
otherwise the reference implementations after one warning. CUDA tensors use the Triton kernels
of :mod:`ctrlrnn.ops.gpu` when Triton imports (it is imported lazily, on the first CUDA call),
otherwise the reference implementations after one warning. Every op family has Triton kernels
(:data:`ctrlrnn.ops.gpu.FAMILIES`): with Triton installed nothing runs the reference on CUDA.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from ctrlrnn.ops import _extension, gemm_path, gpu

#: Families whose GPU module has the CPU extension's API, so :func:`kernel_for` returns it
#: (``cells`` is reached by :func:`gpu_kernels`: its GPU module has the reference's signatures).
_GPU_MIRRORS_CPU = frozenset({"scan", "metagross"})


def cpu_extension(family: str) -> ModuleType | None:
    """The compiled CPU extension of an op family (``"scan"``, ``"cells"`` or ``"metagross"``),
    or None."""
    return _extension.load(family)


def kernel_for(family: str, device: torch.device) -> ModuleType | None:
    """The compiled implementation to use for tensors on ``device``, or None for the reference."""
    if device.type == "cpu":
        return cpu_extension(family)
    if family in _GPU_MIRRORS_CPU:
        return gpu_kernels(family, device)
    return None


def _constant_under_compile(fn: Any) -> Any:
    """``torch.compiler.assume_constant_result(fn)``, without its import of ``torch._dynamo``
    (2 s at ``import ctrlrnn``): the decorator only sets this attribute, which dynamo reads
    when it meets ``fn`` (tests/ops/test_backend_choice.py checks the two agree)."""
    fn._dynamo_marked_constant = True
    return fn


@_constant_under_compile
def _has_kernel(family: str, device_type: str) -> bool:
    return kernel_for(family, torch.device(device_type)) is not None


@_constant_under_compile
def reference_forced() -> bool:
    """``CTRLRNN_BACKEND=reference`` (read once while tracing, like :func:`has_kernel`: torch
    2.4's dynamo cannot trace ``os.environ``)."""
    return _extension.forced_reference()


def functorch_active() -> bool:
    """True inside ``torch.func`` transforms (``grad``, ``vjp``, ``vmap``, ``jacrev``, ...).

    False while dynamo traces (``torch.compile``, ``torch.export``): torch 2.4's dynamo cannot
    trace the query, and a traced graph keeps the compiled ops.
    """
    if torch.compiler.is_compiling():
        return False
    return bool(torch._C._are_functorch_transforms_active())


def has_kernel(family: str, device: torch.device) -> bool:
    """Whether :func:`kernel_for` has a compiled implementation for tensors on ``device``: the
    question every public op asks before choosing its custom op (compiled) or its readable
    reference (plain differentiable torch code).

    Under ``torch.compile`` and ``torch.export`` the answer is computed once, eagerly, while
    tracing (``torch.compiler.assume_constant_result``) and enters the graph as a constant, so
    the extension loader (its locks, files and a possible first build) is never traced. Inside
    ``torch.func`` transforms the answer is False: the reference path is plain torch code, which
    every transform (and any order of derivative) goes through; the compiled ops are not.
    """
    return not functorch_active() and _has_kernel(family, device.type)


def gpu_kernels(family: str, device: torch.device) -> ModuleType | None:
    """The Triton module of an op family for CUDA tensors, or None (reference, warned once).

    ``"scan"`` and ``"metagross"`` mirror the CPU extensions (also returned by
    :func:`kernel_for`); ``"cells"`` exposes ``lstm_sequence``, ``gru_sequence``,
    ``cas_lstm_sequence``, ``ncarnn_sequence`` and ``metagross_state_sequence`` with the
    signatures of :mod:`ctrlrnn.ops.cells_ref` (:data:`ctrlrnn.ops.gpu.CELL_FUNCTIONS`).
    """
    if device.type != "cuda":
        return None
    return gpu.family_module(family, device.type)


def _cuda_status(family: str) -> str:
    """One line: what a CUDA tensor of ``family`` runs on this machine, and why."""
    if family not in gpu.FAMILIES:
        return "reference (no GPU kernels for this family)"
    if _extension.forced_reference():
        return "reference (CTRLRNN_BACKEND=reference set)"
    ok, triton = gpu.triton_status()
    if not ok:
        return f"reference: {triton}"
    try:
        missing = gpu.missing_functions(family)
    except Exception as exc:  # noqa: BLE001 - a kernel module that fails to import
        return f"reference ({triton} installed, but {gpu.FAMILIES[family]} does not import: " \
            f"{type(exc).__name__}: {exc})"
    where = "" if torch.cuda.is_available() else " (no CUDA device here)"
    what = {
        "scan": "linear scan, QRNN f/fo/ifo pooling",
        "cells": "LSTM, GRU, CAS-LSTM and nCARNN cells, METAGROSS as printed (gates='state')",
        "metagross": "fused METAGROSS level (gates + linear scan)",
    }.get(family, family)
    if missing:
        return (f"{triton} kernels{where}; reference for {', '.join(missing)} (not in "
                f"{gpu.FAMILIES[family]})")
    return f"{triton} kernels: {what}{where}"


def _compiler_line() -> str:
    cxx = _extension.compiler()
    return cxx.error or f"{cxx.command} ({cxx.path}): {cxx.version}"


#: What each op family runs, by the layers a user builds (``ctrlrnn info`` prints it).
FAMILY_OPS: dict[str, str] = {
    "scan": "linear scan and QRNN f/fo/ifo pooling: QRNN, RCRN's listener, iCARNN, sCARNN",
    "cells": "fused gated cells: LSTM, GRU, CAS-LSTM, nCARNN, and METAGROSS as printed "
             "(Metagross(gates='state'))",
    "metagross": "fused METAGROSS level, gates from x_t: Metagross(gates='input')",
}


def backend_info() -> dict[str, Any]:
    """Which backend each op family uses on CPU (and CUDA), and why.

    Building the extensions if they have not been built yet, so the answer is the real one.
    """
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cache": str(_extension.cache_dir()),
        "forced_reference": _extension.forced_reference(),
        "require_compiled": _extension.require_compiled(),
        "compiler": _compiler_line(),
        "families": {},
        "cuda": {
            "available": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "triton": gpu.triton_status()[1],
        },
    }
    for family in _extension.EXTENSIONS:
        st = _extension.status(family)
        info["families"][family] = {
            "ops": FAMILY_OPS.get(family, family),
            "cpu": "compiled" if st.loaded else "reference",
            "reason": st.reason,
            "origin": st.origin,
            "path": st.path,
            "log": st.log,
            "parallel_threads": st.module.parallel_threads() if st.loaded and hasattr(
                st.module, "parallel_threads") else st.threads,
            "cuda": _cuda_status(family),
        }
    info["gemm"] = {
        "requested": gemm_path.requested(),
        "forced": gemm_path.forced(),
        "onednn_usable": gemm_path.onednn_usable(),
        "store": str(gemm_path.store_path() or ""),
        "classes": {k: {"path": p, "blas_over_onednn": a} for k, (p, a) in
                    sorted(gemm_path.table().items())},
    }
    return info
