"""Probe of the character-level translation's LSTM baseline (``translation-char-qrnn``):
which of its differences from the QRNN arm limits its fit.

Trains, through ``ctrlrnn train`` (the experiment's own task, model and trainer), the LSTM arm
as the experiment defines it, variants that each change one thing (a bidirectional encoder,
at its width or narrowed to the one-way arm's parameter count, ``task.decoder_init=layers``
as the QRNN decoder's eq 7, twice the width, the QRNN arm's learning rate), and the QRNN arm
as the reference, each for the same budget on the same
10,000 training verses, seed and batch order, ``--jobs`` runs at a time, one thread each.
The budget is either ``--steps N``, exactly N optimizer steps (the trainer's own
``--max-steps``; nothing is timed, so a run paused or slowed by other work on the machine ends
at the same step with the same numbers), or ``--minutes``, wall-clock minutes counted from the
run's first log row at step 10 (the data's set-up not in it): when they are spent a run gets
SIGTERM and stops at the next step boundary with its checkpoint written (``ctrlrnn train``'s
documented stop). ``ctrlrnn eval`` then scores the run's checkpoint on the validation split,
the last point of its curve. A run that fails keeps the last lines of its output in the JSON
(the whole of it: ``RUNS/NAME.out``). The same command again skips the runs that finished
(``RUNS/NAME/probe.json``) and resumes from its last checkpoint (written at every evaluation)
a run whose probe was killed mid-way: the trainer's resume is exact, so its numbers are those
of an unbroken run. ``--json`` is refused when it holds runs of another budget, which writing
it would drop.

Every run also evaluates every ``--eval-every`` steps on the 100 validation verses the
experiment uses (loss per character, token accuracy, BLEU of greedy translations). Its curve,
its exit status and the machine's load while it ran (the 1-minute load average at its start,
its end and sampled every 5 s; the CPUs there are; the runs alongside it) go to ``--json``
(default ``docs/results/data/probes/translation-char-lstm.json``), with each run's steps and
wall seconds. A budget in minutes, not steps, makes the variants' curves comparable only on an
idle machine: read the load first.

Needs the prepared ``verses-en-es`` data (``ctrlrnn data prepare verses-en-es``) or
``--source DIR``. Run from the repository root with the project's environment::

    .venv/bin/python scripts/char_translation_probe.py --steps 2000 --jobs 1
    .venv/bin/python scripts/char_translation_probe.py --minutes 20 --jobs 2
    .venv/bin/python scripts/char_translation_probe.py --list
    .venv/bin/python scripts/char_translation_probe.py --toy --steps 20 --eval-every 5

``--toy`` checks the script in seconds on a generated word-for-word toy data set (its numbers
mean nothing; results under ``--runs``, not ``docs/``); ``--collect`` only reads the runs
already in ``--runs`` and writes the JSON again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: the full runs' shared setting (docs/results/data/full/translation-char-qrnn.json), greedy
#: evaluations (beam 1) so that a curve's points cost little
COMMON = {"model.num_layers": "2", "model.hidden_size": "128", "task.train_size": "10000",
          "task.valid_size": "100", "task.test_size": "16", "task.beam": "1", "threads": "1",
          "checkpoint_every": "100000"}
#: each arm's tuned learning rate and dropout in those runs
LSTM = {"lr": "0.003725220866430849", "model.dropout": "0.021872283571226232"}
QRNN = {"lr": "0.0015207077570850306", "model.dropout": "0.026679065516865996",
        "model.window": "[6,2]", "model.causal": "false"}

#: name -> (model, overrides on COMMON, what it changes), in the order they run (the most
#: informative first)
RUNS: dict[str, tuple[str, dict[str, str], str]] = {
    "lstm": ("lstm", LSTM, "the LSTM arm as defined"),
    "qrnn": ("qrnn", QRNN, "the QRNN arm as defined (reference)"),
    "lstm-bidir": ("lstm", {**LSTM, "model.bidirectional": "true"}, "bidirectional encoder"),
    "lstm-layers": ("lstm", {**LSTM, "task.decoder_init": "layers"},
                    "decoder layer l started from encoder layer l's final state (eq 7's "
                    "pairing)"),
    "lstm-lr": ("lstm", {**LSTM, "lr": QRNN["lr"]}, "the QRNN arm's learning rate"),
    "lstm-wide": ("lstm", {**LSTM, "model.hidden_size": "256"}, "twice the width (256)"),
    "lstm-bidir-92": ("lstm", {**LSTM, "model.bidirectional": "true",
                               "model.hidden_size": "92"},
                      "bidirectional encoder at about the one-way arm's parameters (92 units "
                      "a direction, a decoder of 92)"),
    "lstm-bidir-layers": ("lstm", {**LSTM, "model.bidirectional": "true",
                                   "task.decoder_init": "layers"},
                          "bidirectional encoder and decoder_init=layers"),
}

#: the toy data's word-for-word lexicon (--toy)
LEXICON = {"the": "el", "dog": "perro", "cat": "gato", "eats": "come", "sees": "ve",
           "big": "grande", "small": "chico", "bread": "pan"}
#: the load average's sampling interval, seconds
POLL = 5.0
#: under --minutes, a run whose training has not begun (no log row) this long after its start
#: is stopped (--steps has no clock: a run paused from outside is waited for)
STARTUP_LIMIT = 600.0


def _toy_data(root: Path) -> Path:
    """Write ``{train,valid,test}.tsv`` of word-for-word toy pairs under ``root``/toy-data."""
    out = root / "toy-data"
    out.mkdir(parents=True, exist_ok=True)
    rng, words = random.Random(0), sorted(LEXICON)
    for split, n in (("train", 96), ("valid", 12), ("test", 8)):
        lines = []
        for k in range(n):
            en = [rng.choice(words) for _ in range(rng.randint(2, 4))]
            lines.append(f"{split}{k}\t{' '.join(en)}\t{' '.join(LEXICON[w] for w in en)}\n")
        (out / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return out


def _overrides(name: str, args: argparse.Namespace) -> dict[str, str]:
    overrides = {**COMMON, **RUNS[name][1], "eval_every": str(args.eval_every),
                 "device": args.device}
    if args.source:
        overrides["task.source"] = str(args.source)
    if args.toy:  # every toy verse, small evaluations
        overrides.update({"task.train_size": "0", "task.valid_size": "0",
                          "task.test_size": "0", "task.eval_batch_size": "4"})
    return overrides


def _ctrlrnn(*argv: str) -> list[str]:
    """``ctrlrnn ARGV`` in this interpreter (its PYTHONPATH: this checkout's ``src`` if set)."""
    return [sys.executable, "-m", "ctrlrnn", *argv]


def _train_command(name: str, args: argparse.Namespace) -> list[str]:
    model = RUNS[name][0]
    flags = ["--task", "translate-char", "--model", model, "--seed", "0", "--epochs", "50",
             "--out", str(args.runs / name), "--no-progress"]
    if args.steps or args.max_steps:
        flags += ["--max-steps", str(args.steps or args.max_steps)]
    pairs = [f"{k}={v}" for k, v in _overrides(name, args).items()]
    return ["nice", "-n", "10", *_ctrlrnn("train", *flags, *pairs)]


def _load() -> float:
    return os.getloadavg()[0]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _final_eval(run: Path, device: str, env: dict[str, str]) -> dict[str, Any] | None:
    """``ctrlrnn eval`` of the run's last checkpoint on the validation split (with its step)."""
    from ctrlrnn.train.checkpoint import stored_step

    ckpt = run / "checkpoint.safetensors"
    if not ckpt.exists():
        return None
    done = subprocess.run(_ctrlrnn("eval", "--checkpoint", str(ckpt), "--split", "valid",
                                   "--json", "--device", device),
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or done.returncode}
    return {"step": stored_step(ckpt), **json.loads(done.stdout)}


def _run_one(name: str, args: argparse.Namespace, others: Callable[[], set[str]]) -> None:
    """Train variant ``name`` for ``args.steps`` steps (the trainer stops itself) or
    ``args.minutes`` (then SIGTERM), score its checkpoint, and write ``RUNS/name/probe.json``:
    how it ended, its steps and wall time, the machine's load meanwhile and the probe's other
    runs under way with it (``others()``)."""
    from ctrlrnn.train.checkpoint import stored_step

    run = args.runs / name
    if (run / "probe.json").exists():
        print(f"{name}: {run} already holds a finished run; skipped (remove it to run again)",
              flush=True)
        return
    run.mkdir(parents=True, exist_ok=True)
    rows = run / "log.jsonl"
    # a checkpoint without probe.json: the probe stopped mid-run (a killed session); the
    # trainer resumes it exactly and keeps its log rows up to the checkpoint
    ckpt = run / "checkpoint.safetensors"
    resumed_at = stored_step(ckpt) if ckpt.exists() else None
    if resumed_at is None:
        rows.unlink(missing_ok=True)  # a run stopped before its first checkpoint starts over
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    meta: dict[str, Any] = {"started": _now(), "load_start": _load(), "steps": args.steps,
                            "minutes": None if args.steps else args.minutes,
                            "resumed_at_step": resumed_at}
    samples, alongside = [], others()
    begin, training, stopped = time.monotonic(), None, False
    out = run.parent / f"{name}.out"
    with open(out, "a" if resumed_at is not None else "w", encoding="utf-8") as log:
        command = _train_command(name, args) + (["--resume"] if resumed_at is not None else [])
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        print(f"started {name} (pid {proc.pid})", flush=True)
        while proc.poll() is None:
            time.sleep(POLL if args.steps else min(POLL, max(args.minutes * 60 / 4, 0.5)))
            samples.append(_load())
            alongside |= others()
            now = time.monotonic()
            if training is None and rows.exists():  # the first log row: training under way
                training = now
            # the budget counts from the first row (data set-up and start-up excluded); a
            # budget in steps is the trainer's own (--max-steps), with no clock here
            spent = not args.steps and (now - training >= args.minutes * 60
                                        if training is not None
                                        else now - begin >= STARTUP_LIMIT)
            if spent and not stopped:
                proc.send_signal(signal.SIGTERM)  # stops at the next step boundary
                stopped = True
    meta.update({"finished": _now(), "wall_seconds": round(time.monotonic() - begin, 1),
                 "startup_seconds": round(training - begin, 1) if training else None,
                 "training_seconds": round(time.monotonic() - training, 1) if training
                 else None,
                 "exit": proc.returncode, "stopped_by_budget": stopped,
                 "alongside": sorted(alongside),
                 "load_end": _load(), "load_mean": sum(samples) / len(samples) if samples
                 else None, "load_max": max(samples, default=None)})
    meta["final_valid"] = _final_eval(run, args.device, env)
    if proc.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM) or training is None:
        meta["output_tail"] = out.read_text(encoding="utf-8").splitlines()[-5:]
    (run / "probe.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(f"finished {name}: exit {proc.returncode}"
          f"{' (budget spent)' if stopped else ''}", flush=True)


