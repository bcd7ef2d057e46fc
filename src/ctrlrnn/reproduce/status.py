"""``ctrlrnn reproduce --status``: where a reproduction stands, read from the results files and
the runs directory without training anything.

For each chosen experiment it says, arm by arm, what the results file holds under the
experiment's definition now (:class:`~ctrlrnn.reproduce.cache_validity.Standing`): the search
finished, under way (its trials per rung of successive halving) or not started, and how many
of the final seeds are trained at the search's choice (for an arm trained at another arm's
chosen values, at that arm's). Results of an earlier definition still
on the pages are named as such. Runs whose directory lock a live process holds (on this
machine, or on any machine sharing the runs directory by a file system with ``flock``) are
listed as training now, with their last logged step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.page_cells import training_seconds
from ctrlrnn.reproduce.runner import load_results
from ctrlrnn.reproduce.tuning import IN_PROGRESS, Tuning
from ctrlrnn.train.logs import read_rows
from ctrlrnn.train.run_lock import LOCK_NAME, is_held


@dataclass(frozen=True)
class ArmStatus:
    """What the results file holds of one arm under the definition now."""

    label: str
    #: the search: "finished", "under way", "not started", or "" (the experiment has none)
    search: str
    seeds: int
    planned: int
    #: what the page shows of the arm meanwhile ("" when its results are the current ones)
    shown: str = ""
    #: a search under way: its finished trials at each rung
    trials: str = ""
    #: the arm whose chosen values this one trains at, with no search of its own ("": none)
    values_of: str = ""

    @property
    def final(self) -> bool:
        return self.search in ("finished", "") and self.seeds >= self.planned


def _rungs_line(search: Tuning, trials: list[dict[str, Any]]) -> str:
    """``rung 1: 9 of 9, rung 2: 1 of 3, rung 3: 0 of 1`` (trials that reached each rung)."""
    sizes = search.rung_sizes()
    if not sizes:
        return f"{len(trials)} of {search.trials} trials"
    reached = [sum(int(t.get("rung", 0)) >= r for t in trials) for r in range(len(sizes))]
    return ", ".join(f"rung {r + 1}: {n} of {size}"
                     for r, (n, size) in enumerate(zip(reached, sizes, strict=True)))


def arm_status(exp: Experiment, mode: str, standing: Standing, arm: Arm,
               entries: dict[str, Any]) -> ArmStatus:
    """The status of ``arm`` from the results file's arm ``entries`` (empty when it has
    none)."""
    entry = entries.get(arm.label) or {}
    planned = len(exp.seeds(mode))
    seeds = [s for s in (entry.get("seeds") or {}).values() if isinstance(s, dict)]
    search = exp.tuning(mode)
    lender = exp.values_from(arm, mode)
    if lender is not None:
        record = standing.values(arm, entries)
        current = sum(standing.seed(arm, s, record["chosen"]) for s in seeds) if record else 0
        earlier = len(seeds) - current
        shown = f"{earlier} seed(s) of earlier values or setting" if earlier else ""
        return ArmStatus(arm.label, "", current, planned, shown, values_of=lender)
    if search is None:
        current = sum(standing.seed(arm, s, None) for s in seeds)
        earlier = len(seeds) - current
        return ArmStatus(arm.label, "", current, planned,
                         f"{earlier} seed(s) of an earlier definition" if earlier else "")
    record = entry.get("tuning")
    if standing.tuning(arm, record):
        chosen = record.get("chosen") or {}
        current = sum(standing.seed(arm, s, chosen) for s in seeds)
        earlier = len(seeds) - current
        shown = f"{earlier} earlier seed(s) until these finish" if current < planned and \
            earlier else ""  # fmt: skip
        return ArmStatus(arm.label, "finished", current, planned, shown)
    done = standing.finished_trials(arm, record, entry.get(IN_PROGRESS))
    shown = f"{len(seeds)} seed(s) of an earlier search or setting" if seeds else ""
    if not done:
        return ArmStatus(arm.label, "not started", 0, planned, shown)
    return ArmStatus(arm.label, "under way", 0, planned, shown, _rungs_line(search, done))


def held_runs(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The run directories under ``folder`` whose lock a live process holds, each with its
    last logged row (empty when it has logged nothing yet)."""
    if not folder.is_dir():
        return []
    held = []
    for lock in sorted(folder.rglob(LOCK_NAME)):
        if is_held(lock.parent):
            last = deque(read_rows(lock.parent / "log.jsonl"), maxlen=1)
            held.append((lock.parent, last[0] if last else {}))
    return held


def _held_line(run: Path, row: dict[str, Any], root: Path) -> str:
    where = run.relative_to(root)
    if "step" not in row:
        return f"    training now: {where} (starting)"
    epoch = f", epoch {row['epoch']}" if "epoch" in row else ""
    return f"    training now: {where} (step {row['step']}{epoch})"


def status_lines(chosen: list[Experiment], mode: str, results: Path, runs: Path) -> list[str]:
    """The report of ``--status`` for the ``chosen`` experiments."""
    lines = [f"{mode} mode: results in {results / mode}, runs in {runs / mode}"]
    final = 0
    arms_left = 0
    for exp in chosen:
        cached = load_results(results, mode, exp)
        standing = Standing(exp, mode, cached)
        entries = (cached or {}).get("arms") or {}
        statuses = [arm_status(exp, mode, standing, arm, entries) for arm in exp.arms]
        minutes = training_seconds(cached) / 60 if cached else 0.0
        done = all(s.final for s in statuses)
        final += done
        arms_left += sum(not s.final for s in statuses)
        begun = any(s.seeds or s.search in ("finished", "under way") for s in statuses)
        state = "final" if done else "in progress" if begun else "not started"
        lines += ["", f"{exp.id}: {exp.title}; {state} under its definition now, "
                  f"{minutes:.1f} min of training in its results file"]
        width = max(len(s.label) for s in statuses)
        for s in statuses:
            trials = f" ({s.trials})" if s.trials else ""
            search = f"search {s.search}{trials}; " if s.search else ""
            if s.values_of:
                search = f"no search, at {s.values_of}'s chosen values; "
            shown = f"; meanwhile the page shows {s.shown}" if s.shown else ""
            lines.append(f"  {s.label:<{width}}  {search}seeds {s.seeds} of {s.planned}{shown}")
        lines += [_held_line(run, row, runs / mode)
                  for run, row in held_runs(runs / mode / exp.id)]
    lines += ["", f"{final} of {len(chosen)} experiment(s) final under their definition now; "
              f"{arms_left} arm(s) left to train"]
    return lines
