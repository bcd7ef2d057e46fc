"""The project's performance goals, each set beside the value one run measured.

A :class:`Target` reads one number off the result document (a ratio, a speed-up, a memory fit)
and says whether it meets its goal; the screen and BENCHMARKS.md list them. They are
measurements, not pass/fail tests.

Beside a target that compares two rows' times, the same ratio at equal efficiency: the ratio of
the two rows' roofline floors, which is what the target would read if both rows ran at the same
share of their own floors. A goal beyond it asks the row to use the machine better than its
baseline does (on CPU, better than oneDNN's LSTM). A target may also carry a note, measured in
the same run, of what else bounds it (:func:`target_notes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Target:
    """A stated performance goal, read off one measured record.

    ``value`` extracts the number from the document (None when the row is missing or failed);
    ``goal`` says whether it meets the goal; ``fmt`` formats it; ``note`` (optional) says in
    one sentence, from the same document, what bounds the value (None when it cannot).
    """

    label: str
    value: Callable[[dict[str, Any]], float | None]
    goal: Callable[[float], bool]
    goal_text: str
    fmt: str = "{:.2f}x"
    note: Callable[[dict[str, Any]], str | None] | None = None


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


@dataclass(frozen=True)
class _OverFloor:
    """``case``'s time in ``mode`` over its roofline floor at ``point``: the median over fresh
    processes of their times over their floors where the run timed the point in them
    (:mod:`ctrlrnn.bench.fresh_processes`), as for the speed-ups (one process's time is one
    draw there), else this run's own ratio. A fresh process's floor divides the row's FLOPs
    by the GEMM rate that process measured at the point (numerator and divisor from one
    process: the rate moves between processes and runs of one idle machine),
    its bytes by the run's copy bandwidth; a process without its own rate takes the run's
    floor (the rate measured beside the point's rows in the main process)."""

    case: str
    point: tuple[int, int, int]
    mode: str = "fwdbwd"

    def samples(self, doc: dict[str, Any]) -> list[float]:
        """Every fresh process's time over the floor (empty when there were none)."""
        r = _find(doc, self.case, *self.point)
        floor = None if r is None else r.get("floor", {}).get(f"{self.mode}_s")
        if not floor:
            return []
        procs = r.get("processes", {})
        times = procs.get(self.mode, [])
        rates = procs.get("gemm_rate_flops_per_s") or [None] * len(times)
        gemm_s = r["floor"].get(f"{self.mode}_gemm_s")
        bytes_s = r["floor"].get(f"{self.mode}_bytes_s")
        run_rate = r.get("gemm_rate_flops_per_s")
        out = []
        for t, rate in zip(times, rates, strict=False):
            if not t:
                continue
            own = floor
            if rate and run_rate and gemm_s is not None and bytes_s is not None:
                own = gemm_s * run_rate / rate + bytes_s  # the same FLOPs at this process's rate
            out.append(t / own)
        return out

    def __call__(self, doc: dict[str, Any]) -> float | None:
        got = sorted(self.samples(doc))
        if got:
            n = len(got)
            return got[n // 2] if n % 2 else 0.5 * (got[n // 2 - 1] + got[n // 2])
        r = _find(doc, self.case, *self.point)
        return None if r is None else r.get("ratios", {}).get(f"{self.mode}_over_floor")


@dataclass(frozen=True)
class _SpeedUp:
    """The speed-up of ``case`` over ``other`` at ``point`` in ``mode`` (its inverse, a time
    ratio, with ``inverse``): the median over fresh processes where the run timed the point in
    them (:mod:`ctrlrnn.bench.fresh_processes`), else this run's."""

    case: str
    point: tuple[int, int, int]
    other: str
    mode: str
    inverse: bool = False

    def _ratios(self, doc: dict[str, Any]) -> dict[str, Any]:
        r = _find(doc, self.case, *self.point)
        return {} if r is None else r.get("ratios", {})

    def _out(self, v: float | None) -> float | None:
        if not v:
            return None
        return 1.0 / v if self.inverse else float(v)

    def __call__(self, doc: dict[str, Any]) -> float | None:
        ratios = self._ratios(doc)
        median = ratios.get("speedup_median", {}).get(self.other, {}).get(self.mode)
        if median is not None:
            return self._out(median)
        return self._out(ratios.get("speedup", {}).get(self.other, {}).get(self.mode))

    def samples(self, doc: dict[str, Any]) -> list[float]:
        """Every fresh process's value behind a median (empty when there were none)."""
        got = self._ratios(doc).get("speedup_processes", {}).get(self.other, {})
        return [v for v in map(self._out, got.get(self.mode, [])) if v is not None]

    def at_equal_efficiency(self, doc: dict[str, Any]) -> float | None:
        """The same ratio from the two rows' roofline floors instead of their times (None
        where either row or floor is missing)."""
        mine, other = _find(doc, self.case, *self.point), _find(doc, self.other, *self.point)
        if mine is None or other is None:
            return None
        key = f"{self.mode}_s"
        a, b = mine.get("floor", {}).get(key), other.get("floor", {}).get(key)
        return self._out(b / a) if a and b else None


def _speedup(case: str, point: tuple[int, int, int], other: str, mode: str) -> _SpeedUp:
    return _SpeedUp(case, point, other, mode)


def _inverse(get: _SpeedUp) -> _SpeedUp:
    """A time ratio from a speed-up (1 / speed-up)."""
    return replace(get, inverse=not get.inverse)


def _memory_r2(case: str) -> Callable[[dict[str, Any]], Any]:
    def get(doc: dict[str, Any]) -> float | None:
        fits = [f for f in doc.get("memory_fits", []) if f["case"] == case]
        if not fits or max(fits[0]["lengths"]) < 16384:
            return None
        return min(f["train_bytes"]["r2"] for f in fits)

    return get


def _rcrn_on_torch_lstms(doc: dict[str, Any]) -> str | None:
    """RCRN's floor on torch's kernels: its three BiLSTMs alone against the 3-layer BiLSTM,
    and the RCRN against its BiLSTMs (medians over the fresh processes where there were any),
    with the engine ``controllers="auto"`` gave its RNNs there (:func:`fused_controllers_faster`
    at the run's thread count)."""
    from ctrlrnn.nn.rcrn import fused_controllers_faster

    p = (32, 256, 200)
    floor = _inverse(_speedup("rcrn_torch_lstms", p, "lstm3bi", "fwdbwd"))
    over = _inverse(_speedup("rcrn", p, "rcrn_torch_lstms", "fwdbwd"))
    a, b = floor(doc), over(doc)
    if a is None or b is None:
        return None
    n = len(floor.samples(doc))
    how = f" (medians of {n} fresh processes)" if n else ""
    text = (f"RCRN's three BiLSTMs alone, on torch's kernels as the RCRN runs them with "
            f"`controllers=\"native\"` (`rcrn_torch_lstms`), took {a:.2f}x the 3-layer BiLSTM's "
            f"time{how}: no RCRN on those kernels goes below that. ")
    threads = (doc.get("machine") or {}).get("torch_threads")
    if isinstance(threads, int) and fused_controllers_faster(p[2], p[0], True, threads):
        return text + (f"The RCRN (`controllers=\"auto\"`, which trains this shape on "
                       f"ctrlrnn's fused-cell engine at {threads} threads) took {b:.2f}x "
                       "their time, listener (eq 15-16) included.")
    return text + (f"The RCRN took {b:.2f}x its BiLSTMs' time (the listener, eq 15-16, and the "
                   "glue between them).")


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
        _OverFloor("qrnn_fo", (32, 256, 256)),
        lambda v: v <= 1.25,
        "<= 1.25x",
    ),
    Target(
        "QRNN fo fwd+bwd speed-up over nn.LSTM (B=32, T=256, C=256)",
        _speedup("qrnn_fo", (32, 256, 256), "lstm", "fwdbwd"),
        lambda v: v >= 1.3,
        ">= 1.3x",
    ),
    Target(
        "QRNN fo inference speed-up over nn.LSTM (B=1, T=1024, C=256)",
        _speedup("qrnn_fo", (1, 1024, 256), "lstm", "fwd"),
        lambda v: v >= 2.0,
        ">= 2x",
    ),
    Target(
        "QRNN fo fwd+bwd speed-up over nn.LSTM, word-level LM shape (B=20, T=35, C=650)",
        _speedup("qrnn_fo", (20, 35, 650), "lstm", "fwdbwd"),
        lambda v: v >= 1.2,
        ">= 1.2x",
    ),
    Target(
        "fused LSTM fwd+bwd time / nn.LSTM (B=32, T=256, C=256)",
        _inverse(_speedup("fused_lstm", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 1.1,
        "<= 1.1x",
    ),
    Target(
        "CAS-LSTM 2x256 fwd+bwd time / 2-layer nn.LSTM (B=32, T=256)",
        _inverse(_speedup("caslstm", (32, 256, 256), "lstm2", "fwdbwd")),
        lambda v: v <= 1.3,
        "<= 1.3x",
    ),
    Target(
        "RCRN 200 bidirectional fwd+bwd time / 3-layer BiLSTM (B=32, T=256)",
        _inverse(_speedup("rcrn", (32, 256, 200), "lstm3bi", "fwdbwd")),
        lambda v: v <= 0.8,
        "<= 0.8x",
        note=_rcrn_on_torch_lstms,
    ),
    Target(
        "METAGROSS depth 2 linear fwd+bwd time / roofline floor (B=32, T=256, C=256)",
        _OverFloor("metagross", (32, 256, 256)),
        lambda v: v <= 1.3,
        "<= 1.3x",
    ),
    Target(
        "METAGROSS depth 2 linear fwd+bwd time / nn.LSTM (B=32, T=256, C=256)",
        _inverse(_speedup("metagross", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 1.2,
        "<= 1.2x",
    ),
    Target(
        "METAGROSS as printed (gates='state') depth 2 fwd+bwd time / nn.LSTM (B=32, T=256, "
        "C=256)",
        _inverse(_speedup("metagross_state", (32, 256, 256), "lstm", "fwdbwd")),
        lambda v: v <= 2.0,
        "<= 2x",
    ),
    Target(
        "fused LSTM fwd+bwd time / nn.LSTM, small shape (B=2, T=128, C=64)",
        _inverse(_speedup("fused_lstm", (2, 128, 64), "lstm", "fwdbwd")),
        lambda v: v <= 1.1,
        "<= 1.1x",
    ),
    Target(
        "CAS-LSTM 2x64 fwd+bwd time / 2-layer nn.LSTM, small shape (B=2, T=128)",
        _inverse(_speedup("caslstm", (2, 128, 64), "lstm2", "fwdbwd")),
        lambda v: v <= 1.3,
        "<= 1.3x",
    ),
    Target(
        "RCRN 64 bidirectional fwd+bwd time / 3-layer BiLSTM, small shape (B=2, T=128)",
        _inverse(_speedup("rcrn", (2, 128, 64), "lstm3bi", "fwdbwd")),
        lambda v: v <= 0.8,
        "<= 0.8x",
    ),
    Target(
        "METAGROSS depth 2 linear fwd+bwd time / nn.LSTM, small shape (B=2, T=128, C=64)",
        _inverse(_speedup("metagross", (2, 128, 64), "lstm", "fwdbwd")),
        lambda v: v <= 1.2,
        "<= 1.2x",
    ),
    Target(
        "QRNN fo training memory linear in T up to 16,384 (min R^2 of the fit)",
        _memory_r2("qrnn_fo_memory"),
        lambda v: v >= 0.999,
        "R^2 >= 0.999",
        "{:.5f}",
    ),
]


def equal_efficiency_text(t: Target, doc: dict[str, Any]) -> str:
    """The target's ratio at equal efficiency (module docstring), formatted; '-' where the
    target does not compare two rows' times or a floor is missing."""
    get = getattr(t.value, "at_equal_efficiency", None)
    v = None if get is None else get(doc)
    return "-" if v is None else t.fmt.format(v)


def _shown(t: Target, v: float) -> str:
    """``v`` in the target's format, with as many more decimals as it takes for the text not
    to read as meeting the goal when the value does not (1.2049 against <= 1.2: 1.205x, not
    1.20x), or the reverse."""
    text = t.fmt.format(v)
    for extra in range(1, 4):
        shown = float("".join(ch for ch in text if ch.isdigit() or ch in ".-"))
        if t.goal(shown) == t.goal(v):
            break
        text = t.fmt.replace(".2f", f".{2 + extra}f").format(v)
    return text


def target_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(label, measured, goal, met?, at equal efficiency) for every target; 'not measured'
    where the row is absent. A value that is a median over fresh processes says so, with their
    range."""
    out = []
    for t in TARGETS:
        v = t.value(doc)
        same = equal_efficiency_text(t, doc)
        if v is None:
            out.append((t.label, "not measured", t.goal_text, "-", same))
            continue
        text = _shown(t, v)
        samples = getattr(t.value, "samples", None)
        spread = samples(doc) if samples is not None else []
        if spread:
            text += (f" (median of {len(spread)} fresh processes, {t.fmt.format(min(spread))}-"
                     f"{t.fmt.format(max(spread))})")
        out.append((t.label, text, t.goal_text, "yes" if t.goal(v) else "no", same))
    return out


def target_notes(doc: dict[str, Any]) -> list[str]:
    """The notes of the targets that carry one and could make it from ``doc``."""
    notes = (t.note(doc) for t in TARGETS if t.note is not None)
    return [n for n in notes if n]