def _launch(names: list[str], args: argparse.Namespace) -> None:
    running: set[str] = set()  # the probe's runs under way (read by every run's poll)
    lock = threading.Lock()

    def one(name: str) -> None:
        with lock:
            running.add(name)

        def others() -> set[str]:
            with lock:
                return running - {name}

        try:
            _run_one(name, args, others)
        finally:
            with lock:
                running.discard(name)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [pool.submit(one, name) for name in names]:
            future.result()


def _curve(run: Path) -> list[dict[str, Any]]:
    """The validation rows, each with the mean training loss logged since the previous one and
    the training seconds so far."""
    rows, train, seconds = [], [], None
    for line in (run / "log.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("split") == "train":
            train.append(row["loss"])
            seconds = row.get("seconds", seconds)
        if row.get("split") == "valid":
            rows.append({"step": row["step"], "train_seconds": seconds,
                         "loss": row.get("valid_loss"),
                         "token_accuracy": row.get("valid_token_accuracy"),
                         "bleu": row.get("valid_bleu"),
                         "train_loss": sum(train) / len(train) if train else None})
            train = []
    return rows


def _parameters(run: Path) -> int | None:
    """The model's size: the elements of the ``model/`` tensors its checkpoint stores."""
    from safetensors import safe_open

    ckpt = run / "checkpoint.safetensors"
    if not ckpt.exists():
        return None
    with safe_open(str(ckpt), framework="pt") as fh:
        shapes = [fh.get_slice(k).get_shape() for k in fh.keys() if k.startswith("model/")]
    return sum(math.prod(shape) for shape in shapes)


def _collect(runs: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (model, overrides, what) in RUNS.items():
        run = runs / name
        if not (run / "probe.json").exists() and not (run / "log.jsonl").exists():
            continue
        result = (json.loads((run / "result.json").read_text())
                  if (run / "result.json").exists() else {})
        # a run without probe.json was still under way (or killed) when this was collected:
        # its curve so far, marked unfinished
        probe = (json.loads((run / "probe.json").read_text())
                 if (run / "probe.json").exists() else {"unfinished": True})
        out[name] = {"model": model, "overrides": overrides, "changes": what,
                     "parameters": result.get("parameters") or _parameters(run),
                     "run": probe,
                     "curve": _curve(run) if (run / "log.jsonl").exists() else []}
    return out


def _previous(args: argparse.Namespace) -> dict[str, Any]:
    """The runs of the results file already at ``--json`` that were trained under the same
    budget (``--steps`` and ``--eval-every``), each with the commit and time it was written at:
    variants run in an earlier invocation are kept beside this one's."""
    if not args.json.exists() or not args.steps:
        return {}
    old = json.loads(args.json.read_text(encoding="utf-8"))
    if old.get("steps") != args.steps or old.get("eval_every") != args.eval_every:
        return {}
    return {name: {"commit": old.get("commit"), "written": old.get("written"), **entry}
            for name, entry in old.get("runs", {}).items()}


def _check_json_budget(args: argparse.Namespace) -> None:
    """Refuse a ``--json`` whose runs this invocation would drop: :func:`_previous` keeps
    only runs of the same ``--steps`` and ``--eval-every`` (a budget in minutes keeps none)."""
    if not args.json.exists():
        return
    old = json.loads(args.json.read_text(encoding="utf-8"))
    if old.get("runs") and not _previous(args):
        raise SystemExit(f"--json: {args.json} holds runs of another budget (steps "
                         f"{old.get('steps')}, minutes {old.get('minutes')}, eval every "
                         f"{old.get('eval_every')}); give another --json, so that they are "
                         "kept")


def _merge(previous: dict[str, Any], fresh: dict[str, Any], commit: str | None,
           written: str) -> dict[str, Any]:
    """``previous`` with ``fresh`` over it (a variant trained now replaces its earlier run),
    in the order of :data:`RUNS`."""
    runs = {**previous, **{name: {"commit": commit, "written": written, **entry}
                           for name, entry in fresh.items()}}
    return {name: runs[name] for name in RUNS if name in runs}


def _commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty else "")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Variants: " + "; ".join(f"{n}: {w}" for n, (_, _, w) in RUNS.items()))
    p.add_argument("--steps", type=int, default=0,
                   help="every run trains exactly N optimizer steps (the trainer's "
                        "--max-steps; no clock, so the machine's load does not change the "
                        "results); replaces --minutes")
    p.add_argument("--minutes", type=float, default=None,
                   help="wall-clock training budget of every run, from its first log row "
                        "(default 20 unless --steps)")
    p.add_argument("--eval-every", type=int, default=250,
                   help="evaluate every N steps (default 250; 625 steps an epoch)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="with --minutes, also stop a run after N steps (default 0: the "
                        "minutes alone)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    p.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS),
                   metavar="NAME", help="these variants only (default: all; --list)")
    p.add_argument("--device", default="cpu", help="the runs' device (default cpu)")
    p.add_argument("--source", type=Path, default=None,
                   help="task.source: a folder of {train,valid,test}.tsv (default: the "
                        "prepared verses-en-es)")
    p.add_argument("--toy", action="store_true",
                   help="a generated toy data set, to check the script (numbers mean nothing)")
    p.add_argument("--runs", type=Path, default=None,
                   help="run folders (default runs/char-translation-probe, with --toy "
                        "runs/char-translation-probe-toy)")
    p.add_argument("--json", type=Path, default=None,
                   help="results (default docs/results/data/probes/translation-char-lstm.json; "
                        "with --toy RUNS/probe.json)")
    p.add_argument("--collect", action="store_true", help="only read the runs in --runs")
    p.add_argument("--list", action="store_true", help="list the variants and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list:
        for name, (model, overrides, what) in RUNS.items():
            print(f"{name:18} --model {model} {' '.join(f'{k}={v}' for k, v in overrides.items())}"
                  f"\n{'':18} {what}")
        return 0
    if args.steps and (args.minutes is not None or args.max_steps):
        raise SystemExit("--steps is the whole budget: give --steps or --minutes "
                         "(with --max-steps), not both")
    if args.steps < 0:
        raise SystemExit("--steps must be positive")
    if not args.steps and args.minutes is None:
        args.minutes = 20.0
    if (args.minutes is not None and args.minutes <= 0) or args.jobs < 1 or args.eval_every < 1:
        raise SystemExit("--minutes, --jobs and --eval-every must be positive")
    if args.toy and args.source:
        raise SystemExit("--toy writes its own data: give --toy or --source, not both")
    args.runs = args.runs or Path("runs/char-translation-probe" + ("-toy" if args.toy else ""))
    args.json = args.json or (args.runs / "probe.json" if args.toy else
                              Path("docs/results/data/probes/translation-char-lstm.json"))
    _check_json_budget(args)
    args.runs.mkdir(parents=True, exist_ok=True)
    if args.toy:
        args.source = _toy_data(args.runs).resolve()
    if not args.collect:
        _launch(args.only, args)
    # imported here: they load torch, which the launcher itself never needs
    from ctrlrnn.cpu import cpu_model
    from ctrlrnn.reproduce.probe_tables import EQUAL_STEPS

    data = {"kind": EQUAL_STEPS, "experiment": "translation-char-qrnn", "task": "translate-char",
            "seed": 0, "cpu_model": cpu_model(),
            "probe": "scripts/char_translation_probe.py", "commit": _commit(),
            "written": _now(), "toy": args.toy, "steps": args.steps, "minutes": args.minutes,
            "eval_every": args.eval_every, "max_steps": args.max_steps, "jobs": args.jobs,
            "evaluation": "validation verses (100 unless --toy); BLEU of greedy translations",
            "common": COMMON,
            "machine": {"processor": platform.processor() or platform.machine(),
                        "cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
                        "threads_per_run": 1, "device": args.device},
            "runs": _merge(_previous(args), _collect(args.runs), _commit(), _now())}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("wrote", args.json)
    failed = [name for name, entry in data["runs"].items()
              if entry["run"].get("exit") not in (None, 0, 128 + signal.SIGTERM)]
    if failed:
        print("failed (see their output_tail):", " ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
