"""ctrlrnn reproduce: verdicts, caching of finished runs, pages written from the results."""

from __future__ import annotations

import dataclasses
import json

from ctrlrnn.reproduce import pages, runner
from ctrlrnn.reproduce.experiments import EXPERIMENTS, Arm, Claim, Experiment


def test_every_experiment_is_well_formed():
    ids = [e.id for e in EXPERIMENTS]
    assert len(ids) == len(set(ids))
    for e in EXPERIMENTS:
        labels = {a.label for a in e.arms}
        assert e.paper in pages.PAGES
        for c in e.claims:
            assert c.better in labels and c.worse in labels, (e.id, c)


def test_every_arm_configuration_validates_at_its_tuning_values(tmp_path):
    """Each arm's run (and its trials: budget plus searched keys) is a valid configuration."""
    for e in EXPERIMENTS:
        for mode in ("quick", "full"):
            tuning = e.tuning(mode)
            extras = [None]
            if tuning is not None:
                extras += [{**tuning.overrides, **{p.key: p.low for p in tuning.params}},
                           {p.key: p.high for p in tuning.params}]
            for arm in e.arms:
                for extra in extras:
                    runner.config_for(e, arm, 0, mode, tmp_path, extra)


TINY = Experiment(
    id="tiny-copy", paper="qrnn", title="tiny copy", task="copy", metric="token_accuracy",
    higher_is_better=True,
    arms=(Arm("LSTM", "lstm", {"hidden_size": 8}), Arm("QRNN", "qrnn", {"hidden_size": 8})),
    claims=(Claim("QRNN", "LSTM", "nowhere"),),
    quick={"max_steps": 3, "epochs": 1, "batch_size": 16, "task.train_size": 64,
           "task.valid_size": 16, "task.test_size": 16},
    full={}, task_args={"digits": 3}, seeds_quick=2,
)


def test_run_cache_and_pages(tmp_path, monkeypatch):
    runs, results, docs = tmp_path / "runs", tmp_path / "results", tmp_path / "docs"
    data = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert data["complete"] and set(data["arms"]) == {"LSTM", "QRNN"}
    for arm in data["arms"].values():
        assert set(arm["seeds"]) == {"0", "1"}
        for seed in arm["seeds"].values():
            assert 0.0 <= seed["test"] <= 1.0 and seed["steps"] == 3
    saved = json.loads((results / "quick" / "tiny-copy.json").read_text())
    assert saved["arms"]["QRNN"]["seeds"]["1"]["test"] == data["arms"]["QRNN"]["seeds"]["1"]["test"]

    def no_training(*args, **kwargs):
        raise AssertionError("a cached experiment was trained again")

    monkeypatch.setattr(runner, "run_one", no_training)
    again = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                  log=lambda s: None)
    assert again == saved

    monkeypatch.setattr(pages, "EXPERIMENTS", (TINY,))
    written = pages.write_pages(results, docs, "quick")
    qrnn_page = (docs / "qrnn.md").read_text()
    assert "tiny copy" in qrnn_page and "QRNN beats LSTM" in qrnn_page
    # 3 steps, no patience: every run stopped at its cap, so no verdict is more than early
    assert any(f"**{v}**" in qrnn_page for v in ("early: same direction", "early: opposite"))
    assert (docs / "qrnn-tiny-copy-quick.png").exists()
    assert (docs / "README.md") in written
    assert "QRNN beats LSTM" in (docs / "README.md").read_text()


def test_interrupted_run_resumes(tmp_path):
    runs = tmp_path / "runs"
    arm = TINY.arms[1]
    first = runner.run_one(TINY, arm, 0, "quick", runs, show_progress=False)
    out = runs / "quick" / TINY.id / "qrnn-seed0"
    (out / "result.json").unlink()  # as if killed after the last checkpoint
    second = runner.run_one(TINY, arm, 0, "quick", runs, show_progress=False)
    assert second["test"] == first["test"] and second["step"] == first["step"]


