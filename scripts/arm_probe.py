"""Train one arm of a ``ctrlrnn reproduce`` experiment with some settings changed: the probes
that measure why a baseline sits where it does (its level as the training data or the width
grows, more seeds of an earlier probe).

Each run is the arm as the experiment's full mode defines it (``runner.config_for``: its task,
model, stopping rule and evaluation), at the learning rate and dropout its search chose (read
from ``docs/results/data/full/EXPERIMENT.json``; an arm still in its search takes them from
the overrides), one thread, with the ``key=value`` overrides
given last. Every seed's result (its stop, steps, validation and test metrics, training time,
the machine's load at its start and end, its validation curve) goes to ``--json`` (default
``docs/results/data/probes/EXPERIMENT.json``) under ``--name`` as it finishes; a run already
recorded there under that name and seed is read back, not trained again, and a run stopped
midway continues from its checkpoint in ``--runs``.

From the repository root, with the project's environment::

    .venv/bin/python scripts/arm_probe.py metagross-tree BiLSTM task.train_size=30000 \\
        --name trees-30000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctrlrnn.interrupts import exit_status
from ctrlrnn.reproduce.probe_tables import ARM
from ctrlrnn.reproduce.probes import (
    PROBES,
    experiment_arm,
    read_probe_file,
    train_probe_run,
    update_probe_file,
)
from ctrlrnn.train.stops import TrainingInterrupted

RESULTS = Path("docs/results/data/full")


def _value(text: str) -> Any:
    """A ``key=value`` override's value: JSON where it parses (numbers, booleans, lists)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"overrides: expected key=value, got {pair!r}")
        out[key] = _value(value)
    return out


def _chosen(exp_id: str, label: str, given: dict[str, Any]) -> dict[str, Any]:
    """The values the arm's search chose in the full mode's results file; an arm whose search
    has not chosen yet takes the learning rate (and dropout) from the overrides ``given``."""
    path = RESULTS / f"{exp_id}.json"
    arms = json.loads(path.read_text(encoding="utf-8")).get("arms", {}) if path.exists() else {}
    chosen = (arms.get(label, {}).get("tuning") or {}).get("chosen")
    if not chosen and "lr" not in given:
        raise SystemExit(f"arm: {path} holds no chosen values for {label!r}; give lr=... "
                         "(and the dropout) among the overrides")
    return dict(chosen or {})


def _read(path: Path, experiment: str) -> dict[str, Any]:
    return read_probe_file(path, _empty(experiment))


def _empty(experiment: str) -> dict[str, Any]:
    return {"experiment": experiment, "kind": ARM, "threads": 1, "probes": {}}


def _record(path: Path, experiment: str, name: str, probe: dict[str, Any],
            row: dict[str, Any]) -> None:
    """Add ``row`` to probe ``name`` of the file as it is on disk now
    (:func:`~ctrlrnn.reproduce.probes.update_probe_file`), and to ``probe``."""

    def add(data: dict[str, Any]) -> None:
        current = data["probes"].setdefault(name, {**probe, "runs": []})
        current["runs"] = sorted([*(r for r in current["runs"] if r["seed"] != row["seed"]),
                                  row], key=lambda r: r["seed"])

    probe["runs"] = update_probe_file(path, _empty(experiment), add)["probes"][name]["runs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("arm", help="the arm's label, as its page names it")
    parser.add_argument("overrides", nargs="*", help="key=value, as `ctrlrnn train` takes them")
    parser.add_argument("--name", required=True, help="the name the runs are recorded under")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/probes"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_intermixed_args()
    path = args.json or PROBES / f"{args.experiment}.json"
    data = _read(path, args.experiment)
    try:
        exp, arm = experiment_arm(args.experiment, args.arm)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    changed = _overrides(args.overrides)
    extra = {**_chosen(args.experiment, args.arm, changed), **changed}
    probe = data["probes"].setdefault(args.name,
                                      {"arm": args.arm, "overrides": changed, "runs": []})
    if probe["arm"] != args.arm:
        raise SystemExit(f"name: {args.name!r} is a probe of {probe['arm']!r} in {path}")
    if probe.get("overrides") != changed:
        raise SystemExit(f"name: {args.name!r} changes {probe.get('overrides')} in {path}, "
                         f"not {changed}: give another --name")
    for seed in args.seeds:
        if any(r["seed"] == seed for r in probe["runs"]):
            print(f"{args.name}, seed {seed}: in {path} already", flush=True)
            continue
        out = args.runs / args.experiment / f"{args.name}-seed{seed}"
        try:
            row = {"seed": seed, "settings": extra,
                   **train_probe_run(exp, arm, seed, out, extra)}
        except TrainingInterrupted as stop:
            print(f"{args.name}, seed {seed}: stopped at step {stop.step}; its checkpoint "
                  f"{stop.checkpoint} resumes with the same command", file=sys.stderr,
                  flush=True)
            raise SystemExit(exit_status(stop.signum)) from None
        _record(path, args.experiment, args.name, probe, row)
        print(f"{args.name}, seed {seed}: valid {row['valid']}, test {row['test']}, "
              f"stopped by {row['stop_reason']} at step {row['step']} (best {row['best_step']})",
              flush=True)


if __name__ == "__main__":
    main()
