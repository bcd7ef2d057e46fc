"""A result document printed to the terminal: machine, roofline, time and memory tables,
targets, fitted to the console's width."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctrlrnn.bench.machine import machine_summary
from ctrlrnn.bench.result_rows import memory_cells, memory_rows, time_cells, time_rows
from ctrlrnn.bench.targets import target_notes, target_rows

#: The screen's time table: when the console is narrow the columns of highest ``drop`` are
#: left out first (the JSON file and BENCHMARKS.md keep every column).
SCREEN_TIME_COLUMNS = [
    ("case", {}),
    ("B", {"justify": "right"}),
    ("T", {"justify": "right"}),
    ("C", {"justify": "right"}),
    ("fwd", {"justify": "right", "drop": 4}),
    ("fwd / floor", {"justify": "right", "drop": 5, "short": "/floor"}),
    ("fwd+bwd", {"justify": "right"}),
    ("fwd+bwd / floor", {"justify": "right", "drop": 2, "short": "/floor"}),
    ("fwd speed-up", {"wrap": ", ", "drop": 6}),
    ("fwd+bwd speed-up", {"wrap": ", ", "drop": 3}),
    ("CPU share", {"justify": "right", "drop": 7, "short": "CPU"}),
]
SCREEN_MEMORY_COLUMNS = [
    ("case", {}),
    ("B", {"justify": "right"}),
    ("T", {"justify": "right"}),
    ("C", {"justify": "right"}),
    ("train MiB", {"justify": "right"}),
    ("saved MiB", {"justify": "right", "drop": 2}),
    ("params MiB", {"justify": "right", "drop": 3}),
    ("peak RSS +MiB", {"justify": "right", "drop": 4}),
]


def _screen_cells(r: dict[str, Any], cells: Callable[[dict[str, Any]], list[str]],
                  n: int, status_at: int) -> list[str]:
    """``cells(r)`` for a measured row; for a failed or skipped one, its status in column
    ``status_at`` (a column never left out) and the reason printed under the table."""
    if r.get("status") == "ok":
        return cells(r)
    row = [r["case"], str(r["batch"]), str(r["length"]), str(r["width"])] + [""] * (n - 4)
    row[status_at] = str(r.get("status", "?"))
    return row


def _not_measured(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {r['case']} B={r['batch']} T={r['length']} C={r['width']} {r.get('status', '?')}: "
        f"{r.get('reason', '')}"
        for r in rows
        if r.get("status") != "ok"
    ]


def print_report(doc: dict[str, Any], console: Any = None) -> None:
    """Print the machine line, roofline, time table, memory table and targets with rich.

    The tables fit the console's width (:func:`ctrlrnn.tables.fit_table`): on a narrow one
    the less important columns are left out (named under the table), numbers are never cut."""
    # rich (and ctrlrnn.tables, built on it) come with the `train` extra: imported here so that
    # the bench's modules load without it
    from rich.console import Console
    from rich.markup import escape

    from ctrlrnn.tables import Col, fit_table

    console = console or Console()
    width = console.width
    roof = doc["roofline"]
    console.print(f"[bold]machine[/]: {machine_summary(doc['machine'])}")
    console.print(
        f"[bold]roofline[/] (this run): GEMM {roof['gemm_gflops']:.1f} GFLOP/s at "
        f"{'x'.join(map(str, roof['gemm_shape']))}, copy {roof['copy_gb_per_s']:.1f} GB/s "
        f"(read+write), {doc['dtype']}, medians of {len(roof['gemm_samples_s'])}"
        + (
            f"; clone into fresh memory {roof['clone_gb_per_s']:.1f} GB/s (not in the floor)"
            if roof.get("clone_gb_per_s")
            else ""
        )
    )
    rows = time_rows(doc)
    if rows:
        cols = [Col(h, **kw) for h, kw in SCREEN_TIME_COLUMNS]
        cells = [_screen_cells(r, time_cells, len(cols), 6) for r in rows]
        layout = fit_table(width, cols, cells)
        legend = "/floor: the time over the roofline floor" if layout.style == "compact" else None
        console.print(layout.table(
            cells,
            title="time (medians; floor = GEMM FLOPs / GEMM rate + bytes / bandwidth)",
            caption=legend,
        ))
        for line in _not_measured(rows):
            console.print(escape(line))
    mrows = memory_rows(doc)
    if mrows:
        cols = [Col(h, **kw) for h, kw in SCREEN_MEMORY_COLUMNS]
        cells = [_screen_cells(r, memory_cells, len(cols), 4) for r in mrows]
        layout = fit_table(width, cols, cells)
        console.print(layout.table(
            cells, title="training memory of one step (train = saved-for-backward + params)"
        ))
        for line in _not_measured(mrows):
            console.print(escape(line))
        for f in doc.get("memory_fits", []):
            tb = f["train_bytes"]
            console.print(
                f"  {f['case']} B={f['batch']} C={f['width']}: {tb['slope'] / 1024:.1f} KiB per "
                f"step, R^2 {tb['r2']:.5f}; T x{f['growth']['length_ratio']:.0f} -> train bytes "
                f"x{f['growth']['train_bytes_ratio']:.2f}"
            )
    cols = [Col("target", wrap=True, min_width=30), Col("measured"), Col("goal"), Col("met"),
            Col("at equal efficiency")]
    trows = [list(row) for row in target_rows(doc)]
    layout = fit_table(width, cols, trows)
    console.print(layout.table(trows, title="targets (measured values, not pass/fail tests)"))
    for note in target_notes(doc):
        console.print(escape(f"  {note}"))
