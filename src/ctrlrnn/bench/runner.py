"""Running the selected cases over a grid and collecting one JSON-ready result document.

The document (schema ``ctrlrnn-bench/1``) holds, from one process and one run:

* ``machine``: the machine and software description (see :func:`ctrlrnn.bench.machine.machine`);
* ``roofline``: the GEMM rate and copy bandwidth. Both are measured at the start and again at
  the end of the run (``roofline_start``, ``roofline_end``), and the copy is timed again before
  every timed grid point (``copy_samples_s`` of ``roofline``). The floors use the higher of the
  two GEMM rates (the tighter floor) and the median copy bandwidth over all the copy samples of
  the run: the memory bandwidth of a shared machine moves with load from outside the process,
  and the rows are timed all through the run;
* ``results``: one record per (case, grid point): for ``kind == "time"`` the forward and
  forward+backward medians, the declared FLOPs and bytes, the roofline floors, and the ratios
  (time / floor, and the speed-up against each comparison case measured at the same point);
  for ``kind == "memory"`` the training memory of one forward+backward step;
* ``memory_fits``: per memory case and batch, a least-squares line of training bytes against
  sequence length (bytes per step and R^2).
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from ctrlrnn.bench import fresh_processes as _fresh
from ctrlrnn.bench import roofline as _roofline
from ctrlrnn.bench.case_registry import Case, CaseUnavailable, Point, Workload
from ctrlrnn.bench.machine import MEASURE, machine
from ctrlrnn.bench.memory import RSS_METHOD, SAVED_METHOD, linear_fit, measure_training_memory
from ctrlrnn.bench.speedups import speedups, time_rows
from ctrlrnn.ops import gemm_path
from ctrlrnn.timing import Timer, forward_backward_timer, forward_timer

SCHEMA = "ctrlrnn-bench/1"

#: progress callback: (completed steps, total steps, what is running now)
Progress = Callable[[int, int, str], None]


def plan(cases: Sequence[Case], grid: str) -> list[tuple[Case, Point]]:
    """Every (case, point) pair of ``grid``: time cases grouped by point (the rows at one point
    are timed together, interleaved), in the order their points first appear and then in case
    order; memory cases last, in case then point order."""
    timed = [c for c in cases if c.kind == "time"]
    points: list[Point] = []
    for c in timed:
        for p in c.points(grid):
            if p not in points:
                points.append(p)
    steps = [(c, p) for p in points for c in timed if p in c.points(grid)]
    steps += [(c, p) for c in cases if c.kind != "time" for p in c.points(grid)]
    return steps


def _record(c: Case, p: Point, dtype: str) -> dict[str, Any]:
    return {
        "case": c.name,
        "group": c.group,
        "kind": c.kind,
        "batch": p.batch,
        "length": p.length,
        "width": p.width,
        "dtype": dtype,
        "compare_to": list(c.compare_to),
        "threads": torch.get_num_threads(),
    }


def _fail(rec: dict[str, Any], exc: BaseException) -> None:
    if isinstance(exc, CaseUnavailable):
        rec["status"] = "skipped"
        rec["reason"] = str(exc)
        return
    rec["status"] = "error"
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    rec["reason"] = f"{type(exc).__name__}: {exc}"
    rec["traceback"] = "".join(tb[-6:])


def _timer_kwargs(c: Case, warmup: int, repeats: int, max_seconds: float | None) -> dict[str, Any]:
    return {
        "warmup": warmup if c.warmup is None else c.warmup,
        "repeats": repeats if c.max_repeats is None else min(repeats, c.max_repeats),
        "max_seconds": max_seconds,
        "min_repeats": 3 if c.min_repeats is None else c.min_repeats,
    }


def _interleave_safe(timers: dict[int, Timer], recs: list[dict[str, Any]]) -> dict[int, Any]:
    """Round-robin samples over ``timers`` (index -> timer); a timer whose call raises marks
    its record as an error and drops out; returns index -> Timing for the rest."""
    live = dict(timers)
    for i, t in list(live.items()):
        gemm_path.uses(clear=True)
        try:
            t.warm_up()
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            _fail(recs[i], exc)
            del live[i]
        # which GEMM path the row's kernels took (forward, then forward+backward warm-up)
        recs[i].setdefault("gemm_uses", {}).update(gemm_path.uses())
    while True:
        pending = [i for i, t in live.items() if not t.done]
        if not pending:
            break
        for i in pending:
            try:
                live[i].step()
            except Exception as exc:  # noqa: BLE001
                _fail(recs[i], exc)
                del live[i]
    return {i: t.result() for i, t in live.items()}


def time_point(
    cases: Sequence[Case],
    p: Point,
    dtype: torch.dtype,
    *,
    warmup: int = 1,
    repeats: int = 5,
    max_seconds: float | None = 10.0,
) -> list[dict[str, Any]]:
    """Build every case at point ``p`` and time them together: first all forwards, then all
    forward+backward passes, each phase taking one sample of each case in turn (A, B, C, A, B,
    C, ...), so load from other processes falls on the compared rows alike."""
    dname = str(dtype).replace("torch.", "")
    recs = [_record(c, p, dname) for c in cases]
    work: dict[int, Workload] = {}
    for i, c in enumerate(cases):
        t0 = time.perf_counter()
        try:
            work[i] = c.build(p, dtype)
        except Exception as exc:  # noqa: BLE001 - skipped or error, recorded
            _fail(recs[i], exc)
        recs[i]["build_s"] = time.perf_counter() - t0
    fwd = _interleave_safe(
        {
            i: forward_timer(w.fn, **_timer_kwargs(cases[i], warmup, repeats, max_seconds))
            for i, w in work.items()
        },
        recs,
    )
    fwdbwd = _interleave_safe(
        {
            i: forward_backward_timer(
                w.fn, w.leaves, **_timer_kwargs(cases[i], warmup, repeats, max_seconds)
            )
            for i, w in work.items()
            if i in fwd
        },
        recs,
    )
    for i, w in work.items():
        if i in fwd and i in fwdbwd:
            recs[i].update(
                {
                    "status": "ok",
                    "flops": w.flops.to_dict(),
                    "bytes": w.bytes.to_dict(),
                    "fwd": fwd[i].to_dict(),
                    "fwdbwd": fwdbwd[i].to_dict(),
                    "info": w.info,
                }
            )
    return recs


def point_gemm_shape(r: dict[str, Any]) -> tuple[int, int, int]:
    """The GEMM shape of a row's point: its input projection ``(B*T) x C`` times ``C x 4C``."""
    return (max(1, r["batch"] * r["length"]), max(1, r["width"]), max(1, 4 * r["width"]))


