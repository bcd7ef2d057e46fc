"""Presenting a benchmark run: machine description, screen table, JSON file, BENCHMARKS.md.

Everything here reads the result document of :func:`ctrlrnn.bench.runner.run`, so a JSON file
saved today can be re-rendered (``ctrlrnn bench --from results.json --markdown BENCHMARKS.md``)
without measuring again.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files

MIB = 1024.0 * 1024.0
#: Rows whose fwd+bwd CPU share is below this are listed in BENCHMARKS.md.
LOW_CPU_SHARE = 0.7


# --------------------------------------------------------------------------------------------
# Machine description
# --------------------------------------------------------------------------------------------


def _cpuinfo() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    cores: set[tuple[str, str]] = set()
    phys = core = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        text = ""
    found_model = False
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and not found_model:
            model, found_model = value, True
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
            cores.add((phys, core))
        elif key == "flags" and not flags:
            flags = set(value.split())
    # the vector extensions that decide which GEMM kernels the BLAS libraries pick
    isa = [f for f in CPU_ISA_FLAGS if f in flags]
    return {"cpu_model": model, "physical_cores": len(cores) or None, "cpu_isa": isa}


#: CPU flags named with the machine: machines of one model name differ in these, and with them
#: the GEMM path that is fastest (MKL against oneDNN)
CPU_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_vp2intersect",
                 "amx_bf16", "amx_tile")


def _meminfo_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine() -> dict[str, Any]:
    """Describe this machine and software: CPU model, cores, memory, threads, versions, and the
    active ctrlrnn backend (``ctrlrnn.backend_info()``)."""
    from ctrlrnn.bench.cases import backend_info

    try:
        import ctrlrnn

        version = getattr(ctrlrnn, "__version__", None)
    except Exception:  # noqa: BLE001 - described as missing rather than failing the run
        version = None
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    parallel = [ln.strip() for ln in torch.__config__.parallel_info().splitlines() if ln.strip()]
    info: dict[str, Any] = {
        **_cpuinfo(),
        "logical_cpus": os.cpu_count(),
        "cpus_available": affinity,
        "memory_bytes": _meminfo_bytes(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "torch_parallel_info": parallel,
        "env": {
            k: os.environ[k]
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CTRLRNN_BACKEND")
            if k in os.environ
        },
        "load_average_at_start": load,
        "ctrlrnn_version": version,
        "git_commit": _git_commit(),
        "backend": backend_info(),
    }
    return info


def machine_summary(m: dict[str, Any]) -> str:
    """One line: CPU model, cores, threads, torch version."""
    cores = m.get("physical_cores")
    cpus = m.get("cpus_available") or m.get("logical_cpus")
    return (
        f"{m.get('cpu_model')} ({cores} physical cores, {cpus} logical CPUs available), "
        f"torch {m.get('torch')} with {m.get('torch_threads')} threads"
    )


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def save_json(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the result document to ``path`` (parent folders created); return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(files.dumps(doc, indent=2, sort_keys=False, default=str) + "\n",
                 encoding="utf-8")
    return p


def load_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a result document written by :func:`save_json`."""
    from ctrlrnn.bench.runner import SCHEMA

    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"path: {path} is not a ctrlrnn bench result ({SCHEMA})")
    return doc


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def fmt_time(s: float | None) -> str:
    """Seconds as ms (or s above 10 s)."""
    if s is None:
        return "-"
    return f"{s:.2f} s" if s >= 10 else f"{s * 1e3:.2f} ms"


def fmt_ratio(x: float | None) -> str:
    """A ratio as ``1.23x``."""
    return "-" if x is None else f"{x:.2f}x"


def fmt_share(x: float | None) -> str:
    """A fraction as a percentage."""
    return "-" if x is None else f"{100 * x:.0f}%"


def fmt_mib(n: float | None) -> str:
    """Bytes as MiB."""
    return "-" if n is None else f"{n / MIB:.1f}"


def _speedups(r: dict[str, Any], mode: str) -> str:
    sp = r.get("ratios", {}).get("speedup", {})
    return ", ".join(f"{v[mode]:.2f}x vs {k}" for k, v in sp.items()) or "-"


def time_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The time records of ``doc`` (any status)."""
    return [r for r in doc.get("results", []) if r.get("kind") == "time"]


def memory_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The memory records of ``doc`` (any status)."""
    return [r for r in doc.get("results", []) if r.get("kind") == "memory"]


