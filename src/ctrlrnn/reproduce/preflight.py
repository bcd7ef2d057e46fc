"""Before ``ctrlrnn reproduce`` trains anything: every chosen experiment's data can be had.

A full run trains the experiments one after another for hours. A data source that cannot be
prepared here (an optional package missing, say ``pysword`` for the verses, or a Debian package
that cannot be fetched) would otherwise surface only when its experiment's turn comes. So each
experiment still to train sets up its task once, in the mode's configuration (which fetches,
prepares and caches its data, as its first run would), and every problem is reported together,
naming the experiment, before any training starts.
"""

from __future__ import annotations

from pathlib import Path

from ctrlrnn.data.errors import DataError
from ctrlrnn.reproduce.experiment_spec import Experiment


def data_problems(experiments: list[Experiment], mode: str, runs_dir: Path,
                  show_progress: bool = True) -> dict[str, str]:
    """Experiment id -> what stops its data from being set up here (empty: all can run).

    One set-up per distinct (task, task options) of ``experiments``' first arms and mode, in
    experiment order; the data layer caches what it prepares, so the runs that follow find it.
    """
    from ctrlrnn.progress import track
    from ctrlrnn.reproduce.runner import config_for  # runner imports the trainer: lazily

    problems: dict[str, str] = {}
    seen: dict[tuple[str, str], str | None] = {}
    shown = show_progress and len(experiments) > 1
    for exp in (track(experiments, "checking the experiments' data") if shown
                else experiments):
        if not exp.arms:
            continue
        try:
            cfg, task_cls = config_for(exp, exp.arms[0], 0, mode, runs_dir / "preflight")
        except ValueError as exc:
            problems[exp.id] = f"configuration: {exc}"
            continue
        key = (exp.task, repr(sorted(cfg.task_args.items())))
        if key not in seen:
            seen[key] = _set_up(task_cls, cfg)
        problem = seen[key]
        if problem is not None:
            problems[exp.id] = problem
    return problems


def _set_up(task_cls: type, cfg: object) -> str | None:
    """None when the task sets up, else the error's message."""
    try:
        task = task_cls(cfg.task_args, cfg.seed)  # type: ignore[attr-defined]
        task.setup()
    except (DataError, ValueError, FileNotFoundError, ImportError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