def add_floors(results: list[dict[str, Any]], roof: _roofline.Roofline,
               per_point: bool = False) -> None:
    """Fill ``floor`` of every ok time record in place from its declared FLOPs and bytes:
    ``fwd_s`` (forward) and ``fwdbwd_s`` (forward + backward), each also split into its GEMM
    part and its bytes part. ``per_point``: the GEMM rate is the one measured at the row's own
    projection shape (:func:`point_gemm_shape`, the faster path), else the roofline's."""
    for r in results:
        if r.get("kind") != "time" or r.get("status") != "ok":
            continue
        if per_point:
            rate = r.get("gemm_rate_flops_per_s")
            if rate is None:
                dtype = getattr(torch, r.get("dtype", "float32"))
                rate = _roofline.gemm_rate_at(point_gemm_shape(r), dtype)
                r["gemm_rate_flops_per_s"] = rate
            roof = replace(roof, gemm_flops_per_s=rate)
        fl, by = r["flops"], r["bytes"]
        fb_flops, fb_bytes = fl["fwd"] + fl["bwd"], by["fwd"] + by["bwd"]
        r["floor"] = {
            "fwd_s": roof.floor_s(fl["fwd"], by["fwd"]),
            "fwdbwd_s": roof.floor_s(fb_flops, fb_bytes),
            "fwd_gemm_s": fl["fwd"] / roof.gemm_flops_per_s,
            "fwd_bytes_s": by["fwd"] / roof.copy_bytes_per_s,
            "fwdbwd_gemm_s": fb_flops / roof.gemm_flops_per_s,
            "fwdbwd_bytes_s": fb_bytes / roof.copy_bytes_per_s,
        }


