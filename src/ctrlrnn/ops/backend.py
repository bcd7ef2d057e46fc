"""The one dispatch point: which implementation runs an op for a given tensor.

CPU tensors use the compiled C++ extensions when they can be built (see :mod:`._extension`),
otherwise the reference implementations after one warning. CUDA tensors use the GPU kernels
(``ctrlrnn.ops.gpu``, a later addition) when present, else the reference implementations.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import torch

from ctrlrnn.ops import _extension


def cpu_extension(family: str) -> ModuleType | None:
    """The compiled CPU extension of an op family (``"scan"`` or ``"cells"``), or None."""
    return _extension.load(family)


def kernel_for(family: str, device: torch.device) -> ModuleType | None:
    """The compiled implementation to use for tensors on ``device``, or None for the reference."""
    if device.type == "cpu":
        return cpu_extension(family)
    return None


def backend_info() -> dict[str, Any]:
    """Which backend each op family uses on CPU (and CUDA), and why.

    Building the extensions if they have not been built yet, so the answer is the real one.
    """
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cache": str(_extension.cache_dir()),
        "forced_reference": _extension.forced_reference(),
        "require_compiled": os.environ.get("CTRLRNN_REQUIRE_COMPILED", "") not in {"", "0"},
        "families": {},
    }
    for family in _extension.EXTENSIONS:
        st = _extension.status(family)
        info["families"][family] = {
            "cpu": "compiled" if st.loaded else "reference",
            "reason": st.reason,
            "path": st.path,
            "parallel_threads": st.module.parallel_threads() if st.loaded and hasattr(
                st.module, "parallel_threads") else st.threads,
            "cuda": "reference (no GPU kernels yet)" if torch.cuda.is_available() else
            "no CUDA device",
        }
    return info
