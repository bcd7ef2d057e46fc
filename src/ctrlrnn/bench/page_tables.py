"""The full tables of BENCHMARKS.md: the targets, each group's time table, training memory,
the rows that did not keep their threads busy and the rows not measured."""

from __future__ import annotations

import statistics
from typing import Any

from ctrlrnn.bench.case_registry import Point
from ctrlrnn.bench.fresh_processes import TARGET_POINT_CASES
from ctrlrnn.bench.page_method import md_table
from ctrlrnn.bench.result_rows import (
    LOW_CPU_SHARE,
    MEMORY_HEADERS,
    MIB,
    TIME_HEADERS,
    fmt_share,
    fmt_time,
    memory_cells,
    memory_rows,
    time_cells,
    time_rows,
)
from ctrlrnn.bench.targets import target_notes, target_rows


def targets_lines(doc: dict[str, Any]) -> list[str]:
    """The "Targets" section: the project's goals beside this run's measurements."""
    lines: list[str] = []
    targets = target_rows(doc)
    lines += [
        "## Targets",
        "",
        "The project's performance goals, set beside this run's measurements (they are "
        "measurements, not tests).",
        "",
    ]
    lines += fresh_process_lines(doc)
    lines += md_table(["target", "measured", "goal", "met", "at equal efficiency"],
                       [list(t) for t in targets])
    lines += [
        "",
        "**at equal efficiency**: where a target compares two rows' times, the same ratio "
        "from their roofline floors (below), i.e. what it would read if both rows ran at the "
        "same share of their own floors. A goal beyond it asks the row to use the machine "
        "better than its baseline does.",
        "",
    ]
    notes = target_notes(doc)
    if notes:
        lines += [*(f"- {note}" for note in notes), ""]
    return lines


def fresh_process_lines(doc: dict[str, Any]) -> list[str]:
    """What the fresh processes of a run were (:mod:`ctrlrnn.bench.fresh_processes`), with
    nn.LSTM's time at each such point in the run's own process against the fresh ones."""
    processes = doc.get("settings", {}).get("processes", 0)
    if not processes:
        return []
    lines = []
    for b, t, c in doc["settings"].get("process_points", []):
        base = next((r for r in doc.get("results", []) if r.get("case") == "lstm"
                     and (r["batch"], r["length"], r["width"]) == (b, t, c)
                     and r.get("status") == "ok"), None)
        rows = TARGET_POINT_CASES.get(Point(b, t, c))
        which = ("every row was" if rows is None else
                 f"the rows the targets read ({', '.join(f'`{r}`' for r in rows)}) were")
        said = (f"At B={b}, T={t}, C={c} {which} timed again in {processes} fresh "
                "processes (each interleaving the rows, as the run does), and each ratio there "
                "is the median over those, with their range. ")
        parts = []
        for mode, what in (("fwd", "forward"), ("fwdbwd", "forward+backward")):
            fresh = [v for v in (base or {}).get("processes", {}).get(mode, []) if v]
            if base is not None and fresh:
                parts.append(f"{what} {fmt_time(base[mode]['median_s'])} in this run's own "
                             f"process and {fmt_time(statistics.median(fresh))} (median; "
                             f"{fmt_time(min(fresh))}-{fmt_time(max(fresh))}) in the fresh ones")
        if parts:
            said += (f"nn.LSTM there took: {'; '.join(parts)}. At such a point one process's "
                     "ratio is one draw (the run's own is in the JSON, as `ratios.speedup`).")
        lines += [said, ""]
    return lines


def time_lines(doc: dict[str, Any]) -> list[str]:
    """One time table per group of rows (layers, the linear scan)."""
    lines: list[str] = []
    rows = time_rows(doc)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for group, grows in groups.items():
        title = {"layer": "Layers", "scan": "Linear scan"}.get(group, group)
        lines += [f"## {title}: time", ""]
        lines += md_table(TIME_HEADERS, [time_cells(r) for r in grows])
        lines.append("")
    return lines


def memory_lines(doc: dict[str, Any]) -> list[str]:
    """The training-memory section and its least-squares lines, when the run measured it."""
    lines: list[str] = []
    mrows = memory_rows(doc)
    if mrows:
        meth = doc.get("memory_methods", {})
        lines += [
            "## Training memory against sequence length",
            "",
            f"- **train MiB** = saved MiB + params MiB. saved: {meth.get('train_bytes')}.",
            "- **peak RSS +MiB**: whole-process resident memory, "
            f"{meth.get('peak_rss_delta_bytes')} (includes gradients and temporaries; noisier).",
            "",
        ]
        lines += md_table(MEMORY_HEADERS, [memory_cells(r) for r in mrows])
        lines.append("")
        for f in doc.get("memory_fits", []):
            tb = f["train_bytes"]
            line = (
                f"- `{f['case']}` B={f['batch']} C={f['width']}: least-squares line "
                f"{tb['slope'] / 1024:.1f} KiB per step + {tb['intercept'] / MIB:.2f} MiB, "
                f"R^2 = {tb['r2']:.5f}; T grows x{f['growth']['length_ratio']:.0f}, train bytes "
                f"x{f['growth']['train_bytes_ratio']:.2f}"
            )
            if "peak_rss_delta_bytes" in f:
                line += f"; peak RSS delta R^2 = {f['peak_rss_delta_bytes']['r2']:.4f}"
            lines.append(line + ".")
        lines.append("")
    return lines


def low_share_lines(doc: dict[str, Any]) -> list[str]:
    """The rows whose CPU share during fwd+bwd stayed below :data:`LOW_CPU_SHARE`."""
    m = doc["machine"]
    rows = time_rows(doc)
    lines: list[str] = []
    low = [
        r
        for r in rows
        if r.get("status") == "ok" and (r["fwdbwd"].get("cpu_share") or 1.0) < LOW_CPU_SHARE
    ]
    if low:
        lines += [
            "## Rows that did not keep their threads busy",
            "",
            f"CPU share below {100 * LOW_CPU_SHARE:.0f}% during fwd+bwd: these rows ran "
            "(mostly) on fewer threads than the "
            f"{m.get('torch_threads')} available, or other processes took their CPUs while they "
            "ran. Either way their time is not what the machine can do.",
            "",
        ]
        for r in low:
            lines.append(
                f"- `{r['case']}` B={r['batch']} T={r['length']} C={r['width']}: "
                f"{fmt_share(r['fwdbwd']['cpu_share'])}"
            )
        lines.append("")
    return lines


def not_measured_lines(doc: dict[str, Any]) -> list[str]:
    """The rows that did not measure, with their status and reason."""
    lines: list[str] = []
    bad = [r for r in doc.get("results", []) if r.get("status") != "ok"]
    if bad:
        lines += ["## Rows not measured", ""]
        for r in bad:
            lines.append(
                f"- `{r['case']}` B={r['batch']} T={r['length']} C={r['width']}: "
                f"{r['status']}: {r.get('reason', '')}"
            )
        lines.append("")
    return lines
