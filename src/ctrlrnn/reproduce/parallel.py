"""``ctrlrnn reproduce --jobs N``: an experiment's runs trained N at a time, in worker processes.

The runs of an experiment that do not depend on each other train side by side: first every
arm's search (each arm's trials in one worker, one after another, since each trial is proposed
from the ones before it), then every (arm, seed) run at its arm's chosen values. Each worker
runs one torch thread by default: on a machine of a few cores, N one-thread processes train
more runs an hour than one process of N threads.

A worker trains in the run directory the sequential runner uses, with the same configuration
and seed, and writes nothing else. The sequential pass that follows
(:func:`ctrlrnn.reproduce.runner.run_experiment`) finds each run finished, reads its result,
and writes the results file, the figures and the pages as it always does. So a run's numbers
are the same whatever ``--jobs`` was, given the same threads per run, and a killed worker loses
at most its runs' last steps: the sequential pass resumes them from their checkpoints.

A stop signal to the command (Ctrl-C, SIGTERM, SIGHUP) is passed on to the workers, and a
worker gets SIGTERM when the command's process ends in any way (Linux): each worker's run then
stops at a step boundary with its checkpoint, as a run of the sequential pass does, and no
worker trains on after the command has ended.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from functools import partial, wraps
from pathlib import Path
from typing import Any

from ctrlrnn.interrupts import at_stop, exit_status, forget, stop_with_parent, stopped_by
from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.tuning import borrowed


def default_threads(jobs: int) -> int:
    """Torch threads per run when ``jobs`` runs train at once: the CPUs this process may use,
    shared out, at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(jobs, 1))


def _start_worker(threads: int) -> None:
    import torch

    stop_with_parent()
    torch.set_num_threads(threads)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Pass a stop on to ``pool``'s live workers (SIGTERM: each checkpoints and stops)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive() and process.pid is not None:
            try:
                os.kill(process.pid, signal.SIGTERM)
            except ProcessLookupError:  # ended meanwhile
                pass


def _arm(exp: Experiment, label: str) -> Arm:
    return next(a for a in exp.arms if a.label == label)


def _ends_at_a_stop(work: Callable[..., Any]) -> Callable[..., Any]:
    """``work`` run in a worker, which ends when a stop signal stops it: the run under way
    has written its checkpoint, and a worker left waiting for more work would outlive the
    command (the pool's queues give a waiting worker no end of input)."""

    @wraps(work)
    def run(*args: Any) -> Any:
        try:
            return work(*args)
        except KeyboardInterrupt as exc:  # the training loop's stop, or Ctrl-C
            os._exit(exit_status(stopped_by(exc)))

    return run


@_ends_at_a_stop
def _tune_in_worker(exp: Experiment, label: str, mode: str, runs_dir: str,
                    results_dir: str) -> dict[str, Any] | None:
    """One arm's whole search, in its trials' run directories (nothing else written)."""
    cached = runner.load_results(Path(results_dir), mode, exp)
    entry = (cached or {}).get("arms", {}).get(label)
    return runner.tune(exp, _arm(exp, label), mode, Path(runs_dir), False, entry,
                       lambda line: None, Standing(exp, mode, cached))


@_ends_at_a_stop
def _train_in_worker(exp: Experiment, label: str, seed: int, mode: str, runs_dir: str,
                     params: dict[str, float] | None) -> dict[str, Any]:
    """One (arm, seed) run at ``params``, in its run directory."""
    return runner.run_one(exp, _arm(exp, label), seed, mode, Path(runs_dir), False, params)


def _seeds_to_train(exp: Experiment, arm: Arm, mode: str, standing: Standing,
                    cached: dict[str, Any] | None, tuned: dict[str, Any] | None) -> list[int]:
    """The seeds of ``arm`` the sequential runner would train: those without a result that
    stands at the arm's values (:meth:`Standing.seed`)."""
    params = dict(tuned["chosen"]) if tuned is not None else None
    earlier = ((cached or {}).get("arms", {}).get(arm.label) or {}).get("seeds", {})
    return [s for s in exp.seeds(mode) if not standing.seed(arm, earlier.get(str(s)), params)]


def _collect(futures: dict[Future, str], log: Callable[[str], None], what: str
             ) -> dict[str, Any]:  # fmt: skip
    """Wait for ``futures`` (labelled), logging each as it ends; a failed one is logged and
    left to the sequential pass, which trains it again and records its error."""
    done: dict[str, Any] = {}
    for i, fut in enumerate(as_completed(futures), 1):
        label = futures[fut]
        try:
            done[label] = fut.result()
        except BrokenProcessPool:
            log(f"[reproduce] a worker process died during {what}; the runs it held resume "
                f"in the sequential pass")
            break
        except Exception as exc:  # noqa: BLE001 - the sequential pass records the error
            log(f"[reproduce] {label}: failed in its worker ({exc}); retried in the "
                f"sequential pass")
            continue
        log(f"[reproduce] {label}: done ({i}/{len(futures)} {what})")
    return done


def prefetch(exp: Experiment, mode: str, runs_dir: Path, results_dir: Path, jobs: int,
             threads: int, log: Callable[[str], None] = print) -> None:
    """Train the runs :func:`runner.run_experiment` would train for ``exp``, ``jobs`` at a
    time in worker processes of ``threads`` torch threads each (module docstring)."""
    cached = runner.load_results(results_dir, mode, exp)
    if cached is not None and runner.is_cached(results_dir, mode, exp):
        return
    standing = Standing(exp, mode, cached)
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                             initargs=(threads,)) as pool:
        stop = partial(_stop_workers, pool)
        at_stop(stop)
        try:
            _train_in(pool, exp, mode, runs_dir, results_dir, jobs, threads, log, standing,
                      cached)
        finally:
            forget(stop)


def _train_in(pool: ProcessPoolExecutor, exp: Experiment, mode: str, runs_dir: Path,
              results_dir: Path, jobs: int, threads: int, log: Callable[[str], None],
              standing: Standing, cached: dict[str, Any] | None) -> None:
    """:func:`prefetch`'s work in ``pool``: every arm's search, then the seeds."""
    tuned: dict[str, dict[str, Any] | None] = {a.label: None for a in exp.arms}
    if exp.tuning(mode) is not None:
        searched = [arm for arm in exp.arms if exp.values_from(arm, mode) is None]
        searches = {pool.submit(_tune_in_worker, exp, arm.label, mode, str(runs_dir),
                                str(results_dir)): f"{exp.id}: {arm.label} search"
                    for arm in searched}
        found = _collect(searches, log, "searches")
        for arm in searched:
            record = found.get(f"{exp.id}: {arm.label} search")
            if record is None:  # failed or unfinished: the sequential pass tunes it
                return
            tuned[arm.label] = record
        for arm in exp.arms:  # the arms trained at another's values (Arm.tuned_like)
            lender = exp.values_from(arm, mode)
            if lender is not None:
                tuned[arm.label] = borrowed(lender, tuned[lender] or {})
    runs: dict[Future, str] = {}
    for arm in exp.arms:
        record = tuned[arm.label]
        params = dict(record["chosen"]) if record is not None else None
        for seed in _seeds_to_train(exp, arm, mode, standing, cached, record):
            runs[pool.submit(_train_in_worker, exp, arm.label, seed, mode, str(runs_dir),
                             params)] = f"{exp.id}: {arm.label} seed {seed}"
    if runs:
        log(f"[reproduce] {exp.id}: {len(runs)} run(s), {jobs} at a time, "
            f"{threads} thread(s) each")
        _collect(runs, log, "runs")
