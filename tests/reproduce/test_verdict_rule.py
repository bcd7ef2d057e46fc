"""The one verdict rule of the results pages, and the stopping rule (patience vs cap) that
decides whether a run converged."""

from __future__ import annotations

import pytest

from ctrlrnn.reproduce import verdicts as v
from ctrlrnn.reproduce.verdicts import speed_verdict, verdict


@pytest.mark.parametrize(
    "better,worse,higher,expected",
    [
        ([0.9, 0.92], [0.5, 0.52], True, v.REPRODUCED),
        ([0.6, 0.9], [0.5, 0.7], True, v.SAME_WITHIN),  # overlapping spreads
        ([0.5, 0.52], [0.9, 0.92], True, v.OPPOSITE),
        ([0.6, 0.7], [0.65, 0.75], True, v.OPPOSITE_WITHIN),
        ([0.5, 0.5], [0.5, 0.5], True, v.OPPOSITE_WITHIN),  # a tie does not hold the claim
        ([80.0, 81.0], [90.0, 91.0], False, v.REPRODUCED),  # perplexity: lower is better
        ([0.6], [0.5], True, v.SAME_ONE_SEED),
        ([0.4], [0.5], True, v.OPPOSITE_ONE_SEED),
        # a single seed in either arm: its spread is unknown, only the direction is said,
        # however wide the other arm's spread
        ([0.51], [0.69, 0.57, 0.36], True, v.OPPOSITE_ONE_SEED),
        ([0.9, 0.92, 0.91], [0.5], True, v.SAME_ONE_SEED),
        ([], [0.5], True, v.NOT_RUN),
    ],
)
def test_verdict(better, worse, higher, expected):
    assert verdict(better, worse, higher) == expected


def test_both_at_chance_is_no_signal_whatever_the_gap():
    level = v.useful_level(0.1, "accuracy")
    assert level == pytest.approx(0.12)
    assert verdict([0.115, 0.118], [0.10, 0.10], True, useful=level) == v.NO_SIGNAL
    # one arm learned: the claim is judged
    assert verdict([0.30, 0.31], [0.10, 0.10], True, useful=level) == v.REPRODUCED
    assert verdict([0.10, 0.10], [0.30, 0.31], True, useful=level) == v.OPPOSITE


def test_unusable_translations_are_no_signal():
    level = v.useful_level(None, "bleu")
    assert verdict([0.35, 0.33], [0.08, 0.10], True, useful=level) == v.NO_SIGNAL


def test_baseline_below_paper_level_gets_no_verdict():
    # the paper's BiLSTM: 96.9 exact match; ours 51.6 -> below 90% of it
    assert verdict([60.0, 61.0], [51.0, 52.0], True, baseline_paper=96.9) == v.BASELINE_LOW
    assert verdict([95.0, 96.0], [88.0, 89.0], True, baseline_paper=96.9) == v.REPRODUCED
    # lower is better: a baseline perplexity above paper / 0.9 is below the paper's level
    assert verdict([200.0, 201.0], [250.0, 252.0], False, baseline_paper=82.0) == v.BASELINE_LOW
    assert v.paper_level(91.0, 82.0, False) == pytest.approx(82.0 / 91.0)


def test_speed_verdict_words():
    assert speed_verdict([True, True]) == v.REPRODUCED
    assert speed_verdict([False, False]) == v.OPPOSITE
    assert speed_verdict([True, False, True]) == "mixed (2 of 3 cells)"


# ---------------------------------------------------------------- the stopping rule
def test_patience_stops_a_run_that_stopped_improving(scripted_trainer):
    # exact match (higher is better) improves for 3 evaluations, then stays flat, and so
    # does the loss that breaks its ties
    trainer, _ = scripted_trainer({"exact_match": [0.1, 0.2, 0.3, 0.3, 0.25, 0.3, 0.3],
                                   "loss": [1.0, 0.9, 0.8, 0.8, 0.85, 0.8, 0.9]},
                                  patience=3)
    result = trainer.fit()
    assert result["stop_reason"] == "patience"
    assert result["best_step"] == 3 and result["step"] == 6


def test_a_run_still_improving_at_the_cap_is_not_converged(scripted_trainer):
    curve = [0.05 * k for k in range(1, 30)]
    trainer, _ = scripted_trainer({"exact_match": curve}, patience=3, max_steps=8)
    result = trainer.fit()
    assert result["stop_reason"] == "max_steps"
    assert result["best_step"] == 8 and result["step"] == 8
    assert 0.0 < result["cpu_share"] and result["threads"] >= 1


def test_a_baseline_below_paper_level_says_whether_it_converged():
    from ctrlrnn.reproduce.pages import _ceiling_why

    converged = [{"stop_reason": "patience"}] * 3
    assert "measured ceiling" in _ceiling_why(converged)
    capped = [{"stop_reason": "patience"}, {"stop_reason": "epochs"}]
    assert "not converged" in _ceiling_why(capped)
    assert "did not record" in _ceiling_why([{}])
