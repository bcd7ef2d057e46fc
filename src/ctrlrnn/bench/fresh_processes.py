"""The rows of the targets' points timed again in fresh processes; their ratios are the medians.

At the small-shape point (:data:`ctrlrnn.bench.grids.SMALL`: batch 2, width 64) one
forward+backward takes a few milliseconds, and there (and at the B=1 inference point, see
:data:`FRESH_POINTS`) the time of ``torch.nn.LSTM`` and of ctrlrnn's rows depends on the
process: on an idle machine it differs between processes of the same program by more than
the gaps the targets measure, and the run's own process, which has timed every other shape
before, is sometimes the slowest and sometimes the fastest. A ratio from one process is then
one draw. The same holds, by less, at the targets' large points (:data:`TARGET_POINT_CASES`).
So
:func:`time_points_in_fresh_processes` times every row of such a point again in ``processes``
new Python processes, each interleaving the rows as the main run does
(:func:`ctrlrnn.bench.runner.time_point`) and timing nothing else, and
:func:`add_process_medians` sets, per row and comparison, the median of the fresh processes'
speed-ups beside the list of them; the targets and the tables read the median. The run's own
ratio stays in ``ratios["speedup"]``.

Each process runs ``python -m ctrlrnn.bench.fresh_process_child SPEC OUT``: it reads the
cases, the point, the dtype, the thread count and the timing settings from the JSON file
``SPEC`` and writes its records to ``OUT``. The GEMM path is the parent's (``CTRLRNN_GEMM``
is inherited)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.bench.case_registry import Case, Point
from ctrlrnn.bench.grids import B1_INFERENCE, SMALL
from ctrlrnn.bench.speedups import row_key, speedups

#: The large points of the targets (:mod:`ctrlrnn.bench.targets`) and the rows the targets read
#: there. nn.LSTM's time moves from process to process at these points too, by more than some
#: goals' margins (docs and BENCHMARKS.md show the spread). Only these rows are timed again there,
#: with at most :data:`TARGET_POINT_REPEATS` repeats a process, to keep the quick run short.
TARGET_POINT_CASES: dict[Point, tuple[str, ...]] = {
    Point(32, 256, 256): ("lstm", "lstm2", "fused_lstm", "qrnn_fo", "caslstm", "metagross",
                          "metagross_state"),
    Point(32, 256, 200): ("lstm3bi", "rcrn_torch_lstms", "rcrn"),
}
#: Timed repeats a fresh process takes at a point of :data:`TARGET_POINT_CASES`.
TARGET_POINT_REPEATS = 3
#: The points whose rows are timed in fresh processes: the small-shape point, where per-call
#: costs rather than FLOPs decide the time, the B=1 inference point, where nn.LSTM's
#: forward time moves from process to process as much (GEMM path aside: it is oneDNN's own),
#: and the targets' large points (:data:`TARGET_POINT_CASES`).
FRESH_POINTS: tuple[Point, ...] = (SMALL, B1_INFERENCE, *TARGET_POINT_CASES)


def fresh_cases(p: Point, cases: Sequence[Case]) -> list[Case]:
    """The ``cases`` timed again in fresh processes at ``p``: all of them, but at the targets'
    large points only the rows the targets read (:data:`TARGET_POINT_CASES`)."""
    keep = TARGET_POINT_CASES.get(p)
    return [c for c in cases if keep is None or c.name in keep]
#: Fresh processes timing those points (``ctrlrnn bench --processes``).
DEFAULT_PROCESSES = 5
#: Longest one process may take before the run records it as failed (seconds).
PROCESS_TIMEOUT_S = 600.0


def child_failure(proc: subprocess.CompletedProcess[str], what: str) -> RuntimeError:
    """The error of a timing process that failed: its exit status and its last output lines,
    where the cause is (a child's traceback ends there)."""
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
    return RuntimeError(f"{what} exited with {proc.returncode}:\n{tail}")


def _spec(
    cases: Sequence[Case], p: Point, dtype: torch.dtype, settings: dict[str, Any]
) -> dict[str, Any]:
    return {
        "cases": [c.name for c in cases],
        "point": [p.batch, p.length, p.width],
        "dtype": str(dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        **settings,
    }


def time_point_in_fresh_process(
    cases: Sequence[Case], p: Point, dtype: torch.dtype, *, warmup: int, repeats: int,
    max_seconds: float | None,
) -> list[dict[str, Any]]:
    """Time ``cases`` at ``p`` in a new Python process; return its records (as
    :func:`ctrlrnn.bench.runner.time_point` gives them). Raises ``RuntimeError`` with the
    process's last output lines when it fails."""
    settings = {"warmup": warmup, "repeats": repeats, "max_seconds": max_seconds}
    with tempfile.TemporaryDirectory(prefix="ctrlrnn-bench-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "out.json")
        spec_path.write_text(json.dumps(_spec(cases, p, dtype, settings), allow_nan=False))
        proc = subprocess.run(
            [sys.executable, "-m", "ctrlrnn.bench.fresh_process_child", str(spec_path),
             str(out_path)],
            capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, check=False,
        )
        if proc.returncode != 0 or not out_path.exists():
            raise child_failure(proc, f"the fresh process timing B={p.batch} T={p.length} "
                                      f"C={p.width}")
        records: list[dict[str, Any]] = json.loads(out_path.read_text())
        return records


def time_points_in_fresh_processes(
    groups: Sequence[tuple[Point, Sequence[Case]]], dtype: torch.dtype, processes: int, *,
    warmup: int, repeats: int, max_seconds: float | None,
    points: Sequence[Point] = FRESH_POINTS, progress: Callable[[str], None] | None = None,
) -> dict[Point, list[list[dict[str, Any]]]]:
    """For each ``(point, cases)`` of ``groups`` at one of ``points``, the records
    of ``processes`` fresh processes (a failed process gives one record per case with
    ``status == "error"``)."""
    out: dict[Point, list[list[dict[str, Any]]]] = {}
    for p, every in groups:
        cases = fresh_cases(p, every)
        if p not in points or not cases or cases[0].kind != "time":
            continue
        reps = min(repeats, TARGET_POINT_REPEATS) if p in TARGET_POINT_CASES else repeats
        runs = out.setdefault(p, [])
        for k in range(processes):
            if progress:
                progress(f"B={p.batch} T={p.length} C={p.width} again, fresh process {k + 1} "
                         f"of {processes}")
            try:
                runs.append(time_point_in_fresh_process(
                    cases, p, dtype, warmup=warmup, repeats=reps, max_seconds=max_seconds))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                runs.append([{"case": c.name, "status": "error", "reason": str(exc)}
                             for c in cases])
    return out


def add_process_medians(
    results: list[dict[str, Any]], fresh: dict[Point, list[list[dict[str, Any]]]]
) -> None:
    """For each ok time record of ``results`` at a point of ``fresh``, set ``ratios
    ["speedup_processes"][other][mode]`` (each fresh process's speed-up) and
    ``ratios["speedup_median"][other][mode]`` (their median), and ``processes`` (each fresh
    process's forward and forward+backward medians and GEMM rate at the point, None where it
    failed). Call after
    :func:`ctrlrnn.bench.runner.add_ratios`; the run's own values are left as they are."""
    for p, runs in fresh.items():
        here = [r for r in results if (r.get("batch"), r.get("length"), r.get("width"))
                == (p.batch, p.length, p.width) and r.get("kind") == "time"]
        per_process = [speedups(run) for run in runs]
        for r in here:
            if r.get("status") != "ok":
                continue
            mine = [next((o for o in run if o["case"] == r["case"]), {}) for run in runs]
            if not any(mine):  # a row the fresh processes did not time (fresh_cases)
                continue
            r["processes"] = {
                mode: [o[mode]["median_s"] if o.get("status") == "ok" else None for o in mine]
                for mode in ("fwd", "fwdbwd")
            }
            # each process's GEMM rate at the point (its floor's divisor; None where it failed)
            r["processes"]["gemm_rate_flops_per_s"] = [
                o.get("gemm_rate_flops_per_s") if o.get("status") == "ok" else None for o in mine
            ]
            lists: dict[str, dict[str, list[float]]] = {}
            key = row_key(r)
            for other in r.get("compare_to", []):
                for mode in ("fwd", "fwdbwd"):
                    vals = [s[key][other][mode] for s in per_process
                            if other in s.get(key, {})]
                    if vals:
                        lists.setdefault(other, {})[mode] = vals
            ratios = r.setdefault("ratios", {})
            ratios["speedup_processes"] = lists
            ratios["speedup_median"] = {
                other: {mode: statistics.median(v) for mode, v in modes.items()}
                for other, modes in lists.items()
            }
