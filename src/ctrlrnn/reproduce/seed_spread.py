"""The paragraph a results page gives an arm whose seeds lie far apart: each seed's test and
validation result and how its run ended, so that a reader sees whether the spread is in what
the runs learned (their validation results differ as much) and where each stopped."""

from __future__ import annotations

import math
from typing import Any

from ctrlrnn.reproduce.experiment_spec import Experiment
from ctrlrnn.reproduce.page_cells import fmt, metric_scale, ordered_arms

#: how far apart an arm's seeds may lie before its page says how each ended: points of a
#: percentage or of BLEU; for any other metric, this fraction of the seeds' mean
POINTS = 10.0
FRACTION = 0.1

#: a seed whose validation curve never leaves its first value by more than this (points of a
#: percentage or of BLEU; for any other metric, this fraction of the first value) over at least
#: FLAT_EVALUATIONS evaluations learned nothing after its first evaluation
FLAT_POINTS = 1.0
FLAT_FRACTION = 0.01
FLAT_EVALUATIONS = 3

#: the words for a run's ``stop_reason``
STOPPED = {"patience": "by patience", "epochs": "at the epoch cap", "max_steps": "at the step cap",
           "diverged": "at a non-finite loss"}


def in_points(metric: str, scale: float) -> bool:
    """Whether ``metric``'s shown values are points: a percentage (``scale`` 100) or BLEU."""
    return scale != 1.0 or metric == "bleu"


def far_apart(values: list[float], metric: str, scale: float) -> bool:
    """Whether seeds' shown ``values`` of ``metric`` lie further apart than the pages allow
    without saying why (:data:`POINTS` or :data:`FRACTION`)."""
    if len(values) < 2:
        return False
    spread = max(values) - min(values)
    if in_points(metric, scale):
        return spread > POINTS
    mean = sum(values) / len(values)
    return spread > FRACTION * abs(mean)


def _ending(seed: dict[str, Any]) -> str:
    """How one seed's run ended: ``by patience at step 43,736, best checkpoint at 37,488``."""
    reason = seed.get("stop_reason")
    words = STOPPED.get(str(reason), f"({reason})" if reason else "")
    steps, best = seed.get("steps"), seed.get("best_step")
    text = f"{words} at step {steps:,}" if isinstance(steps, int) else words
    if isinstance(best, int):
        text += f", best checkpoint at {best:,}"
    return text.strip()


def climb(seed: dict[str, Any], higher_is_better: bool) -> tuple[float, int] | None:
    """For a seed stopped by patience whose curve holds its best checkpoint: how much its
    validation value improved over as many evaluations before the best as followed it (the
    patience window), and that number; None without such a curve. A large climb means the
    run was still improving when the window ran out."""
    curve = seed.get("curve") or []
    steps = [point[0] for point in curve]
    if seed.get("stop_reason") != "patience" or seed.get("best_step") not in steps:
        return None
    best = steps.index(seed["best_step"])
    after = len(curve) - 1 - best
    if after < 1 or best - after < 0:
        return None
    change = curve[best][1] - curve[best - after][1]
    return (change if higher_is_better else -change), after


def _climb_clause(exp: Experiment, seed: dict[str, Any]) -> str:
    """``; its validation accuracy had improved by 6.4 over the 10 evaluations before its
    best`` (:func:`climb`), or nothing."""
    found = climb(seed, exp.selected_higher_is_better)
    if found is None:
        return ""
    change, window = found
    return (f"; its validation {exp.selected} had improved by "
            f"{fmt(change * metric_scale(exp.selected))} over the {window} evaluations before "
            "its best")


def flat(seed: dict[str, Any], metric: str, scale: float) -> tuple[float, float, int] | None:
    """For a seed whose validation curve (of ``metric``, shown times ``scale``) stays within
    :data:`FLAT_POINTS` (:data:`FLAT_FRACTION`) of its first value at every one of its
    evaluations, at least :data:`FLAT_EVALUATIONS`: that first value, the largest distance
    from it, and the number of evaluations; None otherwise."""
    values = [scale * float(point[1]) for point in seed.get("curve") or []]
    if len(values) < FLAT_EVALUATIONS or not all(math.isfinite(v) for v in values):
        return None
    first = values[0]
    width = max(abs(v - first) for v in values)
    limit = FLAT_POINTS if in_points(metric, scale) else FLAT_FRACTION * abs(first)
    return (first, width, len(values)) if width <= limit else None


def _flat_clause(exp: Experiment, seed: dict[str, Any]) -> str:
    """``; its validation accuracy stayed within 0.4 points of its first evaluation's 35.4 at
    all 6 evaluations: it learned nothing after its first evaluation`` (:func:`flat`), or
    nothing."""
    scale = metric_scale(exp.selected)
    found = flat(seed, exp.selected, scale)
    if found is None:
        return ""
    first, width, count = found
    within = (f"{fmt(width)} points" if in_points(exp.selected, scale)
              else f"{fmt(100 * width / abs(first))}%" if first else fmt(width))
    return (f"; its validation {exp.selected} stayed within {within} of its first "
            f"evaluation's {fmt(first)} at all {count} evaluations: it learned nothing after "
            "its first evaluation")


def same_order(tests: list[float], valids: list[float | None]) -> bool:
    """Whether the seeds' validation results rank them as their test results do (ties in
    either count as agreeing)."""
    pairs = [(t, v) for t, v in zip(tests, valids) if v is not None]
    return len(pairs) == len(tests) and all(
        (t1 - t2) * (v1 - v2) >= 0 for i, (t1, v1) in enumerate(pairs) for t2, v2 in pairs[i + 1:])


def spread_lines(exp: Experiment, data: dict[str, Any]) -> list[str]:
    """One paragraph for each arm whose seeds' test results lie far apart (:func:`far_apart`):
    each seed's test and validation result and how its run ended, and whether the validation
    results rank the seeds as the test results do (then the spread is in what the runs
    learned, not in the sampling of the test split)."""
    scale = metric_scale(exp.metric)
    unit = " points" if in_points(exp.metric, scale) else ""
    lines: list[str] = []
    for label, arm in ordered_arms(exp, data):
        seeds = sorted(((int(k), s) for k, s in arm.get("seeds", {}).items()
                        if s.get("test") is not None and math.isfinite(float(s["test"]))))
        tests = [scale * float(s["test"]) for _k, s in seeds]
        if not far_apart(tests, exp.metric, scale):
            continue
        valids = [scale * float(s["valid"]) if s.get("valid") is not None else None
                  for _k, s in seeds]
        each = " ".join(
            f"Seed {k}: test {fmt(t)}, validation {fmt(v)}, stopped {_ending(s)}"
            f"{_flat_clause(exp, s) or _climb_clause(exp, s)}."
            for (k, s), t, v in zip(seeds, tests, valids))
        if same_order(tests, valids):
            why = ("Their validation results rank them as their test results do: the spread "
                   "is in what the runs learned, not in the sampling of the test split.")
        else:
            why = ("Their validation results do not rank them as their test results do: part "
                   "of the spread is in the sampling of the test split.")
        lines += ["", f"**{label}'s seeds lie {fmt(max(tests) - min(tests))}{unit} apart** on "
                  f"the test {exp.metric}. {each} {why}"]
    return lines
