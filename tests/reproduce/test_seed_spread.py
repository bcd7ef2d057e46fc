"""The paragraph a results page gives an arm whose seeds lie far apart."""

from __future__ import annotations

import dataclasses

from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.page_section import experiment_section
from ctrlrnn.reproduce.seed_spread import climb, far_apart, flat, same_order, spread_lines

EXP = Experiment(
    id="spread", paper="qrnn", title="spread", task="copy", metric="accuracy",
    higher_is_better=True, arms=(Arm("LSTM", "lstm"), Arm("QRNN", "qrnn")),
    claims=(Claim("QRNN", "LSTM", "nowhere"),), quick={}, full={},
)


def _seed(test, valid, steps=100, best=80, reason="patience"):
    return {"test": test, "valid": valid, "steps": steps, "best_step": best,
            "stop_reason": reason}


def _data(lstm, qrnn):
    return {"arms": {"LSTM": {"seeds": dict(enumerate(lstm))},
                     "QRNN": {"seeds": dict(enumerate(qrnn))}}}


def test_far_apart_in_points_for_percentages_and_bleu_else_relative():
    assert far_apart([70.0, 80.5], "accuracy", 100.0)
    assert not far_apart([70.0, 80.0], "accuracy", 100.0)  # 10 points exactly: allowed
    assert far_apart([3.0, 14.0], "bleu", 1.0)
    assert not far_apart([3.0, 12.0], "bleu", 1.0)
    assert far_apart([100.0, 111.0], "perplexity", 1.0)  # 11% of the mean
    assert not far_apart([100.0, 109.0], "perplexity", 1.0)
    assert not far_apart([10.0], "accuracy", 100.0)  # one seed has no spread


def test_same_order_compares_every_pair():
    assert same_order([70.0, 90.0, 80.0], [71.0, 91.0, 85.0])
    assert not same_order([70.0, 90.0, 80.0], [71.0, 85.0, 91.0])
    assert same_order([70.0, 70.0], [60.0, 61.0])  # a tie agrees with either order
    assert not same_order([70.0, 90.0], [71.0, None])  # a missing validation result: unknown


def test_an_arm_far_apart_gets_its_seeds_and_endings():
    data = _data([_seed(0.696, 0.711, 43736, 37488), _seed(0.888, 0.906, 54670, 48422,
                                                            "epochs")],
                 [_seed(0.80, 0.81), _seed(0.82, 0.80)])
    lines = spread_lines(EXP, data)
    text = " ".join(lines)
    assert "**LSTM's seeds lie 19.2 points apart** on the test accuracy." in text
    assert ("Seed 0: test 69.6, validation 71.1, stopped by patience at step 43,736, best "
            "checkpoint at 37,488.") in text
    assert "Seed 1: test 88.8, validation 90.6, stopped at the epoch cap at step 54,670" in text
    assert "rank them as their test results do" in text
    assert "QRNN" not in text  # 2 points apart: nothing to explain


def test_seeds_ranked_otherwise_by_validation_say_so_and_nan_is_left_out():
    data = _data([_seed(0.60, 0.75), _seed(0.75, 0.70), _seed(float("nan"), 0.1)], [])
    text = " ".join(spread_lines(EXP, data))
    assert "do not rank them as their test results do" in text
    assert "Seed 2" not in text


def test_the_page_shows_the_paragraph_under_the_results_table(tmp_path):
    data = _data([_seed(0.5, 0.5), _seed(0.9, 0.9)], [_seed(0.5, 0.5), _seed(0.52, 0.5)])
    data.update({"experiment": "spread", "mode": "full", "complete": True, "errors": {},
                 "definition": dataclasses.asdict(EXP)})
    lines, _judged = experiment_section(EXP, data, tmp_path, "full")
    text = "\n".join(lines)
    assert text.index("| LSTM |") < text.index("**LSTM's seeds lie 40 points apart**")
    assert "QRNN's seeds lie" not in text


def test_climb_measures_the_window_before_the_best_against_the_one_after():
    curve = [[10, 0.1], [20, 0.3], [30, 0.5], [40, 0.6], [50, 0.55], [60, 0.58]]
    seed = {"curve": curve, "best_step": 40, "stop_reason": "patience"}
    change, window = climb(seed, higher_is_better=True)
    assert window == 2 and abs(change - 0.3) < 1e-12  # 0.6 at the best, 0.3 two before
    loss = {"curve": [[1, 3.0], [2, 2.0], [3, 2.5]], "best_step": 2, "stop_reason": "patience"}
    assert climb(loss, higher_is_better=False) == (1.0, 1)  # a loss improves downwards
    assert climb({**seed, "stop_reason": "epochs"}, True) is None  # not cut by patience
    assert climb({**seed, "best_step": 20}, True) is None  # fewer evaluations before than after
    assert climb({**seed, "best_step": 60}, True) is None  # nothing after the best
    assert climb({"stop_reason": "patience", "best_step": 40}, True) is None  # no curve


def test_a_seed_cut_by_patience_while_climbing_says_so():
    climbing = {**_seed(0.60, 0.62, steps=60, best=40),
                "curve": [[10, 0.1], [20, 0.3], [30, 0.5], [40, 0.62], [50, 0.6], [60, 0.61]]}
    data = _data([climbing, _seed(0.9, 0.9)], [])
    text = " ".join(spread_lines(EXP, data))
    assert ("Seed 0: test 60, validation 62, stopped by patience at step 60, best checkpoint "
            "at 40; its validation accuracy had improved by 32 over the 2 evaluations before "
            "its best.") in text
    assert "Seed 1: test 90, validation 90, stopped by patience at step 100, best checkpoint at " \
           "80." in text


def test_a_seed_that_never_left_its_first_evaluation_says_so():
    stuck = {**_seed(0.346, 0.358, steps=60, best=30),
             "curve": [[10, 0.354], [20, 0.354], [30, 0.358], [40, 0.358], [50, 0.354]]}
    data = _data([stuck, _seed(0.577, 0.59)], [])
    text = " ".join(spread_lines(EXP, data))
    assert ("Seed 0: test 34.6, validation 35.8, stopped by patience at step 60, best checkpoint "
            "at 30; its validation accuracy stayed within 0.4 points of its first evaluation's "
            "35.4 at all 5 evaluations: it learned nothing after its first evaluation.") in text
    assert "had improved" not in text  # the flat curve's (tiny) climb is not said as well
    assert flat(stuck, "accuracy", 100.0) is not None
    moved = {"curve": [[10, 0.354], [20, 0.36], [30, 0.37]]}  # 1.6 points: it learned
    assert flat(moved, "accuracy", 100.0) is None
    assert flat({"curve": [[10, 0.354], [20, 0.354]]}, "accuracy", 100.0) is None  # too short
    # a metric not in points: within 1% of the first value
    assert flat({"curve": [[1, 200.0], [2, 201.5], [3, 199.0]]}, "perplexity", 1.0) is not None
    assert flat({"curve": [[1, 200.0], [2, 203.0], [3, 199.0]]}, "perplexity", 1.0) is None
    assert flat({"curve": [[1, 2.0], [2, float("nan")], [3, 2.0]]}, "perplexity", 1.0) is None
