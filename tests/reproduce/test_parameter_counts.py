"""The parameter counts in the results files are those of the models the current code builds
(checked where the models can be built anywhere: the tasks that generate their data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctrlrnn.reproduce.parameter_counts import (
    SYNTHETIC_TASKS,
    main,
    model_parameters,
    recount,
    stale_counts,
)

DATA = Path(__file__).resolve().parents[2] / "docs" / "results" / "data" / "full"
FILES = sorted(p for p in DATA.glob("*.json")
               if json.loads(p.read_text(encoding="utf-8")).get("task") in SYNTHETIC_TASKS)


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
