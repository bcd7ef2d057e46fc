"""The parameter counts in the results files are those of the models the current code builds
(checked where the models can be built anywhere: the tasks that generate their data)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctrlrnn.reproduce.parameter_counts import (
    SYNTHETIC_TASKS,
    main,
    model_parameters,
    recount,
    stale_counts,
)
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.base import Task

# models are built, not trained: a second torch thread only waits on their small inits
pytestmark = pytest.mark.usefixtures("one_thread")

DATA = Path(__file__).resolve().parents[2] / "docs" / "results" / "data" / "full"
FILES = sorted(p for p in DATA.glob("*.json")
               if json.loads(p.read_text(encoding="utf-8")).get("task") in SYNTHETIC_TASKS)


@pytest.fixture(scope="module", autouse=True)
def _data_generated_once() -> Iterator[None]:
    """Generating a task's data is nearly all of a count's cost, and the arms of a file (and
    the files of one task: the logic task's experiments) mostly share it: the data a task
    generates from its options and seed is generated once here, and a task built again with
    those options and seed is given the same (generation is deterministic, so every model is
    still built from the data its setting gives)."""
    done: dict[tuple[type[Task], str, int], dict[str, Any]] = {}
    patches = pytest.MonkeyPatch()
    for name in SYNTHETIC_TASKS:
        cls = task_class(name)

        def setup(self: Task, real: Any = cls.setup) -> None:
            key = (type(self), json.dumps(self.opts, sort_keys=True, default=repr), self.seed)
            if key not in done:
                real(self)
                done[key] = dict(vars(self))
            vars(self).update(done[key])

        patches.setattr(cls, "setup", setup)
    yield
    patches.undo()


def test_synthetic_results_files_are_found():
    assert {p.stem for p in FILES} >= {"metagross-sort5", "metagross-tree3", "qrnn-copy"}


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_stored_counts_are_the_models_counts(path):
    """A stale count names the fix: ``python -m ctrlrnn.reproduce.parameter_counts``."""
    assert stale_counts(json.loads(path.read_text(encoding="utf-8"))) == []


SETTING = {"overrides": {"task.train_size": 20, "task.valid_size": 4, "task.test_size": 4},
           "task_args": {"digits": 3, "embedding_size": 8}, "model": "lstm",
           "model_args": {"hidden_size": 6, "bidirectional": True}}


def _results(count: int) -> dict:
    return {"task": "copy", "arms": {"LSTM": {"seeds": {
        "0": {"setting": SETTING, "parameters": count, "test": 0.5},
        "1": {"setting": SETTING, "parameters": count, "test": 0.6}}}}}


def test_recount_rewrites_only_stale_counts(tmp_path, capsys):
    now = model_parameters("copy", SETTING, 0)
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(_results(now + 8)), encoding="utf-8")
    assert recount(path) == [("LSTM", 0, now + 8, now), ("LSTM", 1, now + 8, now)]
    fixed = json.loads(path.read_text(encoding="utf-8"))
    assert fixed == _results(now)  # nothing else touched
    assert recount(path) == []
    other = tmp_path / "speed.json"
    other.write_text(json.dumps({"rows": []}), encoding="utf-8")
    assert main([str(path), str(other)]) == 0
    out = capsys.readouterr().out
    assert "copy.json: counts as the models now" in out and "speed.json: no run" in out
