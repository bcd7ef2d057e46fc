"""The numbers and cells of a results page, read from a results file: an arm's seed values,
the table's cells (mean ± std, steps, converged, seconds, tuned, baseline) and the training
time a file records."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ctrlrnn.metric_conventions import scale
from ctrlrnn.reproduce.experiment_spec import Experiment
from ctrlrnn.reproduce.tuning import IN_PROGRESS, lender_of
from ctrlrnn.reproduce.verdicts import mean_std, paper_level


def metric_scale(metric: str) -> float:
    """The factor from a stored value of ``metric`` to the one shown: 100 for a percentage,
    a test metric of one slice of a percentage included (``accuracy_ops7``)."""
    return scale(metric.split("_ops", 1)[0])


def seed_values(arm: dict[str, Any], scale: float = 1.0, metric: str = "") -> list[float]:
    """The test results of an arm's seeds: its main metric, or ``metric`` of its test metrics."""
    out = []
    for s in arm.get("seeds", {}).values():
        v = s.get("test") if not metric else s.get("test_metrics", {}).get(metric)
        if v is not None and math.isfinite(float(v)):
            out.append(scale * float(v))
    return out


def claim_values(exp: Experiment, arm: dict[str, Any], metric: str) -> list[float]:
    return seed_values(arm, metric=metric) if metric and metric != exp.metric else seed_values(arm)


def claim_text(better: str, worse: str, metric: str) -> str:
    return f"{better} beats {worse}" + (f" ({metric})" if metric else "")