def _time_table_cells(r: dict[str, Any]) -> list[str]:
    point = [r["case"], str(r["batch"]), str(r["length"]), str(r["width"])]
    if r.get("status") != "ok":
        return point + [r.get("status", "?"), r.get("reason", "")[:80], "", "", "", "", ""]
    rat = r.get("ratios", {})
    return point + [
        fmt_time(r["fwd"]["median_s"]),
        fmt_ratio(rat.get("fwd_over_floor")),
        fmt_time(r["fwdbwd"]["median_s"]),
        fmt_ratio(rat.get("fwdbwd_over_floor")),
        _speedups(r, "fwd"),
        _speedups(r, "fwdbwd"),
        fmt_share(r["fwdbwd"].get("cpu_share")),
    ]


TIME_HEADERS = [
    "case",
    "B",
    "T",
    "C",
    "fwd",
    "fwd / floor",
    "fwd+bwd",
    "fwd+bwd / floor",
    "fwd speed-up",
    "fwd+bwd speed-up",
    "CPU share",
]
MEMORY_HEADERS = ["case", "B", "T", "C", "train MiB", "saved MiB", "params MiB", "peak RSS +MiB"]


def _memory_cells(r: dict[str, Any]) -> list[str]:
    point = [r["case"], str(r["batch"]), str(r["length"]), str(r["width"])]
    if r.get("status") != "ok":
        return point + [r.get("status", "?"), r.get("reason", "")[:80], "", ""]
    m = r["memory"]
    return point + [
        fmt_mib(m["train_bytes"]),
        fmt_mib(m["saved_bytes"]),
        fmt_mib(m["param_bytes"]),
        fmt_mib(m["peak_rss_delta_bytes"]),
    ]


# --------------------------------------------------------------------------------------------
# Targets (from the benchmark issue): measured values set beside the stated goals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A stated performance goal, read off one measured record.

    ``value`` extracts the number from the document (None when the row is missing or failed);
    ``goal`` says whether it meets the goal; ``fmt`` formats it.
    """

    label: str
    value: Callable[[dict[str, Any]], float | None]
    goal: Callable[[float], bool]
    goal_text: str
    fmt: str = "{:.2f}x"


def _find(doc: dict[str, Any], case: str, b: int, t: int, c: int) -> dict[str, Any] | None:
    for r in doc.get("results", []):
        if (r["case"], r["batch"], r["length"], r["width"]) == (case, b, t, c):
            return r if r.get("status") == "ok" else None
    return None


def _ratio(case: str, point: tuple[int, int, int], key: str) -> Callable[[dict[str, Any]], Any]:
    def get(doc: dict[str, Any]) -> float | None:
        r = _find(doc, case, *point)
        return None if r is None else r.get("ratios", {}).get(key)

    return get


def _speedup(
    case: str, point: tuple[int, int, int], other: str, mode: str
) -> Callable[[dict[str, Any]], Any]:
    def get(doc: dict[str, Any]) -> float | None:
        r = _find(doc, case, *point)
        if r is None:
            return None
        return r.get("ratios", {}).get("speedup", {}).get(other, {}).get(mode)

    return get


def _inverse(get: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A time ratio from a speed-up (1 / speed-up)."""

    def inv(doc: dict[str, Any]) -> float | None:
        v = get(doc)
        return None if not v else 1.0 / v

    return inv


def _memory_r2(case: str) -> Callable[[dict[str, Any]], Any]:
    def get(doc: dict[str, Any]) -> float | None:
        fits = [f for f in doc.get("memory_fits", []) if f["case"] == case]
        if not fits or max(fits[0]["lengths"]) < 16384:
            return None
        return min(f["train_bytes"]["r2"] for f in fits)

    return get