def test_unavailable_task_is_reported(tmp_path):
    ghost = Experiment(id="ghost", paper="qrnn", title="ghost", task="no-such-task",
                       metric="accuracy", higher_is_better=True, arms=(Arm("A", "lstm"),),
                       claims=(), quick={}, full={})
    data = runner.run_experiment(ghost, "quick", tmp_path / "r", tmp_path / "s",
                                 log=lambda s: None)
    assert not data["complete"] and "not available" in data["errors"]["*"]


def test_also_metric_column_and_claims(tmp_path):
    exp = Experiment(
        id="two-metrics", paper="metagross", title="two metrics", task="sort",
        metric="exact_match", higher_is_better=True,
        arms=(Arm("A", "lstm", paper=50.0, paper_also={"perplexity": 1.5}),
              Arm("B", "metagross", paper=60.0, paper_also={"perplexity": 1.2})),
        claims=(Claim("B", "A", "t1"), Claim("B", "A", "t1", "perplexity"),
                Claim("A", "B", "t1", "perplexity")),
        quick={}, full={}, also=("perplexity",),
    )

    def seeds(em, ppl):
        return {str(i): {"test": e, "valid": e, "steps": 5, "train_seconds": 1.0,
                         "parameters": 10, "stop_reason": "patience",
                         "test_metrics": {"exact_match": e, "perplexity": p}}
                for i, (e, p) in enumerate(zip(em, ppl))}

    data = {"arms": {"A": {"paper": 50.0, "seeds": seeds([0.40, 0.42], [1.50, 1.52])},
                     "B": {"paper": 60.0, "seeds": seeds([0.30, 0.31], [1.10, 1.11])}}}
    lines, verdicts = pages.experiment_section(exp, data, tmp_path, "quick")
    text = "\n".join(lines)
    assert "test perplexity: ours (paper)" in text
    assert "| B | 60 | 30.5 ± 0.71 (2) | 1.105 ± 0.0071 (1.2) |" in text
    assert verdicts == [("B beats A", "t1", "opposite"),
                        ("B beats A (perplexity)", "t1", "reproduced"),  # lower is better
                        ("A beats B (perplexity)", "t1", "opposite")]


