"""Every benchmark row, registered in the order of the table.

:mod:`ctrlrnn.bench.case_registry` defines a row (:func:`case`, :class:`Workload`) and holds
:data:`REGISTRY`; the rows register themselves when their modules are imported, here, in this
order:

* :mod:`ctrlrnn.bench.cases_torch`: ``torch.nn.LSTM`` and ``torch.nn.GRU``, and the papers'
  stacked LSTM baselines;
* :mod:`ctrlrnn.bench.cases_scan`: the linear scan, compiled, reference and as Python loops;
* :mod:`ctrlrnn.bench.cases_fused`: the fused LSTM and GRU cells;
* :mod:`ctrlrnn.bench.cases_units`: every registered unit's rows, as its entry declares them
  (:class:`ctrlrnn.nn.registry.BenchRow`), in the registry's order;
* :mod:`ctrlrnn.bench.cases_memory`: the training-memory rows.

The names below are re-exported for the callers of the bench (``ctrlrnn bench``, the tests).
"""

from __future__ import annotations

# The rows register as their modules are imported: this order is the table's.
# isort: off
from ctrlrnn.bench import cases_torch
from ctrlrnn.bench import cases_scan
from ctrlrnn.bench import cases_fused
from ctrlrnn.bench import cases_units
from ctrlrnn.bench import cases_memory

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
    "cases_fused",
    "cases_memory",
    "cases_scan",
    "cases_torch",
    "cases_units",
    "family_backend",
    "gru",
    "lstm",
    "scan_python_loop",
    "scan_python_loop_unbind",
    "select",
]
