"""``ctrlrnn reproduce --estimate``: a measured step time and the caps bound each part's cost."""

from __future__ import annotations

import dataclasses

import pytest

from ctrlrnn.reproduce import estimate as est
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.tuning import Param, Tuning

TINY = Experiment(
    id="tiny-cost", paper="qrnn", title="tiny", task="copy", metric="token_accuracy",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"epochs": 7, "batch_size": 16, "task.train_size": 64, "task.valid_size": 16,
           "task.test_size": 16, "patience": 2},
    full={}, task_args={"digits": 3}, seeds_quick=3,
    tuning_quick=Tuning(trials=2, params=(Param("lr", 1e-3, 1e-2, log=True),),
                        overrides={"max_steps": 5}),
)


def test_cap_steps():
    assert est.cap_steps(7, 0, 4) == 28
    assert est.cap_steps(7, 5, 4) == 5
    assert est.cap_steps(1, 500, 313) == 313


def test_step_seconds_is_the_median_gap_after_the_warm_up():
    times = [0.0, 5.0, 5.5, 6.0, 6.1, 6.3, 9.0, 9.2]  # a slow first step, an evaluation at 7
    rows = [{"step": i + 1, "split": "train", "seconds": t} for i, t in enumerate(times)]
    rows.insert(3, {"step": 3, "split": "valid", "valid_loss": 1.0})
    # gaps from step 3 on: 0.5 (3->4), 0.1, 0.2, 2.7, 0.2
    assert est.step_seconds(rows, warmup=3) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no consecutive steps"):
        est.step_seconds(rows[:3], warmup=3)


def test_estimate_measures_every_arm_and_bounds_the_search_and_seeds(tmp_path):
    lines: list[str] = []
    costs = est.estimate([TINY], "quick", tmp_path, steps=4, log=lines.append)
    assert [c.arm for c in costs] == ["LSTM", "QRNN"]
    for c in costs:
        assert c.steps_per_epoch == 4  # 64 examples, batch 16
        assert c.rungs == ((2, 5),) and c.trials == 2  # the trial budget's max_steps
        assert c.seeds == 3 and c.seed_steps == 28  # 7 epochs of 4 steps
        assert 0 < c.seconds_per_step < 5
        assert c.total_seconds == pytest.approx(c.seconds_per_step * (2 * 5 + 3 * 28))
    assert any(line.startswith("| tiny-cost | LSTM |") for line in lines)
    assert any(line.startswith("tiny-cost: at most") for line in lines)
    # a second measurement replaces the first's scratch run instead of resuming it
    again = est.estimate([dataclasses.replace(TINY, arms=TINY.arms[:1])], "quick", tmp_path,
                         steps=4, log=lambda s: None)
    assert again[0].steps_per_epoch == 4


def test_cli_estimate_refuses_too_few_steps_and_pages_only(tmp_path, capsys):
    from ctrlrnn.cli import main

    assert main(["reproduce", "--quick", "--only", "qrnn-copy", "--estimate", "1",
                 "--runs", str(tmp_path)]) == 2
    assert "at least 2 steps" in capsys.readouterr().out
    assert main(["reproduce", "--estimate", "5", "--pages-only"]) == 2


def test_a_halving_search_costs_its_rungs_not_every_trial_to_the_last_cap(tmp_path):
    """Under successive halving every trial trains to the first rung's cap and the kept ones
    continue from there: 3 trials to 2 steps, then 2 of them from 2 to 4 (keep 0.5)."""
    from tiny_runs import tiny_halving_experiment

    lines: list[str] = []
    (cost,) = est.estimate([tiny_halving_experiment("tiny-halving", seeds=1)], "quick", tmp_path,
                           steps=3, log=lines.append)
    assert cost.rungs == ((3, 2), (2, 4)) and cost.trials == 3
    assert cost.search_steps == 3 * 2 + 2 * (4 - 2)
    assert cost.search_seconds == pytest.approx(10 * cost.seconds_per_step)
    row = next(line for line in lines if line.startswith("| tiny-halving | QRNN |"))
    assert "| 3 x 2, then 2 to 4 steps = " in row


def test_search_steps_of_rungs_and_of_none():
    cost = est.ArmCost(experiment="e", arm="a", seconds_per_step=1.0, steps_per_epoch=62,
                       rungs=((9, 248), (3, 620), (1, 1860)), seeds=3, seed_steps=6200,
                       load=None, cpu_share=None)
    assert cost.search_steps == 9 * 248 + 3 * (620 - 248) + 1 * (1860 - 620)
    assert est._search_cell(cost) == "9 x 248, then 3 to 620, then 1 to 1860 steps = 1.3 h"
    none = dataclasses.replace(cost, rungs=())
    assert none.trials == 0 and none.search_steps == 0 and est._search_cell(none) == "no search"
