"""``ctrlrnn reproduce --estimate N``: what an experiment would cost on this machine, measured.

For each arm of each chosen experiment, seed 0 trains ``N`` steps past a short warm-up in a
scratch run directory (``RUNS/estimate/<mode>/<experiment>/<arm>``, replaced each time), in
the mode's configuration. Its seconds per step are the median of the per-step times the run
logs after the warm-up (the first steps build caches; an evaluation or checkpoint in the
middle is one slow step, which the median ignores). With the steps an epoch takes and the
caps of the mode, each part is bounded from above:

* the search: ``trials`` runs, each to the trial budget's cap (:mod:`ctrlrnn.reproduce.tuning`);
  under successive halving, every trial to the first rung's cap, and the trials each later rung
  keeps from the previous rung's cap to its own (they continue from their checkpoints);
* the seeds: ``seeds`` runs, each to the mode's cap.

Runs that stop by patience take less; evaluation is not counted. The measurement is only as
good as the machine is quiet: the load average at each measurement's start and the share of
the CPU its threads got are printed with it.
"""

from __future__ import annotations

import os
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.runner import config_for, slug
from ctrlrnn.train.logs import read_rows
from ctrlrnn.train.run import train_run

#: steps trained before the timed ones (kernel caches, first allocations)
WARMUP = 3


@dataclass(frozen=True)
class ArmCost:
    """One arm's measured step time and the bounds it gives."""

    experiment: str
    arm: str
    seconds_per_step: float
    steps_per_epoch: int
    #: the search's rungs: (trials that train to it, its cap in steps), shortest first; one
    #: rung for a search without halving, none without a search
    rungs: tuple[tuple[int, int], ...]
    seeds: int
    seed_steps: int  # the cap of one seed's run, in steps
    load: float | None
    cpu_share: float | None

    @property
    def trials(self) -> int:
        return self.rungs[0][0] if self.rungs else 0

    @property
    def search_steps(self) -> int:
        """The search's steps at most: each rung's trials from the previous rung's cap on."""
        caps = [0] + [cap for _n, cap in self.rungs]
        return sum(n * max(cap - caps[r], 0) for r, (n, cap) in enumerate(self.rungs))

    @property
    def search_seconds(self) -> float:
        return self.search_steps * self.seconds_per_step

    @property
    def seeds_seconds(self) -> float:
        return self.seeds * self.seed_steps * self.seconds_per_step

    @property
    def total_seconds(self) -> float:
        return self.search_seconds + self.seeds_seconds


def cap_steps(epochs: int, max_steps: int, steps_per_epoch: int) -> int:
    """The steps a run takes at most: its epoch cap, or ``max_steps`` when that is lower."""
    total = epochs * steps_per_epoch
    return min(total, max_steps) if max_steps else total


def step_seconds(rows: list[dict[str, Any]], warmup: int = WARMUP) -> float:
    """The median time of one training step in a run's log ``rows`` (logged every step),
    after the first ``warmup`` steps."""
    times = [(int(r["step"]), float(r["seconds"])) for r in rows
             if r.get("split") == "train" and "seconds" in r]
    times.sort()
    gaps = [b[1] - a[1] for a, b in zip(times, times[1:], strict=False)
            if a[0] >= warmup and b[0] == a[0] + 1]
    if not gaps:
        raise ValueError("the measurement logged no consecutive steps after the warm-up")
    return statistics.median(gaps)


def measure_arm(exp: Experiment, arm: Arm, mode: str, runs_dir: Path, steps: int,
                show_progress: bool = False) -> ArmCost:
    """Train ``steps`` timed steps of ``exp``'s ``arm`` and bound its parts' cost in ``mode``."""
    if steps < 2:
        raise ValueError(f"--estimate: expected at least 2 steps, got {steps}")
    out = runs_dir / "estimate" / mode / exp.id / slug(arm.label)
    if out.exists():
        shutil.rmtree(out)
    measure = {"max_steps": WARMUP + steps, "epochs": 10**6, "eval_every": 0,
               "eval_batches": 1, "log_every": 1, "checkpoint_every": 10**6, "patience": 0}
    cfg, cls = config_for(exp, arm, 0, mode, out, measure)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = train_run(cfg, cls, show_progress=show_progress, verbose=False)
    assert result is not None
    per_epoch = int(result["steps_per_epoch"])
    seed_cfg, _ = config_for(exp, arm, 0, mode, out)
    return ArmCost(
        experiment=exp.id, arm=arm.label,
        seconds_per_step=step_seconds(list(read_rows(out / "log.jsonl"))),
        steps_per_epoch=per_epoch,
        rungs=_search_rungs(exp, arm, mode, out, per_epoch),
        seeds=len(exp.seeds(mode)),
        seed_steps=cap_steps(int(seed_cfg.epochs), int(seed_cfg.max_steps or 0), per_epoch),
        load=load, cpu_share=result.get("cpu_share"),
    )


