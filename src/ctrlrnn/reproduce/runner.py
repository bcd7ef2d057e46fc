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
``"figures"`` in the results file, so the pages never need the run directories.
:func:`forget` drops an experiment's results and runs, for ``ctrlrnn reproduce --rerun``.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiments import Arm, Experiment


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def results_path(results_dir: Path, mode: str, exp: Experiment) -> Path:
    return results_dir / mode / f"{exp.id}.json"


def load_results(results_dir: Path, mode: str, exp: Experiment) -> dict[str, Any] | None:
    path = results_path(results_dir, mode, exp)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def is_cached(results_dir: Path, mode: str, exp: Experiment) -> bool:
    """Whether ``exp``'s results file is complete: every arm and seed done, nothing to train."""
    cached = load_results(results_dir, mode, exp)
    if not cached or not cached.get("complete"):
        return False
    done = cached.get("arms", {})
    return all(str(seed) in done.get(arm.label, {}).get("seeds", {})
               for arm in exp.arms for seed in exp.seeds(mode))


def run_dir(runs_dir: Path, mode: str, exp: Experiment, arm_label: str, seed: int) -> Path:
    """Where one (arm, seed) of ``exp`` trains."""
    return runs_dir / mode / exp.id / f"{slug(arm_label)}-seed{seed}"


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


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def config_for(exp: Experiment, arm: Arm, seed: int, mode: str, out: Path) -> tuple[Any, Any]:
    """The validated (config, task class) of one (arm, seed) of ``exp`` in ``mode``."""
    from ctrlrnn.train.cli import validated_config

    overrides: dict[str, Any] = {"seed": seed, "out": str(out), **exp.overrides(mode)}
    for key, value in {**exp.task_args, **arm.task_args}.items():
        overrides[f"task.{key}"] = value
    for key, value in arm.model_args.items():
        overrides[f"model.{key}"] = value
    return validated_config(exp.task, arm.model, overrides)


def run_one(exp: Experiment, arm: Arm, seed: int, mode: str, runs_dir: Path,
            show_progress: bool) -> dict[str, Any]:
    """Train one (arm, seed) of ``exp`` (or read its finished result)."""
    from ctrlrnn.train.cli import train_run

    out = run_dir(runs_dir, mode, exp, arm.label, seed)
    done = out / "result.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    cfg, cls = config_for(exp, arm, seed, mode, out)
    resume = (out / "checkpoint.safetensors").exists()
    result = train_run(cfg, cls, resume=resume, show_progress=show_progress, verbose=False)
    assert result is not None
    return result


def _summarise(result: dict[str, Any], exp: Experiment) -> dict[str, Any]:
    test, valid = result.get("test", {}), result.get("valid", {})
    epochs = max(int(result.get("epochs_completed", 0)), 1)
    return {
        "test": test.get(exp.metric),
        "valid": valid.get(exp.metric),
        "test_metrics": test,
        "steps": result.get("step"),
        "best_step": result.get("best_step"),
        "stop_reason": result.get("stop_reason"),
        "train_seconds": result.get("train_seconds"),
        "cpu_share": result.get("cpu_share"),
        "load_start": result.get("load_start"),
        "threads": result.get("threads"),
        "seconds_per_epoch": (result.get("train_seconds") or 0.0) / epochs,
        "parameters": result.get("parameters"),
    }


def run_experiment(
    exp: Experiment,
    mode: str,
    runs_dir: Path,
    results_dir: Path,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every arm and seed of ``exp`` not yet done; write and return its results."""
    cached = load_results(results_dir, mode, exp)
    done: dict[str, dict[str, Any]] = {
        label: dict(arm.get("seeds", {})) for label, arm in (cached or {}).get("arms", {}).items()
    }
    if cached is not None and is_cached(results_dir, mode, exp):
        log(f"[reproduce] {exp.id}: cached ({results_path(results_dir, mode, exp)})")
        return cached
    from ctrlrnn.tasks import TASKS

    data: dict[str, Any] = {
        "experiment": exp.id, "mode": mode, "title": exp.title, "task": exp.task,
        "metric": exp.metric, "higher_is_better": exp.higher_is_better,
        "definition": asdict(exp), "arms": {}, "errors": {},
    }
    if cached and cached.get("figures"):
        data["figures"] = cached["figures"]
    if exp.task not in TASKS:
        data["errors"]["*"] = f"task {exp.task!r} is not available in this version"
        data["complete"] = False
        _write_json(results_path(results_dir, mode, exp), data)
        log(f"[reproduce] {exp.id}: skipped, task {exp.task!r} not available")
        return data
    started = time.perf_counter()
    for arm in exp.arms:
        seeds: dict[str, Any] = {}
        for seed in exp.seeds(mode):
            if str(seed) in done.get(arm.label, {}):
                seeds[str(seed)] = done[arm.label][str(seed)]
                continue
            log(f"[reproduce] {exp.id}: {arm.label}, seed {seed}")
            try:
                result = run_one(exp, arm, seed, mode, runs_dir, show_progress)
            except Exception as exc:  # noqa: BLE001 - one failed arm must not lose the others
                data["errors"][f"{arm.label}/seed{seed}"] = "".join(
                    traceback.format_exception_only(type(exc), exc)).strip()
                log(f"[reproduce] {exp.id}: {arm.label} seed {seed} failed: {exc}")
                continue
            seeds[str(seed)] = _summarise(result, exp)
            if seed == 0:
                _record_figure(exp, arm, mode, runs_dir, data, log)
        data["arms"][arm.label] = {"model": arm.model, "paper": arm.paper, "seeds": seeds}
    data["seconds"] = float((cached or {}).get("seconds", 0.0)) + time.perf_counter() - started
    data["complete"] = not data["errors"]
    data["finished"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    _write_json(results_path(results_dir, mode, exp), data)
    return data


def _record_figure(exp: Experiment, arm: Arm, mode: str, runs_dir: Path, data: dict[str, Any],
                   log: Callable[[str], None]) -> None:
    """Store the figure statistics of ``exp`` (if it has a figure on ``arm``) measured on the
    seed-0 run just trained."""
    from ctrlrnn.reproduce import figures

    if figures.FIGURE_ARMS.get(exp.id, ("", ""))[1] != arm.label:
        return
    recorded = figures.record(exp.id, run_dir(runs_dir, mode, exp, arm.label, 0))
    if recorded is None:
        log(f"[reproduce] {exp.id}: no checkpoint to record the figure from")
        return
    data["figures"] = recorded
