"""A changed stopping budget: capped runs continue, patience-stopped runs stand, and runs from
another rule or past a lowered cap train again (ctrlrnn.reproduce.stopping and the runner)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.stopping import run_action, seed_holds, stopping_budget

OLD = {"epochs": 30, "max_steps": None, "patience": 4, "eval_every": None}


def _seed(reason: str, **extra):
    return {"stop_reason": reason, "steps": 100, **extra}


def test_stopping_budget_reads_only_the_stopping_keys():
    assert stopping_budget({"epochs": 3, "batch_size": 64, "patience": 2}) == {
        "epochs": 3, "max_steps": None, "patience": 2, "eval_every": None}


@pytest.mark.parametrize("reason", ["patience", "epochs", "max_steps", None])
def test_same_budget_holds_whatever_the_stop(reason):
    assert seed_holds(_seed(reason, budget=OLD), dict(OLD), None)


@pytest.mark.parametrize("reason, holds", [
    ("patience", True),      # it stopped before the old cap, so before the new one
    ("epochs", False),       # capped: more to train under the raised cap
    ("max_steps", False),
    (None, False),           # unknown: train (or continue) it
])
def test_raised_cap(reason, holds):
    assert seed_holds(_seed(reason, budget=OLD), {**OLD, "epochs": 100}, None) is holds


def test_lowered_cap_or_other_patience_rule_never_holds():
    assert not seed_holds(_seed("patience", budget=OLD), {**OLD, "epochs": 10}, None)
    assert not seed_holds(_seed("patience", budget=OLD), {**OLD, "patience": 8}, None)
    assert not seed_holds(_seed("patience", budget=OLD), {**OLD, "eval_every": 50}, None)


def test_max_steps_zero_is_unlimited():
    capped = {**OLD, "max_steps": 5000}
    assert seed_holds(_seed("patience", budget=capped), {**capped, "max_steps": 0}, None)
    assert not seed_holds(_seed("patience", budget={**OLD, "max_steps": 0}), capped, None)


def test_seed_without_a_recorded_budget_uses_the_files_definition():
    assert seed_holds(_seed("epochs"), dict(OLD), dict(OLD))
    assert not seed_holds(_seed("epochs"), {**OLD, "epochs": 100}, dict(OLD))
    assert not seed_holds(_seed("patience"), dict(OLD), None)  # nothing known: train it


@pytest.mark.parametrize("result, differences, epochs, max_steps, want", [
    ({"stop_reason": "epochs", "epochs_completed": 30, "step": 90}, {}, 100, 0, "continue"),
    ({"stop_reason": "epochs", "epochs_completed": 30, "step": 90}, {}, 30, 0, "done"),
    ({"stop_reason": "patience", "epochs_completed": 12, "step": 36}, {}, 100, 0, "done"),
    ({"stop_reason": "patience", "epochs_completed": 12, "step": 36}, {}, 10, 0, "restart"),
    ({"stop_reason": "max_steps", "epochs_completed": 2, "step": 50}, {}, 10, 80, "continue"),
    ({"stop_reason": "max_steps", "epochs_completed": 2, "step": 50}, {}, 10, 50, "done"),
    ({"stop_reason": "max_steps", "epochs_completed": 2, "step": 50}, {}, 10, 40, "restart"),
    ({"stop_reason": "epochs", "epochs_completed": 3, "step": 9}, {"lr": (1, 2)}, 3, 0,
     "restart"),
])
def test_run_action(result, differences, epochs, max_steps, want):
    assert run_action(result, differences, epochs, max_steps) == want


TINY = Experiment(
    id="tiny-stop", paper="qrnn", title="tiny", task="copy", metric="token_accuracy",
    higher_is_better=True, arms=(Arm("LSTM", "lstm", {"hidden_size": 8}),),
    claims=(Claim("LSTM", "LSTM", "nowhere"),),
    quick={"epochs": 2, "batch_size": 16, "task.train_size": 32, "task.valid_size": 16,
           "task.test_size": 16, "log_every": 1},
    full={}, task_args={"digits": 3}, seeds_quick=1,
)


def _run(exp, tmp_path, calls=None):
    def log(line: str) -> None:
        if calls is not None:
            calls.append(line)
    return runner.run_experiment(exp, "quick", tmp_path / "runs", tmp_path / "results",
                                 show_progress=False, log=log)


def _train_rows(tmp_path, exp):
    run = runner.run_dir(tmp_path / "runs", "quick", exp, "LSTM", 0)
    rows = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("split") == "train"]


def test_raised_epoch_cap_continues_the_capped_run(tmp_path):
    first = _run(TINY, tmp_path)["arms"]["LSTM"]["seeds"]["0"]
    before = _train_rows(tmp_path, TINY)
    assert first["stop_reason"] == "epochs" and first["epochs"] == 2 and first["steps"] == 4
    assert first["budget"]["epochs"] == 2
    raised = dataclasses.replace(TINY, quick={**TINY.quick, "epochs": 3})
    assert not runner.is_cached(tmp_path / "results", "quick", raised)
    second = _run(raised, tmp_path)["arms"]["LSTM"]["seeds"]["0"]
    assert second["epochs"] == 3 and second["steps"] == 6 and second["budget"]["epochs"] == 3
    # continued, not retrained: the first run's rows (with their wall-clock seconds) are kept
    # as they were, and steps 5 and 6 follow them
    after = _train_rows(tmp_path, raised)
    assert [r["step"] for r in after] == list(range(1, 7)) and after[:4] == before
    assert runner.is_cached(tmp_path / "results", "quick", raised)


def test_lowered_cap_trains_again_from_scratch(tmp_path):
    _run(dataclasses.replace(TINY, quick={**TINY.quick, "epochs": 3}), tmp_path)
    lowered = _run(TINY, tmp_path)["arms"]["LSTM"]["seeds"]["0"]
    assert lowered["epochs"] == 2 and lowered["steps"] == 4


def test_legacy_seeds_carried_into_a_new_file_keep_their_budget(tmp_path):
    """A results file from before seeds recorded their budget: its seeds take the stored
    definition's, and keep it when a partial file under a new definition carries them."""
    _run(TINY, tmp_path)
    path = tmp_path / "results" / "quick" / "tiny-stop.json"
    data = json.loads(path.read_text())
    for seed in data["arms"]["LSTM"]["seeds"].values():
        del seed["budget"]
    path.write_text(json.dumps(data))
    assert runner.is_cached(tmp_path / "results", "quick", TINY)
    raised = dataclasses.replace(TINY, quick={**TINY.quick, "epochs": 3})
    assert not runner.is_cached(tmp_path / "results", "quick", raised)
    again = _run(raised, tmp_path)["arms"]["LSTM"]["seeds"]["0"]
    assert again["epochs"] == 3 and again["budget"]["epochs"] == 3


def test_a_run_stopped_at_a_cap_left_as_it_was_holds_when_another_is_raised():
    steps = {**OLD, "max_steps": 500}
    assert seed_holds(_seed("max_steps", budget=steps), {**steps, "epochs": 100}, None)
    assert seed_holds(_seed("epochs", budget=steps), {**steps, "max_steps": 900}, None)
    assert not seed_holds(_seed("max_steps", budget=steps), {**steps, "max_steps": 900}, None)
    # stopped at a cap that was unset: not a run this record can describe
    assert not seed_holds(_seed("max_steps", budget=OLD), {**OLD, "epochs": 100}, None)