def memory_point(c: Case, p: Point, dtype: torch.dtype) -> dict[str, Any]:
    """Build case ``c`` at ``p`` and measure the memory of one training step."""
    rec = _record(c, p, str(dtype).replace("torch.", ""))
    try:
        w = c.build(p, dtype)
        mem = measure_training_memory(w.fn, w.params, w.leaves)
    except Exception as exc:  # noqa: BLE001 - skipped or error, recorded
        _fail(rec, exc)
        return rec
    rec.update({"status": "ok", "memory": mem.to_dict(), "info": w.info})
    return rec


def add_ratios(results: list[dict[str, Any]]) -> None:
    """Fill ``ratios`` of every ok time record in place.

    * ``fwd_over_floor`` / ``fwdbwd_over_floor``: measured median / roofline floor (1.0 is the
      floor; the fraction of the floor reached is the inverse, ``*_floor_fraction``);
    * ``speedup[other][mode]``: :func:`ctrlrnn.bench.speedups.speedups`.
    """
    ups = speedups(results)
    for key, r in time_rows(results).items():
        ratios: dict[str, Any] = {}
        for mode in ("fwd", "fwdbwd"):
            t = r[mode]["median_s"]
            floor = r["floor"][f"{mode}_s"]
            if floor > 0 and t > 0:
                ratios[f"{mode}_over_floor"] = t / floor
                ratios[f"{mode}_floor_fraction"] = floor / t
        ratios["speedup"] = ups[key]
        r["ratios"] = ratios


