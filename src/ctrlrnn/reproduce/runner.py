"""Running the experiments: every (arm, seed) is one training run; finished work is cached.

Layout (``mode`` is ``quick`` or ``full``)::

    RESULTS/<mode>/<experiment>.json   what the pages are written from (commit these)
    RUNS/<mode>/<experiment>/<arm>-seed<k>/   each run's checkpoint, logs and report

A run whose ``result.json`` exists is not run again; a run interrupted part-way (a checkpoint
but no result) is resumed; an experiment whose results file is complete is skipped whole. An
arm or seed added to an experiment after its results file was written runs alone: the
file's finished (arm, seed) results are kept as they are, even without their run directories.
"""

from __future__ import annotations

import json
import re
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

    out = runs_dir / mode / exp.id / f"{slug(arm.label)}-seed{seed}"
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
        "train_seconds": result.get("train_seconds"),
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
    if cached and cached.get("complete") and all(
        str(seed) in done.get(arm.label, {}) for arm in exp.arms for seed in exp.seeds(mode)
    ):
        log(f"[reproduce] {exp.id}: cached ({results_path(results_dir, mode, exp)})")
        return cached
    from ctrlrnn.tasks import TASKS

    data: dict[str, Any] = {
        "experiment": exp.id, "mode": mode, "title": exp.title, "task": exp.task,
        "metric": exp.metric, "higher_is_better": exp.higher_is_better,
        "definition": asdict(exp), "arms": {}, "errors": {},
    }
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
        data["arms"][arm.label] = {"model": arm.model, "paper": arm.paper, "seeds": seeds}
    data["seconds"] = float((cached or {}).get("seconds", 0.0)) + time.perf_counter() - started
    data["complete"] = not data["errors"]
    _write_json(results_path(results_dir, mode, exp), data)
    return data
