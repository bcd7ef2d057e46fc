"""The benchmark case registry: one entry per row of the benchmark.

A case is a function that builds the work for one grid point ``(batch, length, width)`` and
declares what that work costs at minimum, so the roofline floor is computed per case:

* ``flops``: matrix-multiply FLOPs of the forward pass and of the backward pass (the backward
  of a GEMM is two GEMMs of the same size, for the weight and the input gradients, so 2x);
* ``bytes``: the elementwise bytes a fused implementation must move at minimum, forward and
  backward (GEMM operands are not counted here; they are in the GEMM time).

Adding a row is one decorated function (the cost models are in :mod:`ctrlrnn.bench.costs`,
the grids in :mod:`ctrlrnn.bench.grids`, the shared builder steps in
:mod:`ctrlrnn.bench.workloads`)::

    @case("gru", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
          description="torch.nn.GRU, 1 layer, input = hidden = width")
    def gru(p: Point, dtype: torch.dtype) -> Workload:
        m = torch.nn.GRU(p.width, p.width, batch_first=True).to(dtype)
        x = make_input(p, dtype)
        return Workload(
            fn=lambda: m(x)[0],
            leaves=[x, *m.parameters()],
            params=list(m.parameters()),
            flops=gated_rnn_flops(p, p.width, p.width, gates=3),
            bytes=per_unit_bytes(p, p.width, dtype, fwd=8, bwd=12),
        )

A builder that needs something not available in this installation (e.g. an op not built yet)
raises :class:`CaseUnavailable` with the reason; the run records the row as skipped.

The rows themselves are in the ``cases_*`` modules; :mod:`ctrlrnn.bench.cases` imports them in
the order of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any, Literal

import torch

from ctrlrnn.timing import Outputs

Kind = Literal["time", "memory"]


@dataclass(frozen=True, order=True)
class Point:
    """One grid point: batch size, sequence length and layer width (channels/hidden units)."""

    batch: int
    length: int
    width: int

    def __post_init__(self) -> None:
        for name in ("batch", "length", "width"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")

    @property
    def elements(self) -> int:
        """``batch * length * width``."""
        return self.batch * self.length * self.width


@dataclass(frozen=True)
class Cost:
    """A forward and a backward amount (FLOPs or bytes)."""

    fwd: float
    bwd: float

    @property
    def total(self) -> float:
        """Forward plus backward."""
        return self.fwd + self.bwd

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form."""
        return {"fwd": float(self.fwd), "bwd": float(self.bwd)}


@dataclass
class Workload:
    """What a case builder returns for one grid point.

    Attributes:
        fn: runs the forward pass and returns its outputs (tensor or tuple of tensors).
        flops: matmul FLOPs, forward and backward.
        bytes: minimal elementwise bytes, forward and backward.
        leaves: tensors that require grad (parameters and inputs); their ``.grad`` is reset.
        params: parameters (for the memory measurement's parameter bytes).
        info: free-form facts about this build worth recording (e.g. which backend ran).
    """

    fn: Callable[[], Outputs]
    flops: Cost
    bytes: Cost
    leaves: list[torch.Tensor] = field(default_factory=list)
    params: list[torch.Tensor] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


Builder = Callable[[Point, torch.dtype], Workload]


class CaseUnavailable(RuntimeError):
    """Raised by a builder when its op or layer is not available in this installation."""


@dataclass(frozen=True)
class Case:
    """A registered benchmark row.

    Attributes:
        name: unique name (used by ``--only``).
        build: the builder.
        group: ``"layer"`` (compared with ``torch.nn.LSTM``) or ``"scan"`` or another family.
        kind: ``"time"`` (forward and forward+backward timings) or ``"memory"`` (training
            memory over the grid's lengths).
        compare_to: names of cases whose time at the same point this row is divided by.
        quick: grid points of the quick run.
        full: grid points of the full run.
        description: one line for the table and BENCHMARKS.md.
        warmup: untimed calls before timing, overriding the run's setting (None: the run's).
        max_repeats: cap on the timed repeats of this case (None: the run's ``repeats``); for
            rows so slow that the run's repeats would dominate the whole benchmark.
        min_repeats: the fewest timed repeats once the run's time budget per measurement
            (``max_seconds``) is spent (None: 3).
    """

    name: str
    build: Builder
    group: str
    kind: Kind
    compare_to: tuple[str, ...]
    quick: tuple[Point, ...]
    full: tuple[Point, ...]
    description: str
    warmup: int | None = None
    max_repeats: int | None = None
    min_repeats: int | None = None

    def points(self, grid: str) -> tuple[Point, ...]:
        """The points of ``grid`` (``"quick"``, ``"full"`` or ``"tiny"``: the first quick point
        shrunk to batch 2, length 8, width 8 - for tests)."""
        if grid == "quick":
            return self.quick
        if grid == "full":
            return self.full
        if grid == "tiny":
            if self.kind == "memory":
                return (Point(2, 8, 8), Point(2, 16, 8), Point(2, 32, 8))
            return (Point(2, 8, 8),)
        raise ValueError(f"grid: expected 'quick', 'full' or 'tiny', got {grid!r}")


#: name -> Case, in registration order (the order of the table).
REGISTRY: dict[str, Case] = {}


def case(
    name: str,
    *,
    group: str,
    quick: Iterable[Point],
    full: Iterable[Point],
    description: str,
    kind: Kind = "time",
    compare_to: Sequence[str] = ("lstm",),
    warmup: int | None = None,
    max_repeats: int | None = None,
    min_repeats: int | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator registering ``build`` as the case ``name`` (see the module docstring)."""

    def deco(build: Builder) -> Builder:
        if name in REGISTRY:
            raise ValueError(f"name: case {name!r} is already registered")
        REGISTRY[name] = Case(
            name=name,
            build=build,
            group=group,
            kind=kind,
            compare_to=tuple(c for c in compare_to if c != name),
            quick=tuple(quick),
            full=tuple(full),
            description=description,
            warmup=warmup,
            max_repeats=max_repeats,
            min_repeats=min_repeats,
        )
        return build

    return deco


def select(patterns: Sequence[str] | None = None, *, with_baselines: bool = True) -> list[Case]:
    """Cases whose name matches any glob in ``patterns`` (all when None or empty), in registry
    order. With ``with_baselines`` the cases they compare to are added, so every ratio is
    measured in the same run."""
    if not patterns:
        return list(REGISTRY.values())
    chosen = {
        n
        for n in REGISTRY
        if any(fnmatch(n, p) or (p in n and not any(ch in p for ch in "*?[")) for p in patterns)
    }
    if not chosen:
        raise ValueError(f"only: no case matches {list(patterns)}; known: {list(REGISTRY)}")
    if with_baselines:
        for n in list(chosen):
            chosen.update(c for c in REGISTRY[n].compare_to if c in REGISTRY)
    return [c for n, c in REGISTRY.items() if n in chosen]
