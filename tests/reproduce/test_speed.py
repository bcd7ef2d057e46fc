"""ctrlrnn reproduce speed sections: the epoch-time measurement and its page lines."""

from __future__ import annotations

import json

import pytest

from ctrlrnn.reproduce import experiments, speed
from ctrlrnn.reproduce.experiments import Arm, Experiment
from ctrlrnn.reproduce.runner import config_for

TINY = Experiment(
    id="tiny-addition", paper="qrnn", title="tiny addition", task="addition",
    metric="token_accuracy", higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(), quick={"epochs": 1, "batch_size": 16, "task.train_size": 64,
                      "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 2},
)


def test_epoch_time_times_the_runs_own_steps(monkeypatch, tmp_path):
    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY,))
    r = speed.epoch_time(TINY.id, "quick")
    cfg, cls = config_for(TINY, TINY.arms[0], 0, "quick", tmp_path)
    task = cls(cfg.task_args, 0)
    task.setup()
    n = len(task.train_batches(0, cfg.batch_size))
    assert r["batches_per_epoch"] == n == 64 // 16
    assert r["sampled_batches"] == min(n, speed.SAMPLED_BATCHES["quick"])
    assert set(r["arms"]) == {"LSTM", "QRNN"}
    for row in r["arms"].values():
        assert row["step_s"] > 0 and row["batch_size"] == 16
        assert row["epoch_s"] == pytest.approx(row["step_s"] * n)
    assert r["arms"]["QRNN"]["setting"]["model_args"] == {"hidden_size": 8}
    assert r["arms"]["LSTM"]["setting"] == speed.arm_settings(TINY.id, "quick")["LSTM"]


@pytest.mark.parametrize("n,k", [(1, 8), (5, 8), (8, 8), (100, 8), (1000, 3)])
def test_sample_spreads_over_the_epoch(n, k):
    picked = speed._sample(n, k)
    assert picked == sorted(set(picked)) and len(picked) == min(n, k)
    assert picked[0] == 0 and picked[-1] == n - 1


def _result(**epoch_s):
    return {"batches_per_epoch": 10, "sampled_batches": 3, "repeats": 5,
            "arms": {k: {"step_s": v / 10, "epoch_s": v, "batch_size": 4}
                     for k, v in epoch_s.items()}}


@pytest.mark.parametrize(
    "times,verdict",
    [({"LSTM": 4.0, "QRNN": 1.0}, "reproduced"),
     ({"LSTM": 4.0, "QRNN": 5.0}, "opposite"),
     ({"LSTM": 4.0, "QRNN": 1.0, "QRNN + zoneout 0.1": 6.0}, "mixed (1 of 2 arms)")],
)
def test_epoch_time_lines(times, verdict):
    text = "\n".join(speed._epoch_time_lines("qrnn-ptb-lm", _result(**times), "here", []))
    assert f"**{verdict}**" in text
    q = times["QRNN"]
    assert f"| QRNN | {q / 10:.3g} | {q:.3g} | {4.0 / q:.2f}x |" in text
    assert "One epoch is 10 batches of 4" in text


@pytest.mark.parametrize(
    "bidirectional,verdict",
    [(8.0, "reproduced"), (2.0, "reproduced"), (1.0, "mixed (1 of 2 pairs)")],
)
def test_a_second_lstm_arm_is_a_baseline_of_the_claim(bidirectional, verdict):
    """The character-level translation's second LSTM arm is one more baseline the QRNN is
    claimed faster than, not an arm claimed faster than the first LSTM."""
    bidir = "LSTM (bidirectional encoder)"
    times = {"LSTM": 4.0, "QRNN": 1.5, bidir: bidirectional}
    claims: list[speed.SpeedClaim] = []
    text = "\n".join(speed._epoch_time_lines("translation-char-qrnn", _result(**times), "here",
                                             claims))
    claim = f"QRNN trains faster per epoch than the LSTM and the {bidir}"
    assert f"Claim *{claim}*: **{verdict}** (on CPU)." in text
    assert claims[0][2] == claim
    assert f"| {bidir} | {bidirectional / 10:.3g} | {bidirectional:.3g} | " \
           f"{4.0 / bidirectional:.2f}x |" in text


def test_run_speed_measures_only_what_is_missing(monkeypatch, tmp_path):
    path = tmp_path / "full" / "speed.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"machine": "m", "qrnn": {"kept": 1}, "rcrn": {"kept": 2}}))

    def never(mode):
        raise AssertionError("a part already measured was measured again")

    monkeypatch.setattr(speed, "qrnn_figure4", never)
    monkeypatch.setattr(speed, "rcrn_table10", never)
    monkeypatch.setattr(speed, "epoch_times",
                        lambda mode: {"qrnn-ptb-lm": _result(LSTM=2.0, QRNN=1.0)})
    sections = speed.run_speed("full", tmp_path, tmp_path)
    data = json.loads(path.read_text())
    assert data["qrnn"] == {"kept": 1} and "qrnn-ptb-lm" in data["epoch_time"]
    assert any("training time per epoch" in line for line in sections["qrnn"])
    claims = speed.speed_claims("full", tmp_path)
    assert claims == [("qrnn", "Training time per epoch (`qrnn-ptb-lm`)",
                       "QRNN trains faster per epoch than the LSTM", "figure 4 (left)",
                       "reproduced (CPU)")]


def test_epoch_time_lines_mark_an_arm_measured_in_an_earlier_setting(monkeypatch):
    """Rows record the setting they were measured in: one the experiment no longer defines is
    marked, as are the claim and its verdict; rows recording none say the setting is unknown."""
    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY,))
    monkeypatch.setitem(speed.EPOCH_TIME, TINY.id, ("qrnn", "table 3", "faster"))
    now = speed.arm_settings(TINY.id, "quick")
    r = _result(LSTM=4.0, QRNN=1.0)
    r["arms"]["LSTM"]["setting"] = now["LSTM"]
    r["arms"]["QRNN"]["setting"] = {**now["QRNN"], "model_args": {"hidden_size": 4}}
    claims: list[speed.SpeedClaim] = []
    text = "\n".join(speed._epoch_time_lines(TINY.id, r, "here", claims, "quick"))
    assert "| QRNN (earlier setting) |" in text and "| LSTM |" in text
    assert "**Earlier setting.** The times of QRNN were measured" in text
    assert "(on CPU, earlier setting)" in text
    assert claims[0][-1] == "reproduced (CPU, earlier setting)"
    assert "not recorded here" not in text
    r["arms"]["QRNN"]["setting"] = now["QRNN"]
    text = "\n".join(speed._epoch_time_lines(TINY.id, r, "here", [], "quick"))
    assert "earlier setting" not in text.lower() and "not recorded here" not in text
    del r["arms"]["QRNN"]["setting"]
    text = "\n".join(speed._epoch_time_lines(TINY.id, r, "here", [], "quick"))
    assert "measured before the speed results recorded each arm's setting" in text