def test_added_arm_runs_alone(tmp_path, monkeypatch):
    runs, results = tmp_path / "runs", tmp_path / "results"
    first = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                  log=lambda s: None)
    import shutil

    shutil.rmtree(runs)  # the finished results must come from the results file alone
    trained = []

    def fake_run(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        trained.append((arm.label, seed))
        return {"test": {"token_accuracy": 0.5}, "valid": {"token_accuracy": 0.5}, "step": 3,
                "train_seconds": 1.0, "epochs_completed": 1, "parameters": 1}

    monkeypatch.setattr(runner, "run_one", fake_run)
    grown = dataclasses.replace(TINY, arms=(*TINY.arms, Arm("GRU", "gru", {"hidden_size": 8})))
    data = runner.run_experiment(grown, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert trained == [("GRU", 0), ("GRU", 1)]
    assert data["complete"] and data["arms"]["LSTM"] == first["arms"]["LSTM"]
    assert data["arms"]["GRU"]["seeds"]["1"]["test"] == 0.5
    assert data["seconds"] >= first["seconds"]
    trained.clear()
    runner.run_experiment(grown, "quick", runs, results, show_progress=False, log=lambda s: None)
    assert trained == []


def test_cli_writes_pages_only_when_something_was_trained(tmp_path, monkeypatch, capsys):
    from ctrlrnn import cli
    from ctrlrnn.reproduce import experiments

    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY,))
    monkeypatch.setattr(pages, "EXPERIMENTS", (TINY,))
    paths = ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"),
             "--docs", str(tmp_path / "docs"), "--quick", "--no-speed", "--no-progress"]
    assert cli.main(["reproduce", *paths]) == 0
    page = tmp_path / "docs" / "qrnn.md"
    first = page.read_text()
    assert "tiny copy" in first
    page.write_text("untouched")  # a second run must not rewrite it
    assert cli.main(["reproduce", *paths]) == 0
    assert "nothing trained, pages left as they are" in capsys.readouterr().out
    assert page.read_text() == "untouched"
    assert cli.main(["reproduce", *paths, "--pages-only"]) == 0
    assert page.read_text() == first  # rewritten from the results files, identically

    trained = []
    real_run_one = runner.run_one

    def counting(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        trained.append((arm.label, seed))
        return real_run_one(exp, arm, seed, mode, runs_dir, show_progress, params)

    monkeypatch.setattr(runner, "run_one", counting)
    assert cli.main(["reproduce", *paths, "--rerun", "tiny-copy"]) == 0
    assert sorted(trained) == [("LSTM", 0), ("LSTM", 1), ("QRNN", 0), ("QRNN", 1)]
    assert (tmp_path / "runs" / "quick" / "tiny-copy.previous").is_dir()
    assert "earlier runs moved to" in capsys.readouterr().out


def _fake_result(seconds: float) -> dict:
    return {"test": {"token_accuracy": 0.5}, "valid": {"token_accuracy": 0.5}, "step": 3,
            "train_seconds": seconds, "epochs_completed": 1, "parameters": 1,
            "stop_reason": "patience"}


def test_an_interrupted_experiment_keeps_its_time(tmp_path, monkeypatch):
    """Each finished run's partial file records the wall time so far, so an experiment killed
    and continued adds its parts up (they were lost: only the last invocation counted)."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    clock = iter(float(t) for t in range(0, 10_000, 100))  # each perf_counter call: +100 s
    monkeypatch.setattr(runner.time, "perf_counter", lambda: next(clock))
    calls = []

    def killed_after_two(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        calls.append((arm.label, seed))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _fake_result(7.0)

    monkeypatch.setattr(runner, "run_one", killed_after_two)
    try:
        runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                              log=lambda s: None)
    except KeyboardInterrupt:
        pass
    partial = json.loads((results / "quick" / "tiny-copy.json").read_text())
    assert not partial["complete"] and partial["seconds"] > 0
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(7.0))
    done = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert done["complete"]
    assert done["seconds"] > partial["seconds"]  # the first part is counted, not dropped


def test_a_superseded_results_file_adds_no_time(tmp_path, monkeypatch):
    """A finished file whose runs all train again (another definition) gives none of its wall
    time to the new results."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    path = results / "quick" / "tiny-copy.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"complete": True, "seconds": 1e6, "arms": {},
                                "definition": {"quick": {"epochs": 99}}}))
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: _fake_result(7.0))
    done = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert done["complete"] and done["seconds"] < 1e5


def test_training_time_sums_every_run_and_trial():
    data = {"seconds": 5.0, "arms": {
        "A": {"seeds": {"0": {"train_seconds": 60.0}, "1": {"train_seconds": 120.0}},
              "tuning": {"trials": [{"train_seconds": 30.0}, {"train_seconds": 30.0}]}},
        "B": {"seeds": {"0": {"train_seconds": 60.0}}}}}
    assert pages.training_seconds(data) == 300.0  # not the file's wall seconds
    assert pages._training_time_line(data) == [
        "", "Training time: 5.0 minutes on this machine (4.0 for the 3 final runs, 1.0 for the "
        "2 tuning trials; each run's own training clock, whatever else the machine ran)."]
    legacy = {"seconds": 90.0, "arms": {"A": {"seeds": {"0": {"test": 0.5}}}}}
    assert pages.training_seconds(legacy) == 90.0 and pages._training_time_line(legacy) == []


