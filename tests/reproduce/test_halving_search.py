"""Successive halving: many short trials, the best continued to the next rung's caps, the
choice made where the runs end; resumable at any trial of any rung; the real trainer continues
a trial from its checkpoint when its rung's cap rises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tiny_runs import tiny_halving_experiment

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.tuning import Param, Tuning, record_holds, tune_arm

RUNGS = ({"epochs": 1}, {"epochs": 3}, {"epochs": 9})
SEARCH = Tuning(trials=9, params=(Param("lr", 1e-4, 1e-1, log=True),), rungs=RUNGS,
                keep=1 / 3, arm_streams=True)


def _curve(lr: float, epochs: int) -> float:
    """A made-up validation accuracy: a high learning rate starts fast and stalls at 0.6, a
    low one starts slowly and ends near 0.9."""
    fast = math.log10(lr) + 4  # 0 (lr 1e-4) .. 3 (lr 1e-1)
    ceiling = 0.9 - 0.1 * fast
    speed = 0.15 * (1 + fast)
    return ceiling * (1 - math.exp(-speed * epochs))


class FakeTrainer:
    """Trains a trial by the curve: what ``run_trial`` returns; counts the epochs trained."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail_at = fail_at

    def __call__(self, k: int, overrides: dict, out: Path) -> dict:
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append((k, overrides["epochs"]))
        out.mkdir(parents=True, exist_ok=True)
        value = _curve(overrides["lr"], overrides["epochs"])
        return {"valid": {"acc": value}, "step": overrides["epochs"] * 10,
                "best_step": overrides["epochs"] * 10, "stop_reason": "epochs"}


def test_the_rungs_keep_the_best_third_and_choose_where_runs_end(tmp_path: Path) -> None:
    trainer = FakeTrainer()
    record = tune_arm(SEARCH, tmp_path, "acc", True, trainer, log=lambda s: None, arm="A")
    assert SEARCH.rung_sizes() == [9, 3, 1]
    assert [e for _, e in trainer.calls] == [1] * 9 + [3] * 3 + [9]
    rows = record["trials"]
    assert [r["rung"] for r in rows].count(2) == 1 and len(rows) == 9
    first = {r["trial"]: r["rungs"][0] for r in rows}
    second = [k for k, e in trainer.calls if e == 3]
    assert sorted(second) == sorted(sorted(first, key=lambda k: -first[k])[:3])
    chosen = next(r for r in rows if r["rung"] == 2)
    assert record["best_trial"] == chosen["trial"] and record["chosen"] == chosen["params"]
    assert record["rule"] == "successive halving" and record["rungs"] == list(RUNGS)
    assert record_holds(record, SEARCH) and Tuning.from_record(record) == SEARCH
    # the fastest starter of rung 0 is not the choice when another ends higher
    fastest = max(first, key=first.get)
    finals = {r["trial"]: r["valid"] for r in rows}
    assert finals[record["best_trial"]] >= finals[fastest]


def test_an_interrupted_search_resumes_without_training_again(tmp_path: Path) -> None:
    whole = tune_arm(SEARCH, tmp_path / "whole", "acc", True, FakeTrainer(), log=lambda s: None,
                     arm="A")
    for stop in (4, 10, 12):  # in rung 0, rung 1, the last rung
        folder = tmp_path / f"stop{stop}"
        with pytest.raises(KeyboardInterrupt):
            tune_arm(SEARCH, folder, "acc", True, FakeTrainer(fail_at=stop), log=lambda s: None,
                     arm="A")
        again = FakeTrainer()
        resumed = tune_arm(SEARCH, folder, "acc", True, again, log=lambda s: None, arm="A")
        assert len(again.calls) == 13 - stop
        assert resumed == whole


def test_a_results_file_stands_in_for_lost_run_directories(tmp_path: Path) -> None:
    whole = tune_arm(SEARCH, tmp_path / "a", "acc", True, FakeTrainer(), log=lambda s: None,
                     arm="A")
    again = FakeTrainer()
    held = tune_arm(SEARCH, tmp_path / "b", "acc", True, again, log=lambda s: None, arm="A",
                    done=whole["trials"])
    assert again.calls == [] and held["chosen"] == whole["chosen"]


def test_every_record_saved_midway_holds_every_finished_trial(tmp_path: Path) -> None:
    """What the runner writes into the results file after each trial (``on_trial``) holds every
    trial finished so far, those of the rung under way and those read from an earlier results
    file, so a checkout alone resumes a search interrupted mid-rung."""
    whole = tune_arm(SEARCH, tmp_path / "whole", "acc", True, FakeTrainer(), log=lambda s: None,
                     arm="A")
    for stop, rows, at_rung_1 in ((4, 4, 0), (10, 9, 1), (12, 9, 3)):
        saved: list[dict] = []
        with pytest.raises(KeyboardInterrupt):
            tune_arm(SEARCH, tmp_path / f"stop{stop}", "acc", True, FakeTrainer(fail_at=stop),
                     log=lambda s: None, arm="A", on_trial=saved.append)
        last = saved[-1]["trials"]
        assert len(saved) == stop and len(last) == rows
        assert sum(1 for r in last if r["rung"] >= 1) == at_rung_1
        # the run directories lost: the last record alone resumes the search, and a record
        # saved after the next trial keeps every row it was given
        again: list[dict] = []
        resumed = tune_arm(SEARCH, tmp_path / f"fresh{stop}", "acc", True, FakeTrainer(),
                           log=lambda s: None, arm="A", done=last, on_trial=again.append)
        assert resumed == whole
        reached = {r["trial"]: len(r["rungs"]) for r in last}
        for record in again:  # no row lost, none cut back to an earlier rung
            now = {r["trial"]: len(r["rungs"]) for r in record["trials"]}
            assert all(now.get(k, 0) >= n for k, n in reached.items())


