"""Score trained runs' checkpoints of a sequence-to-sequence experiment at each target length:
where its exact match is lost as the outputs grow longer (``ctrlrnn eval --by-length``, kept in
a probe file its page renders).

Each ``NAME=CHECKPOINT`` pair scores one checkpoint (a run's ``best.safetensors``) on
``--split``, decoded as the run's own evaluation decodes, and records under ``NAME`` in
``--json`` (default ``docs/results/data/probes/EXPERIMENT-by-length.json``), for each target
length, its examples, the share exactly right (``exact_match``) and the count of wrong outputs
that hold the target's tokens in another order (``reordered``); a name already there is
scored again and replaced. One thread.

From the repository root, with the project's environment::

    .venv/bin/python scripts/length_probe.py metagross-tree5 \\
        trees-30000-to-patience=runs/probes/metagross-tree5/trees-30000-to-patience-seed0/best.safetensors
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ctrlrnn.reproduce.probe_tables import BY_LENGTH
from ctrlrnn.reproduce.probes import PROBES, experiment_arm, read_probe_file, update_probe_file
from ctrlrnn.train.checkpoint import stored_step
from ctrlrnn.train.run import rebuild_from_checkpoint


def _pairs(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"runs: expected NAME=CHECKPOINT, got {item!r}")
        out[name] = Path(path)
    return out


def score(checkpoint: Path, split: str) -> dict[str, Any]:
    """The checkpoint's run (task, model, seed, step) and its exact match at each target
    length of ``split``."""
    try:
        cfg, task, model, ckpt = rebuild_from_checkpoint(checkpoint)
        ckpt.restore(model, rng=False)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"runs: {exc}") from None
    by_length = getattr(task, "exact_match_by_length", None)
    if by_length is None:
        raise SystemExit(f"runs: {checkpoint} is a run of task {cfg.task!r}, which decodes "
                         "no sequences")
    model.eval()
    counts = by_length(model, split)
    examples = sum(c.examples for c in counts.values())
    return {"checkpoint": str(checkpoint), "task": cfg.task, "model": cfg.model,
            "seed": cfg.seed, "step": stored_step(checkpoint),
            "exact_match": sum(c.exact for c in counts.values()) / max(examples, 1),
            "by_length": [{"length": length, "examples": c.examples,
                           "exact_match": c.exact / c.examples, "reordered": c.reordered}
                          for length, c in counts.items()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("runs", nargs="+", metavar="NAME=CHECKPOINT")
    parser.add_argument("--arm", default="", help="the arm the runs train, as its page names it")
    parser.add_argument("--split", default="test", choices=["valid", "test"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = _pairs(args.runs)
    if args.arm:
        try:
            experiment_arm(args.experiment, args.arm)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    torch.set_num_threads(1)
    path = args.json or PROBES / f"{args.experiment}-by-length.json"
    empty = {"experiment": args.experiment, "kind": BY_LENGTH, "threads": 1, "runs": {}}
    kind = read_probe_file(path, empty).get("kind")
    if kind != BY_LENGTH:
        raise SystemExit(f"json: {path} holds a probe of kind {kind!r}, not {BY_LENGTH!r}")
    for name, checkpoint in runs.items():
        row = {"arm": args.arm, "split": args.split, **score(checkpoint, args.split)}

        def add(data: dict[str, Any], name: str = name, row: dict[str, Any] = row) -> None:
            data["runs"][name] = row

        update_probe_file(path, empty, add)
        print(f"{name}: exact match {100 * row['exact_match']:.1f}% on {args.split} "
              f"({len(row['by_length'])} target lengths)", flush=True)


if __name__ == "__main__":
    main()
