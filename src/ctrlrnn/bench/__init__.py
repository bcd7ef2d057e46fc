"""Speed and roofline measurement: ``ctrlrnn bench``.

* :mod:`ctrlrnn.bench.roofline` measures the GEMM rate and the copy bandwidth in the same run;
* :mod:`ctrlrnn.bench.timing` and :mod:`ctrlrnn.bench.memory` time and size one workload;
* :mod:`ctrlrnn.bench.cases` is the registry of rows (one decorated builder per row);
* :mod:`ctrlrnn.bench.runner` runs a grid and returns one JSON-ready document;
* :mod:`ctrlrnn.bench.report` prints it, saves it, and writes BENCHMARKS.md from it;
* :mod:`ctrlrnn.bench.cli` is the ``ctrlrnn bench`` sub-command.
"""

from __future__ import annotations

from ctrlrnn.bench.cases import REGISTRY, Case, CaseUnavailable, Cost, Point, Workload, case
from ctrlrnn.bench.roofline import Roofline
from ctrlrnn.bench.runner import run

__all__ = [
    "REGISTRY",
    "Case",
    "CaseUnavailable",
    "Cost",
    "Point",
    "Roofline",
    "Workload",
    "case",
    "run",
]
