"""ctrlrnn: controlled recurrent networks for PyTorch.

QRNN, RCRN, CARNN, METAGROSS and CAS-LSTM as drop-in replacements for :class:`torch.nn.LSTM`,
built on two compiled primitives: the diagonal linear scan and the fused gated cell. Every
registered unit's layer and cell (:mod:`ctrlrnn.nn.registry`) is a name of this package.
"""

from __future__ import annotations

from ctrlrnn.nn import *  # noqa: F403 - every registered unit's layer and cell
from ctrlrnn.nn import (
    ContextualCARNNLM,
    HistorySummary,
    MetagrossFFN,
    PositionEncoder,
    RecurrentBase,
)
from ctrlrnn.nn.registry import unit_exports
from ctrlrnn.onnx_export import export_onnx
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
from ctrlrnn.serialization import safe_globals

__version__ = "0.1.0"

__all__ = [
    "ContextualCARNNLM",
    "HistorySummary",
    "KernelBuildWarning",
    "MetagrossFFN",
    "PositionEncoder",
    "RecurrentBase",
    "backend_info",
    "empty_cache",
    "export_onnx",
    "linear_scan",
    "linear_scan_ref",
    "output_cache_info",
    "qrnn_pooling",
    "qrnn_pooling_ref",
    "safe_globals",
    "set_output_cache_limit",
]
__all__ = sorted([*__all__, *unit_exports()])
del unit_exports

#: the subpackages a user imports from by name (``ctrlrnn.nn``, ``ctrlrnn.ops``)
_PUBLIC_MODULES = ("nn", "ops")


def __dir__() -> list[str]:
    """The public names only: ``__all__``, the public subpackages and ``__version__`` (not
    the modules and helpers that importing the package binds)."""
    return sorted([*__all__, *_PUBLIC_MODULES, "__version__"])
