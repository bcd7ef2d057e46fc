"""``ctrlrnn reproduce`` at the paper's scale: ``--list``, ``--data`` and ``torchrun``.

* :func:`listing`: every table of the five papers (:data:`~ctrlrnn.reproduce.paper_tables.
  TABLES`), the experiments that reproduce it, and at which scales;
* :func:`parse_data`, :func:`registered_data` and :func:`missing_data`: the user's files
  (``--data NAME=PATH``, or registered once with ``ctrlrnn data add NAME PATH``), and what the
  chosen experiments still lack (refused before anything trains);
* :func:`follow`: under ``torchrun`` every process trains each run together (the trainer's
  data parallelism), but only rank 0 keeps the books (results files, pages). The other ranks
  follow its plan: the runs its runner will train, decided from the same results files and
  run folders before any is trained, in the same order. A run the runner would skip, they
  skip. Only experiments without a search can run this way (the paper's recipes have none).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ctrlrnn.reproduce.experiment_spec import PAPER, Experiment
from ctrlrnn.settings import raw, raw_int


def world_size() -> int:
    """How many processes ``torchrun`` started (1 alone)."""
    try:
        return max(1, raw_int("WORLD_SIZE", 1))
    except ValueError:
        return 1


def is_main() -> bool:
    return (raw("RANK") or "0") == "0"


def parse_data(items: Iterable[str]) -> dict[str, str] | str:
    """``--data NAME=PATH`` items as a dict; an error message for a malformed item or an
    unknown name."""
    from ctrlrnn.reproduce.paper_scales import NEEDS

    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            return f"--data: expected NAME=PATH, got {item!r}"
        if name not in NEEDS:
            return (f"--data: unknown data set {name!r} (known: {', '.join(sorted(NEEDS))})")
        out[name] = str(Path(path).expanduser())
    return out


def registered_data() -> dict[str, str] | str:
    """The data sets registered with ``ctrlrnn data add`` that the paper scale knows; an
    error message when the record cannot be read."""
    from ctrlrnn.data import user_files
    from ctrlrnn.data.errors import DataError
    from ctrlrnn.reproduce.paper_scales import NEEDS

    try:
        return {k: v for k, v in user_files.registered().items() if k in NEEDS}
    except DataError as exc:
        return str(exc)


def missing_data(chosen: Iterable[Experiment], data: dict[str, str]) -> list[str]:
    """One line per chosen experiment and data set it needs that ``--data`` has not given."""
    return [f"{exp.id}: {need.line()}" for exp in chosen if exp.paper_scale is not None
            for need in exp.missing_data(data)]


def listing(scale: str | None = None) -> str:
    """The table of ``--list``: every table of the five papers, each experiment of it, and
    whether it trains at our scale (on what) and at the paper's (on what data); ``scale``: that
    scale's column alone."""
    from ctrlrnn.reproduce.experiments import EXPERIMENTS, paper_scale_experiments
    from ctrlrnn.reproduce.paper_tables import TABLES, scale_cell

    known = {e.id: e for e in (*EXPERIMENTS, *paper_scale_experiments())}
    columns = [("ours", "ours"), (PAPER, "paper scale")]
    if scale is not None:
        columns = [c for c in columns if c[0] == scale]
    head = ["paper", "table", "what", "experiment", *(name for _, name in columns)]
    rows: list[list[str]] = []
    for table in TABLES:
        for exp_id in table.experiments:
            exp = known.get(exp_id)
            rows.append([table.page, table.table, table.what, exp_id,
                         *(scale_cell(exp, key) for key, _ in columns)])
        if table.missing:
            rows.append([table.page, table.table, table.what,
                         "–" if not table.experiments else "(part)",
                         *(f"not built: {table.missing}" for _ in columns)])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def keep_one_process_group() -> None:
    """Join ``torchrun``'s process group once for every run this process trains.

    Each run of the trainer joins the group and leaves it at its end; a second run joining
    again would read the first one's addresses from torchrun's store (a fresh default group
    takes the same name) and could hang. So the group is joined here, before the first run,
    the trainer's runs find it joined and reuse it, and it is left when the process ends."""
    import atexit

    import torch.distributed as dist

    from ctrlrnn.train import run as train_module
    from ctrlrnn.train.distributed import init_distributed

    init_distributed("auto")
    train_module.shutdown = lambda ctx: None  # type: ignore[assignment]

    def leave() -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(leave)


def check_distributed(chosen: Iterable[Experiment], mode: str, args: Any) -> str | None:
    """Why these experiments cannot run under ``torchrun`` (None: they can)."""
    if getattr(args, "jobs", 1) and args.jobs > 1:
        return "under torchrun, the processes train each run together; drop --jobs"
    if args.estimate is not None:
        return "--estimate times one process; run it without torchrun"
    if getattr(args, "storage", None):
        return ("under torchrun, the processes train each run together; --storage shares "
                "runs between processes that train apart: use one or the other")
    searched = [e.id for e in chosen if e.tuning(mode) is not None]
    if searched and not args.pages_only:
        return (f"under torchrun only experiments without a search can run (the paper's "
                f"scale has none); these have one in this mode: {', '.join(searched)}")
    return None


def follow(chosen: Iterable[Experiment], mode: str, runs: Path, results: Path,
           rerun: set[str], show_progress: bool = False) -> int:
    """A rank other than 0 under ``torchrun``: train, in step with rank 0, every run its
    runner will train (module docstring); returns 0."""
    from ctrlrnn.reproduce import runner
    from ctrlrnn.reproduce.cache_validity import Standing
    from ctrlrnn.train.run import train_run

    for exp in chosen:
        again = exp.id in rerun
        cached = None if again else runner.load_results(results, mode, exp)
        if cached is not None and runner.is_cached(results, mode, exp):
            continue
        standing = Standing(exp, mode, cached)
        arms = (cached or {}).get("arms", {})
        for arm in exp.arms:
            for seed in exp.seeds(mode):
                entry = ((arms.get(arm.label) or {}).get("seeds") or {}).get(str(seed))
                if standing.seed(arm, entry, None):
                    continue
                out = runner.run_dir(runs, mode, exp, arm.label, seed)
                cfg, cls = runner.config_for(exp, arm, seed, mode, out)
                resume = _resume(out, cfg, again)
                if resume is None:
                    continue
                try:
                    train_run(cfg, cls, resume=resume, show_progress=show_progress,
                              verbose=False)
                except Exception as exc:  # noqa: BLE001 - rank 0 reports it; go on as it does
                    print(f"[reproduce] rank {raw('RANK')}: {exp.id} {arm.label} "
                          f"seed {seed} failed: "
                          f"{traceback.format_exception_only(type(exc), exc)[-1].strip()}")
    return 0


def _resume(out: Path, cfg: Any, again: bool) -> bool | None:
    """Whether rank 0's runner resumes the run in ``out`` (True), starts it afresh (False),
    or reads its finished result and trains nothing (None): as
    :func:`~ctrlrnn.reproduce.runner.train_in` decides."""
    import json

    from ctrlrnn.reproduce import runner

    if again:
        return False
    done = out / "result.json"
    if done.exists():
        action = runner._finished_run_action(out, json.loads(done.read_text(encoding="utf-8")),
                                             cfg)
        if action == "done":
            return None
        return action != "restart"
    return (out / "checkpoint.safetensors").exists()