def test_runs_on_a_gpu_are_named_and_timed_as_such():
    gpu = "cuda:0 (NVIDIA H100 80GB HBM3)"
    # the launching thread's CPU share on a GPU is no sign of a shared machine
    seeds = [{"train_seconds": 12.0, "cpu_share": 0.05, "load_start": 0.1, "threads": 16,
              "device": gpu}]
    assert pages._seconds_cell(seeds) == "12"
    data = {"arms": {"A": {"seeds": {"0": seeds[0]}}}}
    assert pages._training_time_line(data)[1].startswith(f"Training time: 0.2 minutes on {gpu} (")
    data["arms"]["B"] = {"seeds": {"0": {"train_seconds": 12.0, "device": "cpu"}}}
    assert f"on this machine's CPU and {gpu} (" in pages._training_time_line(data)[1]
    cpu = [{"train_seconds": 12.0, "cpu_share": 0.05, "load_start": 0.1, "threads": 2,
            "device": "cpu"}]
    assert pages._seconds_cell(cpu) == "shared machine"


def test_a_run_result_names_its_device(tmp_path):
    result = runner.run_one(TINY, TINY.arms[0], 0, "quick", tmp_path / "runs",
                            show_progress=False)
    assert result["device"] == "cpu"
    assert runner._summarise(result, TINY, TINY.arms[0], "quick")["device"] == "cpu"


def _capped_result(*args, **kwargs):
    return {**_fake_result(7.0), "stop_reason": "cap"}


def test_a_failing_rerun_leaves_finished_results_alone(tmp_path, monkeypatch):
    """When every part fails (a missing dependency, say), the finished results file is left as
    it was and the failures are returned; it was overwritten by an errors-only file."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    monkeypatch.setattr(runner, "run_one", _capped_result)
    first = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                  log=lambda s: None)
    assert first["complete"]
    path = results / "quick" / "tiny-copy.json"
    before = path.read_bytes()

    def missing_dependency(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'music21'")

    monkeypatch.setattr(runner, "run_one", missing_dependency)
    raised = dataclasses.replace(TINY, quick={**TINY.quick, "max_steps": 30})  # seeds continue
    data = runner.run_experiment(raised, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    assert path.read_bytes() == before
    assert not data["complete"] and len(data["errors"]) == 4
    assert data["arms"] == first["arms"]


def test_a_failed_part_keeps_its_earlier_results(tmp_path, monkeypatch):
    """A failed seed keeps the summary it had at the same values; a failed tuning keeps the
    arm's earlier entry. The file records the failures and is marked incomplete."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    monkeypatch.setattr(runner, "run_one", _capped_result)
    first = runner.run_experiment(TINY, "quick", runs, results, show_progress=False,
                                  log=lambda s: None)

    def seed1_fails(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        if seed == 1:
            raise RuntimeError("out of memory")
        return {**_fake_result(9.0), "test": {"token_accuracy": 0.75}}

    real_tune = runner.tune

    def qrnn_tuning_fails(exp, arm, *args, **kwargs):
        if arm.label == "QRNN":
            raise RuntimeError("optuna is broken")
        return real_tune(exp, arm, *args, **kwargs)

    monkeypatch.setattr(runner, "run_one", seed1_fails)
    monkeypatch.setattr(runner, "tune", qrnn_tuning_fails)
    raised = dataclasses.replace(TINY, quick={**TINY.quick, "max_steps": 30})
    data = runner.run_experiment(raised, "quick", runs, results, show_progress=False,
                                 log=lambda s: None)
    stored = json.loads((results / "quick" / "tiny-copy.json").read_text())
    assert not stored["complete"]
    assert set(stored["errors"]) == {"LSTM/seed1", "QRNN/tuning"}
    assert stored["arms"]["LSTM"]["seeds"]["0"]["test"] == 0.75  # newly trained
    assert stored["arms"]["LSTM"]["seeds"]["1"] == first["arms"]["LSTM"]["seeds"]["1"]
    assert stored["arms"]["QRNN"] == first["arms"]["QRNN"]
    assert data["arms"] == stored["arms"]


def test_cli_exits_nonzero_and_names_the_failed_parts(tmp_path, monkeypatch, capsys):
    from ctrlrnn import cli
    from ctrlrnn.reproduce import experiments

    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY,))
    monkeypatch.setattr(pages, "EXPERIMENTS", (TINY,))

    def qrnn_fails(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        if arm.label == "QRNN":
            raise ModuleNotFoundError("No module named 'music21'")
        return _fake_result(1.0)

    monkeypatch.setattr(runner, "run_one", qrnn_fails)
    paths = ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"),
             "--docs", str(tmp_path / "docs"), "--quick", "--no-speed", "--no-progress"]
    assert cli.main(["reproduce", *paths]) == 1
    out = capsys.readouterr().out
    assert "FAILED tiny-copy QRNN/seed0: ModuleNotFoundError: No module named 'music21'" in out
    assert "1 experiment(s) had failures" in out
    assert (tmp_path / "docs" / "qrnn.md").is_file()  # the pages are still written


