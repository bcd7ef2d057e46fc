"""Every benchmark row, registered in the order of the table.

:mod:`ctrlrnn.bench.case_registry` defines a row (:func:`case`, :class:`Workload`) and holds
:data:`REGISTRY`; the rows register themselves when their modules are imported, here, in this
order:

* :mod:`ctrlrnn.bench.cases_torch`: ``torch.nn.LSTM`` and ``torch.nn.GRU``;
* :mod:`ctrlrnn.bench.cases_scan`: the linear scan, compiled, reference and as Python loops;
* :mod:`ctrlrnn.bench.cases_qrnn`: the QRNN's poolings and the training-memory rows;
* :mod:`ctrlrnn.bench.cases_architectures`: the papers' baselines, the fused cells and the
  other architectures.

The names below are re-exported for the callers of the bench (``ctrlrnn bench``, the tests).
"""

from __future__ import annotations

# The rows register as their modules are imported: this order is the table's.
# isort: off
from ctrlrnn.bench import cases_torch
from ctrlrnn.bench import cases_scan
from ctrlrnn.bench import cases_qrnn
from ctrlrnn.bench import cases_architectures

# isort: on
from ctrlrnn.bench.case_registry import (
    REGISTRY,
    Builder,
    Case,
    CaseUnavailable,
    Cost,
    Kind,
    Point,
    Workload,
    case,
    select,
)
from ctrlrnn.bench.cases_scan import scan_python_loop, scan_python_loop_unbind
from ctrlrnn.bench.cases_torch import gru, lstm
from ctrlrnn.bench.workloads import backend_info, family_backend

__all__ = [
    "REGISTRY",
    "Builder",
    "Case",
    "CaseUnavailable",
    "Cost",
    "Kind",
    "Point",
    "Workload",
    "backend_info",
    "case",
    "cases_architectures",
    "cases_qrnn",
    "cases_scan",
    "cases_torch",
    "family_backend",
    "gru",
    "lstm",
    "scan_python_loop",
    "scan_python_loop_unbind",
    "select",
]
