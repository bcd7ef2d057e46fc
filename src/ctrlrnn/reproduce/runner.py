"""Running the experiments: every (arm, seed) is one training run; finished work is cached.

Layout (``mode`` is ``quick`` or ``full``)::

    RESULTS/<mode>/<experiment>.json   what the pages are written from (commit these)
    RUNS/<mode>/<experiment>/<arm>-seed<k>/   each run's checkpoint, logs and report

A run whose ``result.json`` exists is not run again; a run interrupted part-way (a checkpoint
but no result) is resumed; an experiment whose results file is complete is skipped whole. An
arm or seed added to an experiment after its results file was written runs alone: the
file's finished (arm, seed) results are kept as they are, even without their run directories.

After an experiment's seed-0 run of the arm named in :data:`figures.FIGURE_ARMS` is trained,
the statistics its figure needs are measured on the run's checkpoint and stored under
``"figures"`` in the results file, and each seed keeps its validation curve
(:mod:`.learning_curves`), so the pages never need the run directories.
:func:`forget` drops an experiment's results and runs, for ``ctrlrnn reproduce --rerun``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from ctrlrnn import files
from ctrlrnn.reproduce import figures
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.learning_curves import add_missing_curves, read_curve
from ctrlrnn.reproduce.shared_study import SharedStudy, run_units
from ctrlrnn.reproduce.stopping import Action, run_action, stopping_budget
from ctrlrnn.reproduce.tuning import IN_PROGRESS, tune_arm
from ctrlrnn.tasks import TASKS
from ctrlrnn.train.config_changes import config_differences
from ctrlrnn.train.logs import replace_atomically
from ctrlrnn.train.run import train_run, validated_config

#: seconds between looks at a shared study while other processes train the units left
POLL_S = 10.0


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def results_path(results_dir: Path, mode: str, exp: Experiment) -> Path:
    return results_dir / mode / f"{exp.id}.json"


def load_results(results_dir: Path, mode: str, exp: Experiment) -> dict[str, Any] | None:
    path = results_path(results_dir, mode, exp)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def add_run_curves(exp: Experiment, mode: str, runs_dir: Path, results_dir: Path) -> int:
    """Give the seeds of ``exp``'s results file that have no validation curve the one their run
    directory under ``runs_dir`` holds (:mod:`.learning_curves`), rewriting the file when any
    gained one; how many did."""
    data = load_results(results_dir, mode, exp)
    gained = add_missing_curves(data, exp, partial(run_dir, runs_dir, mode, exp))
    if gained and data is not None:
        write_results(results_path(results_dir, mode, exp), data)
    return gained


def is_cached(results_dir: Path, mode: str, exp: Experiment) -> bool:
    """Whether ``exp``'s results file is complete: every arm and seed done, nothing to train."""
    cached = load_results(results_dir, mode, exp)
    if not cached or not cached.get("complete"):
        return False
    done, standing = cached.get("arms", {}), Standing(exp, mode, cached)
    tuned = exp.tuning(mode) is not None
    for arm in exp.arms:
        entry = done.get(arm.label, {})
        record = standing.values(arm, done) if tuned else None
        if tuned and record is None:
            return False
        params = dict(record["chosen"]) if record is not None else None
        if not all(standing.seed(arm, entry.get("seeds", {}).get(str(seed)), params)
                   for seed in exp.seeds(mode)):
            return False
    return True


def params_tag(params: dict[str, float] | None) -> str:
    """A run directory suffix naming tuned values (``lr=0.00123`` -> ``-lr0.00123``)."""
    if not params:
        return ""
    return "-" + "-".join(f"{slug(k.split('.')[-1])}{v:.3g}" for k, v in sorted(params.items()))


def run_dir(runs_dir: Path, mode: str, exp: Experiment, arm_label: str, seed: int,
            params: dict[str, float] | None = None) -> Path:
    """Where one (arm, seed) of ``exp`` trains (at the tuned ``params``, if any)."""
    return runs_dir / mode / exp.id / f"{slug(arm_label)}-seed{seed}{params_tag(params)}"