def _search_rungs(exp: Experiment, arm: Arm, mode: str, out: Path,
                  per_epoch: int) -> tuple[tuple[int, int], ...]:
    """(trials, cap in steps) of each rung of ``exp``'s search in ``mode`` (one rung without
    successive halving; none without a search): the caps of a trial's configuration, with
    the rung's over the search's overrides, as :mod:`ctrlrnn.reproduce.tuning` trains it."""
    tuning = exp.tuning(mode)
    if tuning is None or exp.values_from(arm, mode) is not None:
        return ()
    rungs = tuning.rungs or ({},)
    sizes = tuning.rung_sizes() if tuning.rungs else [tuning.trials]
    out_rungs = []
    for caps, trials in zip(rungs, sizes, strict=True):
        cfg, _ = config_for(exp, arm, 0, mode, out, {**tuning.overrides, **caps})
        out_rungs.append((trials, cap_steps(int(cfg.epochs), int(cfg.max_steps or 0),
                                            per_epoch)))
    return tuple(out_rungs)


def _search_cell(cost: ArmCost) -> str:
    """``9 x 6200 steps = 1.2 h``, or under successive halving ``9 x 248, then 3 to 620, then
    1 to 1860 steps = 1.1 h``."""
    if not cost.rungs:
        return "no search"
    (first_n, first_cap), *later = cost.rungs
    text = f"{first_n} x {first_cap}" + "".join(f", then {n} to {cap}" for n, cap in later)
    return f"{text} steps = {_hours(cost.search_seconds)}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def table(costs: list[ArmCost]) -> list[str]:
    """The costs as a Markdown table, one row per arm, then a line per experiment."""
    lines = ["| experiment | arm | s/step | steps/epoch | search (at most) | seeds (at most) "
             "| load at start | CPU share |", "|---|---|---|---|---|---|---|---|"]
    by_exp: dict[str, list[ArmCost]] = {}
    for c in costs:
        by_exp.setdefault(c.experiment, []).append(c)
        load = f"{c.load:.2f}" if c.load is not None else "-"
        share = f"{c.cpu_share:.2f}" if c.cpu_share is not None else "-"
        search = _search_cell(c)
        lines.append(f"| {c.experiment} | {c.arm} | {c.seconds_per_step:.3f} | "
                     f"{c.steps_per_epoch} | {search} | {c.seeds} x {c.seed_steps} steps = "
                     f"{_hours(c.seeds_seconds)} | {load} | {share} |")
    lines.append("")
    for exp_id, rows in by_exp.items():
        search = sum(c.search_seconds for c in rows)
        seeds = sum(c.seeds_seconds for c in rows)
        lines.append(f"{exp_id}: at most {_hours(search + seeds)} (search {_hours(search)}, "
                     f"seeds {_hours(seeds)})")
    return lines


def estimate(experiments: list[Experiment], mode: str, runs_dir: Path, steps: int,
             show_progress: bool = False, log: Any = print) -> list[ArmCost]:
    """Measure every arm of ``experiments`` and print the table of what they would cost."""
    costs = []
    for exp in experiments:
        for arm in exp.arms:
            log(f"[estimate] {exp.id}: {arm.label}, {steps} steps")
            costs.append(measure_arm(exp, arm, mode, runs_dir, steps, show_progress))
    for line in table(costs):
        log(line)
    log("[estimate] upper bounds: every run to its cap, evaluation not counted; runs that "
        "stop by patience take less")
    return costs
