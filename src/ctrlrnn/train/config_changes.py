"""What a resumed run's configuration may change: the stored and the requested configuration
compared key by key (:func:`config_differences`).

A run resumed with a configuration that differs from the one its checkpoint stored is refused
unless each difference is one that changes no step (:data:`RESUMABLE_CHANGES`) or one the
command accepts (``--override``; :func:`override_advice` words the options that would, naming
only keys the requested model and task have); ``ctrlrnn reproduce`` uses the same comparison to
decide whether a finished run can be continued.
"""

from __future__ import annotations

from typing import Any

#: configuration keys a resumed run may change without ``--override``: limits, where the run
#: is, and how often it logs and checkpoints (none changes what a step computes)
RESUMABLE_CHANGES = frozenset({"max_steps", "epochs", "out", "threads", "device", "log_every",
                               "checkpoint_every"})


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """``{"lr": ..., "model.hidden_size": ..., "task.digits": ...}`` of a stored config."""
    out = {k: v for k, v in config.items() if k not in ("model_args", "task_args")}
    out.update({f"model.{k}": v for k, v in (config.get("model_args") or {}).items()})
    out.update({f"task.{k}": v for k, v in (config.get("task_args") or {}).items()})
    return out


def show_value(value: Any) -> str:
    """A configuration value as a message shows it (a non-empty string as it is)."""
    return value if isinstance(value, str) and value else repr(value)


#: configuration keys added after runs were first stored, with the value a run stored without
#: the key trained under (so a stored run compares as what it was, not as "unknown"); compared
#: only where the requested configuration has the key (``model.causal``: QRNN runs only)
IMPLIED_WHEN_ABSENT: dict[str, Any] = {"monitor": "", "model.causal": True, "precision": "fp32"}


def config_differences(stored: dict[str, Any], requested: dict[str, Any],
                       accept: frozenset[str] = frozenset()) -> dict[str, tuple[Any, Any]]:
    """Keys whose stored and requested values differ (flattened names, in order), less
    :data:`RESUMABLE_CHANGES` and ``accept``. A key the stored config lacks (written by an
    older version) is not compared, unless :data:`IMPLIED_WHEN_ABSENT` says what it was."""
    given, b = _flat(stored), _flat(requested)
    a = {**IMPLIED_WHEN_ABSENT, **given}
    differ: dict[str, tuple[Any, Any]] = {}
    for key in b:
        if key in RESUMABLE_CHANGES or key in accept or key not in a:
            continue
        old, new = a[key], b[key]
        if isinstance(old, list) and isinstance(new, tuple):
            new = list(new)
        if old != new:
            differ[key] = (old, b[key])
    for key in given:
        if key not in b and key not in accept and key.startswith(("model.", "task.")):
            if key.split(".", 1)[0] in accept:  # an option of the model (task) changed from
                continue
            differ[key] = (a[key], None)
    return differ


def override_advice(differ: dict[str, tuple[Any, Any]], requested: dict[str, Any]) -> str | None:
    """The ``--override KEY=VALUE`` options that make a resume accept the differences
    ``differ`` (as :func:`config_differences` found them against ``requested``), or None
    when one of them cannot be accepted so: an option the stored run's model (or task) has
    and the requested one lacks is accepted with ``model`` (``task``), not by name."""
    present = _flat(requested)
    named: list[str] = []
    for key, (_old, new) in differ.items():
        if key in present:
            named.append(f"--override {key}={show_value(new)}")
        elif key.split(".", 1)[0] not in differ:
            return None
    return " ".join(named)
