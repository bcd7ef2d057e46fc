"""The registry of recurrent units: one entry per unit, declared on its layer class.

A unit is a layer class on the :class:`~ctrlrnn.nn.base.RecurrentBase` contract, registered
with :func:`register_unit` under a name::

    @register_unit("qrnn", description="Quasi-recurrent network (QRNN paper)",
                   options={"window": (int | tuple[int, ...], 2), "pooling": (str, "fo")},
                   cell=QRNNCell, bench=[BenchRow(...)])
    class QRNN(RecurrentBase):
        ...

Everything that lists the units reads :data:`UNITS`: ``--model NAME`` of ``ctrlrnn train``
(:data:`ctrlrnn.models.encoders.ENCODERS`, whose ``model.*`` options are the entry's
``options``), the help of ``ctrlrnn train``, the names :mod:`ctrlrnn.nn` and :mod:`ctrlrnn`
export (the layer and its cell), and the rows of ``ctrlrnn bench`` (the entry's ``bench``).
The units register in the order their modules are imported, and are listed in that order.
docs/adding-a-unit.md walks through adding one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the grids a bench row may run on (``ctrlrnn.bench.grids``): "layer" (the layers' quick and
#: full grids), "target" (the layer targets' point (32, 256, 256) in the quick run, the layers'
#: full grid), "rcrn_table10" (the RCRN paper's table 10: width 200, batch 32)
BENCH_GRIDS = ("layer", "target", "rcrn_table10")


@dataclass(frozen=True)
class BenchRow:
    """One row of ``ctrlrnn bench`` for a unit: how it is built, called and what it costs.

    The bench builds ``cls(C, C, batch_first=True, **options)`` at width ``C`` (with
    ``context_size=C`` when ``context``) and times ``layer(x)[0]`` (``layer(x, context)[0]``
    with a ``(B, C)`` context when ``context``) on a ``(B, T, C)`` input. Its roofline floor
    (``ctrlrnn.bench.costs``) is read off two declarations, both functions of ``C``:

    * ``gemms``: the matrix products of the forward pass, as ``(k, n)`` for a ``(B*T, k) @
      (k, n)`` GEMM each (their backward counts twice);
    * ``values``: the fewest elementwise values a fused implementation moves, as ``(units,
      forward values, backward values)`` per (batch, step, unit) of each part.

    Attributes:
        name: the row's name (``ctrlrnn bench --only NAME``).
        description: one line for the table and BENCHMARKS.md.
        gemms: ``C -> [(k, n), ...]``.
        values: ``C -> [(units, forward, backward), ...]``.
        options: constructor keywords beyond the sizes and ``batch_first``.
        grid: one of :data:`BENCH_GRIDS`.
        compare_to: the rows whose time at the same point this one is compared with.
        context: the unit reads a context vector (see above).
        backend: an op family whose active backend the row records (e.g. ``"scan"``).
    """

    name: str
    description: str
    gemms: Callable[[int], Sequence[tuple[int, int]]]
    values: Callable[[int], Sequence[tuple[int, int, int]]]
    options: Mapping[str, Any] = field(default_factory=dict)
    grid: str = "layer"
    compare_to: tuple[str, ...] = ("lstm",)
    context: bool = False
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.grid not in BENCH_GRIDS:
            raise ValueError(f"grid: expected one of {BENCH_GRIDS}, got {self.grid!r}")


@dataclass(frozen=True)
class Unit:
    """A registered unit (see the module docstring).

    Attributes:
        name: the encoder name (``ctrlrnn train --model NAME``).
        cls: the layer class.
        description: one line for ``ctrlrnn train --help``.
        options: the ``model.*`` options the layer takes beyond the common ones (hidden size,
            layers, dropout, direction), as ``{key: (type, default)}``.
        cell: the single-step cell class, or None.
        bench: the unit's rows of ``ctrlrnn bench``.
    """

    name: str
    cls: type
    description: str
    options: Mapping[str, tuple[Any, Any]]
    cell: type | None = None
    bench: tuple[BenchRow, ...] = ()

    @property
    def exports(self) -> tuple[str, ...]:
        """The names :mod:`ctrlrnn.nn` and :mod:`ctrlrnn` export for it: the layer and the
        cell."""
        classes = (self.cls,) if self.cell is None else (self.cls, self.cell)
        return tuple(c.__name__ for c in classes)


#: name -> unit, in registration order
UNITS: dict[str, Unit] = {}


def register_unit(
    name: str,
    *,
    description: str,
    options: Mapping[str, tuple[Any, Any]] | None = None,
    cell: type | None = None,
    bench: Iterable[BenchRow] = (),
) -> Callable[[type], type]:
    """Class decorator registering the layer class as the unit ``name`` (see the module
    docstring); returns the class unchanged."""

    def deco(cls: type) -> type:
        if name in UNITS:
            raise ValueError(f"name: a unit {name!r} is already registered "
                             f"({UNITS[name].cls.__module__}.{UNITS[name].cls.__qualname__})")
        unit = Unit(name=name, cls=cls, description=description, options=dict(options or {}),
                    cell=cell, bench=tuple(bench))
        UNITS[name] = unit
        return cls

    return deco


def unregister_unit(name: str) -> Unit:
    """Remove the unit ``name`` from the registry (a test's, or a notebook cell run again);
    returns its entry."""
    if name not in UNITS:
        raise ValueError(f"name: no unit {name!r} is registered (registered: {', '.join(UNITS)})")
    return UNITS.pop(name)


def unit_exports() -> list[str]:
    """Every registered unit's exported names (:attr:`Unit.exports`), in registration order."""
    return [n for unit in UNITS.values() for n in unit.exports]
