"""Whether a finished run still answers its experiment after the stopping budget changed.

An experiment's runs stop by patience (the validation metric stopped improving) or at a cap
(``epochs``, ``max_steps``). When an experiment's caps are raised, a run that stopped by
patience stands as it is (it stopped before either cap), and so does one that stopped at a cap
left as it was; a run that stopped at a raised cap has more to train: it continues from its
checkpoint. A run that went past a lowered cap, or one trained under another patience rule or
another configuration (:mod:`ctrlrnn.reproduce.cache_validity`), trains again from scratch.

Two places decide it: :func:`seed_holds` reads a seed's summary in the committed results file
(so a clone without the run directories knows what is left), :func:`run_action` reads a run
directory's ``result.json`` and its checkpoint's configuration.
"""

from __future__ import annotations

from typing import Any, Literal

#: the overrides that decide when a run stops: the caps, and the patience rule
CAPS = ("epochs", "max_steps")
RULE = ("patience", "eval_every")
CAP_REASONS = frozenset({"epochs", "max_steps"})


def stopping_budget(overrides: dict[str, Any]) -> dict[str, Any]:
    """The stopping keys of an experiment's mode overrides (absent keys: None, the default)."""
    return {key: overrides.get(key) for key in (*CAPS, *RULE)}


def _unlimited(key: str, value: Any) -> bool:
    return key == "max_steps" and not value  # max_steps 0 (or unset) puts no limit


def _at_least(key: str, new: Any, old: Any) -> bool:
    """Whether the cap ``new`` lets a run go at least as far as the cap ``old`` did."""
    if _unlimited(key, new):
        return True
    if _unlimited(key, old):
        return False
    if new is None or old is None:
        return new == old
    return bool(new >= old)


def run_holds(stop_reason: str | None, then: dict[str, Any], budget: dict[str, Any]) -> bool:
    """Whether a finished run trained under the budget ``then``, stopped for ``stop_reason``,
    is the run ``budget`` would train: the same budget; or the same patience rule, no cap
    lowered, and the run stopped by patience or at a cap that is set and unchanged (it never
    reached any cap that was raised)."""
    if all(then.get(key) == budget.get(key) for key in (*CAPS, *RULE)):
        return True
    if any(then.get(key) != budget.get(key) for key in RULE):
        return False
    if not all(_at_least(key, budget.get(key), then.get(key)) for key in CAPS):
        return False
    if stop_reason == "patience":
        return True
    cap = then.get(stop_reason) if stop_reason in CAPS else None
    return bool(cap) and cap == budget.get(stop_reason)


def seed_holds(summary: dict[str, Any], budget: dict[str, Any],
               trained_under: dict[str, Any] | None) -> bool:
    """Whether a seed's ``summary`` (its entry in a results file) stands under ``budget``
    (:func:`run_holds`).

    ``trained_under`` is the budget it was trained under when the summary does not record one
    (results written before it did: the budget of the file's stored definition), or None when
    unknown.
    """
    then = summary.get("budget", trained_under)
    if then is None:
        return False
    return run_holds(summary.get("stop_reason"), then, budget)


Action = Literal["done", "continue", "restart"]


def run_action(result: dict[str, Any], differences: dict[str, Any], epochs: int,
               max_steps: int) -> Action:
    """What to do with a finished run whose ``result`` (its ``result.json``) is on disk, under
    a configuration with caps ``epochs`` / ``max_steps`` that differs from the run's stored
    one in ``differences`` (keys other than the caps and the run's place).

    ``restart``: another configuration, or the run went past a lowered cap; ``continue``: it
    stopped at a cap that is now higher; ``done``: its result answers this configuration.
    """
    if differences:
        return "restart"
    step = int(result.get("step") or 0)
    done_epochs = int(result.get("epochs_completed") or 0)
    if done_epochs > epochs or (max_steps and step > max_steps):
        return "restart"
    if result.get("stop_reason") in CAP_REASONS and done_epochs < epochs and (
            not max_steps or step < max_steps):
        return "continue"
    return "done"
