"""The benchmark case registry: one entry per row of the benchmark.

A case is a function that builds the work for one grid point ``(batch, length, width)`` and
declares what that work costs at minimum, so the roofline floor is computed per case:

* ``flops``: matrix-multiply FLOPs of the forward pass and of the backward pass (the backward
  of a GEMM is two GEMMs of the same size, for the weight and the input gradients, so 2x);
* ``bytes``: the elementwise bytes a fused implementation must move at minimum, forward and
  backward (GEMM operands are not counted here; they are in the GEMM time).

Adding a row is one decorated function::

    @case("gru", group="layer", quick=LAYER_QUICK, full=LAYER_FULL,
          description="torch.nn.GRU, 1 layer, input = hidden = width")
    def gru(p: Point, dtype: torch.dtype) -> Workload:
        m = torch.nn.GRU(p.width, p.width, batch_first=True).to(dtype)
        x = _input(p, dtype)
        return Workload(
            fn=lambda: m(x)[0],
            leaves=[x, *m.parameters()],
            params=list(m.parameters()),
            flops=gated_rnn_flops(p, p.width, p.width, gates=3),
            bytes=per_unit_bytes(p, p.width, dtype, fwd=8, bwd=12),
        )

A builder that needs something not available in this installation (e.g. an op not built yet)
raises :class:`CaseUnavailable` with the reason; the run records the row as skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any, Literal

import torch
from torch import nn

from ctrlrnn.bench.timing import Outputs

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


# --------------------------------------------------------------------------------------------
# Cost models
# --------------------------------------------------------------------------------------------


def gemm_cost(m: int, k: int, n: int) -> Cost:
    """FLOPs of ``(m, k) @ (k, n)``: ``2*m*k*n`` forward, twice that backward (input and
    weight gradients)."""
    f = 2.0 * m * k * n
    return Cost(fwd=f, bwd=2.0 * f)


def gated_rnn_flops(p: Point, input_size: int, hidden: int, gates: int) -> Cost:
    """Matmul FLOPs of a 1-layer gated RNN (LSTM: 4 gates, GRU: 3): the input projection and the
    recurrent projection, ``2*B*T*(input_size + hidden)*(gates*hidden)`` forward."""
    return gemm_cost(p.batch * p.length, input_size + hidden, gates * hidden)


def qrnn_flops(p: Point, input_size: int, hidden: int, window: int, gates: int) -> Cost:
    """Matmul FLOPs of a QRNN layer: the causal convolution of width ``window`` as one GEMM,
    ``2*B*T*(window*input_size)*(gates*hidden)`` forward."""
    return gemm_cost(p.batch * p.length, window * input_size, gates * hidden)


def per_unit_bytes(p: Point, units: int, dtype: torch.dtype, *, fwd: int, bwd: int) -> Cost:
    """Elementwise bytes when each of ``B*T*units`` positions moves ``fwd`` (forward) and
    ``bwd`` (backward) values of ``dtype``."""
    n = p.batch * p.length * units * _itemsize(dtype)
    return Cost(fwd=float(n * fwd), bwd=float(n * bwd))


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


#: Elementwise values per (batch, step, unit) of the fused LSTM cell: forward reads the 4 gate
#: pre-activations and c_{t-1}, writes h_t and c_t; backward reads the 4 saved gate
#: activations, c_t and grad h_t, writes the 4 gate gradients.
LSTM_UNIT_VALUES = (7, 10)
#: GRU: forward reads 3 input and 3 recurrent pre-activations and h_{t-1}, writes h_t; backward
#: reads the saved r, z, n and the recurrent n pre-activation, h_{t-1} and grad h_t, writes 3+3
#: pre-activation gradients.
GRU_UNIT_VALUES = (8, 12)
#: Linear scan per element: forward reads a, b and writes h; backward reads grad h, a, h and
#: writes grad a, grad b.
SCAN_ELEMENT_VALUES = (3, 5)
#: QRNN pooling gates per pooling mode.
QRNN_GATES = {"f": 2, "fo": 3, "ifo": 4}


def qrnn_unit_values(pooling: str) -> tuple[int, int]:
    """Elementwise values per (batch, step, unit) of the fused QRNN pooling: forward reads the G
    gate pre-activations and writes h and c (f-pooling: h is c, one write); backward reads the
    G gates, c and grad h, writes the G gate gradients."""
    g = QRNN_GATES[pooling]
    fwd = g + (1 if pooling == "f" else 2)
    return fwd, 2 * g + 2


# --------------------------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------------------------


def _grid(batches: Iterable[int], lengths: Iterable[int], widths: Iterable[int]) -> list[Point]:
    return [Point(b, t, w) for b, t, w in itertools.product(batches, lengths, widths)]


#: Layers, quick: the training point of the targets and the B=1 long-sequence inference point.
LAYER_QUICK = (Point(32, 256, 256), Point(1, 1024, 256), Point(8, 512, 512))
LAYER_FULL = tuple(_grid((1, 8, 32), (256, 1024), (256, 512, 1024)))
#: Scan: the bandwidth target point (8M elements).
SCAN_QUICK = (Point(32, 256, 1024),)
SCAN_FULL = (
    Point(32, 256, 1024),
    Point(1, 4096, 256),
    Point(8, 1024, 512),
    Point(32, 1024, 1024),
    Point(64, 512, 2048),
)
#: The Python loop over unbound steps is slow at long lengths; the full grid stops it at 1024.
SCAN_LOOP_FULL = tuple(p for p in SCAN_FULL if p.length <= 1024)
#: The indexing loop's backward moves O(T^2 * B * C) bytes (and so may the reference): only the
#: target point, where one fwd+bwd already takes seconds.
SCAN_INDEXED_FULL = SCAN_QUICK
#: Memory growth over T, up to 16,384 steps.
MEMORY_LENGTHS = (1024, 2048, 4096, 8192, 16384)
MEMORY_QUICK = tuple(Point(4, t, 256) for t in MEMORY_LENGTHS)
MEMORY_FULL = tuple(Point(b, t, 256) for b in (4, 16) for t in MEMORY_LENGTHS)


# --------------------------------------------------------------------------------------------
# Helpers for builders
# --------------------------------------------------------------------------------------------


def _input(p: Point, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)


def _module_workload(
    m: nn.Module, x: torch.Tensor, flops: Cost, nbytes: Cost, **info: Any
) -> Workload:
    params = [q for q in m.parameters() if q.requires_grad]
    return Workload(
        fn=lambda: m(x)[0],
        flops=flops,
        bytes=nbytes,
        leaves=[x, *params],
        params=params,
        info=dict(info),
    )


def _ctrlrnn() -> Any:
    try:
        import ctrlrnn
    except Exception as exc:  # noqa: BLE001 - any import failure makes the row unavailable
        raise CaseUnavailable(f"import ctrlrnn failed: {type(exc).__name__}: {exc}") from exc
    return ctrlrnn


def _require(attr: str) -> Any:
    """``ctrlrnn.<attr>``, else ``ctrlrnn.ops.<attr>`` / ``ctrlrnn.nn.<attr>`` (the same object,
    before the top-level re-export exists); :class:`CaseUnavailable` when neither has it."""
    import importlib

    ctrlrnn = _ctrlrnn()
    if hasattr(ctrlrnn, attr):
        return getattr(ctrlrnn, attr)
    for sub in ("ctrlrnn.ops", "ctrlrnn.nn"):
        try:
            mod = importlib.import_module(sub)
        except Exception:  # noqa: BLE001 - a broken sub-package just means "not there"
            continue
        if hasattr(mod, attr):
            return getattr(mod, attr)
    raise CaseUnavailable(f"ctrlrnn.{attr} is not available in this ctrlrnn")


def backend_info() -> dict[str, Any] | str:
    """``ctrlrnn.backend_info()``, or the reason it could not be called."""
    try:
        return dict(_require("backend_info")())
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        return f"unavailable: {type(exc).__name__}: {exc}"


def family_backend(family: str, device: str = "cpu") -> str:
    """The active backend of one op family (e.g. ``"compiled"`` or ``"reference"`` for
    ``"scan"``) as ``ctrlrnn.backend_info()`` reports it; the whole report when it has no such
    entry."""
    info = backend_info()
    if isinstance(info, dict):
        fam = info.get("families", {}).get(family)
        if isinstance(fam, dict) and device in fam:
            return str(fam[device])
    return str(info)


# --------------------------------------------------------------------------------------------
# Cases: baselines
# --------------------------------------------------------------------------------------------


@case(
    "lstm",
    group="layer",
    quick=LAYER_QUICK,
    full=LAYER_FULL,
    description="torch.nn.LSTM, 1 layer, input = hidden = width",
)
def lstm(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.LSTM(width, width)``, batch first."""
    m = nn.LSTM(p.width, p.width, batch_first=True).to(dtype)
    return _module_workload(
        m,
        _input(p, dtype),
        gated_rnn_flops(p, p.width, p.width, gates=4),
        per_unit_bytes(p, p.width, dtype, fwd=LSTM_UNIT_VALUES[0], bwd=LSTM_UNIT_VALUES[1]),
    )