def tuning_dir(runs_dir: Path, mode: str, exp: Experiment, arm_label: str) -> Path:
    """Where the trials of ``exp``'s arm train (:mod:`ctrlrnn.reproduce.tuning`): one directory
    per search (its :meth:`~ctrlrnn.reproduce.tuning.Tuning.key`) and setting (a digest of
    :meth:`~ctrlrnn.reproduce.cache_validity.Standing.setting`), so that the finished trials of an
    earlier search, or of the same search at another model or data size, are never read back
    as this one's."""
    tuning = exp.tuning(mode)
    tag = f"-{tuning.key()}" if tuning is not None else ""
    arm = next((a for a in exp.arms if a.label == arm_label), None)
    if arm is not None:
        text = files.dumps(Standing(exp, mode, None).setting(arm), sort_keys=True)
        tag += "-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return runs_dir / mode / exp.id / f"{slug(arm_label)}-tuning{tag}"


def forget(exp: Experiment, mode: str, runs_dir: Path, results_dir: Path,
           log: Callable[[str], None] = print) -> None:
    """Drop ``exp``'s results file and move its runs aside (to ``<id>.previous``, replacing
    an older one), so that it trains again from scratch."""
    path = results_path(results_dir, mode, exp)
    if path.exists():
        path.unlink()
    runs = runs_dir / mode / exp.id
    if runs.exists():
        previous = runs.with_name(f"{exp.id}.previous")
        if previous.exists():
            shutil.rmtree(previous)
        runs.rename(previous)
        log(f"[reproduce] {exp.id}: earlier runs moved to {previous}")


def write_results(path: Path, data: dict[str, Any]) -> None:
    """Write a results file atomically, in the one format they all share."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda fh: files.dump(data, fh, indent=1, sort_keys=True))


def config_for(exp: Experiment, arm: Arm, seed: int, mode: str, out: Path,
               extra: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The validated (config, task class) of one (arm, seed) of ``exp`` in ``mode``; ``extra``
    overrides last (a tuning trial's budget and values, or an arm's tuned values)."""
    overrides: dict[str, Any] = {"seed": seed, "out": str(out), **exp.overrides(mode)}
    for key, value in {**exp.task_args, **arm.task_args}.items():
        overrides[f"task.{key}"] = value
    for key, value in arm.model_args.items():
        overrides[f"model.{key}"] = value
    overrides.update(extra or {})
    return validated_config(exp.task, arm.model, overrides)


def train_in(out: Path, exp: Experiment, arm: Arm, seed: int, mode: str,
             extra: dict[str, Any] | None, show_progress: bool) -> dict[str, Any]:
    """Train one run of ``exp``'s ``arm`` in ``out`` (resuming it, or reading its result)."""
    cfg, cls = config_for(exp, arm, seed, mode, out, extra)
    result, action = _finished(out, cfg)
    if result is not None and action == "done":
        return _with_curve(out, exp, result)
    if action == "restart":  # the runner's own directory: what it held answers nothing now
        shutil.rmtree(out)
    # "continue": the trainer extends the finished run from its checkpoint to the new cap
    resume = (out / "checkpoint.safetensors").exists()
    result = train_run(cfg, cls, resume=resume, show_progress=show_progress, verbose=False)
    assert result is not None
    return _with_curve(out, exp, result)


