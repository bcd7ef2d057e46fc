"""How metrics are shown and compared: accuracies in percent everywhere a person reads them (the
command line, ``report.md``, the results pages), like the papers' tables, which metrics are
better lower (a loss, a perplexity), and how two validation results are ordered.

Files meant for programs (``result.json``, ``log.jsonl``, the results data) keep fractions in
[0, 1]."""

from __future__ import annotations

import math
from typing import Any

#: metrics stored as fractions and shown in percent
PERCENT = frozenset({"accuracy", "exact_match", "token_accuracy", "dialog_accuracy",
                     "api_call_accuracy", "proposal_accuracy", "information_accuracy"})

#: metrics where a lower value is better (every other metric: higher is better)
LOWER_IS_BETTER = frozenset({"loss", "perplexity", "nll", "bits_per_char"})


def higher_is_better(metric: str, main: str = "", main_higher: bool = True) -> bool:
    """Whether a higher value of ``metric`` is better (a loss or perplexity: lower is). A task
    or experiment states its own ``main`` metric's direction (``main_higher``); every other
    metric's is :data:`LOWER_IS_BETTER`'s."""
    if main and metric == main:
        return main_higher
    return metric not in LOWER_IS_BETTER


def selection_key(value: float, loss: Any, higher: bool) -> tuple[float, float]:
    """The order of validation results, lower first: by the selecting metric's ``value``
    (``higher``: whether higher is better), then, on a tie, by the validation ``loss``, lower
    first; a missing or non-finite loss comes last. A coarse metric (exact match, accuracy on
    a small split) can stay at one value while the model still improves (at 0 early in a
    hard task), and the loss still orders those results. The trainer's best checkpoint and
    patience, and the search's ranking of its trials, both follow it."""
    tie = float(loss) if isinstance(loss, (int, float)) and math.isfinite(loss) else math.inf
    return (-value if higher else value), tie


def scale(metric: str) -> float:
    """The factor from a metric's stored value to the value shown (100 for percentages)."""
    return 100.0 if metric in PERCENT else 1.0


def format_metric(metric: str, value: Any) -> str:
    """``value`` of ``metric`` as shown to a person: ``86.7%`` for an accuracy, 4 significant
    digits otherwise; anything that is not a finite number as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if metric in PERCENT:
        return f"{100.0 * value:.2f}%"
    return f"{value:.4g}"


def format_metrics(metrics: dict[str, Any]) -> str:
    """``name value`` pairs of a split's metrics, in name order."""
    return "  ".join(f"{k} {format_metric(k, v)}" for k, v in sorted(metrics.items()))
