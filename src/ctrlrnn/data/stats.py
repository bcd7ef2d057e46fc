"""Statistics of a prepared data set: examples per split, vocabulary, mean length."""

from __future__ import annotations

from collections.abc import Iterable, Sized
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SplitStats:
    """One split: number of examples, total and mean length in ``unit``."""

    name: str
    examples: int
    total_length: int

    @property
    def mean_length(self) -> float:
        return self.total_length / self.examples if self.examples else 0.0


@dataclass
class DatasetStats:
    """Statistics of one data set, as recorded in its manifest and printed by ``prepare``."""

    name: str
    splits: list[SplitStats]
    vocab_size: int | None
    unit: str = "tokens"
    extra: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetStats:
        splits = [SplitStats(**s) for s in data["splits"]]
        return cls(data["name"], splits, data["vocab_size"], data.get("unit", "tokens"),
                   dict(data.get("extra", {})))


def split_stats(name: str, sequences: Iterable[Sized]) -> SplitStats:
    """Stats of a split given its examples (anything with a length)."""
    count = total = 0
    for sequence in sequences:
        count += 1
        total += len(sequence)
    return SplitStats(name, count, total)


def render_stats(stats: DatasetStats, width: int | None = None) -> Any:
    """A :class:`rich.table.Table` of ``stats``, fitted to a console ``width`` columns wide
    (numbers are never cut; see :func:`ctrlrnn.tables.fit_table`)."""
    # rich (ctrlrnn.tables is built on it) is the `train` extra: reading statistics needs none
    from ctrlrnn.tables import Col, fit_table

    title = f"{stats.name}: vocabulary {stats.vocab_size if stats.vocab_size is not None else '-'}"
    cols = [
        Col("split"),
        Col("examples", justify="right"),
        Col(f"{stats.unit} (total)", justify="right", drop=1),
        Col(f"mean length ({stats.unit})", justify="right"),
    ]
    rows = [[s.name, f"{s.examples:,}", f"{s.total_length:,}", f"{s.mean_length:.2f}"]
            for s in stats.splits]
    return fit_table(width or 1000, cols, rows).table(rows, title=title)
