"""Equal tuning of every arm: same trial count, chosen values used by the final seeds,
resumable search, diverged trials never chosen."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.tuning import Param, Tuning, tune_arm

SEARCH = Tuning(trials=4, params=(Param("lr", 1e-4, 1e-1, log=True),
                                  Param("model.dropout", 0.0, 0.5)),
                overrides={"max_steps": 2}, startup=2)

TINY = Experiment(
    id="tiny-tuned", paper="qrnn", title="tiny tuned copy", task="copy",
    metric="token_accuracy", higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8}),
          Arm("GRU", "gru", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"max_steps": 3, "epochs": 1, "batch_size": 16, "task.train_size": 64,
           "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 3}, seeds_quick=2, tuning_quick=SEARCH,
)


def _fake_result(valid: float) -> dict:
    return {"test": {"token_accuracy": valid}, "valid": {"token_accuracy": valid}, "step": 2,
            "best_step": 2, "stop_reason": "max_steps", "train_seconds": 0.1,
            "epochs_completed": 1, "parameters": 1}


def _score(overrides: dict) -> float:
    """A validation curve over the search space, best near lr = 1e-2 (made up, smooth)."""
    return 1.0 - abs(math.log10(overrides["lr"]) + 2.0) / 3.0 - 0.1 * overrides["model.dropout"]


def test_every_arm_gets_the_same_trials_and_its_seeds_use_the_chosen_values(tmp_path,
                                                                              monkeypatch):
    trials: dict[str, list[dict]] = {}
    seeds: list[tuple[str, int, dict]] = []

    def fake_trial(exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        assert overrides["max_steps"] == 2  # the trial budget, the same for every arm
        trials.setdefault(arm.label, []).append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        result = _fake_result(_score(overrides))
        (out / "result.json").write_text(json.dumps(result))
        return result

    def fake_run_one(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        seeds.append((arm.label, seed, dict(params or {})))
        return _fake_result(0.5)

    monkeypatch.setattr(runner, "run_trial", fake_trial)
    monkeypatch.setattr(runner, "run_one", fake_run_one)
    runs, results = tmp_path / "runs", tmp_path / "results"
    data = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert data["complete"]
    assert {label: len(t) for label, t in trials.items()} == {"LSTM": 4, "QRNN": 4, "GRU": 4}
    for label, arm in data["arms"].items():
        table = arm["tuning"]
        assert [r["trial"] for r in table["trials"]] == [0, 1, 2, 3]
        assert table["sampler"] == "optuna TPE" and table["trials_planned"] == 4
        best = max(table["trials"], key=lambda r: r["valid"])
        assert table["chosen"] == best["params"] and table["best_trial"] == best["trial"]
        for lr_dropout in (r["params"] for r in table["trials"]):
            assert 1e-4 <= lr_dropout["lr"] <= 1e-1 and 0 <= lr_dropout["model.dropout"] <= 0.5
        used = [p for name, _, p in seeds if name == label]
        assert used == [table["chosen"]] * 2
        assert all(s["params"] == table["chosen"] for s in arm["seeds"].values())
    # the same sampler seed and the same (made-up) curve: every arm is proposed the same values
    assert trials["LSTM"] == trials["QRNN"] == trials["GRU"]
    assert runner.is_cached(results, "quick", TINY)

    # cached: nothing is tuned or trained again
    trials.clear()
    seeds.clear()
    runner.run_experiment(TINY, "quick", runs, results, show_progress=False, log=lambda s: None)
    assert trials == {} and seeds == []

    # a search with more trials is not the cached one: the arms tune again, from their trials
    more = dataclasses.replace(TINY, tuning_quick=dataclasses.replace(SEARCH, trials=5))
    assert not runner.is_cached(results, "quick", more)


def test_untuned_seeds_train_again_once_the_experiment_is_tuned(tmp_path, monkeypatch):
    seeds: list[tuple[str, int, dict]] = []

    def fake_run_one(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        seeds.append((arm.label, seed, dict(params or {})))
        return _fake_result(0.5)

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    runs, results = tmp_path / "runs", tmp_path / "results"
    untuned = dataclasses.replace(TINY, tuning_quick=None)
    runner.run_experiment(untuned, "quick", runs, results, show_progress=False,
                          log=lambda s: None)
    assert len(seeds) == 6 and all(p == {} for _, _, p in seeds)
    seeds.clear()
    monkeypatch.setattr(runner, "run_trial", lambda exp, arm, mode, runs_dir, show, number,
                        overrides, out: _fake_result(_score(overrides)))
    runner.run_experiment(TINY, "quick", runs, results, show_progress=False, log=lambda s: None)
    assert len(seeds) == 6 and all(p for _, _, p in seeds)


def test_an_interrupted_search_resumes_to_the_same_trials(tmp_path):
    def run(into, stop_at=None):
        def trial(number, overrides, out):
            if number == stop_at:
                raise KeyboardInterrupt
            out.mkdir(parents=True, exist_ok=True)
            result = _fake_result(_score(overrides))
            (out / "result.json").write_text(json.dumps(result))
            return result
        return tune_arm(SEARCH, into, "token_accuracy", True, trial, log=lambda s: None)

    whole = run(tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", stop_at=3)
    assert (tmp_path / "cut" / "trial3" / "params.json").exists()  # proposed before it trained
    resumed = run(tmp_path / "cut")
    assert resumed["trials"] == whole["trials"] and resumed["chosen"] == whole["chosen"]


@pytest.mark.parametrize("higher", [True, False])
def test_a_diverged_trial_is_never_chosen(tmp_path, higher):
    values = iter([math.nan, 0.3, 0.7, math.nan])

    def trial(number, overrides, out):
        return _fake_result(next(values))

    table = tune_arm(SEARCH, tmp_path, "token_accuracy", higher, trial, log=lambda s: None)
    assert table["best_trial"] == (2 if higher else 1)
    assert len(table["trials"]) == 4

    def diverged(number, overrides, out):
        return _fake_result(math.nan)

    table = tune_arm(SEARCH, tmp_path / "all", "token_accuracy", higher, diverged,
                     log=lambda s: None)
    assert table["best_trial"] is None and table["chosen"] == {}


def test_a_real_tiny_search_trains_its_trials_and_seeds(tmp_path):
    small = dataclasses.replace(
        TINY, arms=TINY.arms[:1],
        tuning_quick=dataclasses.replace(SEARCH, trials=2, overrides={"max_steps": 1}))
    runs, results = tmp_path / "runs", tmp_path / "results"
    data = runner.run_experiment(small, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert data["complete"], data["errors"]
    table = data["arms"]["LSTM"]["tuning"]
    assert [r["steps"] for r in table["trials"]] == [1, 1]
    chosen = table["chosen"]
    out = runner.run_dir(runs, "quick", small, "LSTM", 0, chosen)
    from ctrlrnn.train.checkpoint import Checkpoint

    config = Checkpoint(out / "checkpoint.safetensors").config
    assert config["lr"] == pytest.approx(chosen["lr"])
    assert config["model_args"]["dropout"] == pytest.approx(chosen["model.dropout"])
    assert data["arms"]["LSTM"]["seeds"]["0"]["steps"] == 3


def test_pages_show_the_search_and_mark_untuned_results(tmp_path, monkeypatch):
    from ctrlrnn.reproduce import pages

    monkeypatch.setattr(runner, "run_trial", lambda exp, arm, mode, runs_dir, show, number,
                        overrides, out: _fake_result(_score(overrides)))
    monkeypatch.setattr(runner, "run_one", lambda exp, arm, seed, mode, runs_dir, show,
                        params=None: _fake_result(0.5 + 0.1 * (arm.label == "QRNN")))
    runs, results = tmp_path / "runs", tmp_path / "results"
    data = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    lines, judged = pages.experiment_section(TINY, data, tmp_path, "quick")
    page = "\n".join(lines)
    assert "Tuning, the same for every arm" in page and "4 trials per arm" in page
    assert page.count("**(chosen)**") == 3  # one per arm
    chosen = data["arms"]["QRNN"]["tuning"]["chosen"]
    assert f"lr {chosen['lr']:.3g}, dropout {chosen['model.dropout']:.3g} (4)" in page
    # the fake runs stop at their step cap: not converged, so no more than early
    assert "untuned" not in page and judged[0][2] == "early: same direction"

    untuned = {**data, "arms": {k: {**v, "tuning": None} for k, v in data["arms"].items()}}
    lines, judged = pages.experiment_section(TINY, untuned, tmp_path, "quick")
    page = "\n".join(lines)
    assert "**Untuned results.**" in page and "(untuned)" in page
    assert judged[0][2] == "early: same direction (untuned)"
    assert "no patience in this mode, every run trains to the cap of 3 steps or 1 epochs" in page


class _Stop(BaseException):
    """An interruption the runner does not catch (as Ctrl-C)."""


def test_finished_runs_reach_the_results_file_at_once_and_continue_from_it(tmp_path,
                                                                             monkeypatch):
    import shutil

    from ctrlrnn.reproduce import pages

    trained: list[tuple[str, int]] = []
    stopped: list[bool] = []

    def fake_run_one(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        if arm.label == "QRNN" and seed == 1 and not stopped:
            stopped.append(True)
            raise _Stop
        trained.append((arm.label, seed))
        return _fake_result(0.5)

    monkeypatch.setattr(runner, "run_trial", lambda exp, arm, mode, runs_dir, show, number,
                        overrides, out: _fake_result(_score(overrides)))
    monkeypatch.setattr(runner, "run_one", fake_run_one)
    runs, results = tmp_path / "runs", tmp_path / "results"
    with pytest.raises(_Stop):
        runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                              log=lambda s: None)
    saved = runner.load_results(results, "quick", TINY)
    assert saved is not None and not saved["complete"]
    assert set(saved["arms"]["LSTM"]["seeds"]) == {"0", "1"}
    assert set(saved["arms"]["QRNN"]["seeds"]) == {"0"}
    lines, judged = pages.experiment_section(TINY, saved, tmp_path, "quick")
    assert "**In progress**: 3 of the 6 final runs" in "\n".join(lines)
    assert judged[0][2].endswith("(partial)")

    shutil.rmtree(runs)  # what was finished comes from the results file alone
    trained.clear()
    tuned_again: list[str] = []

    def trial(exp, arm, mode, runs_dir, show, number, overrides, out):
        tuned_again.append(arm.label)
        return _fake_result(_score(overrides))

    monkeypatch.setattr(runner, "run_trial", trial)
    data = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert data["complete"]
    assert trained == [("QRNN", 1), ("GRU", 0), ("GRU", 1)]
    assert tuned_again == ["GRU"] * 4  # the arm never reached; the others' searches are kept


def test_a_changed_search_tunes_again_and_never_reads_back_the_old_trials(tmp_path,
                                                                          monkeypatch):
    """Another trial budget (or range, or seed) is another search: the stored tuning no longer
    holds, and the trials run again in their own directories. The finished trials of the old
    search were read back as the new one's (they sat in the same directory)."""
    budgets: list[int] = []

    def fake_trial(exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        budgets.append(overrides["max_steps"])
        out.mkdir(parents=True, exist_ok=True)
        result = _fake_result(_score(overrides))
        (out / "result.json").write_text(json.dumps(result))
        return result

    monkeypatch.setattr(runner, "run_trial", fake_trial)
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(0.5))
    runs, results = tmp_path / "runs", tmp_path / "results"
    runner.run_experiment(TINY, "quick", runs, results, show_progress=False, log=lambda s: None)
    assert budgets == [2] * 12
    longer = dataclasses.replace(
        TINY, tuning_quick=dataclasses.replace(SEARCH, overrides={"max_steps": 5}))
    assert not runner.is_cached(results, "quick", longer)
    assert runner.tuning_dir(runs, "quick", longer, "LSTM") != runner.tuning_dir(
        runs, "quick", TINY, "LSTM")
    budgets.clear()
    data = runner.run_experiment(longer, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert budgets == [5] * 12
    assert all(arm["tuning"]["trial_overrides"] == {"max_steps": 5}
               for arm in data["arms"].values())
    assert runner.is_cached(results, "quick", longer)


def test_a_search_record_holds_only_for_its_own_search():
    from ctrlrnn.reproduce.tuning import record_holds

    record = {"sampler": "optuna TPE", "sampler_seed": 0, "startup_trials": 2,
              "train_seed": 0, "trials_planned": 4,
              "space": [{"key": "lr", "low": 1e-4, "high": 1e-1, "log": True},
                        {"key": "model.dropout", "low": 0.0, "high": 0.5, "log": False}],
              "trial_overrides": {"max_steps": 2}, "trials": [{}] * 4}
    assert Tuning.from_record(record) == SEARCH and record_holds(record, SEARCH)
    assert not record_holds({**record, "trials": [{}] * 3}, SEARCH)  # unfinished
    assert not record_holds(record, dataclasses.replace(SEARCH, trials=5))
    assert not record_holds(record, dataclasses.replace(SEARCH, seed=1))
    assert not record_holds(record, dataclasses.replace(
        SEARCH, params=(Param("lr", 1e-3, 1e-1, log=True), SEARCH.params[1])))
    assert not record_holds({**record, "space": "garbled"}, SEARCH)
    assert not record_holds(None, SEARCH)
    # fewer trials than start-up draws: the record stores the start-up actually used (all of
    # them random), and it is still this search's
    short = dataclasses.replace(SEARCH, trials=1, startup=3)
    assert record_holds({**record, "trials_planned": 1, "startup_trials": 1,
                         "trials": [{}]}, short)
    # the directory key ignores the trial count: a grown search keeps its finished trials
    assert dataclasses.replace(SEARCH, trials=9).key() == SEARCH.key()
    assert dataclasses.replace(SEARCH, overrides={"max_steps": 3}).key() != SEARCH.key()


def test_the_page_names_the_search_the_runs_ran_and_a_changed_definition(tmp_path,
                                                                         monkeypatch):
    from ctrlrnn.reproduce import pages

    monkeypatch.setattr(runner, "run_trial", lambda exp, arm, mode, runs_dir, show, number,
                        overrides, out: _fake_result(_score(overrides)))
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(0.5))
    data = runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "results",
                                 show_progress=False, log=lambda s: None)
    longer = dataclasses.replace(
        TINY, tuning_quick=dataclasses.replace(SEARCH, overrides={"max_steps": 5}))
    lines, judged = pages.experiment_section(TINY, data, tmp_path, "quick")
    assert not any("earlier search" in verdict for _, _, verdict in judged)
    lines, judged = pages.experiment_section(longer, data, tmp_path, "quick")
    page = "\n".join(lines)
    assert "each trial: max_steps=2. The final seeds" in page  # what the runs ran
    assert "now defines another search" in page and "max_steps=5" in page
    # the verdicts read seeds of the earlier search, in the summary too
    assert judged and all(verdict.endswith("(earlier search)") for _, _, verdict in judged)
    assert "(earlier search)" in page.split("| claim (paper) |")[1]

    def other_search(arm: str) -> dict:
        stored = data["arms"][arm]
        return {**data, "arms": {**data["arms"], arm: {**stored, "tuning": {
            **stored["tuning"], "trial_overrides": {"max_steps": 5}}}}}

    lines, judged = pages.experiment_section(TINY, other_search("GRU"), tmp_path, "quick")
    assert "**Unequal tuning**" in "\n".join(lines)
    # the claim (QRNN over LSTM) reads no GRU seed: unmarked; one arm of it from another
    # search: marked
    assert not any("earlier search" in verdict for _, _, verdict in judged)
    _, judged = pages.experiment_section(TINY, other_search("QRNN"), tmp_path, "quick")
    assert all(verdict.endswith("(earlier search)") for _, _, verdict in judged)


