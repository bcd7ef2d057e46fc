"""The GPU path: Triton kernels for the linear scan, QRNN pooling, the RCRN listener, the fused
gated cells and the fused METAGROSS level.

Triton is an optional dependency (``pip install ctrlrnn[gpu]``) and is imported lazily: nothing
here imports it at ``import ctrlrnn``, so a CPU-only install without Triton keeps working. The
kernel modules (each op's ``triton_kernels`` in its folder, :mod:`ctrlrnn.ops.linear_scan`,
:mod:`ctrlrnn.ops.cells.lstm`, ...) import Triton at their own import, which
happens only when a CUDA tensor first asks for a kernel (through
:func:`ctrlrnn.ops.backend.kernel_for`) or when the tests load them under the Triton interpreter.

Selection (never a silent fallback to a slow path): a CUDA tensor runs the Triton
kernels when Triton imports; otherwise the reference implementation runs after one
:class:`RuntimeWarning` per op family, and :func:`ctrlrnn.backend_info` says why. The decision
itself is the pure function :func:`choose_backend`, tested without a GPU.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from types import ModuleType

from ctrlrnn import settings
from ctrlrnn.ops import registry

__all__ = [
    "CELL_FUNCTIONS",
    "FAMILIES",
    "FAMILY_FUNCTIONS",
    "choose_backend",
    "family_module",
    "interpreting",
    "missing_functions",
    "triton_status",
]

#: Op families with a GPU implementation -> the module exposing it, derived from the list of
#: ops (:mod:`ctrlrnn.ops.registry`). Each mirrors the CPU extension of the same name: the same
#: functions with the same signatures, registered as the CUDA kernels of the same custom ops
#: (:mod:`ctrlrnn.ops.kernel_op`). A family whose kernels come from several ops' modules is
#: gathered by :mod:`.scan_and_pooling`.
FAMILIES: dict[str, str] = {
    family: modules[0] if len(modules) == 1 else "ctrlrnn.ops.gpu.scan_and_pooling"
    for family in registry.families()
    if (modules := registry.gpu_modules(family))
}

#: The functions each family's GPU module must expose (the dispatch test and ``ctrlrnn info``
#: check them): those of its ops with CUDA kernels.
FAMILY_FUNCTIONS: dict[str, tuple[str, ...]] = {
    family: tuple(fn for op in registry.ops_of(family) if not op.cpu_only for fn in op.functions)
    for family in FAMILIES
}
CELL_FUNCTIONS = FAMILY_FUNCTIONS["cells"]

_LOCK = threading.Lock()
_TRITON: tuple[bool, str] | None = None
_WARNED: set[str] = set()
#: (family, device type) -> (CTRLRNN_BACKEND's text, the Triton status, the module): the last
#: answer of :func:`family_module`
_RESOLVED: dict[tuple[str, str], tuple[str | None, object, ModuleType | None]] = {}


def interpreting() -> bool:
    """True when ``TRITON_INTERPRET=1``: kernels run in Triton's CPU interpreter (tests)."""
    return (settings.raw("TRITON_INTERPRET") or "").strip() not in {"", "0"}


def triton_status() -> tuple[bool, str]:
    """``(True, "triton <version>")`` when Triton imports, else ``(False, <why not>)``.

    Imports Triton on first call only (cached).
    """
    global _TRITON
    if _TRITON is None:
        with _LOCK:
            if _TRITON is None:
                try:
                    triton = importlib.import_module("triton")
                    _TRITON = (True, f"triton {getattr(triton, '__version__', '?')}")
                except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
                    _TRITON = (
                        False,
                        f"triton not importable ({type(exc).__name__}: {exc}); "
                        "install the extra: pip install 'ctrlrnn[gpu]'",
                    )
    return _TRITON


def choose_backend(
    family: str, device_type: str, triton_ok: bool, forced_reference: bool = False
) -> str:
    """The backend an op family uses for tensors on a device type: the selection rule.

    Returns ``"triton"`` (CUDA tensor and Triton importable), ``"reference"`` (a CUDA tensor
    without Triton, a forced reference, or a family without GPU kernels) or ``"cpu"`` (CPU
    tensors: decided by the CPU extension loader, not here).
    """
    if device_type == "cpu":
        return "cpu"
    if forced_reference or family not in FAMILIES or device_type != "cuda" or not triton_ok:
        return "reference"
    return "triton"


def family_module(family: str, device_type: str = "cuda") -> ModuleType | None:
    """The GPU module of ``family`` for tensors on ``device_type``, or None for the reference.

    Warns once per family when a CUDA tensor has to take the reference path because Triton is
    missing (or ``CTRLRNN_BACKEND=reference`` forces it, which is not warned about: it was asked
    for).
    """
    from ctrlrnn.ops._extension import forced_reference

    # the answer is asked at every kernel call; it changes only with CTRLRNN_BACKEND's text or
    # Triton's status, so it is kept per (family, device type) with the two it was made from
    text = settings.raw("CTRLRNN_BACKEND")
    known = _RESOLVED.get((family, device_type))
    if known is not None and known[0] == text and known[1] is _TRITON:
        return known[2]
    module = _resolve(family, device_type, forced_reference())
    _RESOLVED[(family, device_type)] = (text, _TRITON, module)
    return module


def _resolve(family: str, device_type: str, forced: bool) -> ModuleType | None:
    """:func:`family_module`'s answer, computed (and warned about) afresh."""
    ok, why = triton_status() if device_type == "cuda" and not forced else (False, "")
    choice = choose_backend(family, device_type, ok, forced)
    if choice == "triton":
        return importlib.import_module(FAMILIES[family])
    if device_type == "cuda" and not forced and family in FAMILIES and family not in _WARNED:
        _WARNED.add(family)
        warnings.warn(
            f"ctrlrnn: no GPU kernels for op family {family!r} on CUDA tensors: {why}. Using the "
            "slow reference implementation (`ctrlrnn info` shows the backends).",
            RuntimeWarning,
            stacklevel=4,
        )
    return None


def missing_functions(family: str) -> list[str]:
    """The functions of :data:`FAMILY_FUNCTIONS` that the GPU module of ``family`` lacks.

    Imports the module (and so Triton): call it only when :func:`triton_status` is ok.
    """
    module = importlib.import_module(FAMILIES[family])
    return [name for name in FAMILY_FUNCTIONS.get(family, ()) if not callable(
        getattr(module, name, None))]