def _with_curve(out: Path, exp: Experiment, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the validation curve its run's log in ``out`` holds (the result travels
    with it through a shared storage, to machines without the run's directory)."""
    curve = read_curve(out, exp.selected)
    return {**result, "curve": curve} if curve else result


def _finished(out: Path, cfg: Any) -> tuple[dict[str, Any] | None, Action | None]:
    """The result of the finished run in ``out`` and what to do with it under ``cfg``
    (:func:`_finished_run_action`); ``(None, None)`` when no run finished there."""
    done = out / "result.json"
    if not done.exists():
        return None, None
    result = json.loads(done.read_text(encoding="utf-8"))
    return result, _finished_run_action(out, result, cfg)


def _finished_run_action(out: Path, result: dict[str, Any], cfg: Any) -> Action:
    """:func:`~ctrlrnn.reproduce.stopping.run_action` of the finished run in ``out`` under
    ``cfg``, from its checkpoint's stored configuration (a run without a readable checkpoint
    cannot be continued or checked: its result stands)."""
    # checkpoints are safetensors files (the `train` extra): `ctrlrnn reproduce` registers its
    # parser without it
    from ctrlrnn.train.checkpoint import Checkpoint

    try:
        stored = Checkpoint(out / "checkpoint.safetensors").config
    except (OSError, ValueError):
        return "done"
    differences = config_differences(stored, cfg.to_dict(), ())
    return run_action(result, differences, int(cfg.epochs), int(cfg.max_steps or 0))


def run_one(exp: Experiment, arm: Arm, seed: int, mode: str, runs_dir: Path,
            show_progress: bool, params: dict[str, float] | None = None) -> dict[str, Any]:
    """Train one (arm, seed) of ``exp`` at the tuned ``params`` (or read its finished result)."""
    out = run_dir(runs_dir, mode, exp, arm.label, seed, params)
    return train_in(out, exp, arm, seed, mode, params, show_progress)


def run_trial(exp: Experiment, arm: Arm, mode: str, runs_dir: Path, show_progress: bool,
              number: int, overrides: dict[str, Any], out: Path) -> dict[str, Any]:
    """Train one tuning trial of ``exp``'s ``arm`` (its overrides: budget and proposed values)."""
    tuning = exp.tuning(mode)
    seed = tuning.train_seed if tuning is not None else 0
    return train_in(out, exp, arm, seed, mode, overrides, show_progress)


def tune(exp: Experiment, arm: Arm, mode: str, runs_dir: Path, show_progress: bool,
         cached: dict[str, Any] | None, log: Callable[[str], None],
         standing: Standing | None = None,
         save: Callable[[dict[str, Any]], None] | None = None,
         storage: str | None = None) -> dict[str, Any] | None:
    """The tuning of ``exp``'s ``arm`` in ``mode``: read from ``cached`` (the arm's entry of the
    results file) when it stands (:meth:`Standing.tuning`: every planned trial of the same
    search, in the same setting), else run or finish it: the trials the entry already holds
    (its tuning, or its ``search_in_progress``: :meth:`Standing.finished_trials`) are not
    trained again, and ``save(record)`` is called with the search so far after each trial
    trained (or read from its run directory). None: no tuning."""
    tuning = exp.tuning(mode)
    if tuning is None:
        return None
    standing = standing or Standing(exp, mode, None)
    done = (cached or {}).get("tuning")
    if standing.tuning(arm, done):
        return dict(done or {})
    log(f"[reproduce] {exp.id}: tuning {arm.label} ({tuning.trials} trials)")

    def trial(number: int, overrides: dict[str, Any], out: Path) -> dict[str, Any]:
        return run_trial(exp, arm, mode, runs_dir, show_progress, number, overrides, out)

    entry = cached or {}
    held = standing.finished_trials(arm, entry.get("tuning"), entry.get(IN_PROGRESS))
    if held:
        log(f"[reproduce] {exp.id}: {arm.label}: {len(held)} trial(s) read from the results file")

    def saved(record: dict[str, Any]) -> None:
        if save is not None:
            save(standing.stamp_tuning(arm, record))

    def search(shared: SharedStudy | None = None) -> dict[str, Any]:
        return tune_arm(tuning, tuning_dir(runs_dir, mode, exp, arm.label), exp.selected,
                        exp.selected_higher_is_better, trial, log, arm=arm.label, done=held,
                        on_trial=saved, shared=shared)

    if storage is None:
        record = search()
    else:  # shared by the processes given the same storage (module shared_study)
        study = SharedStudy(storage, f"ctrlrnn/{mode}/{exp.id}/{arm.label}/search-"
                                     f"{tuning.key()}")
        if tuning.rungs:  # each trial of each rung a unit
            record = search(study)
        else:  # TPE proposes each trial from the ones before: the whole search is one unit
            record = run_units(study, ["search"], lambda unit: None,
                               lambda unit: (search(), 0.0), lambda: time.sleep(POLL_S)
                               )["search"]  # fmt: skip
    return standing.stamp_tuning(arm, record)


def _summarise(result: dict[str, Any], exp: Experiment, arm: Arm, mode: str,
               params: dict[str, float] | None = None) -> dict[str, Any]:
    test, valid = result.get("test", {}), result.get("valid", {})
    epochs = max(int(result.get("epochs_completed", 0)), 1)
    return {
        "params": dict(params or {}),
        "test": test.get(exp.metric),
        "valid": valid.get(exp.metric),
        "selected_by": exp.selected,  # the validation metric that chose the checkpoint
        "valid_selected": valid.get(exp.selected),
        "test_metrics": test,
        "steps": result.get("step"),
        "epochs": result.get("epochs_completed"),
        "budget": stopping_budget(exp.overrides(mode)),
        "setting": Standing(exp, mode, None).setting(arm),
        "best_step": result.get("best_step"),
        "stop_reason": result.get("stop_reason"),
        "train_seconds": result.get("train_seconds"),
        "cpu_share": result.get("cpu_share"),
        "load_start": result.get("load_start"),
        "threads": result.get("threads"),
        "device": result.get("device"),
        "seconds_per_epoch": (result.get("train_seconds") or 0.0) / epochs,
        "parameters": result.get("parameters"),
        **({"curve": result["curve"]} if result.get("curve") else {}),
    }


def run_experiment(
    exp: Experiment,
    mode: str,
    runs_dir: Path,
    results_dir: Path,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    storage: str | None = None,
) -> dict[str, Any]:
    """Run every arm and seed of ``exp`` not yet done; write and return its results.

    ``storage``: an Optuna storage URL through which processes on this machine and others,
    each running the same command, split the searches' trials and the seeds' runs
    (:mod:`ctrlrnn.reproduce.shared_study`); each then writes the same results file."""
    add_run_curves(exp, mode, runs_dir, results_dir)
    cached = load_results(results_dir, mode, exp)
    standing = Standing(exp, mode, cached)
    standing.date_entries(cached)
    if cached is not None and is_cached(results_dir, mode, exp):
        log(f"[reproduce] {exp.id}: cached ({results_path(results_dir, mode, exp)})")
        return cached
    job = _ExperimentJob(exp, mode, runs_dir, results_dir, cached, standing,
                         show_progress=show_progress, log=log, storage=storage)
    data = job.data
    if exp.task not in TASKS:
        data["errors"]["*"] = f"task {exp.task!r} is not available in this version"
        data["complete"] = False
        write_results(job.path, data)
        log(f"[reproduce] {exp.id}: skipped, task {exp.task!r} not available")
        return data
    for arm in exp.arms:
        job.run_arm(arm)
    if data["errors"] and cached is not None and cached.get("complete") \
            and data["arms"] == job.cached_arms:
        # nothing new came of this run (e.g. the task's dependency is missing here): the
        # finished results file is left as it was, and the failures are returned and logged
        log(f"[reproduce] {exp.id}: every failed part kept its earlier results; "
            f"{job.path} left unchanged")
        return {**cached, "errors": data["errors"], "complete": False}
    data["seconds"] = job.spent()
    data["complete"] = not data["errors"]
    data["finished"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    write_results(job.path, data)
    return data


class _ExperimentJob:
    """One :func:`run_experiment` of an experiment not cached: its results so far
    (``data``), the file's earlier ones (``cached``), and each arm's search and seeds."""

    def __init__(self, exp: Experiment, mode: str, runs_dir: Path, results_dir: Path,
                 cached: dict[str, Any] | None, standing: Standing, *, show_progress: bool,
                 log: Callable[[str], None], storage: str | None) -> None:
        self.exp = exp
        self.mode = mode
        self.runs_dir = runs_dir
        self.cached = cached
        self.standing = standing
        self.show_progress = show_progress
        self.log = log
        self.storage = storage
        self.path = results_path(results_dir, mode, exp)
        #: each arm's seeds in the results file
        self.done: dict[str, dict[str, Any]] = {
            label: dict(arm.get("seeds", {}))
            for label, arm in (cached or {}).get("arms", {}).items()
        }
        self.data: dict[str, Any] = {
            "experiment": exp.id, "mode": mode, "title": exp.title, "task": exp.task,
            "metric": exp.metric, "higher_is_better": exp.higher_is_better,
            "selected_by": exp.selected, "definition": asdict(exp), "arms": {}, "errors": {},
        }
        if cached and cached.get("figures"):
            self.data["figures"] = cached["figures"]
        self.started = time.perf_counter()
        self.cached_arms: dict[str, Any] = (cached or {}).get("arms", {})
        # the wall time of the work the file holds: an interrupted run's (its partial file
        # records it) and, when this run carries a finished file's tuning or seeds over, that
        # file's
        self.carried = cached is not None and not cached.get("complete")

    def spent(self) -> float:
        """The wall seconds of the work the results file holds, this run's included."""
        return (float(self.cached.get("seconds", 0.0)) if self.carried and self.cached
                else 0.0) + (time.perf_counter() - self.started)

    def save_partial(self) -> None:
        """Write the results so far (the earlier ones of the arms not done yet kept)."""
        write_results(self.path, _partial(self.data, self.cached_arms, self.spent()))

    def save_search(self, label: str, record: dict[str, Any]) -> None:
        """Write the trials so far into the results file beside the arm's earlier results."""
        so_far = _partial(self.data, self.cached_arms, self.spent())
        earlier = {k: v for k, v in (self.cached_arms.get(label) or self.data["arms"][label])
                   .items() if k != IN_PROGRESS}
        so_far["arms"] = {**so_far["arms"], label: {**earlier, IN_PROGRESS: record}}
        write_results(self.path, so_far)

    def run_arm(self, arm: Arm) -> None:
        """Search ``arm`` (where the experiment tunes), then train its seeds not done."""
        exp, data = self.exp, self.data
        seeds: dict[str, Any] = {}
        entry: dict[str, Any] = {"model": arm.model, "paper": arm.paper, "seeds": seeds}
        data["arms"][arm.label] = entry
        try:
            tuned = self.borrow(arm) if exp.values_from(arm, self.mode) else tune(
                exp, arm, self.mode, self.runs_dir, self.show_progress,
                self.cached_arms.get(arm.label), self.log, self.standing,
                partial(self.save_search, arm.label), self.storage)
        except Exception as exc:  # noqa: BLE001 - one failed arm must not lose the others
            if files.is_no_space(exc):  # no later arm could write either: stop, one line
                raise
            data["errors"][f"{arm.label}/tuning"] = "".join(
                traceback.format_exception_only(type(exc), exc)).strip()
            self.log(f"[reproduce] {exp.id}: tuning {arm.label} failed: {exc}")
            if arm.label in self.cached_arms:  # the arm's earlier results stay in the file
                data["arms"][arm.label] = self.cached_arms[arm.label]
            return
        params: dict[str, float] = {}
        if tuned is not None:
            self.carried = self.carried or tuned == self.cached_arms.get(arm.label, {}).get(
                "tuning")
            entry["tuning"] = tuned
            params = dict(tuned["chosen"])
        todo = []
        for seed in exp.seeds(self.mode):
            earlier = self.done.get(arm.label, {}).get(str(seed))
            # a seed trained at other values (before tuning, or another search) trains again,
            # and one that stopped at a cap since raised continues (module stopping)
            if self.standing.seed(arm, earlier, params if tuned is not None else None):
                seeds[str(seed)] = earlier
                self.carried = True
            else:
                todo.append(seed)
        if tuned is not None:  # the search, with the seeds that stand, is in the file before
            # the others train (a run killed meanwhile must lose neither)
            self.save_partial()
        self.train_seeds(arm, todo, seeds, params, tuned=tuned is not None)

    def borrow(self, arm: Arm) -> dict[str, Any]:
        """The values ``arm`` trains at instead of a search of its own (:attr:`Arm.tuned_like`):
        its lender's choice, searched earlier in this run or standing in the results file."""
        record = self.standing.values(arm, self.data["arms"])
        if record is None:
            raise RuntimeError(f"{arm.label} trains at the values {arm.tuned_like}'s search "
                               f"chooses, and {arm.tuned_like} has no finished search")
        return record

    def train_seeds(self, arm: Arm, todo: list[int], seeds: dict[str, Any],
                    params: dict[str, float], *, tuned: bool) -> None:
        """Train ``arm``'s seeds ``todo`` at ``params`` into ``seeds``, each written to the
        results file when it finishes; a failed one is recorded and keeps its earlier result
        where that trained at these values."""
        exp, log = self.exp, self.log
        shared = _shared_seed_results(exp, arm, todo, self.mode, self.runs_dir, params or None,
                                      self.storage, log) if self.storage else {}
        for seed in todo:
            earlier = self.done.get(arm.label, {}).get(str(seed))
            log(f"[reproduce] {exp.id}: {arm.label}, seed {seed}")
            try:
                result = shared.get(seed) or run_one(exp, arm, seed, self.mode, self.runs_dir,
                                                     self.show_progress, params or None)
                if "error" in result:  # failed in _shared_seed_results
                    raise RuntimeError(result["error"])
            except Exception as exc:  # noqa: BLE001 - one failed arm must not lose the others
                if files.is_no_space(exc):
                    raise
                self.data["errors"][f"{arm.label}/seed{seed}"] = "".join(
                    traceback.format_exception_only(type(exc), exc)).strip()
                log(f"[reproduce] {exp.id}: {arm.label} seed {seed} failed: {exc}")
                if earlier is not None and (not tuned or earlier.get("params") == params) \
                        and self.standing.same_setting(arm, earlier):
                    seeds[str(seed)] = earlier  # trained here at these values: kept, not lost
                continue
            seeds[str(seed)] = _summarise(result, exp, arm, self.mode, params)
            if seed == 0:
                _record_figure(exp, arm, self.mode, self.runs_dir, self.data, log,
                               params or None)
            # finished runs are in the results file at once (a partial file can be committed
            # and continued elsewhere, without the run directories)
            self.save_partial()


def _shared_seed_results(exp: Experiment, arm: Arm, seeds: list[int], mode: str, runs_dir: Path,
                         params: dict[str, float] | None, storage: str,
                         log: Callable[[str], None]) -> dict[int, dict[str, Any]]:
    """The results of ``arm``'s ``seeds`` at ``params``, each trained here or by another
    process sharing ``storage`` (read from its study), once. A run that fails here gives a
    result with its ``error`` (the caller records it), and stays free for another try."""
    study = SharedStudy(storage, f"ctrlrnn/{mode}/{exp.id}/runs")
    units = {f"{arm.label}/seed{seed}/{params_tag(params)}": seed for seed in seeds}

    def here(unit: str) -> tuple[dict[str, Any], float] | None:
        out = run_dir(runs_dir, mode, exp, arm.label, units[unit], params)
        result, action = _finished(out, config_for(exp, arm, units[unit], mode, out, params)[0])
        return ((_with_curve(out, exp, result), 0.0) if result is not None and action == "done"
                else None)

    def train(unit: str) -> tuple[dict[str, Any], float]:
        log(f"[reproduce] {exp.id}: {arm.label}, seed {units[unit]} (shared)")
        try:
            return run_one(exp, arm, units[unit], mode, runs_dir, False, params), 0.0
        except Exception as exc:  # noqa: BLE001 - recorded by the caller, like any failed seed
            if files.is_no_space(exc):
                raise
            return {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()
                    }, float("nan")  # fmt: skip

    rows = run_units(study, list(units), here, train, lambda: time.sleep(POLL_S))
    return {units[unit]: row for unit, row in rows.items()}


def _partial(data: dict[str, Any], cached_arms: dict[str, Any],
             seconds: float) -> dict[str, Any]:
    """The results so far, as a file marked incomplete, with the wall ``seconds`` spent so far
    (a run continued after an interruption adds to them): the arms not reached yet in this run
    keep what the results file held for them."""
    arms = {label: arm for label, arm in cached_arms.items() if label not in data["arms"]}
    return {**data, "arms": {**data["arms"], **arms}, "complete": False, "seconds": seconds}


def _record_figure(exp: Experiment, arm: Arm, mode: str, runs_dir: Path, data: dict[str, Any],
                   log: Callable[[str], None], params: dict[str, float] | None = None) -> None:
    """Store the figure statistics of ``exp`` (if it has a figure on ``arm``) measured on the
    seed-0 run just trained."""
    if figures.FIGURE_ARMS.get(exp.id, ("", ""))[1] != arm.label:
        return
    recorded = figures.record(exp.id, run_dir(runs_dir, mode, exp, arm.label, 0, params))
    if recorded is None:
        log(f"[reproduce] {exp.id}: no checkpoint to record the figure from")
        return
    data["figures"] = recorded