def test_a_search_cut_mid_way_resumes_from_the_results_file_alone(tmp_path, monkeypatch):
    """Each finished trial is in the results file at once (the arm's ``search_in_progress``,
    beside its earlier results): with the run directories gone, the search goes on from the
    next trial, to the trials an uninterrupted search makes, and trains none twice."""
    import shutil

    from ctrlrnn.reproduce import pages
    from ctrlrnn.reproduce.tuning import IN_PROGRESS

    def fake_trial(exp, arm, mode, runs_dir, show, number, overrides, out):
        trained.append((arm.label, number))
        if (arm.label, number) == cut_at:
            raise _Stop
        return _fake_result(_score(overrides))

    monkeypatch.setattr(runner, "run_trial", fake_trial)
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(0.5))
    whole_runs, whole_results = tmp_path / "whole-runs", tmp_path / "whole"
    trained: list[tuple[str, int]] = []
    cut_at = None
    whole = runner.run_experiment(TINY, "quick", whole_runs, whole_results,
                                  show_progress=False, log=lambda s: None)

    runs, results = tmp_path / "runs", tmp_path / "results"
    # an earlier, finished results file of another search: its rows stay until replaced
    earlier = dataclasses.replace(
        TINY, tuning_quick=dataclasses.replace(SEARCH, overrides={"max_steps": 3}))
    runner.run_experiment(earlier, "quick", runs, results, show_progress=False,
                          log=lambda s: None)
    before = runner.load_results(results, "quick", earlier)
    shutil.rmtree(runs)
    trained.clear()
    cut_at = ("QRNN", 2)
    with pytest.raises(_Stop):
        runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                              log=lambda s: None)
    saved = runner.load_results(results, "quick", TINY)
    assert saved is not None and not saved["complete"]
    qrnn = saved["arms"]["QRNN"]
    assert [r["trial"] for r in qrnn[IN_PROGRESS]["trials"]] == [0, 1]
    assert qrnn["seeds"] == before["arms"]["QRNN"]["seeds"]  # the earlier results stay
    assert qrnn["tuning"] == before["arms"]["QRNN"]["tuning"]
    lines, _ = pages.experiment_section(TINY, saved, tmp_path, "quick")
    assert "**Search under way**: QRNN, 2 of 4 trials finished" in "\n".join(lines)
    # the file's training time counts the trials of the search under way too
    held = sum(r["train_seconds"] for a in saved["arms"].values()
               for key in ("tuning", IN_PROGRESS) for r in (a.get(key) or {}).get("trials", []))
    held += sum(x["train_seconds"] for a in saved["arms"].values() for x in a["seeds"].values())
    assert pages.training_seconds(saved) == pytest.approx(held)
    assert len(qrnn[IN_PROGRESS]["trials"]) == 2 and held > pages.training_seconds(
        {**saved, "arms": {k: {kk: vv for kk, vv in a.items() if kk != IN_PROGRESS}
                           for k, a in saved["arms"].items()}})

    shutil.rmtree(runs)  # only the results file goes on
    trained.clear()
    cut_at = None
    data = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert data["complete"]
    assert trained == [("QRNN", 2), ("QRNN", 3)] + [("GRU", k) for k in range(4)]
    for label in ("LSTM", "QRNN", "GRU"):
        assert IN_PROGRESS not in data["arms"][label]
        got, want = data["arms"][label]["tuning"], whole["arms"][label]["tuning"]
        assert [r["params"] for r in got["trials"]] == [r["params"] for r in want["trials"]]
        assert got["chosen"] == want["chosen"]


