"""The probes' tables on the results pages, rendered from the probe files in
``docs/results/data/probes`` so that a probe run again changes its page's numbers with it.

An experiment names its probe files (:attr:`Experiment.probe_files`); its note says what the
probes mean, and :func:`probe_lines` shows what they measured. Each file says which of three
kinds of probe wrote it (its ``kind``):

- :data:`ARM` (``scripts/arm_probe.py``): one arm of the experiment, trained as its full mode
  defines it with some settings changed, one row a seed;
- :data:`DATA_SIZE` (``scripts/carnn_lm_data_probe.py``): the CARNN LM's LSTM at several
  training-set sizes and vocabularies;
- :data:`EQUAL_STEPS` (``scripts/char_translation_probe.py``): arms and variants of an arm
  trained the same number of steps and scored on the validation split along the way;
- :data:`BY_LENGTH` (``scripts/length_probe.py``): trained runs' checkpoints of a
  sequence-to-sequence experiment scored at each target length.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctrlrnn import files
from ctrlrnn.reproduce.experiment_spec import Experiment
from ctrlrnn.reproduce.page_cells import fmt, metric_scale, short_key

ARM = "arm"
DATA_SIZE = "data-size"
EQUAL_STEPS = "equal-steps"
BY_LENGTH = "by-length"

#: what the load column means, said once above each file's tables
LOAD_WORDS = ("The load column is the machine's 1-minute load average at a run's start and end "
              "(or its mean over the run): other training jobs ran beside the probes, which "
              "changes their minutes, not their metrics.")


def probe_lines(exp: Experiment, probes_dir: Path) -> list[str]:
    """Markdown lines of ``exp``'s probe files in ``probes_dir``, a paragraph and table(s) per
    probe; a file that is not there gets a line that says so.

    Raises ``ValueError`` naming the file when it has no known ``kind``."""
    lines: list[str] = []
    for name in exp.probe_files:
        path = probes_dir / name
        shown = f"data/probes/{name}"
        if not path.exists():
            lines += ["", f"The probe file `{shown}` is not in this folder: its measurements "
                      "are not shown."]
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        render = _RENDERERS.get(data.get("kind", ""))
        if render is None:
            raise ValueError(f"probe file {path}: kind {data.get('kind')!r} is none of "
                             f"{', '.join(sorted(_RENDERERS))}")
        written = _date(data.get("written"))
        timed = data.get("kind") != BY_LENGTH  # a scoring of checkpoints trains nothing
        lines += ["", f"Probes from [`{shown}`]({shown}) (last written {written} on "
                  f"{_machine(data)}; one thread a run)." + (f" {LOAD_WORDS}" if timed else "")]
        lines += render(exp, data)
    return lines


def _date(stamp: Any) -> str:
    """``2026-12-05T09:05:54+00:00`` as ``2026-12-05 09:05 UTC``."""
    text = str(stamp or "")
    return f"{text[:10]} {text[11:16]} UTC" if len(text) >= 16 else text or "at an unknown time"


def _machine(data: dict[str, Any]) -> str:
    machine = data.get("machine")
    if isinstance(machine, dict):  # the equal-steps probe's description of its machine
        cpu, cpus = data.get("cpu_model") or machine.get("processor"), machine.get("cpus")
    else:
        cpu, cpus = data.get("cpu_model") or machine, data.get("cpus")
    return f"{cpu or 'an unrecorded CPU'}, {cpus or '?'} CPUs"


def _value(v: Any) -> str:
    """A setting as a cell: whole numbers with thousands separated, other numbers to 3
    significant digits, the rest as written."""
    if isinstance(v, bool) or v is None:
        return "–" if v is None else str(v).lower()
    try:
        number = float(v)
    except (TypeError, ValueError):
        return str(v)
    if number.is_integer() and abs(number) >= 1:
        return f"{int(number):,}"
    return fmt(number, 3)


def _settings(settings: dict[str, Any]) -> str:
    return ", ".join(f"{short_key(k)} {_value(v)}" for k, v in settings.items())


def _minutes(seconds: Any) -> str:
    return fmt(float(seconds) / 60, 3) if seconds is not None else "–"


def _epoch(step: Any, per_epoch: Any) -> str:
    """A step as the epoch it falls in (the number of epochs begun)."""
    if step is None or not per_epoch:
        return "–"
    return str(-(-int(step) // int(per_epoch)))


def _arm_tables(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """One table a probe of an arm (``scripts/arm_probe.py``), a row a seed."""
    metrics = [exp.metric, *(m for m in exp.also if "_ops" not in m)]
    lines: list[str] = []
    for name, probe in data.get("probes", {}).items():
        changed = probe.get("overrides") or {}
        command = " ".join(["scripts/arm_probe.py", exp.id, _quoted(probe["arm"]),
                            *(f"{k}={files.dumps(v)}" for k, v in changed.items()),
                            "--name", name, "--seeds",
                            *(str(r["seed"]) for r in probe["runs"])])
        what = f"changed: {_settings(changed)}" if changed else "as chosen, more seeds"
        lines += ["", f"Probe `{name}`: {probe['arm']}, {what} (`{command}`)", "",
                  "| seed | settings | stopped by | best epoch / last | "
                  f"validation {_header(exp.metric)} | "
                  + " | ".join(f"test {_header(m)}" for m in metrics) + " | minutes | load |",
                  "|---|---|---|---|---|" + "---|" * len(metrics) + "---|---|"]
        for run in probe["runs"]:
            per_epoch = run.get("steps_per_epoch")
            tests = [_metric(run.get("test", {}).get(m), m) for m in metrics]
            lines.append(
                f"| {run['seed']} | {_settings(run.get('settings', {}))} | "
                f"{_stop(run)} | {_epoch(run.get('best_step'), per_epoch)} / "
                f"{_epoch(run.get('step'), per_epoch)} | "
                f"{_metric(run.get('valid', {}).get(exp.metric), exp.metric)} | "
                + " | ".join(tests)
                + f" | {_minutes(run.get('train_seconds'))} | {_load(run)} |")
    return lines


#: how a run stopped, as the trainer records it, in the words of the pages' tables
STOPS = {"patience": "patience", "epochs": "the epoch cap", "max_steps": "the step cap",
         "diverged": "**diverged**"}


def _stop(run: dict[str, Any]) -> str:
    reason = run.get("stop_reason")
    return STOPS.get(reason, str(reason)) if reason else "–"


def _quoted(text: str) -> str:
    return f'"{text}"' if " " in text else text


def _metric(value: Any, metric: str) -> str:
    """A stored metric as shown: a percentage to one decimal, anything else to 4 digits."""
    if value is None:
        return "–"
    scale = metric_scale(metric)
    return f"{float(value) * scale:.1f}" if scale != 1.0 else fmt(float(value))


def _header(metric: str) -> str:
    return f"{metric} (%)" if metric_scale(metric) != 1.0 else metric


def _load(run: dict[str, Any]) -> str:
    start, end = run.get("load_start"), run.get("load_end")
    if start is None or end is None:
        return "–"
    return f"{float(start):.1f}-{float(end):.1f}"


def _data_size_tables(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """The training-set size probe (``scripts/carnn_lm_data_probe.py``), a row a run."""
    runs = data.get("runs", [])
    lines = ["", f"Probe: {data.get('probe', exp.id)}, seed {data.get('seed', 0)} "
             "(`scripts/carnn_lm_data_probe.py "
             + " ".join(r["run"] for r in runs) + "`)", "",
             "| training sentences | vocabulary | words | test words outside it | lr | dropout "
             "| stopped by | best step / last | validation perplexity | test perplexity "
             "| minutes | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        sentences = f"{r['train_sentences']:,}" if r["train_sentences"] else "all"
        vocab = ("the whole training split's" if r["vocabulary"] == "whole"
                 else "the training sentences'")
        lines.append(
            f"| {sentences} | {vocab} | {r['vocabulary_size']:,} | "
            f"{100 * r['test_unknown_share']:.1f}% | {_value(r['lr'])} | "
            f"{_value(r['dropout'])} | {_stop(r)} | {r['best_step']:,} / {r['step']:,} | "
            f"{fmt(r['valid_perplexity'])} | {fmt(r['test_perplexity'])} | "
            f"{_minutes(r.get('train_seconds'))} | {_load(r)} |")
    return lines


def _equal_steps_tables(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """The equal-step probe (``scripts/char_translation_probe.py``): each run at the last step,
    then the validation loss at every evaluation."""
    every: dict[str, Any] = data.get("runs", {})
    runs = {name: r for name, r in every.items() if not r["run"].get("unfinished")}
    steps = data.get("steps")
    lines = ["", f"Probe (`scripts/char_translation_probe.py --steps {steps}`): every run trains "
             f"{steps:,} steps from seed {data.get('seed', 0)} and is scored every "
             f"{data.get('eval_every')} steps on {data.get('evaluation', 'the validation split')}.",
             "",
             "| run | what it changes | parameters | lr | dropout | validation loss | token "
             "accuracy (%) | BLEU | minutes | load (mean) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        final, run = r["run"].get("final_valid") or {}, r["run"]
        over = r.get("overrides", {})
        load = run.get("load_mean")
        lines.append(
            f"| {name} | {r.get('changes', '')} | {r['parameters']:,} | "
            f"{_value(over.get('lr'))} | {_value(over.get('model.dropout'))} | "
            f"{fmt(final.get('loss'))} | {_metric(final.get('token_accuracy'), 'accuracy')} | "
            f"{fmt(final.get('bleu'), 3)} | {_minutes(run.get('training_seconds'))} | "
            f"{'–' if load is None else f'{float(load):.1f}'} |")
    points = sorted({p["step"] for r in runs.values() for p in r.get("curve", [])})
    lines += ["", "Validation loss (nats a character) by step:", "",
              "| run | " + " | ".join(f"{s:,}" for s in points) + " |",
              "|---|" + "---|" * len(points)]
    for name, r in runs.items():
        at = {p["step"]: p.get("loss") for p in r.get("curve", [])}
        lines.append(f"| {name} | " + " | ".join(fmt(at.get(s)) for s in points) + " |")
    unfinished = [name for name in every if name not in runs]
    if unfinished:
        lines += ["", f"Not finished yet: {', '.join(unfinished)} (the same command goes on "
                  "with them)."]
    return lines


def _by_length_table(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """The length probe (``scripts/length_probe.py``): a table a split, a row a target length,
    a column a scored checkpoint, each cell its exact match (%) over that length's examples."""
    runs: dict[str, Any] = data.get("runs", {})
    if not runs:
        return ["", "The length probe has scored no run yet."]
    # a page may show another experiment's file beside its own, to compare at equal lengths
    scored = data.get("experiment", exp.id)
    command = " ".join(["scripts/length_probe.py", scored,
                        *(f"{name}={run['checkpoint']}" for name, run in runs.items())])
    lines = ["", f"Exact match (%) at each target length of {scored}'s checkpoints named, "
             f"decoded as the runs' evaluation decodes (`{command}`):"]
    for split in sorted({run.get("split", "test") for run in runs.values()}):
        these = {name: run for name, run in runs.items() if run.get("split", "test") == split}
        rows = {name: {r["length"]: r for r in run["by_length"]} for name, run in these.items()}
        lengths = sorted({length for by in rows.values() for length in by})
        sizes = {name: {k: r["examples"] for k, r in by.items()} for name, by in rows.items()}
        # runs on other training-set sizes draw other test trees: each cell then says its count
        shared = len({tuple(sorted(c.items())) for c in sizes.values()}) == 1
        counts = next(iter(sizes.values()))
        # a search trial's folder holds a later checkpoint once the trial goes on: the step
        # says which one was scored
        heads = [f"{name} (step {run['step']:,})" if run.get("step") else name
                 for name, run in these.items()]
        lines += ["", f"| target length ({split} split) | " + ("examples | " if shared else "")
                  + " | ".join(heads) + " |", "|---|" + "---|" * (len(these) + shared)]
        for length in lengths:
            cells = [_length_cell(rows[name].get(length), shared) for name in these]
            lines.append(f"| {length} | " + (f"{counts[length]:,} | " if shared else "")
                         + " | ".join(cells) + " |")
        totals = [_metric(run.get("exact_match"), "exact_match")
                  + ("" if shared else f" of {sum(sizes[name].values()):,}")
                  for name, run in these.items()]
        lines.append("| all | " + (f"{sum(counts.values()):,} | " if shared else "")
                     + " | ".join(totals) + " |")
        lines += _reordered_line(these)
    return lines


def _reordered_line(runs: dict[str, Any]) -> list[str]:
    """How many of each run's wrong outputs hold the target's tokens in another order (the
    runs scored before the probe counted them are left out)."""
    parts = []
    for name, run in runs.items():
        rows = run["by_length"]
        if not all("reordered" in r for r in rows):
            continue
        wrong = sum(r["examples"] - round(r["exact_match"] * r["examples"]) for r in rows)
        parts.append(f"{name} {sum(r['reordered'] for r in rows):,} of {wrong:,}")
    if not parts:
        return []
    return ["", "Wrong outputs that hold exactly their target's tokens in another order: "
            + "; ".join(parts) + "."]


def _length_cell(row: dict[str, Any] | None, shared: bool) -> str:
    if row is None:
        return "–"
    shown = _metric(row["exact_match"], "exact_match")
    return shown if shared else f"{shown} of {row['examples']:,}"


_RENDERERS: dict[str, Callable[[Experiment, dict[str, Any]], list[str]]] = {
    ARM: _arm_tables, DATA_SIZE: _data_size_tables, EQUAL_STEPS: _equal_steps_tables,
    BY_LENGTH: _by_length_table}