def test_a_page_states_the_evaluation_limit_its_runs_had(tmp_path):
    """The limit line reads the stored runs' definition, and the task's own default where the
    mode set none (the PTB LM evaluates 40 batches unless told otherwise)."""
    exp = Experiment(
        id="lm-limit", paper="qrnn", title="lm", task="ptb-lm", metric="perplexity",
        higher_is_better=False, arms=(Arm("LSTM", "lstm"), Arm("QRNN", "qrnn")),
        claims=(Claim("QRNN", "LSTM", "t"),), quick={}, full={"eval_batches": 0},
    )
    seeds = {"0": {"test": 100.0, "valid": 110.0}}
    data = {"arms": {"LSTM": {"seeds": seeds}, "QRNN": {"seeds": seeds}}}

    def limit_line(definition):
        lines, _ = pages.experiment_section(exp, {**data, "definition": definition},
                                            tmp_path, "full")
        return [line for line in lines if "evaluation batches" in line]

    assert limit_line({"full": {"epochs": 1}}) == [
        "In this mode every evaluation, the final test included, reads only the first 40 "
        "evaluation batches of its split."]
    assert limit_line({"full": {"eval_batches": 0}}) == []
    assert "first 7 evaluation" in limit_line({"full": {"eval_batches": 7}})[0]


def test_cli_checks_every_experiments_data_before_training(tmp_path, monkeypatch, capsys):
    """A data source that cannot be set up (a missing package, a fetch that fails) is reported
    for every experiment it stops, before any experiment trains; experiments already cached
    are not set up again."""
    from ctrlrnn import cli
    from ctrlrnn.data.errors import MissingSourceError
    from ctrlrnn.reproduce import experiments
    from ctrlrnn.tasks.seq2seq_tasks import CopyTask

    # the same task with other options stands for an experiment whose data source is missing
    broken = dataclasses.replace(TINY, id="tiny-verses", title="tiny verses",
                                 task_args={"digits": 4})
    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY, broken))
    monkeypatch.setattr(pages, "EXPERIMENTS", (TINY, broken))
    set_up = []

    def setup(self):
        set_up.append(dict(self.opts))
        if self.opts.get("digits") == 4:
            raise MissingSourceError("verses-en-es", "pip install pysword==0.2.8",
                                     "pysword is not installed")

    real_setup = CopyTask.setup

    def setup_or_fail(self):
        setup(self)
        real_setup(self)

    monkeypatch.setattr(CopyTask, "setup", setup_or_fail)
    trained = []
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: trained.append(a) or _fake_result(1))
    paths = ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "runs"),
             "--docs", str(tmp_path / "docs"), "--quick", "--no-speed", "--no-progress"]
    assert cli.main(["reproduce", *paths]) == 2
    out = capsys.readouterr().out
    assert ("tiny-verses: its data cannot be set up here: MissingSourceError: data source "
            "'verses-en-es': pysword is not installed. Install it with: pip install "
            "pysword==0.2.8") in out
    assert "nothing trained" in out and not trained
    assert "tiny-copy" not in out  # its data set up
    # without the broken one, everything trains; once cached, nothing is set up again
    monkeypatch.setattr(experiments, "EXPERIMENTS", (TINY,))
    monkeypatch.setattr(pages, "EXPERIMENTS", (TINY,))
    assert cli.main(["reproduce", *paths]) == 0 and trained
    set_up.clear()
    assert cli.main(["reproduce", *paths]) == 0
    assert set_up == []
