"""Data-size probe of the CARNN LM experiment's LSTM baseline (``carnn-lm``): how its test
perplexity moves as its training set grows from the experiment's 10,000 PTB sentences towards
the whole 42,068.

Each run is the experiment's own LSTM arm in full mode (``runner.config_for``: its task, width,
evaluation every 150 steps, patience of 5 evaluations, validation and test on the whole splits)
at one learning rate and dropout for every size, with only ``task.train_size`` changed, seed 0,
one thread. The experiment builds its vocabulary from its training sentences, so a larger
training set has more word types and fewer unknown words, and its perplexity is not comparable
with a smaller set's: a run ``SIZE:whole`` reads the vocabulary of the whole training split
(``task.whole_vocab``) whatever its size, ``SIZE:slice`` the experiment's own.

A run ends by the experiment's patience or at ``--max-steps``. Its result, its vocabulary's
size, the share of test words outside it, its validation curve and the machine's load while it
ran go to ``--json`` (default ``docs/results/data/probes/carnn-lm-data.json``) as each run
finishes, so a probe stopped between runs keeps the finished ones (run it again to add the
rest; a finished run is read back, not trained again).

Needs the prepared ``ptb`` data (``ctrlrnn data prepare ptb``) or ``--source DIR``. From the
repository root::

    .venv/bin/python scripts/carnn_lm_data_probe.py 10000:whole 0:whole 10000:slice
    .venv/bin/python scripts/carnn_lm_data_probe.py 200:whole 200:slice --max-steps 20 \\
        --runs /tmp/probe --json /tmp/probe.json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctrlrnn.data.vocab import UNK
from ctrlrnn.reproduce.probe_tables import DATA_SIZE
from ctrlrnn.reproduce.probes import (
    experiment_arm,
    read_probe_file,
    train_probe_run,
    update_probe_file,
)
from ctrlrnn.reproduce.runner import config_for
from ctrlrnn.train.config import check_options

#: the LSTM's values in the experiment's previous full run, at which its seeds reached
#: 190.0 +- 1.7 (its page quotes them)
LR, DROPOUT = 0.00138, 0.01


def _train(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train the LSTM arm named ``SIZE:VOCAB`` (the first SIZE training sentences, 0: all;
    VOCAB ``whole`` or ``slice``); its result and curve."""
    exp, arm = experiment_arm("carnn-lm", "LSTM LM (no context)")
    size, vocab = _parse(name)
    out = args.runs / name.replace(":", "-")
    extra = {"task.train_size": size, "task.whole_vocab": vocab == "whole", "lr": args.lr,
             "model.dropout": args.dropout, "max_steps": args.max_steps}
    if args.source:
        extra["task.source"] = str(args.source)
    run = train_probe_run(exp, arm, 0, out, extra)
    cfg, cls = config_for(exp, arm, 0, "full", out, extra)
    task = cls(check_options("task", exp.task, cfg.task_args, cls.options), 0)
    task.setup()
    test_words = [w for _, sentence in task.pairs["test"] for w in sentence]
    return {"run": name, "train_sentences": size, "vocabulary": vocab,
            "vocabulary_size": len(task.vocab),
            # PTB writes its own rare words as <unk>, the vocabulary's unknown token
            "test_unknown_share": sum(w == UNK or w not in task.vocab for w in test_words)
            / len(test_words),
            "lr": args.lr, "dropout": args.dropout, "max_steps": args.max_steps,
            **{k: v for k, v in run.items() if k not in ("valid", "test")},
            "valid_perplexity": run["valid"]["perplexity"],
            "test_perplexity": run["test"]["perplexity"]}


def _parse(name: str) -> tuple[int, str]:
    size, _, vocab = name.partition(":")
    if not size.isdigit() or vocab not in ("whole", "slice"):
        raise SystemExit(f"runs: expected SIZE:whole or SIZE:slice, got {name!r}")
    return int(size), vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*",
                        default=["10000:whole", "0:whole", "10000:slice", "20000:whole"],
                        help="runs, each SIZE:VOCAB: SIZE training sentences (0: the whole "
                             "split), VOCAB whole (the whole split's vocabulary) or slice")
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--dropout", type=float, default=DROPOUT)
    parser.add_argument("--max-steps", type=int, default=9000,
                        help="the cap of every run (the experiment's patience may end it first)")
    parser.add_argument("--source", type=Path,
                        help="a folder of train.txt, valid.txt and test.txt, one sentence a "
                             "line, in place of PTB")
    parser.add_argument("--runs", type=Path, default=Path("runs/carnn-lm-data-probe"))
    parser.add_argument("--json", type=Path,
                        default=Path("docs/results/data/probes/carnn-lm-data.json"))
    args = parser.parse_args()
    runs = {r["run"]: r for r in read_probe_file(args.json, {}).get("runs", [])}
    for name in args.names:
        _parse(name)
        if name in runs:
            print(f"{name}: in {args.json} already", flush=True)
            continue
        runs[name] = _train(name, args)
        row = runs[name]
        print(f"{name} ({row['vocabulary_size']} words): valid {row['valid_perplexity']:.1f}, test "
              f"{row['test_perplexity']:.1f} at step {row['best_step']} of {row['step']} "
              f"({row['stop_reason']})", flush=True)
        update_probe_file(args.json, {}, lambda data, name=name, row=row: _add(data, name, row))


def _add(data: dict[str, Any], name: str, row: dict[str, Any]) -> None:
    """Put run ``name``'s ``row`` into the probe file's ``data``, as read when it finished."""
    runs = {r["run"]: r for r in data.get("runs", [])}
    runs[name] = row
    data.update({"kind": DATA_SIZE, "probe": "carnn-lm LSTM arm, training-set size", "seed": 0,
                 "threads": 1, "runs": list(runs.values())})


if __name__ == "__main__":
    main()