def test_another_rung_plan_is_another_search() -> None:
    other = Tuning(trials=9, params=SEARCH.params, rungs=({"epochs": 2}, {"epochs": 6}),
                   arm_streams=True)
    plain = Tuning(trials=9, params=SEARCH.params, arm_streams=True, startup=9)
    assert len({SEARCH.key(), other.key(), plain.key()}) == 3
    assert "successive halving" in SEARCH.describe() and "9-3-1" in SEARCH.describe()
    with pytest.raises(ValueError, match=r"rungs\[0\]"):
        Tuning(trials=3, params=SEARCH.params, rungs=({"lr": 1},))
    with pytest.raises(ValueError, match="keep"):
        Tuning(trials=3, params=SEARCH.params, rungs=RUNGS, keep=1.0)


def test_real_trials_continue_from_their_checkpoints(tmp_path: Path, one_thread) -> None:
    """The real trainer: each rung's survivors continue to the higher cap (their step count
    grows from where the last rung stopped), and the arm's seeds train at the choice."""
    exp = tiny_halving_experiment("tiny-halving", seeds=1)
    search = exp.tuning("quick")
    data = runner.run_experiment(exp, "quick", tmp_path / "runs", tmp_path / "res",
                                 show_progress=False, log=lambda s: None)
    assert data["complete"], data["errors"]
    record = data["arms"]["QRNN"]["tuning"]
    assert [r["rung"] for r in record["trials"]].count(1) == 2
    for row in record["trials"]:
        trial = tmp_path / "runs" / "quick" / "tiny-halving"
        found = list(trial.rglob(f"trial{row['trial']}/rung0.json"))
        assert len(found) == 1
        assert json.loads(found[0].read_text())["step"] == 2
        if row["rung"] == 1:
            assert row["steps"] == 4
    assert data["arms"]["QRNN"]["seeds"]["0"]["params"] == record["chosen"]
    assert record_holds(record, search)


def test_a_saved_record_keeps_the_results_files_rows_the_search_has_not_reached() -> None:
    """Rows another process published skip this one's reading (a shared study): a record saved
    meanwhile still holds the results file's rows, at the furthest rung either reached."""
    from ctrlrnn.reproduce.tuning import _HalvingSearch

    held = {0: {"trial": 0, "rungs": [0.5, 0.7], "rung": 1},
            1: {"trial": 1, "rungs": [0.4], "rung": 0}}
    search = _HalvingSearch(SEARCH, Path("."), "acc", True, FakeTrainer(), lambda s: None, 0,
                            None, held, {})
    search.rows.update({0: {"trial": 0, "rungs": [0.5], "rung": 0},
                        2: {"trial": 2, "rungs": [0.6], "rung": 0}})
    rows = search.rows_so_far()
    assert rows[0]["rungs"] == [0.5, 0.7]  # the file's rung 1 is kept, not cut back
    assert rows[1] == held[1] and rows[2]["rungs"] == [0.6]


class TiedTrainer(FakeTrainer):
    """Every trial at 0 accuracy after the first rung, its loss lower the higher its lr (the
    accuracy of the later rungs as :func:`_curve` has it): a hard task's first rung."""

    def __call__(self, k: int, overrides: dict, out: Path) -> dict:
        result = super().__call__(k, overrides, out)
        if overrides["epochs"] == RUNGS[0]["epochs"]:
            result["valid"] = {"acc": 0.0, "loss": -math.log10(overrides["lr"])}
        return result


def test_a_tie_of_the_metric_is_ranked_by_the_validation_loss(tmp_path: Path) -> None:
    trainer = TiedTrainer()
    record = tune_arm(SEARCH, tmp_path, "acc", True, trainer, log=lambda s: None, arm="A")
    rows = record["trials"]
    assert all(r["rungs"][0] == 0.0 for r in rows)
    lr = {r["trial"]: r["params"]["lr"] for r in rows}
    second = sorted(k for k, e in trainer.calls if e == 3)
    # the three lowest losses (highest learning rates) continue, not the three first trials
    assert second == sorted(sorted(lr, key=lambda k: -lr[k])[:3])
    assert second != [0, 1, 2]
    assert all(r["valid_loss"] is not None for r in rows if r["rung"] == 0)


def test_the_choice_on_a_tie_is_the_lower_loss_and_stored_rows_keep_their_order() -> None:
    from ctrlrnn.reproduce.tuning import _best

    rows = [{"trial": 0, "valid": 1.0, "valid_loss": 0.3, "params": {}},
            {"trial": 1, "valid": 1.0, "valid_loss": 0.1, "params": {}},
            {"trial": 2, "valid": 0.9, "valid_loss": 0.01, "params": {}}]
    assert _best(rows, True)["trial"] == 1
    assert _best([{**r, "valid": 2 - r["valid"]} for r in rows], False)["trial"] == 1
    stored = [{k: v for k, v in r.items() if k != "valid_loss"} for r in rows]
    assert _best(stored, True)["trial"] == 0  # rows without a loss: the first on a tie