def memory_fits(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (memory case, batch, width, dtype): a line of ``train_bytes`` (and of the peak RSS
    delta, where measured) against length, over the lengths measured."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        if r.get("kind") == "memory" and r.get("status") == "ok":
            groups.setdefault((r["case"], r["batch"], r["width"], r["dtype"]), []).append(r)
    fits = []
    for (name, batch, width, dtype), rows in groups.items():
        rows = sorted(rows, key=lambda r: r["length"])
        if len({r["length"] for r in rows}) < 2:
            continue
        xs = [float(r["length"]) for r in rows]
        fit: dict[str, Any] = {
            "case": name,
            "batch": batch,
            "width": width,
            "dtype": dtype,
            "lengths": [r["length"] for r in rows],
            "train_bytes": linear_fit(xs, [float(r["memory"]["train_bytes"]) for r in rows]),
        }
        first, last = rows[0]["memory"], rows[-1]["memory"]
        fit["growth"] = {
            "length_ratio": xs[-1] / xs[0],
            "train_bytes_ratio": last["train_bytes"] / max(1, first["train_bytes"]),
            "saved_bytes_ratio": last["saved_bytes"] / max(1, first["saved_bytes"]),
        }
        rss = [r["memory"]["peak_rss_delta_bytes"] for r in rows]
        if all(v is not None for v in rss):
            fit["peak_rss_delta_bytes"] = linear_fit(xs, [float(v) for v in rss])
        fits.append(fit)
    return fits


def run(
    cases: Sequence[Case],
    *,
    grid: str = "quick",
    dtype: torch.dtype = torch.float32,
    warmup: int = 1,
    repeats: int = 5,
    max_seconds: float | None = 10.0,
    roofline_repeats: int = 7,
    gemm_shape: tuple[int, int, int] = _roofline.DEFAULT_GEMM_SHAPE,
    copy_bytes: int = _roofline.DEFAULT_COPY_BYTES,
    progress: Progress | None = None,
    machine_info: dict[str, Any] | None = None,
    busy_elsewhere: float | None | str = MEASURE,
    threads: int | None = None,
    argv: Sequence[str] | None = None,
    processes: int = 0,
    fresh_points: Sequence[Point] = _fresh.FRESH_POINTS,
) -> dict[str, Any]:
    """Measure the roofline, then every (case, point) of ``grid``; return the result document.

    ``processes`` > 0: the rows at ``fresh_points`` are timed again in that many fresh Python
    processes, and their ratios are the medians over those
    (:mod:`ctrlrnn.bench.fresh_processes`).

    ``threads`` only records the ``--threads`` the caller asked for (None: the default); the
    caller sets it with :func:`torch.set_num_threads` before calling. ``busy_elsewhere``: the
    CPUs other processes kept busy at the start, where the caller measured it already
    (:func:`ctrlrnn.bench.machine.machine`); by default measured after the roofline.

    A builder raising :class:`CaseUnavailable` gives a ``"skipped"`` record with the reason; any
    other exception an ``"error"`` record with the traceback's last lines (the run goes on).
    """
    if processes < 0:
        raise ValueError(f"processes: expected 0 or more, got {processes}")
    steps = plan(cases, grid)
    fresh_steps = processes * sum(1 for c, p in steps if p in fresh_points
                                  and c.kind == "time" and _fresh.fresh_cases(p, [c]))
    counter = _StepCounter(progress, len(steps) + fresh_steps + 2)
    started = time.time()
    counter.say(0, "roofline: GEMM throughput and copy bandwidth")
    roofline = _RunRoofline(dtype, roofline_repeats, gemm_shape, copy_bytes)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": list(argv) if argv is not None else list(sys.argv),
        "grid": grid,
        "dtype": str(dtype).replace("torch.", ""),
        "settings": {
            "warmup": warmup,
            "repeats": repeats,
            "max_seconds": max_seconds,
            "threads": threads,
            "interleaved": True,
            "processes": processes,
            "process_points": [[p.batch, p.length, p.width] for p in fresh_points],
        },
        "machine": machine_info if machine_info is not None else machine(busy_elsewhere),
        "roofline": roofline.start.to_dict(),
        "memory_methods": {"train_bytes": SAVED_METHOD, "peak_rss_delta_bytes": RSS_METHOD},
        "cases": _case_descriptions(cases),
        "results": [],
    }
    results: list[dict[str, Any]] = doc["results"]
    groups = _point_groups(steps)
    for p, group in groups:
        counter.start(f"{', '.join(c.name for c in group)} B={p.batch} T={p.length} "
                      f"C={p.width}", len(group))
        results.extend(_measure_group(p, group, dtype, roofline, warmup=warmup,
                                      repeats=repeats, max_seconds=max_seconds))
        gc.collect()
    fresh: dict[Point, list[list[dict[str, Any]]]] = {}
    if processes > 0:
        for p, group in [(p, g) for p, g in groups if p in fresh_points and g[0].kind == "time"]:
            fresh.update(_fresh.time_points_in_fresh_processes(
                [(p, group)], dtype, processes, warmup=warmup, repeats=repeats,
                max_seconds=max_seconds, points=fresh_points,
                progress=partial(counter.start, n=len(_fresh.fresh_cases(p, group)))))
    _finish_document(doc, roofline, fresh, counter, started)
    return doc


def _finish_document(doc: dict[str, Any], roofline: _RunRoofline,
                     fresh: dict[Point, list[list[dict[str, Any]]]], counter: _StepCounter,
                     started: float) -> None:
    """After the last point: the roofline again, each row's floors and ratios (the fresh
    processes' medians included), the memory fits, the run's time and the load at its end."""
    counter.say(counter.total - 1, "roofline again: GEMM throughput and copy bandwidth")
    roofline.finish(doc)
    counter.say(counter.total - 1, "floors")
    add_floors(doc["results"], roofline.best, per_point=True)
    doc["gemm"] = {"path": gemm_path.forced(), "onednn_usable": gemm_path.onednn_usable()}
    counter.say(counter.total, "done")
    add_ratios(doc["results"])
    _fresh.add_process_medians(doc["results"], fresh)
    doc["memory_fits"] = memory_fits(doc["results"])
    doc["elapsed_s"] = time.time() - started
    try:
        doc["load_average_at_end"] = list(os.getloadavg())
    except OSError:
        doc["load_average_at_end"] = None


