"""BENCHMARKS.md from a result document. The page leads with its answer: a summary of each
unit's speed against ``torch.nn.LSTM`` on every CPU kind set beside the run, with the goals,
and a figure of it. Then the method (the machine, the roofline, what each number is, the
cases) and the full tables (the targets, the time and memory tables, the rows that did not
measure well, the runs set beside this one)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ctrlrnn.bench.page_method import (
    backend_lines,
    cases_lines,
    definitions_lines,
    md_table,
    method_lines,
    repeats_text,
    roofline_lines,
)
from ctrlrnn.bench.page_tables import (
    fresh_process_lines,
    low_share_lines,
    memory_lines,
    not_measured_lines,
    targets_lines,
    time_lines,
)
from ctrlrnn.bench.result_rows import (
    BUSY_ELSEWHERE,
    LOW_CPU_SHARE,
    fmt_ratio,
    fmt_time,
    speedups,
    time_rows,
)
from ctrlrnn.bench.targets import TARGETS, Target
from ctrlrnn.ops import gemm_path

__all__ = ["SUMMARY_TARGETS", "backend_lines", "busy_warning", "compare_lines", "figure_path",
           "fresh_process_lines", "gemm_lines", "kind_label", "markdown", "repeats_text",
           "speed_figure", "speed_summary", "summary_runs", "write_markdown"]


def busy_warning(doc: dict[str, Any]) -> list[str]:
    """Markdown lines warning that the run shared its CPUs, or nothing.

    Judged by what other processes took of the CPUs when the run started
    (``busy_cpus_elsewhere_at_start``, measured over half a second: more than
    :data:`BUSY_ELSEWHERE` CPUs), or, in results that predate that measure, by the 1-minute load
    average at the start (above half the CPU count; it trails the last minute, so it stays high
    for a while after other work stops); and by the rows' CPU shares (more than a quarter of the
    timed rows below :data:`LOW_CPU_SHARE`). The load at the end is not used: it includes the
    run itself.
    """
    m = doc.get("machine", {})
    cpus = m.get("cpus_available") or m.get("logical_cpus") or 1
    start = m.get("load_average_at_start")
    elsewhere = m.get("busy_cpus_elsewhere_at_start")
    shares = [
        r["fwdbwd"].get("cpu_share")
        for r in time_rows(doc)
        if r.get("status") == "ok" and r["fwdbwd"].get("cpu_share") is not None
    ]
    starved = sum(1 for v in shares if v < LOW_CPU_SHARE)
    if elsewhere is not None:
        busy_start = elsewhere > BUSY_ELSEWHERE
        at_start = f"other processes kept {elsewhere:.1f} of its {cpus} CPUs busy at the start"
    else:
        busy_start = bool(start) and start[0] > 0.5 * cpus
        at_start = (f"the 1-minute load average was {start[0] if start else 0.0:.1f} on {cpus} "
                    "CPUs at the start")
    if not busy_start and starved * 4 <= len(shares):
        return []
    return [
        f"> **This run shared the machine**: {at_start} and {starved} of {len(shares)} timed "
        f"rows got less than {100 * LOW_CPU_SHARE:.0f}% of their threads' CPU time. Every time "
        "below may be inflated, the roofline rates are depressed, and contention does not hit "
        "all rows alike: rows made of many small parallel regions (torch.nn.LSTM/GRU run one "
        "small GEMM per time step, each ending in a thread barrier) suffer far more than rows "
        "made of a few large ones (a QRNN's one GEMM and one scan), which inflates speed-ups "
        "over LSTM/GRU. The CPU share column shows how much CPU each row actually got. Re-run "
        "on an idle machine before quoting these numbers.",
        "",
    ]


def gemm_lines(doc: dict[str, Any]) -> list[str]:
    """Which GEMM path the run's compiled kernels took, overall and per row."""
    g = doc.get("gemm")
    if not g:
        return []
    how = ("each shape class on the path measured faster on this CPU (`CTRLRNN_GEMM=auto`)"
           if g.get("path") == "auto" else f"forced to `{g.get('path')}` (`CTRLRNN_GEMM`)")
    lines = [
        "## GEMM path",
        "",
        f"ctrlrnn's compiled kernels ran their float32 GEMMs with {how}; oneDNN reachable from "
        f"this torch: {'yes' if g.get('onednn_usable') else 'no'}. `step` = the per-step "
        "recurrent products, `bulk` = input projections and weight gradients; `blas` = torch's "
        "BLAS (MKL here), `blas1` = that BLAS held to the calling thread, `tiny` = ctrlrnn's "
        "own kernel for per-step products of at most 8 rows, `onednn` = oneDNN "
        "(what `torch.nn.LSTM` runs on). Rows on torch's own "
        "kernels only (nn.LSTM, nn.GRU, RCRN's controllers) show `-`.",
        "",
    ]
    rows = []
    for r in doc.get("results", []):
        if r.get("kind") != "time" or r.get("status") != "ok":
            continue
        used = r.get("gemm_uses") or {}
        rows.append([f"`{r['case']}`", str(r["batch"]), str(r["length"]), str(r["width"]),
                     gemm_path.summary(used)])
    lines += md_table(["case", "B", "T", "C", "GEMM path"], rows)
    return lines + [""]


