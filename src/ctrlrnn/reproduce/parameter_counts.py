"""The parameter count of each stored run's model, rebuilt from the setting its results file
records, so the counts on the pages are those of the models the current code builds.

A results file stores each seed's count as its run measured it. When a model loses a
parameter that never trained (as ``Seq2Seq`` in the additive mode lost the dot-product query
projection it used to build unused) while its training is unchanged, the stored runs stay
valid but their counts are stale: :func:`recount` rewrites them, and the test
``tests/reproduce/test_parameter_counts.py`` fails while a synthetic task's file holds one.
``python -m ctrlrnn.reproduce.parameter_counts [FILE ...]`` runs it (default: every results file
under ``docs/results/data`` whose model can be built here), then regenerate the pages
(``ctrlrnn reproduce --pages-only``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: tasks that generate their data from the seed: their models can be rebuilt anywhere
SYNTHETIC_TASKS = ("copy", "addition", "sort", "tree-traversal", "logic")


def model_parameters(task: str, setting: dict[str, Any], seed: int) -> int:
    """The number of parameters of the model a run of ``task`` with the stored ``setting``
    (``overrides``, ``task_args``, ``model``, ``model_args``) and ``seed`` builds now."""
    from ctrlrnn.train.run import validated_config

    overrides: dict[str, Any] = {**setting.get("overrides", {}), "seed": seed}
    overrides.update({f"task.{k}": v for k, v in setting.get("task_args", {}).items()})
    overrides.update({f"model.{k}": v for k, v in setting.get("model_args", {}).items()})
    cfg, cls = validated_config(task, setting["model"], overrides)
    built = cls(cfg.task_args, cfg.seed)
    built.setup()
    model = built.build_model(cfg.model, cfg.model_args)
    return sum(p.numel() for p in model.parameters())


def seed_entries(results: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """``(arm, seed, entry)`` of every seed's summary in a results file that records its
    setting and count."""
    for label, arm in results.get("arms", {}).items():
        for seed, entry in (arm.get("seeds") or {}).items():
            if isinstance(entry, dict) and "setting" in entry and "parameters" in entry:
                yield label, int(seed), entry


def stale_counts(results: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    """``(arm, seed, stored, now)`` for every seed whose stored count differs from its model's
    now. Seeds of one setting share one model build when the counts agree."""
    out, known = [], {}
    for label, seed, entry in seed_entries(results):
        key = json.dumps(entry["setting"], sort_keys=True, allow_nan=False)
        if key not in known:
            known[key] = model_parameters(results["task"], entry["setting"], seed)
        now = known[key]
        if entry["parameters"] != now:
            out.append((label, seed, entry["parameters"], now))
    return out


def recount(path: Path) -> list[tuple[str, int, int, int]]:
    """Rewrite the stale counts of the results file at ``path`` (atomically, in the format the
    runner writes); returns what changed, as :func:`stale_counts`."""
    from ctrlrnn.reproduce.runner import write_results

    results = json.loads(path.read_text(encoding="utf-8"))
    stale = stale_counts(results)
    for label, seed, _, now in stale:
        results["arms"][label]["seeds"][str(seed)]["parameters"] = now
    if stale:
        write_results(path, results)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ctrlrnn.reproduce.parameter_counts",
        description="Rewrite the stale parameter counts of results files (see the module "
        "docstring).")
    parser.add_argument("files", nargs="*", type=Path,
                        help="results files (default: docs/results/data/*/*.json)")
    args = parser.parse_args(argv)
    paths = args.files or sorted(Path("docs/results/data").glob("*/*.json"))
    for path in paths:
        try:
            if not any(seed_entries(json.loads(path.read_text(encoding="utf-8")))):
                print(f"{path}: no run with a count")
                continue
            changed = recount(path)
        except (OSError, ValueError, KeyError) as exc:  # no data here for the task, not results
            print(f"{path}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        for label, seed, before, now in changed:
            print(f"{path}: {label} seed {seed}: {before} -> {now}")
        if not changed:
            print(f"{path}: counts as the models now")
    return 0


if __name__ == "__main__":
    sys.exit(main())