def test_trials_in_the_results_file_stand_only_for_the_same_search_and_setting(tmp_path,
                                                                               monkeypatch):
    """A grown search (more trials) keeps the finished tuning's trials; another budget, or
    another setting (here a model size), trains every trial again."""
    from ctrlrnn.reproduce.cache_validity import Standing

    monkeypatch.setattr(runner, "run_trial", lambda exp, arm, mode, runs_dir, show, number,
                        overrides, out: _fake_result(_score(overrides)))
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(0.5))
    data = runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "results",
                                 show_progress=False, log=lambda s: None)
    record = data["arms"]["LSTM"]["tuning"]
    arm = TINY.arms[0]
    more = dataclasses.replace(TINY, tuning_quick=dataclasses.replace(SEARCH, trials=6))
    assert len(Standing(more, "quick", data).finished_trials(arm, record)) == 4
    assert Standing(TINY, "quick", data).finished_trials(arm, None, record) == record["trials"]
    longer = dataclasses.replace(
        TINY, tuning_quick=dataclasses.replace(SEARCH, overrides={"max_steps": 5}))
    assert Standing(longer, "quick", data).finished_trials(arm, record) == []
    wider = dataclasses.replace(TINY, arms=(Arm("LSTM", "lstm", {"hidden_size": 16}),
                                            *TINY.arms[1:]))
    assert Standing(wider, "quick", data).finished_trials(wider.arms[0], record) == []
    gap = {**record, "trials": [record["trials"][0], record["trials"][2]]}
    assert len(Standing(TINY, "quick", data).finished_trials(arm, gap)) == 1