TARGETS: list[Target] = [
    Target(
        "linear_scan fwd+bwd, share of the bandwidth floor (B=32, T=256, C=1024)",
        _ratio("scan_compiled", (32, 256, 1024), "fwdbwd_floor_fraction"),
        lambda v: v >= 0.70,
        ">= 0.70",
        "{:.2f}",
    ),
    Target(
        "linear_scan fwd+bwd speed-up over the Python loop (B=32, T=256, C=1024)",
        _speedup("scan_compiled", (32, 256, 1024), "scan_loop", "fwdbwd"),
        lambda v: v >= 5.0,
        ">= 5x",
    ),
    Target(
        "QRNN fo fwd+bwd time / roofline floor (B=32, T=256, C=256)",
        _ratio("qrnn_fo", (32, 256, 256), "fwdbwd_over_floor"),
        lambda v: v <= 1.25,
        "<= 1.25x",
    ),
    Target(
        "QRNN fo fwd+bwd speed-up over nn.LSTM (B=32, T=256, C=256)",
        _speedup("qrnn_fo", (32, 256, 256), "lstm", "fwdbwd"),
        lambda v: v > 1.0,
        "> 1x",
    ),
    Target(
        "QRNN fo inference speed-up over nn.LSTM (B=1, T=1024, C=256)",
        _speedup("qrnn_fo", (1, 1024, 256), "lstm", "fwd"),
        lambda v: v >= 2.0,
        ">= 2x",
    ),
    Target(
        "fused LSTM fwd+bwd time / nn.LSTM (B=32, T=256, C=256)",
        _inverse(_speedup("fused_lstm", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 1.25,
        "<= 1.25x",
    ),
    Target(
        "CAS-LSTM 2x256 fwd+bwd time / 2-layer nn.LSTM (B=32, T=256)",
        _inverse(_speedup("caslstm", (32, 256, 256), "lstm2", "fwdbwd")),
        lambda v: v <= 1.4,
        "<= 1.4x",
    ),
    Target(
        "RCRN 200 bidirectional fwd+bwd time / 3-layer BiLSTM (B=32, T=256)",
        _inverse(_speedup("rcrn", (32, 256, 200), "lstm3bi", "fwdbwd")),
        lambda v: v <= 0.8,
        "<= 0.8x",
    ),
    Target(
        "METAGROSS depth 2 linear fwd+bwd time / roofline floor (B=32, T=256, C=256)",
        _ratio("metagross", (32, 256, 256), "fwdbwd_over_floor"),
        lambda v: v <= 1.3,
        "<= 1.3x",
    ),
    Target(
        "METAGROSS depth 2 linear fwd+bwd time / nn.LSTM (B=32, T=256, C=256)",
        _inverse(_speedup("metagross", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 1.5,
        "<= 1.5x",
    ),
    Target(
        "METAGROSS as printed (gates='state') depth 2 fwd+bwd time / nn.LSTM (B=32, T=256, "
        "C=256)",
        _inverse(_speedup("metagross_state", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 2.0,
        "<= 2x",
    ),
    Target(
        "QRNN fo training memory linear in T up to 16,384 (min R^2 of the fit)",
        _memory_r2("qrnn_fo_memory"),
        lambda v: v >= 0.999,
        "R^2 >= 0.999",
        "{:.5f}",
    ),
]


def target_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(label, measured, goal, met?) for every target; 'not measured' where the row is absent."""
    out = []
    for t in TARGETS:
        v = t.value(doc)
        if v is None:
            out.append((t.label, "not measured", t.goal_text, "-"))
        else:
            out.append((t.label, t.fmt.format(v), t.goal_text, "yes" if t.goal(v) else "no"))
    return out


# --------------------------------------------------------------------------------------------
# Screen
# --------------------------------------------------------------------------------------------


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
        cells = [_screen_cells(r, _time_table_cells, len(cols), 6) for r in rows]
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
        cells = [_screen_cells(r, _memory_cells, len(cols), 4) for r in mrows]
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
    cols = [Col("target", wrap=True, min_width=30), Col("measured"), Col("goal"), Col("met")]
    trows = [list(row) for row in target_rows(doc)]
    layout = fit_table(width, cols, trows)
    console.print(layout.table(trows, title="targets (measured values, not pass/fail tests)"))


# --------------------------------------------------------------------------------------------
# BENCHMARKS.md
# --------------------------------------------------------------------------------------------


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

    Judged by the 1-minute load average at the start (above half the CPU count) and by the
    rows' CPU shares (more than a quarter of the timed rows below :data:`LOW_CPU_SHARE`). The
    load at the end is not used: it includes the run itself.
    """
    m = doc.get("machine", {})
    cpus = m.get("cpus_available") or m.get("logical_cpus") or 1
    start = m.get("load_average_at_start")
    shares = [
        r["fwdbwd"].get("cpu_share")
        for r in time_rows(doc)
        if r.get("status") == "ok" and r["fwdbwd"].get("cpu_share") is not None
    ]
    starved = sum(1 for v in shares if v < LOW_CPU_SHARE)
    busy_start = bool(start) and start[0] > 0.5 * cpus
    if not busy_start and starved * 4 <= len(shares):
        return []
    loads = [start[0]] if start else [0.0]
    return [
        f"> **This run shared the machine**: the 1-minute load average was {max(loads):.1f} on "
        f"{cpus} CPUs at the start and {starved} of {len(shares)} timed rows got less than "
        f"{100 * LOW_CPU_SHARE:.0f}% of their threads' CPU time. Every time below may be "
        "inflated, the roofline rates are depressed, and contention does not hit all rows "
        "alike: rows made of many small parallel regions (torch.nn.LSTM/GRU run one small "
        "GEMM per time step, each ending in a thread barrier) suffer far more than rows made of "
        "a few large ones (a QRNN's one GEMM and one scan), which inflates speed-ups over "
        "LSTM/GRU. The CPU share column shows how much CPU each row actually got. Re-run on "
        "an idle machine before quoting these numbers.",
        "",
    ]


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


def markdown(doc: dict[str, Any], *, source: str | None = None) -> str:
    """BENCHMARKS.md text for the result document ``doc`` (``source``: the JSON's path)."""
    m = doc["machine"]
    roof = doc["roofline"]
    mem_gb = (m.get("memory_bytes") or 0) / 1e9
    asked = doc.get("settings", {}).get("threads")
    threads_how = "the default" if asked is None else f"set by --threads {asked}"
    lines: list[str] = [
        "# ctrlrnn benchmarks",
        "",
        *busy_warning(doc),
        f"Measured by `ctrlrnn bench` ({doc['grid']} grid, {doc['dtype']}) on {doc['created']}"
        + (f", results in `{source}`" if source else "")
        + ". Every number below comes from that one run on the machine described here; the "
        "ratios compare rows measured in the same process, interleaved at each grid point. "
        "Absolute times are for this machine only: compare the ratios. A single run is one "
        "draw: re-run before trusting a difference of a few percent (every sample is in the "
        "JSON).",
        "",
        "Reproduce: `ctrlrnn bench` (quick grid, 95 s on an idle 2-core machine, 2026-11-22) "
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
        f"when it ended (this includes the run itself): {_load(doc.get('load_average_at_end'))}",
        f"- ctrlrnn {m.get('ctrlrnn_version')}, git {m.get('git_commit')}",
        f"- ctrlrnn backend: `{files.dumps(m.get('backend'), default=str)}`",
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
        f"{len(roof['gemm_samples_s'])} `torch.mm` of "
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
                "writing more than a quarter of the last-level cache use streaming stores.",
            ]
            if roof.get("clone_gb_per_s")
            else []
        ),
        "",
        "The floor of a row is `matmul FLOPs / GEMM rate + elementwise bytes / copy bandwidth`. "
        "Each case declares its FLOPs (forward; backward = 2x forward for the weight and input "
        "gradients) and the fewest elementwise bytes a fused implementation must move "
        "(listed below). `time / floor` = 1.00x would be running at the floor. The floor uses "
        "one measured GEMM rate for every matrix shape, so a row whose GEMMs run faster than "
        "the measured shape did (e.g. mkldnn's fused LSTM inference) can come out slightly "
        "below 1.00x; a row far above it is losing time outside its GEMMs and minimal "
        "elementwise traffic (per-step overhead, extra passes, allocation).",
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
        "Goals stated in the benchmark issue, set beside this run's "
        "measurements (they are measurements, not tests).",
        "",
    ]
    lines += _md_table(["target", "measured", "goal", "met"], [list(t) for t in targets])
    lines.append("")
    rows = time_rows(doc)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for group, grows in groups.items():
        title = {"layer": "Layers", "scan": "Linear scan"}.get(group, group)
        lines += [f"## {title}: time", ""]
        lines += _md_table(TIME_HEADERS, [_time_table_cells(r) for r in grows])
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
        lines += _md_table(MEMORY_HEADERS, [_memory_cells(r) for r in mrows])
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
    doc: dict[str, Any], path: str | os.PathLike[str], *, source: str | None = None
) -> Path:
    """Write :func:`markdown` of ``doc`` to ``path``; return the path."""
    p = Path(path)
    p.write_text(markdown(doc, source=source), encoding="utf-8")
    return p


def _copy_range(roof: dict[str, Any]) -> str:
    """"; single samples ranged A-B GB/s." for the copy samples of a roofline, else "."."""
    samples = roof.get("copy_samples_s") or []
    if not samples:
        return "."
    nbytes = 2 * roof["copy_bytes"]
    return f"; single samples ranged {nbytes / max(samples) / 1e9:.0f}-" \
        f"{nbytes / min(samples) / 1e9:.0f} GB/s."
