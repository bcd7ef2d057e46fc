"""Probes of a baseline's level: one arm of an experiment trained as its full mode defines it,
with some settings changed (its training set's size, its width, its patience), and recorded
with the measurements a page quotes.

``scripts/arm_probe.py``, ``scripts/carnn_lm_data_probe.py`` and ``scripts/length_probe.py`` are
the command lines; this module holds what they share: finding the arm, training one run of it,
and reading and updating the probe's JSON, stamped with the machine it ran on. The pages
render these files as tables (:mod:`ctrlrnn.reproduce.probe_tables`), by the ``kind`` each
writer records.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctrlrnn.cpu import cpu_model
from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.learning_curves import read_curve
from ctrlrnn.reproduce.runner import config_for, write_results
from ctrlrnn.train.run import train_run

try:  # POSIX file locks; without them (Windows) probes side by side are not serialised
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS
    fcntl = None  # type: ignore[assignment]

#: where the probes' JSON files live, one per experiment or probe
PROBES = Path("docs/results/data/probes")


def experiment_arm(exp_id: str, label: str) -> tuple[Experiment, Arm]:
    """Experiment ``exp_id`` and its arm ``label``; ``ValueError`` naming the argument when
    either is unknown."""
    exp = next((e for e in EXPERIMENTS if e.id == exp_id), None)
    if exp is None:
        raise ValueError(f"experiment: no experiment {exp_id!r}")
    arm = next((a for a in exp.arms if a.label == label), None)
    if arm is None:
        raise ValueError(f"arm: {exp_id} has no arm {label!r} (its arms: "
                         f"{', '.join(a.label for a in exp.arms)})")
    return exp, arm


def train_probe_run(exp: Experiment, arm: Arm, seed: int, out: Path,
                    extra: dict[str, Any]) -> dict[str, Any]:
    """Train ``seed`` of ``exp``'s ``arm`` in ``out`` at its full-mode configuration with
    ``extra`` overriding it, one thread unless ``extra`` says otherwise.

    A run stopped midway (by a signal or a crash) continues from its checkpoint in ``out``.
    The record holds how it ended (step, best step, stop reason, steps per epoch), its
    validation and test metrics, its training seconds, the machine's 1-minute load at its
    start and end (its seconds depend on it, its metrics do not) and its validation curve of
    the experiment's metric.
    """
    cfg, cls = config_for(exp, arm, seed, "full", out, {"threads": 1, **extra})
    load_start = os.getloadavg()[0]
    result = train_run(cfg, cls, resume=(out / "checkpoint.safetensors").exists(),
                       show_progress=False, verbose=False)
    if result is None:  # train_run returns None only in torchrun's non-main processes
        raise RuntimeError("a probe trains in one process; run it without torchrun")
    return {"step": result["step"], "best_step": result["best_step"],
            "stop_reason": result["stop_reason"],
            "steps_per_epoch": result["steps_per_epoch"], "valid": result["valid"],
            "test": result["test"], "train_seconds": round(result["train_seconds"], 1),
            "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2),
            "curve": read_curve(out, exp.metric)}


def write_probe_file(path: Path, data: dict[str, Any]) -> None:
    """Write a probe's JSON atomically (``runner.write_results``), stamped with the machine's
    processor type, its CPU's model name, its CPU count and the time of writing."""
    data.update({"machine": platform.processor() or platform.machine(),
                 "cpu_model": cpu_model(),
                 "cpus": os.cpu_count(),
                 "written": datetime.datetime.now(datetime.timezone.utc).isoformat(
                     timespec="seconds")})
    write_results(path, data)


def read_probe_file(path: Path, empty: dict[str, Any]) -> dict[str, Any]:
    """The probe file at ``path``, or a copy of ``empty`` where there is none yet."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    return copy.deepcopy(empty)


def update_probe_file(path: Path, empty: dict[str, Any],
                      change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply ``change`` to the probe file as it is on disk now (:func:`read_probe_file`) and
    write it (:func:`write_probe_file`) under an exclusive lock; returns what was written.
    Probes of one experiment run side by side and each writes when a run ends, so a copy read
    at its start would drop the rows the others wrote since."""
    # the lock is a file of its own, outside the repository: the JSON file is replaced whole
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"ctrlrnn-probe-{key}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_probe_file(path, empty)
        change(data)
        write_probe_file(path, data)
    return data
