"""BENCHMARKS.md from a result document. The page leads with its answer: a summary of each
unit's speed against ``torch.nn.LSTM`` on every CPU kind set beside the run, with the goals,
and a figure of it. Then the method (the machine, the roofline, what each number is, the
cases) and the full tables (the targets, the time and memory tables, the rows that did not
measure well, the runs set beside this one)."""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ctrlrnn.bench.case_registry import Point
from ctrlrnn.bench.fresh_processes import TARGET_POINT_CASES
from ctrlrnn.bench.result_rows import (
    BUSY_ELSEWHERE,
    LOW_CPU_SHARE,
    MEMORY_HEADERS,
    MIB,
    TIME_HEADERS,
    fmt_ratio,
    fmt_share,
    fmt_time,
    memory_cells,
    memory_rows,
    speedups,
    time_cells,
    time_rows,
)
from ctrlrnn.bench.targets import TARGETS, Target, target_notes, target_rows
from ctrlrnn.ops import gemm_path


def _md_table(headers: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return lines


def _load(v: Any) -> str:
    if not v:
        return "unknown"
    return ", ".join(f"{x:.2f}" for x in v)


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


def _elsewhere(busy: float | None) -> str:
    if busy is None:
        return ""
    return (f"; CPUs kept busy by other processes over half a second at the start: {busy:.2f} "
            "(the load average trails the last minute)")


def repeats_text(doc: dict[str, Any]) -> str:
    """How many warm-up calls and timed repeats the medians are over, in words."""
    st = doc.get("settings", {})
    n, warm, budget = st.get("repeats"), st.get("warmup"), st.get("max_seconds")
    text = f"{warm} warm-up call(s), over {n} timed repeats"
    if budget is not None and n is not None and n > 3:
        text += (
            f" (at least 3: a measurement stops adding repeats once they have taken {budget:g} s)"
        )
    over = [
        f"`{name}` {c['warmup']} warm-up, {c.get('min_repeats') or 3} to {c['max_repeats']} repeats"
        for name, c in doc.get("cases", {}).items()
        if c.get("warmup") is not None or c.get("max_repeats") is not None
    ]
    if over:
        text += "; except " + ", ".join(over) + " (too slow for more)"
    repeats = [
        r[m]["repeats"]
        for r in time_rows(doc)
        if r.get("status") == "ok"
        for m in ("fwd", "fwdbwd")
    ]
    if repeats:
        text += f"; repeats actually taken: {min(repeats)} to {max(repeats)}"
    return text


def _yes(v: Any) -> str:
    return "yes" if v else "no"


def backend_lines(backend: Any) -> list[str]:
    """The ctrlrnn backend of a run (``ctrlrnn.backend_info()``) as a short Markdown list: the
    compiler and cache, each kernel family's CPU and CUDA status, and how many GEMM shape
    classes went to each path (the full map stays in the result JSON)."""
    if not isinstance(backend, dict):
        return ["- ctrlrnn backend: not recorded"]
    head = (f"- ctrlrnn backend: compiled kernels cached in `{backend.get('cache')}`, compiler "
            f"`{backend.get('compiler') or 'none found'}`; reference forced: "
            f"{_yes(backend.get('forced_reference'))}, compiled kernels required: "
            f"{_yes(backend.get('require_compiled'))}")
    lines = [head]
    for name, fam in (backend.get("families") or {}).items():
        if not isinstance(fam, dict):
            continue
        what = f" ({fam['ops']})" if fam.get("ops") else ""
        threads = (f", {fam['parallel_threads']} parallel threads"
                   if fam.get("parallel_threads") else "")
        lines.append(f"  - `{name}`{what}: CPU {fam.get('cpu')}, {fam.get('reason')}{threads}; "
                     f"CUDA: {fam.get('cuda')}")
    cuda = backend.get("cuda")
    if isinstance(cuda, dict):
        lines.append(f"  - CUDA device: {cuda.get('device') or 'none'}; Triton: "
                     f"{cuda.get('triton') or 'not installed'}"
                     + (f"; step loops as CUDA graphs: {cuda['step_graphs']}"
                        if cuda.get("step_graphs") else ""))
    g = backend.get("gemm")
    if isinstance(g, dict):
        classes = g.get("classes") or {}
        counts: dict[str, int] = {}
        for v in classes.values():
            path = v.get("path", "?") if isinstance(v, dict) else str(v)
            counts[path] = counts.get(path, 0) + 1
        split = ", ".join(f"{n} {p}" for p, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines.append(f"  - GEMM path: `{g.get('forced')}` (`CTRLRNN_GEMM` requested "
                     f"`{g.get('requested')}`), oneDNN usable: {_yes(g.get('onednn_usable'))}; "
                     f"{len(classes)} shape classes measured on this CPU"
                     + (f": {split}" if split else "")
                     + " (each class and its BLAS/oneDNN time ratio: `machine.backend.gemm` in "
                     "the result JSON)")
    return lines


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
    lines += _md_table(["case", "B", "T", "C", "GEMM path"], rows)
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
    lines += _md_table(["case", "B", "T", "C", "fwd+bwd here", f"fwd+bwd {label}",
                        "here / there", "speed-up here", f"speed-up {label}"], rows)
    return lines + [""]


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
    return _md_table(heads, rows)


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
    m = doc["machine"]
    roof = doc["roofline"]
    mem_gb = (m.get("memory_bytes") or 0) / 1e9
    asked = doc.get("settings", {}).get("threads")
    threads_how = "the default" if asked is None else f"set by --threads {asked}"
    lines: list[str] = [
        "# ctrlrnn benchmarks",
        "",
        *busy_warning(doc),
        *_summary_lines(doc, compare, figure),
        "## Method",
        "",
        f"Measured by `ctrlrnn bench` ({doc['grid']} grid, {doc['dtype']}) on {doc['created']}"
        + (f", results in `{source}`" if source else "")
        + ". Every number below comes from that one run on the machine described here; the "
        "ratios compare rows measured in the same process, interleaved at each grid point. "
        "Absolute times are for this machine only: compare the ratios. A single run is one "
        "draw: re-run before trusting a difference of a few percent (every sample is in the "
        "JSON).",
        "",
        f"Reproduce: `ctrlrnn bench` (the {doc['grid']} grid took {doc.get('elapsed_s', 0):.0f} s "
        "in this run) "
        "or `ctrlrnn bench --full`; "
        "`ctrlrnn bench --from RESULTS.json --markdown BENCHMARKS.md` rewrites this page from a "
        "saved run.",
        "",
        "## Machine",
        "",
        f"- CPU: {m.get('cpu_model')}, {m.get('physical_cores')} physical cores, "
        f"{m.get('logical_cpus')} logical CPUs ({m.get('cpus_available')} available to the "
        f"process), {mem_gb:.1f} GB memory"
        + (f"; vector extensions: {', '.join(m['cpu_isa'])}" if m.get("cpu_isa") else ""),
        f"- {m.get('platform')}, Python {m.get('python')}",
        f"- torch {m.get('torch')}, {m.get('torch_threads')} intra-op threads "
        f"(torch.get_num_threads(), {threads_how}), "
        f"{m.get('torch_interop_threads')} inter-op threads",
        "- load average (1, 5, 15 min) when the run started: "
        f"{_load(m.get('load_average_at_start'))}, "
        f"when it ended (this includes the run itself): {_load(doc.get('load_average_at_end'))}"
        + _elsewhere(m.get("busy_cpus_elsewhere_at_start")),
        f"- ctrlrnn {m.get('ctrlrnn_version')}, git {m.get('git_commit')}",
        *backend_lines(m.get("backend")),
    ]
    par = [ln for ln in m.get("torch_parallel_info", []) if "backend" in ln or "Library" in ln]
    if par:
        lines.append("- torch parallel: " + "; ".join(par))
    lines += [
        "",
        "## Roofline (measured in the same run)",
        "",
        "Both rates were measured at the start and again at the end of the run, and the copy "
        "before every timed point too; the floors use the higher of the two GEMM rates (the "
        "tighter floor) and the median of all the copy samples"
        + (
            f" (GEMM {doc['roofline_start']['gemm_gflops']:.1f} then "
            f"{doc['roofline_end']['gemm_gflops']:.1f} GFLOP/s; copy at the start "
            f"{doc['roofline_start']['copy_gb_per_s']:.1f}, at the end "
            f"{doc['roofline_end']['copy_gb_per_s']:.1f} GB/s)."
            if "roofline_start" in doc and "roofline_end" in doc
            else "."
        ),
        "",
        f"- GEMM: **{roof['gemm_gflops']:.1f} GFLOP/s**, median of "
        f"{len(roof['gemm_samples_s'])} products (the faster of `torch.mm` and oneDNN) of "
        f"{' x '.join(map(str, roof['gemm_shape']))} (M x K x N, 2*M*K*N FLOPs each).",
        f"- Copy bandwidth: **{roof['copy_gb_per_s']:.1f} GB/s**, median of "
        f"{len(roof['copy_samples_s'])} `dst.copy_(src)` of {roof['copy_bytes'] / MIB:.0f} MiB "
        "(bytes read + bytes written, per second) taken all through the run (at the start, "
        "before every timed point, at the end)"
        + _copy_range(roof),
        *(
            [
                f"- For reference, not in the floor: `src.clone()` of the same size, which "
                f"writes into freshly allocated memory each call as most ops do, ran at "
                f"{roof['clone_gb_per_s']:.1f} GB/s. Where that is far below the copy bandwidth, "
                "first-touching new memory (page faults) is expensive on this machine, and a "
                "bandwidth-bound op that allocates its outputs on every call cannot get near "
                "its floor. ctrlrnn's compiled kernels therefore take outputs of 1 MiB or more "
                "from a cache of freed blocks (`ctrlrnn.output_cache_info()`; README), and kernels "
                "writing more than a quarter of the last-level cache, and at most 4 MiB per "
                "thread, use streaming stores (`CTRLRNN_STREAMING_BYTES` sets the bytes).",
            ]
            if roof.get("clone_gb_per_s")
            else []
        ),
        "",
        "The floor of a row is `matmul FLOPs / GEMM rate + elementwise bytes / copy bandwidth`. "
        "Each case declares its FLOPs (forward; backward = 2x forward for the weight and input "
        "gradients) and the fewest elementwise bytes a fused implementation must move "
        "(listed below). `time / floor` = 1.00x would be running at the floor. The GEMM rate "
        "of each row is the faster of torch's BLAS and oneDNN measured at that row's own "
        "point, at its input projection's shape `(B*T) x C` times `C x 4C` (the rates above "
        "are at the fixed shape, for the machine's record). Where a row was timed again in fresh "
        "processes (the targets' points), each process measures that rate again before its rows, "
        "and its time over the floor divides the row's FLOPs by its own rate: the rate moves "
        "between processes and runs, and a ratio takes its numerator and divisor from one "
        "process. A row whose per-step products run "
        "below that rate (small batches) cannot reach 1.00x; a row far above it is losing time "
        "outside its GEMMs and minimal elementwise traffic (per-step overhead, extra passes, "
        "allocation).",
        "",
        "## What each number is",
        "",
        "- **fwd**: median wall time of the forward pass under `torch.no_grad()` (inference), "
        f"after {repeats_text(doc)}.",
        "- **fwd+bwd**: median wall time of the forward pass with autograd plus "
        "`torch.autograd.backward` of the output with a fixed random gradient (input, weights "
        "and scan inputs all require grad).",
        "- Rows at the same (B, T, C) are built together and timed in turn, one sample of "
        "each at a time (A, B, C, A, B, C, ...; forwards first, then forward+backward "
        "passes), so a change in load from other processes falls on the compared rows alike.",
        "- **/ floor**: measured median divided by the roofline floor of that row.",
        "- **CPU share**: median over the fwd+bwd repeats of process CPU time / (wall time x "
        "threads). Near 100%: the row had its CPUs to itself and kept them busy; well below: "
        "other processes took the CPUs or threads sat waiting, and that row's time is "
        "inflated.",
        "- **speed-up vs X**: X's median divided by this row's median, same point, same run "
        "(> 1: this row is faster). Layer rows compare to `torch.nn.LSTM` of the same width; "
        "the compiled scan compares to the Python loop.",
        "- B = batch, T = sequence length, C = width (input size = hidden size, or channels of "
        "the scan).",
        "",
    ]
    cases = doc.get("cases", {})
    if cases:
        lines += ["### Cases", ""]
        counts: dict[str, int] = {}
        for r in doc.get("results", []):
            counts[r["case"]] = counts.get(r["case"], 0) + 1
        lines += _md_table(
            ["case", "kind", "rows in this run", "description"],
            [
                [f"`{n}`", c["kind"], str(counts.get(n, 0)), c["description"]]
                for n, c in cases.items()
            ],
        )
        lines += [
            "",
            "Elementwise bytes per (batch, step, unit), in values of the dtype, forward + "
            "backward: LSTM 7 + 10, GRU 8 + 12, QRNN f 3 + 6, fo 5 + 8, ifo 6 + 10, linear "
            "scan 3 + 5 (32 bytes per element in fp32).",
            "",
        ]
    targets = target_rows(doc)
    lines += [
        "## Targets",
        "",
        "The project's performance goals, set beside this run's measurements (they are "
        "measurements, not tests).",
        "",
    ]
    lines += fresh_process_lines(doc)
    lines += _md_table(["target", "measured", "goal", "met", "at equal efficiency"],
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
    rows = time_rows(doc)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for group, grows in groups.items():
        title = {"layer": "Layers", "scan": "Linear scan"}.get(group, group)
        lines += [f"## {title}: time", ""]
        lines += _md_table(TIME_HEADERS, [time_cells(r) for r in grows])
        lines.append("")
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
        lines += _md_table(MEMORY_HEADERS, [memory_cells(r) for r in mrows])
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
    lines += gemm_lines(doc)
    for label, path, other in compare or []:
        lines += compare_lines(doc, label, path, other)
    bad = [r for r in doc.get("results", []) if r.get("status") != "ok"]
    if bad:
        lines += ["## Rows not measured", ""]
        for r in bad:
            lines.append(
                f"- `{r['case']}` B={r['batch']} T={r['length']} C={r['width']}: "
                f"{r['status']}: {r.get('reason', '')}"
            )
        lines.append("")
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


def _copy_range(roof: dict[str, Any]) -> str:
    """"; single samples ranged A-B GB/s." for the copy samples of a roofline, else "."."""
    samples = roof.get("copy_samples_s") or []
    if not samples:
        return "."
    nbytes = 2 * roof["copy_bytes"]
    return f"; single samples ranged {nbytes / max(samples) / 1e9:.0f}-" \
        f"{nbytes / min(samples) / 1e9:.0f} GB/s."