@case(
    "gru",
    group="layer",
    quick=LAYER_QUICK,
    full=LAYER_FULL,
    description="torch.nn.GRU, 1 layer, input = hidden = width",
)
def gru(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.GRU(width, width)``, batch first."""
    m = nn.GRU(p.width, p.width, batch_first=True).to(dtype)
    return _module_workload(
        m,
        _input(p, dtype),
        gated_rnn_flops(p, p.width, p.width, gates=3),
        per_unit_bytes(p, p.width, dtype, fwd=GRU_UNIT_VALUES[0], bwd=GRU_UNIT_VALUES[1]),
    )


# --------------------------------------------------------------------------------------------
# Cases: the linear scan
# --------------------------------------------------------------------------------------------


def _scan_inputs(p: Point, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)
    b = torch.randn(p.batch, p.length, p.width, generator=gen).to(dtype).requires_grad_(True)
    return a, b


def _scan_bytes(p: Point, dtype: torch.dtype) -> Cost:
    fwd, bwd = SCAN_ELEMENT_VALUES
    return per_unit_bytes(p, p.width, dtype, fwd=fwd, bwd=bwd)


def scan_python_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``h_t = a_t * h_{t-1} + b_t`` over dim 1 of batch-first ``(B, T, C)`` tensors, written
    the obvious way, ``h = a[:, t] * h + b[:, t]``, with autograd recording every step.

    Its backward is slow beyond the per-step overhead: the gradient of each ``a[:, t]`` slice
    is materialised by autograd as a full ``(B, T, C)`` zero tensor with one slice filled, so
    the backward moves O(T^2 * B * C) bytes. :func:`scan_python_loop_unbind` avoids that.
    """
    h = torch.zeros_like(a[:, 0])
    hs = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return torch.stack(hs, dim=1)


def scan_python_loop_unbind(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same loop over ``a.unbind(1)`` and ``b.unbind(1)``: autograd stacks the per-step
    gradients once, so the backward is O(T * B * C), only the per-step overhead remains."""
    h = torch.zeros_like(a[:, 0])
    hs = []
    for at, bt in zip(a.unbind(1), b.unbind(1), strict=True):
        h = at * h + bt
        hs.append(h)
    return torch.stack(hs, dim=1)


@case(
    "scan_loop",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_INDEXED_FULL,
    compare_to=(),
    warmup=0,
    max_repeats=3,
    min_repeats=1,
    description="linear scan as a Python loop with autograd, h = a[:, t] * h + b[:, t]",
)
def scan_loop(p: Point, dtype: torch.dtype) -> Workload:
    """The Python-loop linear scan (indexing), the comparison row for the compiled one."""
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: scan_python_loop(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )


@case(
    "scan_loop_unbind",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_LOOP_FULL,
    compare_to=(),
    description="the same Python loop over a.unbind(1), b.unbind(1) (no O(T^2) backward)",
)
def scan_loop_unbind(p: Point, dtype: torch.dtype) -> Workload:
    """The Python-loop linear scan over unbound time steps, a fairer loop baseline."""
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: scan_python_loop_unbind(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )


@case(
    "scan_compiled",
    group="scan",
    quick=SCAN_QUICK,
    full=SCAN_FULL,
    compare_to=("scan_loop", "scan_loop_unbind"),
    description="ctrlrnn.linear_scan (compiled backend), batch-first (B, T, C)",
)
def scan_compiled(p: Point, dtype: torch.dtype) -> Workload:
    """``ctrlrnn.linear_scan(a, b)`` with the active (compiled) backend."""
    linear_scan = _require("linear_scan")
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: linear_scan(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
        info={"backend": family_backend("scan")},
    )


@case(
    "scan_ref",
    group="scan",
    quick=(),
    full=SCAN_INDEXED_FULL,
    compare_to=("scan_loop", "scan_loop_unbind"),
    description="ctrlrnn.ops.linear_scan_ref (the readable reference implementation)",
)
def scan_ref(p: Point, dtype: torch.dtype) -> Workload:
    """``ctrlrnn.ops.linear_scan_ref(a, b)``."""
    linear_scan_ref = _require("linear_scan_ref")
    a, b = _scan_inputs(p, dtype)
    return Workload(
        fn=lambda: linear_scan_ref(a, b),
        flops=Cost(0.0, 0.0),
        bytes=_scan_bytes(p, dtype),
        leaves=[a, b],
    )


# --------------------------------------------------------------------------------------------
# Cases: QRNN
# --------------------------------------------------------------------------------------------

QRNN_WINDOW = 2


def _qrnn(p: Point, dtype: torch.dtype, pooling: str) -> Workload:
    qrnn_cls = _require("QRNN")
    m = qrnn_cls(p.width, p.width, batch_first=True, window=QRNN_WINDOW, pooling=pooling).to(dtype)
    fwd, bwd = qrnn_unit_values(pooling)
    return _module_workload(
        m,
        _input(p, dtype),
        qrnn_flops(p, p.width, p.width, QRNN_WINDOW, QRNN_GATES[pooling]),
        per_unit_bytes(p, p.width, dtype, fwd=fwd, bwd=bwd),
        backend=family_backend("scan"),
    )


def _register_qrnn(pooling: str) -> None:
    def build(p: Point, dtype: torch.dtype) -> Workload:
        return _qrnn(p, dtype, pooling)

    build.__name__ = build.__qualname__ = f"qrnn_{pooling}"
    build.__doc__ = f"``ctrlrnn.QRNN(width, width, window=2, pooling={pooling!r})``."
    case(
        f"qrnn_{pooling}",
        group="layer",
        quick=LAYER_QUICK,
        full=LAYER_FULL,
        description=(
            f"ctrlrnn.QRNN, window {QRNN_WINDOW}, {pooling}-pooling, input = hidden = width"
        ),
    )(build)


for _pooling in ("f", "fo", "ifo"):
    _register_qrnn(_pooling)


@case(
    "qrnn_fo_memory",
    group="memory",
    kind="memory",
    quick=MEMORY_QUICK,
    full=MEMORY_FULL,
    compare_to=(),
    description="ctrlrnn.QRNN fo, window 2: training memory against sequence length",
)
def qrnn_fo_memory(p: Point, dtype: torch.dtype) -> Workload:
    """The fo-pooling QRNN, measured for memory rather than time."""
    return _qrnn(p, dtype, "fo")


@case(
    "lstm_memory",
    group="memory",
    kind="memory",
    quick=(),
    full=MEMORY_FULL,
    compare_to=(),
    description="torch.nn.LSTM: training memory against sequence length (for comparison)",
)
def lstm_memory(p: Point, dtype: torch.dtype) -> Workload:
    """``torch.nn.LSTM``, measured for memory rather than time."""
    return lstm(p, dtype)


# The rows of the fused cells and the other architectures register themselves on import.
from ctrlrnn.bench import cases_architectures  # noqa: E402,F401
