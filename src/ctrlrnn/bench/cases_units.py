"""Benchmark rows of the registered units: each unit declares its rows (``bench`` of its entry,
:class:`ctrlrnn.nn.registry.BenchRow`): how its layer is built and called at width C and the
least work its roofline floor counts. They are registered here, unit by unit, in the order of
the registry."""

from __future__ import annotations

import torch

from ctrlrnn.bench.case_registry import Point, Workload, case
from ctrlrnn.bench.costs import gemm_cost, per_unit_bytes, sum_costs
from ctrlrnn.bench.grids import (
    LAYER_FULL,
    LAYER_QUICK,
    RCRN_FULL,
    RCRN_QUICK,
    TARGET_QUICK,
)
from ctrlrnn.bench.workloads import family_backend, make_input, module_workload
from ctrlrnn.nn.registry import UNITS, BenchRow, Unit

#: a row's grid name (:data:`ctrlrnn.nn.registry.BENCH_GRIDS`) -> its quick and full points
GRIDS: dict[str, tuple[tuple[Point, ...], tuple[Point, ...]]] = {
    "layer": (LAYER_QUICK, LAYER_FULL),
    "target": (TARGET_QUICK, LAYER_FULL),
    "rcrn_table10": (RCRN_QUICK, RCRN_FULL),
}


def unit_workload(unit: Unit, row: BenchRow, p: Point, dtype: torch.dtype) -> Workload:
    """The workload of ``row`` of ``unit`` at ``p``: the layer built at width ``p.width``, its
    forward on a ``(B, T, C)`` input (and a ``(B, C)`` context when the row says so), the
    declared GEMMs and elementwise values as its costs."""
    C = p.width
    options = {**row.options, **({"context_size": C} if row.context else {})}
    m = unit.cls(C, C, batch_first=True, **options).to(dtype)
    x = make_input(p, dtype)
    flops = sum_costs(*(gemm_cost(p.batch * p.length, k, n) for k, n in row.gemms(C)))
    nbytes = sum_costs(*(per_unit_bytes(p, units, dtype, fwd=fwd, bwd=bwd)
                         for units, fwd, bwd in row.values(C)))
    info = {} if row.backend is None else {"backend": family_backend(row.backend)}
    if not row.context:
        return module_workload(m, x, flops, nbytes, **info)
    context = torch.randn(p.batch, C).to(dtype)
    params = [q for q in m.parameters() if q.requires_grad]
    return Workload(fn=lambda: m(x, context)[0], flops=flops, bytes=nbytes,
                    leaves=[x, *params], params=params, info=info)


def unit_row(unit_name: str, row_name: str) -> tuple[Unit, BenchRow]:
    """The unit ``unit_name`` and its row ``row_name``."""
    unit = UNITS[unit_name]
    return unit, next(r for r in unit.bench if r.name == row_name)


def _register(unit: Unit, row: BenchRow) -> None:
    def build(p: Point, dtype: torch.dtype) -> Workload:
        return unit_workload(unit, row, p, dtype)

    build.__name__ = build.__qualname__ = row.name
    build.__doc__ = f"``{unit.cls.__name__}``: {row.description}."
    quick, full = GRIDS[row.grid]
    case(row.name, group="layer", quick=quick, full=full, compare_to=row.compare_to,
         description=row.description)(build)


for _unit in UNITS.values():
    for _row in _unit.bench:
        _register(_unit, _row)
