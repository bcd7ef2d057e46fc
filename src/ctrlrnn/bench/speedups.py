"""Speed-ups between the rows of one benchmark run (or of one fresh process's records): the
one place that divides one case's median time by another's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def row_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """A time record's ``(case, batch, length, width, dtype)``: what :func:`speedups` keys by."""
    return (record["case"], record["batch"], record["length"], record["width"], record["dtype"])


def time_rows(records: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The ok time rows of ``records`` by :func:`row_key`."""
    return {
        row_key(r): r for r in records if r.get("kind") == "time" and r.get("status") == "ok"
    }


def speedups(records: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``other``'s median / the row's median, per mode, for each comparison case measured among
    ``records`` at the row's point and dtype (> 1: the row is faster); keyed by each ok time
    row's :func:`row_key`. ``runner.add_ratios`` stores them as
    ``ratios["speedup"]``; ``fresh_processes`` takes them from each fresh process's records."""
    index = time_rows(records)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, r in index.items():
        row: dict[str, dict[str, float]] = {}
        for other in r.get("compare_to", []):
            o = index.get((other, *key[1:]))
            if o is not None:
                row[other] = {mode: o[mode]["median_s"] / r[mode]["median_s"]
                              for mode in ("fwd", "fwdbwd")}
        out[key] = row
    return out
