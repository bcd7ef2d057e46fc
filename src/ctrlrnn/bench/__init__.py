"""Speed and roofline measurement: ``ctrlrnn bench``.

* :mod:`ctrlrnn.bench.roofline` measures the GEMM rate and the copy bandwidth in the same run;
* :mod:`ctrlrnn.bench.timing` and :mod:`ctrlrnn.bench.memory` time and size one workload;
* :mod:`ctrlrnn.bench.case_registry` defines a row (one decorated builder per row), and
  :mod:`ctrlrnn.bench.cases` registers every row, from the ``cases_*`` modules, with the cost
  models of :mod:`ctrlrnn.bench.costs` and the grids of :mod:`ctrlrnn.bench.grids`;
* :mod:`ctrlrnn.bench.runner` runs a grid and returns one JSON-ready document; it times the
  small-shape and batch-1 points again in fresh processes (:mod:`ctrlrnn.bench.fresh_processes`,
  each one :mod:`ctrlrnn.bench.fresh_process_child`) and takes their ratios' medians;
* :mod:`ctrlrnn.bench.report` saves it and loads it; :mod:`ctrlrnn.bench.screen` prints it and
  :mod:`ctrlrnn.bench.benchmarks_page` writes BENCHMARKS.md from it;
* :mod:`ctrlrnn.bench.cli` is the ``ctrlrnn bench`` sub-command;
* :mod:`ctrlrnn.bench.gpu_check` is ``scripts/gpu-check``: the CUDA tests and benchmarks
  (:mod:`ctrlrnn.bench.gpu_benchmarks`) and ``docs/gpu.md`` (:mod:`ctrlrnn.bench.gpu_page`).
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