class _StepCounter:
    """A run's progress: the steps done of ``total``, reported to ``progress`` when given."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def say(self, step: int, what: str) -> None:
        """Report ``what`` at ``step``."""
        if self.progress:
            self.progress(step, self.total, what)

    def start(self, what: str, n: int) -> None:
        """Report ``what`` as the next step, then count its ``n`` steps as done."""
        self.say(self.done + 1, what)
        self.done += n


class _RunRoofline:
    """The roofline of a run: measured at its start and end, and the copy timed again before
    each timed point (the samples the floors' median bandwidth reads)."""

    def __init__(self, dtype: torch.dtype, repeats: int, gemm_shape: tuple[int, int, int],
                 copy_bytes: int) -> None:
        self.dtype = dtype
        self._measure = partial(_roofline.measure, dtype=dtype, repeats=repeats,
                                gemm_shape=gemm_shape, copy_bytes=copy_bytes)
        self.start = self._measure()
        #: copy timings taken before each timed point
        self.copy_samples: list[float] = []
        self.best = self.start

    def sample_copy(self) -> None:
        """Time the copy once more (before a timed point)."""
        self.copy_samples += _roofline.measure_copy(
            self.start.copy_bytes, dtype=self.dtype, warmup=1, repeats=3
        )[1]

    def finish(self, doc: dict[str, Any]) -> None:
        """Measure the roofline again and record the run's in ``doc``: the better GEMM rate of
        the two and the median of every copy sample."""
        end = self._measure()
        samples = self.copy_samples + self.start.copy_samples_s + end.copy_samples_s
        self.best = _roofline.with_copy_samples(_roofline.best_of(self.start, end), samples)
        doc["roofline"] = self.best.to_dict()
        doc["roofline_start"] = self.start.to_dict()
        doc["roofline_end"] = end.to_dict()


def _case_descriptions(cases: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """The document's ``cases``: each case's group, kind, description and repeat settings."""
    return {
        c.name: {
            "group": c.group,
            "kind": c.kind,
            "description": c.description,
            "compare_to": list(c.compare_to),
            "warmup": c.warmup,
            "max_repeats": c.max_repeats,
            "min_repeats": c.min_repeats,
        }
        for c in cases
    }


def _point_groups(steps: list[tuple[Case, Point]]) -> list[tuple[Point, list[Case]]]:
    """The plan's steps as groups measured together: the time cases at one point, and each
    memory step alone."""
    groups: list[tuple[Point, list[Case]]] = []
    for c, p in steps:
        if c.kind == "time" and groups and groups[-1][0] == p and groups[-1][1][0].kind == "time":
            groups[-1][1].append(c)
        else:
            groups.append((p, [c]))
    return groups


def _measure_group(p: Point, group: list[Case], dtype: torch.dtype, roofline: _RunRoofline, *,
                   warmup: int, repeats: int, max_seconds: float | None) -> list[dict[str, Any]]:
    """The records of one group: its time cases timed together (after a copy sample and the
    GEMM rate at the point's shape), or its memory case; each with the group's wall time."""
    t0 = time.perf_counter()
    if group[0].kind == "time":
        roofline.sample_copy()
        # the GEMM rate at this point's shape, measured beside its rows (load changes)
        shape = point_gemm_shape({"batch": p.batch, "length": p.length, "width": p.width})
        rate = _roofline.gemm_rate_at(shape, dtype)
        recs = time_point(
            group, p, dtype, warmup=warmup, repeats=repeats, max_seconds=max_seconds
        )
        for r in recs:
            r["gemm_rate_flops_per_s"] = rate
    else:
        recs = [memory_point(c, p, dtype) for c in group]
    wall = time.perf_counter() - t0
    for r in recs:
        r["point_wall_s"] = wall
    return recs