def compare_lines(doc: dict[str, Any], label: str, source: str, other: dict[str, Any]) -> list[str]:
    """This run's fwd+bwd times beside another results file's, row by row."""
    mine = {(r["case"], r["batch"], r["length"], r["width"]): r for r in doc.get("results", [])
            if r.get("kind") == "time" and r.get("status") == "ok"}
    om = other.get("machine", {})
    og = (other.get("gemm") or {}).get("path", "torch.mm (before the GEMM path choice)")
    lines = [
        f"## Beside {label}",
        "",
        f"`{source}`: {other.get('grid')} grid, {other.get('created')}, CPU "
        f"{om.get('cpu_model')}"
        + (f" ({', '.join(om['cpu_isa'])})" if om.get("cpu_isa") else "")
        + f", torch {om.get('torch')}, GEMM path {og}. Times from different runs: compare the "
        "speed-ups (each measured within its own run), the times only on the same machine.",
        "",
    ]
    rows = []
    for r in other.get("results", []):
        key = (r.get("case"), r.get("batch"), r.get("length"), r.get("width"))
        here = mine.get(key)
        if here is None or r.get("status") != "ok" or r.get("kind") != "time":
            continue
        t_here, t_there = here["fwdbwd"]["median_s"], r["fwdbwd"]["median_s"]
        rows.append([f"`{key[0]}`", str(key[1]), str(key[2]), str(key[3]),
                     fmt_time(t_here), fmt_time(t_there), fmt_ratio(t_here / t_there),
                     speedups(here, "fwdbwd"), speedups(r, "fwdbwd")])
    lines += md_table(["case", "B", "T", "C", "fwd+bwd here", f"fwd+bwd {label}",
                        "here / there", "speed-up here", f"speed-up {label}"], rows)
    return lines + [""]


#: the targets of the summary: each sets a unit against torch's LSTM (short name, label)
SUMMARY_TARGETS: tuple[tuple[str, str], ...] = (
    ("QRNN, training", "QRNN fo fwd+bwd speed-up over nn.LSTM (B=32, T=256, C=256)"),
    ("QRNN, inference at batch 1", "QRNN fo inference speed-up over nn.LSTM (B=1, T=1024, C=256)"),
    ("QRNN, word-level LM shape", "QRNN fo fwd+bwd speed-up over nn.LSTM, word-level LM shape "
     "(B=20, T=35, C=650)"),
    ("CAS-LSTM, 2 layers", "CAS-LSTM 2x256 fwd+bwd time / 2-layer nn.LSTM (B=32, T=256)"),
    ("RCRN, against a 3-layer BiLSTM", "RCRN 200 bidirectional fwd+bwd time / 3-layer BiLSTM "
     "(B=32, T=256)"),
    ("METAGROSS", "METAGROSS depth 2 linear fwd+bwd time / nn.LSTM (B=32, T=256, C=256)"),
    ("METAGROSS as printed", "METAGROSS as printed (gates='state') depth 2 fwd+bwd time / "
     "nn.LSTM (B=32, T=256, C=256)"),
    ("fused LSTM cell", "fused LSTM fwd+bwd time / nn.LSTM (B=32, T=256, C=256)"),
    ("CAS-LSTM, small shape", "CAS-LSTM 2x64 fwd+bwd time / 2-layer nn.LSTM, small shape "
     "(B=2, T=128)"),
    ("RCRN, small shape", "RCRN 64 bidirectional fwd+bwd time / 3-layer BiLSTM, small shape "
     "(B=2, T=128)"),
    ("METAGROSS, small shape", "METAGROSS depth 2 linear fwd+bwd time / nn.LSTM, small shape "
     "(B=2, T=128, C=64)"),
    ("fused LSTM cell, small shape", "fused LSTM fwd+bwd time / nn.LSTM, small shape (B=2, "
     "T=128, C=64)"),
)
_POINT = re.compile(r"\((B=[^)]*)\)")


