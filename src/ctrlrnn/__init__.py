"""ctrlrnn: controlled recurrent networks for PyTorch.

QRNN, RCRN, CARNN, METAGROSS and CAS-LSTM as drop-in replacements for :class:`torch.nn.LSTM`,
built on two compiled primitives: the diagonal linear scan and the fused gated cell. Every
registered unit's layer and cell (:mod:`ctrlrnn.nn.registry`) is a name of this package.

Importing the package loads the layers (:mod:`ctrlrnn.nn`) and the ops (:mod:`ctrlrnn.ops`)
only. The names it exports from other modules (:data:`_LAZY`) are loaded on first access, and
the command line, training, benchmarks and reproduction load when they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ctrlrnn.nn import *  # noqa: F403 - every registered unit's layer and cell
from ctrlrnn.nn import (
    ContextualCARNNLM,
    HistorySummary,
    MetagrossFFN,
    PositionEncoder,
    RecurrentBase,
)
from ctrlrnn.nn.registry import unit_exports
from ctrlrnn.ops import (
    backend_info,
    empty_cache,
    linear_scan,
    linear_scan_ref,
    output_cache_info,
    set_output_cache_limit,
)
from ctrlrnn.ops._extension import KernelBuildWarning
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling, qrnn_pooling_ref

if TYPE_CHECKING:  # for type checkers: at run time these load on first access (``_LAZY``)
    from ctrlrnn.onnx_export import export_onnx as export_onnx
    from ctrlrnn.serialization import safe_globals as safe_globals

__version__ = "0.1.0"

#: exported name -> the module that defines it, imported on the name's first access
_LAZY: dict[str, str] = {
    "export_onnx": "ctrlrnn.onnx_export",
    "safe_globals": "ctrlrnn.serialization",
}

__all__ = [
    "ContextualCARNNLM",
    "HistorySummary",
    "KernelBuildWarning",
    "MetagrossFFN",
    "PositionEncoder",
    "RecurrentBase",
    "backend_info",
    "empty_cache",
    "linear_scan",
    "linear_scan_ref",
    "output_cache_info",
    "qrnn_pooling",
    "qrnn_pooling_ref",
    "set_output_cache_limit",
]
__all__ = sorted([*__all__, *_LAZY, *unit_exports()])
del unit_exports

#: the subpackages a user imports from by name (``ctrlrnn.nn``, ``ctrlrnn.ops``)
_PUBLIC_MODULES = ("nn", "ops")


def __getattr__(name: str) -> Any:
    """An exported name of :data:`_LAZY`, imported from its module on first access and kept
    here; AttributeError for any other name."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ctrlrnn' has no attribute {name!r}")
    found = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    """The public names only: ``__all__``, the public subpackages and ``__version__`` (not
    the modules and helpers that importing the package binds)."""
    return sorted([*__all__, *_PUBLIC_MODULES, "__version__"])
