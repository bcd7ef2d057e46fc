"""A results file's seeds and tunings stand only for the setting they were trained in: another
model or data size trains them again (ctrlrnn.reproduce.cache_validity and the runner)."""

from __future__ import annotations

import dataclasses
import json

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.cache_validity import Standing, setting
from ctrlrnn.reproduce.experiments import Arm, Claim, Experiment
from ctrlrnn.reproduce.tuning import IN_PROGRESS, Param, Tuning

SEARCH = Tuning(trials=3, params=(Param("lr", 1e-4, 1e-1, log=True),),
                overrides={"max_steps": 2}, startup=2)

TINY = Experiment(
    id="tiny-held", paper="qrnn", title="tiny", task="copy", metric="token_accuracy",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"epochs": 5, "patience": 2, "batch_size": 16, "task.train_size": 64},
    full={}, task_args={"digits": 3}, seeds_quick=2, tuning_quick=SEARCH,
)


def _result(valid: float, reason: str) -> dict:
    return {"test": {"token_accuracy": valid}, "valid": {"token_accuracy": valid}, "step": 2,
            "best_step": 2, "stop_reason": reason, "train_seconds": 0.1,
            "epochs_completed": 1, "parameters": 1}


class Recorder:
    """Fake trials and seeds: what trained, and where."""

    def __init__(self, monkeypatch):
        self.trials: list[tuple[str, str]] = []
        self.seeds: list[tuple[str, int]] = []
        monkeypatch.setattr(runner, "run_trial", self.trial)
        monkeypatch.setattr(runner, "run_one", self.seed)

    def trial(self, exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        self.trials.append((arm.label, out.parent.name))
        out.mkdir(parents=True, exist_ok=True)
        result = _result(1.0 - abs(overrides["lr"] - 1e-2), "max_steps")
        (out / "result.json").write_text(json.dumps(result))
        return result

    def seed(self, exp, arm, seed, mode, runs_dir, show_progress, params=None):
        self.seeds.append((arm.label, seed))
        return _result(0.5, "patience")

    def run(self, exp, tmp_path):
        self.trials.clear()
        self.seeds.clear()
        return runner.run_experiment(exp, "quick", tmp_path / "runs", tmp_path / "results",
                                     show_progress=False, log=lambda s: None)


def _results(tmp_path) -> tuple:
    path = tmp_path / "results" / "quick" / "tiny-held.json"
    return path, json.loads(path.read_text())


def _legacy_results(fake: Recorder, tmp_path) -> tuple:
    """TINY trained, its results file then rewritten as one from before entries recorded
    their setting and trial budget."""
    fake.run(TINY, tmp_path)
    path, data = _results(tmp_path)
    for arm in data["arms"].values():
        del arm["tuning"]["setting"], arm["tuning"]["budget"]
        for seed in arm["seeds"].values():
            del seed["setting"]
    path.write_text(json.dumps(data))
    return path, data


def test_entries_record_the_setting_and_the_trial_budget(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    data = fake.run(TINY, tmp_path)
    arm = data["arms"]["LSTM"]
    want = setting(TINY.quick, TINY.task_args, dataclasses.asdict(TINY.arms[0]))
    assert want["overrides"] == {"batch_size": 16, "task.train_size": 64}  # no stopping keys
    assert want["model_args"] == {"hidden_size": 8} and want["task_args"] == {"digits": 3}
    assert arm["tuning"]["setting"] == want and all(
        s["setting"] == want for s in arm["seeds"].values())
    assert arm["tuning"]["budget"] == {"epochs": 5, "max_steps": 2, "patience": 2,
                                       "eval_every": None}
    assert runner.is_cached(tmp_path / "results", "quick", TINY)


def test_another_size_tunes_and_trains_again_in_fresh_directories(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    fake.run(TINY, tmp_path)
    first_dirs = {d for _, d in fake.trials}
    for bigger in (
            dataclasses.replace(TINY, quick={**TINY.quick, "task.train_size": 128}),
            dataclasses.replace(TINY, task_args={"digits": 4}),
            dataclasses.replace(TINY, arms=(Arm("LSTM", "lstm", {"hidden_size": 16}),
                                            TINY.arms[1]))):
        assert not runner.is_cached(tmp_path / "results", "quick", bigger)
        fake.run(dataclasses.replace(TINY), tmp_path)  # back to the stored setting: cached
        assert fake.trials == [] and fake.seeds == []
    bigger = dataclasses.replace(TINY, quick={**TINY.quick, "task.train_size": 128})
    fake.run(bigger, tmp_path)
    # every trial trained anew, in other directories (never read back from the first size's)
    assert len(fake.trials) == 6 and not {d for _, d in fake.trials} & first_dirs
    assert len(fake.seeds) == 4
    assert runner.is_cached(tmp_path / "results", "quick", bigger)


def test_an_arm_changed_alone_trains_alone(tmp_path, monkeypatch):
    fake = Recorder(monkeypatch)
    fake.run(TINY, tmp_path)
    wider = dataclasses.replace(TINY, arms=(TINY.arms[0], Arm("QRNN", "qrnn",
                                                               {"hidden_size": 16})))
    fake.run(wider, tmp_path)
    assert {label for label, _ in fake.trials} == {"QRNN"}
    assert fake.seeds == [("QRNN", 0), ("QRNN", 1)]


def test_entries_without_a_record_take_the_files_definition(tmp_path, monkeypatch):
    """Results written before entries recorded their setting and trial budget."""
    fake = Recorder(monkeypatch)
    path, data = _legacy_results(fake, tmp_path)
    assert runner.is_cached(tmp_path / "results", "quick", TINY)
    bigger = dataclasses.replace(TINY, quick={**TINY.quick, "batch_size": 32})
    assert not runner.is_cached(tmp_path / "results", "quick", bigger)
    # a file without a readable definition: nothing in it is known to stand
    data.pop("definition")
    path.write_text(json.dumps(data))
    standing = Standing(TINY, "quick", data)
    assert not standing.tuning(TINY.arms[0], data["arms"]["LSTM"]["tuning"])
    assert not standing.seed(TINY.arms[0], data["arms"]["LSTM"]["seeds"]["0"], None)


def test_a_tuning_stands_under_a_raised_cap_its_trials_never_reached(tmp_path, monkeypatch):
    """The trials stopped at their own max_steps: the mode's raised epoch cap changes none of
    them. A lowered one, or another patience rule, is another run for every trial."""
    fake = Recorder(monkeypatch)
    fake.run(TINY, tmp_path)
    _, data = _results(tmp_path)
    standing = Standing(dataclasses.replace(TINY, quick={**TINY.quick, "epochs": 50}),
                        "quick", data)
    assert standing.tuning(TINY.arms[0], data["arms"]["LSTM"]["tuning"])
    for other in ({"epochs": 1}, {"patience": 3}):
        changed = Standing(dataclasses.replace(TINY, quick={**TINY.quick, **other}),
                           "quick", data)
        assert not changed.tuning(TINY.arms[0], data["arms"]["LSTM"]["tuning"])
    # trials that stopped at the epoch cap have more to train under a raised one
    capped = json.loads(json.dumps(data["arms"]["LSTM"]["tuning"]))
    for row in capped["trials"]:
        row["stop_reason"] = "epochs"
    assert not standing.tuning(TINY.arms[0], capped)


def test_an_old_entry_kept_after_a_failure_keeps_its_own_setting(tmp_path, monkeypatch):
    """A legacy entry (no setting recorded) kept in a file written under a new definition,
    because its retraining failed, must not take the new definition's setting."""
    fake = Recorder(monkeypatch)
    path, data = _legacy_results(fake, tmp_path)
    bigger = dataclasses.replace(TINY, quick={**TINY.quick, "task.train_size": 128})

    def broken(train):
        def run(exp, arm, *args, **kwargs):
            if arm.label == "LSTM":
                raise RuntimeError("no data here")
            return train(exp, arm, *args, **kwargs)
        return run

    # the LSTM's retraining fails; the QRNN's is new, so the file is written again
    monkeypatch.setattr(runner, "run_trial", broken(fake.trial))
    monkeypatch.setattr(runner, "run_one", broken(fake.seed))
    failed = runner.run_experiment(bigger, "quick", tmp_path / "runs", tmp_path / "results",
                                   show_progress=False, log=lambda s: None)
    assert failed["errors"] and not failed["complete"]
    _, kept = _results(tmp_path)
    assert kept["definition"]["quick"]["task.train_size"] == 128
    old = kept["arms"]["LSTM"]
    assert old["tuning"]["setting"]["overrides"]["task.train_size"] == 64
    assert all(s["setting"]["overrides"]["task.train_size"] == 64
               for s in old["seeds"].values())
    standing = Standing(bigger, "quick", kept)
    assert not standing.tuning(bigger.arms[0], old["tuning"])
    assert not runner.is_cached(tmp_path / "results", "quick", bigger)


def test_seeds_that_stand_are_in_the_file_while_another_trains(tmp_path, monkeypatch):
    """A run that trains seed 1 again must not drop the standing seed 0 from the results file
    while it trains (killed then, the next run would train seed 0 again)."""
    fake = Recorder(monkeypatch)
    fake.run(TINY, tmp_path)
    path, data = _results(tmp_path)
    for arm in data["arms"].values():
        del arm["seeds"]["1"]
    path.write_text(json.dumps(data))
    on_disk: list[dict] = []

    def seed(exp, arm, seed, *args, **kwargs):
        on_disk.append(json.loads(path.read_text())["arms"][arm.label]["seeds"])
        return fake.seed(exp, arm, seed, *args, **kwargs)

    monkeypatch.setattr(runner, "run_one", seed)
    fake.run(TINY, tmp_path)
    assert [sorted(s) for s in on_disk] == [["0"], ["0"]]
    assert all(sorted(a["seeds"]) == ["0", "1"] for a in _results(tmp_path)[1]["arms"].values())


def test_a_page_marks_runs_of_an_earlier_setting(tmp_path, monkeypatch):
    """Stored runs whose setting the definition no longer has are shown as such, and the
    verdicts reading them say so, until they are trained again."""
    from ctrlrnn.reproduce.pages import experiment_section

    fake = Recorder(monkeypatch)
    data = fake.run(TINY, tmp_path)
    lines, judged = experiment_section(TINY, data, tmp_path, "quick")
    assert not any("earlier setting" in line for line in lines)
    wider = dataclasses.replace(TINY, arms=(TINY.arms[0],
                                            Arm("QRNN", "qrnn", {"hidden_size": 16})))
    lines, judged = experiment_section(wider, data, tmp_path, "quick")
    text = "\n".join(lines)
    assert "| QRNN (earlier setting) |" in text and "| LSTM |" in text
    assert "**Earlier setting.** Stored runs of QRNN" in text
    assert all("earlier setting" in verdict for _, _, verdict in judged)
    # an unfinished file counts only the runs in the setting now as done
    lines, _ = experiment_section(wider, {**data, "complete": False}, tmp_path, "quick")
    assert "**In progress**: 2 of the 4 final runs" in "\n".join(lines)


def test_character_translation_reruns_its_qrnn_arm_alone(tmp_path):
    """The results of translation-char-qrnn after its QRNN arm became the paper's encoder
    (section 3.3: widths 6 and 2, unmasked; eq 7 layer by layer): QRNN seeds and searches of the
    earlier setting (``model.num_layers=2`` alone, as the committed files stored them) train
    again, the LSTM arm's stand, in quick mode; in full mode the experiment also defines
    another search (successive halving), so the LSTM arm's earlier search trains again
    too (and stands once it has), its seeds' setting unchanged; nothing is lost from the file
    until then. Built from the
    committed files with the QRNN entries set to the earlier setting, whether or not they have
    been retrained since."""
    import copy
    from pathlib import Path

    from ctrlrnn.reproduce.experiments import by_id
    from ctrlrnn.reproduce.tuning import search_of

    exp = by_id()["translation-char-qrnn"]
    qrnn = next(a for a in exp.arms if a.label == "QRNN")
    assert qrnn.model_args == {"num_layers": 2, "window": [6, 2], "causal": False}
    cfg, _ = runner.config_for(exp, qrnn, 0, "full", tmp_path)  # a valid configuration
    assert cfg.model_args["window"] == [6, 2] and cfg.model_args["causal"] is False
    results = Path(__file__).resolve().parents[2] / "docs" / "results" / "data"
    for mode in ("full", "quick"):
        cached = copy.deepcopy(runner.load_results(results, mode, exp))
        earlier = cached["arms"]["QRNN"]
        for summary in earlier["seeds"].values():
            summary["setting"]["model_args"] = {"num_layers": 2}
        if "tuning" in earlier:
            earlier["tuning"]["setting"]["model_args"] = {"num_layers": 2}
        standing = Standing(exp, mode, cached)
        lstm = next(a for a in exp.arms if a.label == "LSTM")
        params = {"LSTM": None, "QRNN": None}
        for arm in (lstm, qrnn):
            entry = cached["arms"][arm.label]
            # the LSTM's search stands in quick mode, and in full mode once the search the
            # experiment defines now (successive halving) has replaced the earlier ones
            new_search = search_of(entry.get("tuning")) == exp.tuning(mode)
            stands = arm is lstm and (mode == "quick" or new_search)
            if exp.tuning(mode) is not None:
                assert standing.tuning(arm, entry["tuning"]) == stands
                params[arm.label] = dict(entry["tuning"]["chosen"])
            for summary in entry["seeds"].values():
                assert standing.seed(arm, summary, params[arm.label]) == (arm is lstm)
                assert standing.other_setting(arm, summary) == (arm is qrnn)
        runner.write_results(runner.results_path(tmp_path / "data", mode, exp), cached)
        # the committed file: complete, or partial with the new search under way beside the
        # earlier results (tuning.IN_PROGRESS), or done with some of its seeds yet to train at
        # its choice, or between the two (every seed stored, but some of an earlier setting,
        # before the first trial of the next search is); either way not the experiment as
        # defined now
        committed = runner.load_results(results, mode, exp)
        as_committed = Standing(exp, mode, committed)
        unfinished = []
        for arm in (lstm, qrnn):
            entry = committed["arms"][arm.label]
            if (IN_PROGRESS in entry or len(entry["seeds"]) < len(exp.seeds(mode))
                    or any(as_committed.other_setting(arm, s) for s in entry["seeds"].values())):
                unfinished.append(arm.label)
        assert committed["complete"] or unfinished
        assert not runner.is_cached(tmp_path / "data", mode, exp)