def _summary_target(label: str) -> Target:
    return next(t for t in TARGETS if t.label == label)


def _as_speed(t: Target, v: float | None) -> float | None:
    """A target's value as a speed against its baseline (> 1: faster): a time ratio
    inverted."""
    if v is None or v <= 0:
        return None
    return 1.0 / v if " time / " in t.label else v


def _goal_speed(t: Target) -> float:
    """A target's goal as a speed against its baseline (``<= 1.25x`` of the time: 0.80x)."""
    bound = float(re.findall(r"[\d.]+", t.goal_text)[0])
    return 1.0 / bound if " time / " in t.label else bound


def kind_label(doc: dict[str, Any]) -> str:
    """A run's CPU kind and date in a few words: "AMD EPYC, AVX-512 bf16, 2026-11-28"."""
    m = doc.get("machine", {})
    cpu = re.sub(r"\((?:R|TM)\)", "", str(m.get("cpu_model") or "CPU"))
    cpu = re.sub(r"\s+(?:Processor|CPU)\b.*$", "", cpu).strip() or "CPU"
    isa = set(m.get("cpu_isa") or [])
    vector = next((name for flag, name in (("avx512_fp16", "AVX-512 fp16"),
                                           ("avx512_bf16", "AVX-512 bf16"),
                                           ("avx512f", "AVX-512"), ("avx2", "AVX2"))
                   if flag in isa), "")
    date = str(doc.get("created") or "")[:10]
    return ", ".join(part for part in (cpu, vector, date) if part)


