"""Small pieces the reproduce tests share: a tiny experiment searched by successive halving,
and a results tree with the keys that differ between runs of the same work left out."""

from __future__ import annotations

from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.tuning import halving_search


def tiny_halving_experiment(exp_id: str, seeds: int) -> Experiment:
    """A QRNN on a tiny copy task, searched by halving over 3 trials (caps 2 then 4 steps)."""
    search = halving_search(None, ({"max_steps": 2}, {"max_steps": 4}), trials=3, keep=0.5,
                            lr=(1e-3, 1e-2), overrides={"epochs": 50})
    return Experiment(
        id=exp_id, paper="qrnn", title=f"tiny copy ({exp_id})", task="copy",
        metric="token_accuracy", higher_is_better=True,
        arms=(Arm("QRNN", "qrnn", {"hidden_size": 8}),), claims=(),
        quick={"max_steps": 3, "epochs": 1, "batch_size": 16, "task.train_size": 64,
               "task.valid_size": 16, "task.test_size": 16},
        full={}, task_args={"digits": 3}, seeds_quick=seeds, tuning_quick=search)


def without(data: object, keys: set[str]) -> object:
    """``data`` with every dict entry whose key is in ``keys`` left out, at any depth."""
    if isinstance(data, dict):
        return {k: without(v, keys) for k, v in data.items() if k not in keys}
    if isinstance(data, list):
        return [without(v, keys) for v in data]
    return data


#: what differs between two runs of the same work: when and how fast it ran
TIMINGS = {"train_seconds", "seconds_per_epoch", "cpu_share", "load_start", "seconds",
           "finished", "when", "date", "trained", "dated"}


def numbers(data: object) -> object:
    """``data`` without its timings (keys in :data:`TIMINGS`, at any depth)."""
    return without(data, TIMINGS)