def ordered_arms(exp: Experiment, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The arms in the order the experiment defines them (the results file sorts its keys)."""
    arms = data.get("arms", {})
    return [(a.label, arms[a.label]) for a in exp.arms if a.label in arms]


def mean_std_cell(values: list[float]) -> str:
    """``mean ± std`` of the seeds; one seed has no spread to show, so its std is "–"."""
    m, s = mean_std(values)
    return f"{fmt(m)} ± {fmt(s, 2) if len(values) > 1 else '–'}"


def fmt(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}g}"


def steps_cell(seeds: list[dict[str, Any]]) -> str:
    if not seeds:
        return "–"
    steps = [s.get("steps") for s in seeds]
    best = [s.get("best_step") for s in seeds]
    text = "/".join(str(x) for x in steps if x is not None) or "–"
    if any(b is not None for b in best):
        text += " (" + "/".join(str(b) if b is not None else "–" for b in best) + ")"
    return text


def converged_cell(seeds: list[dict[str, Any]]) -> str:
    """``yes`` when every seed stopped by its patience, ``diverged`` when one stopped at a
    non-finite loss or parameter, ``not converged`` when one hit the step or epoch cap, ``not
    recorded`` for results written before the stop was recorded."""
    reasons = [s.get("stop_reason") for s in seeds]
    if not reasons or any(r is None for r in reasons):
        return "not recorded"
    diverged = sum(r == "diverged" for r in reasons)
    if diverged:
        return f"**diverged** ({diverged} of {len(reasons)}: stopped at a non-finite value)"
    capped = sum(r != "patience" for r in reasons)
    return "yes" if not capped else f"**not converged** ({capped} of {len(reasons)} capped)"


def seconds_cell(seeds: list[dict[str, Any]]) -> str:
    """Mean training seconds, only when every seed had the machine to itself."""
    secs = [x["train_seconds"] for x in seeds if x.get("train_seconds")]
    if not secs:
        return "–"
    for x in seeds:
        if str(x.get("device") or "cpu").startswith("cuda"):
            continue  # GPU time: the CPU share of the launching thread says nothing of it
        share, load, threads = x.get("cpu_share"), x.get("load_start"), x.get("threads")
        if share is None or load is None or threads is None:
            return "not recorded"
        if share < OWN_MACHINE_SHARE or load > threads + OWN_MACHINE_EXTRA_LOAD:
            return "shared machine"
    mean = statistics.fmean(secs)
    return f"{mean:.0f}" if mean >= 100 else fmt(mean, 3)  # 1040, not 1.04e+03


#: a run had the machine to itself when it got at least this share of its threads' CPU time
#: and the load average when it started was at most its threads plus this
OWN_MACHINE_SHARE = 0.85


OWN_MACHINE_EXTRA_LOAD = 0.5


def baseline_cell(values: list[float], paper: float | None, higher: bool) -> str:
    if paper is None or not values:
        return "–"
    m = statistics.fmean(values)
    return f"{fmt(m)} / {fmt(paper)} ({paper_level(m, paper, higher):.0%})"


def short_key(key: str) -> str:
    return key.split(".")[-1]


def tuned_cell(tuning: dict[str, Any] | None) -> str:
    if not tuning:
        return "–"
    chosen = tuning.get("chosen") or {}
    if not chosen:
        return f"every trial diverged ({len(tuning.get('trials', []))})"
    values = ", ".join(f"{short_key(k)} {v:.3g}" for k, v in sorted(chosen.items()))
    lender = lender_of(tuning)
    if lender is not None:
        return f"{values} ({lender}'s)"
    return f"{values} ({len(tuning.get('trials', []))})"


def ceiling_why(seeds: list[dict[str, Any]]) -> str:
    """Why a baseline stayed below the paper's level, as its runs recorded it."""
    reasons = [x.get("stop_reason") for x in seeds]
    if reasons and all(r == "patience" for r in reasons):
        return "— its measured ceiling here: every seed converged (stopped by patience)"
    if any(r in ("max_steps", "epochs") for r in reasons):
        return "— stopped at the cap, not converged: more training than this budget"
    return "— its runs did not record how they stopped"


def stored_runs(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A results file's final runs and its tuning trials (their summaries and rows), the trials
    of a search under way (:data:`IN_PROGRESS`) included: work the file holds."""
    arms = list(data.get("arms", {}).values())
    final = [run for arm in arms for run in (arm.get("seeds") or {}).values()]
    trials = [run for arm in arms for key in ("tuning", IN_PROGRESS)
              for run in (arm.get(key) or {}).get("trials", [])]
    return final, trials


def run_seconds(data: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The recorded training seconds of a results file's final runs and of its tuning trials."""

    def recorded(runs: list[dict[str, Any]]) -> list[float]:
        return [float(run["train_seconds"]) for run in runs if run.get("train_seconds")]

    final, trials = stored_runs(data)
    return recorded(final), recorded(trials)


def training_time_line(data: dict[str, Any]) -> list[str]:
    """The experiment's training time, tuning and final runs apart (when its runs record it)."""
    final, trials = run_seconds(data)
    if not final and not trials:
        return []
    text = (f"Training time: {math.fsum(final + trials) / 60:.1f} minutes {where_trained(data)} "
            f"({math.fsum(final) / 60:.1f} for the {len(final)} final runs")
    if trials:
        text += f", {math.fsum(trials) / 60:.1f} for the {len(trials)} tuning trials"
    return ["", text + "; each run's own training clock, whatever else the machine ran)."]


def where_trained(data: dict[str, Any]) -> str:
    """Where the experiment's runs trained: "on this machine" (its CPU; runs from before the
    device was recorded trained there too), or the GPUs they name."""
    final, trials = stored_runs(data)
    runs = final + trials
    gpus = sorted({str(r["device"]) for r in runs if r.get("device") not in (None, "cpu")})
    if not gpus:
        return "on this machine"
    if len(gpus) == len({str(r.get("device") or "cpu") for r in runs}):
        return f"on {', '.join(gpus)}"
    return f"on this machine's CPU and {', '.join(gpus)}"


def training_seconds(data: dict[str, Any]) -> float:
    """The training time a results file holds: the recorded training seconds of every final
    run and every tuning trial it reports (each run's own clock, summed over its resumes, so
    an interrupted experiment counts all of its work and a superseded one none); the file's
    wall ``seconds`` when its runs record none (files written before they did)."""
    final, trials = run_seconds(data)
    recorded = final + trials
    return math.fsum(recorded) if recorded else float(data.get("seconds", 0.0))