def speed_summary(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The summary table: per unit, its speed against its torch baseline in each run (each
    ``(column, document)``), with the goal, as markdown lines."""
    heads = ["unit (point)", "against", "goal", *(column for column, _doc in runs)]
    rows = []
    for name, label in SUMMARY_TARGETS:
        t = _summary_target(label)
        point = _POINT.search(label)
        against = "3-layer BiLSTM" if "BiLSTM" in label else (
            "2-layer nn.LSTM" if "2-layer" in label else "nn.LSTM")
        cells = []
        for _column, doc in runs:
            v = t.value(doc)
            speed = _as_speed(t, v)
            cells.append("-" if speed is None else
                         f"{speed:.2f}x" + ("" if t.goal(v) else " (below goal)"))
        rows.append([f"{name} ({point.group(1) if point else ''})", against,
                     f">= {_goal_speed(t):.2f}x", *cells])
    return md_table(heads, rows)


def speed_figure(runs: list[tuple[str, dict[str, Any]]], path: str | os.PathLike[str]) -> bool:
    """Draw the summary as bars (one group per unit, one bar per run) with each goal as a
    mark; False (nothing drawn) without matplotlib or without a value."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, goals, values = [], [], []
    short = ["QRNN\ntraining", "QRNN\ninference, B=1", "QRNN\nword LM shape", "CAS-LSTM",
             "RCRN\n(vs 3-layer BiLSTM)", "METAGROSS", "METAGROSS\nas printed"]
    for name, (_name, label) in zip(short, SUMMARY_TARGETS):  # the units at their main points
        t = _summary_target(label)
        names.append(name)
        goals.append(_goal_speed(t))
        values.append([_as_speed(t, t.value(doc)) for _column, doc in runs])
    if not any(v is not None for row in values for v in row):
        return False
    width = 0.8 / max(1, len(runs))
    fig, ax = plt.subplots(figsize=(9.0, 4.2))
    colors = ["#33608c", "#8fb3d9", "#c9d9ea", "#e3b27d", "#b0b0b0", "#7a9e7e"]
    for j, (column, _doc) in enumerate(runs):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(names))]
        ys = [row[j] if row[j] is not None else 0.0 for row in values]
        ax.bar(xs, ys, width, label=column, color=colors[j % len(colors)], edgecolor="#1b3a5c",
               linewidth=0.5)
    ax.scatter(range(len(names)), goals, marker="_", s=500, linewidths=2, color="#c0392b",
               zorder=4, label="goal")
    ax.axhline(1.0, color="#555555", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_ylabel("speed against its torch baseline (x)", fontsize=8)
    ax.set_title("Speed against torch's LSTMs (> 1: faster), float32, CPU", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def figure_path(page: str | os.PathLike[str]) -> Path:
    """Where the summary figure of ``page`` goes: ``docs/figures/<page>-speed.png`` beside a
    page whose folder holds ``docs/`` (BENCHMARKS.md at the repository's root), else
    ``<page>-speed.png`` beside it."""
    p = Path(page)
    name = f"{p.stem.lower()}-speed.png"
    return p.parent / "docs" / "figures" / name if (p.parent / "docs").is_dir() else \
        p.parent / name


def summary_runs(doc: dict[str, Any], compare: list[tuple[str, str, dict[str, Any]]] | None
                 ) -> list[tuple[str, dict[str, Any]]]:
    """The runs of the summary, ``(column, document)``: this run, then those set beside it."""
    return [(f"{kind_label(doc)} (this run)", doc)] + [
        (kind_label(other), other) for _label, _path, other in compare or []]


def _summary_lines(doc: dict[str, Any], compare: list[tuple[str, str, dict[str, Any]]] | None,
                   figure: str | None) -> list[str]:
    runs = summary_runs(doc, compare)
    lines = [
        "## Summary",
        "",
        "Each unit's speed against its torch baseline at the same width, in float32 (above 1: "
        "faster). Every row is training (forward and backward) but one, inference at batch 1. "
        "The point is batch B, length T and width C. Each column is one run "
        "on one CPU kind. The first is this page's run; the others are earlier runs of "
        "earlier code, set beside it at the end of the page. A ratio is the median over fresh "
        "processes where the run timed its point in them.",
        "",
        *speed_summary(runs),
        "",
    ]
    if figure:
        lines += [f"![Training speed against torch's LSTMs]({figure})", ""]
    return lines


def markdown(doc: dict[str, Any], *, source: str | None = None,
             compare: list[tuple[str, str, dict[str, Any]]] | None = None,
             figure: str | None = None) -> str:
    """BENCHMARKS.md text for the result document ``doc`` (``source``: the JSON's path;
    ``compare``: other runs as ``(label, path, document)``, set beside this one; ``figure``:
    the summary figure's path relative to the page, drawn by :func:`speed_figure`)."""
    lines: list[str] = [
        "# ctrlrnn benchmarks",
        "",
        *busy_warning(doc),
        *_summary_lines(doc, compare, figure),
        *method_lines(doc, source),
        *roofline_lines(doc),
        *definitions_lines(doc),
        *cases_lines(doc),
        *targets_lines(doc),
        *time_lines(doc),
        *memory_lines(doc),
        *low_share_lines(doc),
        *gemm_lines(doc),
    ]
    for label, path, other in compare or []:
        lines += compare_lines(doc, label, path, other)
    lines += not_measured_lines(doc)
    return "\n".join(lines)


def write_markdown(
    doc: dict[str, Any], path: str | os.PathLike[str], *, source: str | None = None,
    compare: list[tuple[str, str, dict[str, Any]]] | None = None,
) -> Path:
    """Write :func:`markdown` of ``doc`` to ``path``, with its summary figure
    (:func:`figure_path`); return the path."""
    p = Path(path)
    runs = summary_runs(doc, compare)
    figure = figure_path(p)
    drawn = speed_figure(runs, figure)
    shown = os.path.relpath(figure, p.parent).replace(os.sep, "/") if drawn else None
    p.write_text(markdown(doc, source=source, compare=compare, figure=shown), encoding="utf-8")
    return p
