"""The one dispatch table: which implementation runs an op for a given tensor.

Two questions, asked by every op the same way:

* :func:`path`: which of the three paths a public op takes: ``"export"`` (an ONNX export is
  being traced: the scans of :mod:`ctrlrnn.ops.scan_export`), ``"kernel"`` (the op's custom op,
  whose kernel for the tensor's device runs, or its fallback, the reference, where there is
  none: so under TorchScript tracing) or ``"reference"`` (the readable reference,
  differentiated by autograd: no kernel here, ``CTRLRNN_BACKEND=reference``, or inside
  ``torch.func`` transforms).
* :func:`kernel_for`: which module implements an op family's kernels on a device. CPU tensors
  use the compiled C++ extensions when they can be built (see :mod:`._extension`), otherwise
  the reference implementations after one warning. CUDA tensors use the Triton kernels of
  :data:`ctrlrnn.ops.gpu.FAMILIES` when Triton imports (it is imported lazily, on the first CUDA
  call), otherwise the reference implementations after one warning. The CPU extension and the
  Triton module of a family expose the same functions with the same signatures, so one custom
  op per op serves both devices (:mod:`ctrlrnn.ops.kernel_op` registers them).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from ctrlrnn.ops import _extension, gemm_path, gpu, prebuilt, runtime, scan_export
from ctrlrnn.ops.compiled_op import constant_under_compile, torchscript_tracing

#: The three paths of :func:`path`.
EXPORT, KERNEL, REFERENCE = "export", "kernel", "reference"


def cpu_extension(family: str) -> ModuleType | None:
    """The compiled CPU extension of an op family (``"scan"``, ``"cells"`` or ``"metagross"``),
    or None."""
    return _extension.load(family)


def kernel_for(family: str, device: torch.device) -> ModuleType | None:
    """The module implementing ``family``'s kernels for tensors on ``device`` (the CPU
    extension, or the Triton module on CUDA), or None for the reference."""
    if device.type == "cpu":
        return cpu_extension(family)
    return gpu_kernels(family, device)


#: one device object per device type, so that the per-call query builds none
_DEVICES: dict[str, torch.device] = {}


@constant_under_compile
def _has_kernel(family: str, device_type: str) -> bool:
    device = _DEVICES.get(device_type)
    if device is None:
        device = _DEVICES.setdefault(device_type, torch.device(device_type))
    return kernel_for(family, device) is not None


@constant_under_compile
def reference_forced() -> bool:
    """``CTRLRNN_BACKEND=reference`` (read once while tracing, like :func:`has_kernel`: torch
    2.4's dynamo cannot trace reading the environment)."""
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


def path(family: str, device: torch.device) -> str:
    """The path a public op of ``family`` takes for tensors on ``device``: :data:`EXPORT`
    while an ONNX export is traced, else :data:`KERNEL` where :func:`has_kernel`, on the
    ``meta`` device outside ``torch.func`` transforms, or while TorchScript traces
    (``torch.jit.trace``), else :data:`REFERENCE`.

    On the meta device the custom op runs its fake (:mod:`ctrlrnn.ops.kernel_op`): one call
    that gives the outputs' shapes, as ``torch.nn.LSTM``'s one op does there, where the
    reference would dispatch every op of its loop over time to a meta kernel.

    A trace records the custom op as one node whatever runs inside it, and without a kernel the
    op runs its fallback, the reference (:mod:`ctrlrnn.ops.kernel_op`); the reference called
    directly would be recorded step by step, its loop over time unrolled and fixed to the
    traced length."""
    if scan_export.active():
        return EXPORT
    shapes_only = device.type == "meta" and not functorch_active()
    if has_kernel(family, device) or shapes_only or torchscript_tracing():
        return KERNEL
    return REFERENCE


def gpu_kernels(family: str, device: torch.device) -> ModuleType | None:
    """The Triton module of an op family for CUDA tensors, or None (reference, warned once).

    Each mirrors the CPU extension of its family: the same functions (the names of
    :data:`ctrlrnn.ops.gpu.FAMILY_FUNCTIONS`), the same signatures.
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
        "scan": "linear scan, QRNN f/fo/ifo pooling, RCRN listener",
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
    "scan": "linear scan, QRNN f/fo/ifo pooling and convolution windows, the RCRN listener "
            "(eq 15-16): QRNN, RCRN, iCARNN, sCARNN",
    "cells": "fused gated cells: LSTM, GRU, CAS-LSTM, nCARNN, and METAGROSS as printed "
             "(Metagross(gates='state'))",
    "metagross": "fused METAGROSS level, gates from x_t: Metagross(gates='input')",
}


def _step_graphs_status() -> str:
    """Whether the fused cells' step loops are captured in CUDA graphs on CUDA tensors."""
    from ctrlrnn.ops.gpu import step_graphs

    try:
        on = step_graphs.enabled()
    except ValueError as e:
        return f"invalid: {e}"
    return ("on: each call signature's loop captured on its second call, then replayed "
            f"({step_graphs.ENV}=1, the default)" if on
            else f"off: one launch per step from Python ({step_graphs.ENV}=0)")


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
        "prebuilt": prebuilt.describe(),
        "families": {},
        "cuda": {
            "available": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "triton": gpu.triton_status()[1],
            "step_graphs": _step_graphs_status(),
        },
    }
    for family in _extension.EXTENSIONS:
        st = _extension.status(family)
        info["families"][family] = {
            "ops": FAMILY_OPS.get(family, family),
            "cpu": "compiled" if st.loaded else "reference",
            "reason": st.reason,
            "fix": "" if st.loaded or st.origin == "reference" else _extension.advice(st.reason),
            "origin": st.origin,
            "path": st.path,
            "log": st.log,
            "parallel_threads": st.module.parallel_threads() if st.loaded and hasattr(
                st.module, "parallel_threads") else st.threads,
            "cuda": _cuda_status(family),
        }
    info["cpu_runtime"] = runtime.current()
    info["gemm"] = {
        "requested": gemm_path.requested(),
        "forced": gemm_path.forced(),
        "onednn_usable": gemm_path.onednn_usable(),
        "one_thread_usable": gemm_path.one_thread_usable(),
        "store": str(gemm_path.store_path() or ""),
        "classes": {k: {"path": p, "blas_over_onednn": a} for k, (p, a) in
                    sorted(gemm_path.table().items())},
    }
    return info
