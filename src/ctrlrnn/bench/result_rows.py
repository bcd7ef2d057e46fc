"""The rows of a result document as table cells, shared by the screen and BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

MIB = 1024.0 * 1024.0
#: Rows whose fwd+bwd CPU share is below this are listed in BENCHMARKS.md.
LOW_CPU_SHARE = 0.7
#: CPUs that other processes may keep busy at a run's start (measured over half a second) before
#: BENCHMARKS.md calls the run shared: an idle machine's daemons take a few hundredths.
BUSY_ELSEWHERE = 0.2


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


def speedups(r: dict[str, Any], mode: str) -> str:
    """``1.23x vs lstm, ...``: where the row was timed in fresh processes, the median over
    them, marked ``(med. of N fresh)`` (:mod:`ctrlrnn.bench.fresh_processes`)."""
    ratios = r.get("ratios", {})
    sp = ratios.get("speedup", {})
    median = ratios.get("speedup_median", {})
    cells = []
    for other, v in sp.items():
        n = len(ratios.get("speedup_processes", {}).get(other, {}).get(mode, []))
        if mode in median.get(other, {}) and n:
            cells.append(f"{median[other][mode]:.2f}x vs {other} (med. of {n} fresh)")
        else:
            cells.append(f"{v[mode]:.2f}x vs {other}")
    return ", ".join(cells) or "-"


def time_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The time records of ``doc`` (any status)."""
    return [r for r in doc.get("results", []) if r.get("kind") == "time"]


def memory_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The memory records of ``doc`` (any status)."""
    return [r for r in doc.get("results", []) if r.get("kind") == "memory"]


def time_cells(r: dict[str, Any]) -> list[str]:
    point = [r["case"], str(r["batch"]), str(r["length"]), str(r["width"])]
    if r.get("status") != "ok":
        return point + [r.get("status", "?"), r.get("reason", "")[:80], "", "", "", "", ""]
    rat = r.get("ratios", {})
    return point + [
        fmt_time(r["fwd"]["median_s"]),
        fmt_ratio(rat.get("fwd_over_floor")),
        fmt_time(r["fwdbwd"]["median_s"]),
        fmt_ratio(rat.get("fwdbwd_over_floor")),
        speedups(r, "fwd"),
        speedups(r, "fwdbwd"),
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


def memory_cells(r: dict[str, Any]) -> list[str]:
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
