"""Arms trained at another arm's chosen values (``Arm.tuned_like``): an ablation as a paper runs
it, the baseline's best configuration with one component changed. Such an arm has no search;
its seeds train at the lender's choice, stand only while that choice does, and wait while the
lender has none; ``--jobs``, ``--status`` and the pages treat it alike."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tiny_runs import numbers

from ctrlrnn.reproduce import parallel, runner
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment, PaperScale
from ctrlrnn.reproduce.page_section import experiment_section
from ctrlrnn.reproduce.status import status_lines
from ctrlrnn.reproduce.tuning import Param, Tuning

SEARCH = Tuning(trials=2, params=(Param("lr", 1e-3, 1e-2, log=True),), overrides={"max_steps": 2},
                startup=2, arm_streams=True)


def _experiment(*arms: Arm, exp_id: str = "tiny-borrowed") -> Experiment:
    return Experiment(
        id=exp_id, paper="qrnn", title="tiny copy, an ablation", task="copy",
        metric="token_accuracy", higher_is_better=True, arms=arms,
        claims=(Claim("Base", "Variant", "nowhere"),),
        quick={"max_steps": 3, "epochs": 1, "batch_size": 16, "task.train_size": 64,
               "task.valid_size": 16, "task.test_size": 16},
        full={}, task_args={"digits": 3}, seeds_quick=2, tuning_quick=SEARCH)


TINY = _experiment(Arm("Base", "qrnn", {"hidden_size": 8}),
                   Arm("Variant", "qrnn", {"hidden_size": 8, "window": 2}, tuned_like="Base"))
QUIET = lambda line: None  # noqa: E731


def test_a_variant_trains_at_its_lenders_choice_and_jobs_give_the_samenumbers(
        tmp_path, one_torch_thread):
    data = runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "res",
                                 show_progress=False, log=QUIET)
    assert data["complete"]
    base, variant = data["arms"]["Base"], data["arms"]["Variant"]
    chosen = base["tuning"]["chosen"]
    assert len(base["tuning"]["trials"]) == 2
    assert variant["tuning"] == {"values_of": "Base", "chosen": chosen}
    assert [s["params"] for s in variant["seeds"].values()] == [chosen, chosen]
    assert not runner.tuning_dir(tmp_path / "runs", "quick", TINY, "Variant").exists()
    assert runner.is_cached(tmp_path / "res", "quick", TINY)
    # two jobs: the lender's search alone, then the four seeds side by side, the same numbers
    lines: list[str] = []
    parallel.prefetch(TINY, "quick", tmp_path / "runs2", tmp_path / "res2", jobs=2, threads=1,
                      log=lines.append)
    assert any("1 searches" in ln for ln in lines) and any("4 runs" in ln for ln in lines)
    two = runner.run_experiment(TINY, "quick", tmp_path / "runs2", tmp_path / "res2",
                                show_progress=False, log=QUIET)
    assert numbers(two["arms"]) == numbers(data["arms"])


def _fake_training(monkeypatch, *, fail_search: bool = False) -> list[dict]:
    """Trials and seeds that finish at once; the seeds' params are returned as trained."""
    seeds: list[dict] = []

    def trial(exp, arm, mode, runs_dir, show_progress, number, overrides, out):
        if fail_search:
            raise RuntimeError("the trial's data could not be read")
        out.mkdir(parents=True, exist_ok=True)
        value = 1.0 - abs(overrides["lr"] - 5e-3)
        return {"valid": {"token_accuracy": value}, "test": {"token_accuracy": value},
                "step": 2, "best_step": 2, "stop_reason": "max_steps", "train_seconds": 30.0}

    def seed(exp, arm, seed, mode, runs_dir, show_progress, params=None):
        seeds.append({"arm": arm.label, "params": params})
        return {"valid": {"token_accuracy": 0.5}, "test": {"token_accuracy": 0.5}, "step": 3,
                "best_step": 3, "stop_reason": "max_steps", "train_seconds": 90.0,
                "epochs_completed": 1, "parameters": 1}

    monkeypatch.setattr(runner, "run_trial", trial)
    monkeypatch.setattr(runner, "run_one", seed)
    return seeds


def test_a_variant_waits_while_its_lender_has_no_search(tmp_path, monkeypatch):
    trained = _fake_training(monkeypatch, fail_search=True)
    data = runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "res",
                                 show_progress=False, log=QUIET)
    assert not data["complete"] and trained == []  # never at the default values
    assert "Base has no finished search" in data["errors"]["Variant/tuning"]
    assert "Base/tuning" in data["errors"]


def test_the_variants_seeds_stand_only_while_the_lenders_choice_does(tmp_path, monkeypatch):
    trained = _fake_training(monkeypatch)
    runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "res",
                          show_progress=False, log=QUIET)
    path = runner.results_path(tmp_path / "res", "quick", TINY)
    data = json.loads(path.read_text())
    chosen = data["arms"]["Base"]["tuning"]["chosen"]
    assert [t["params"] for t in trained if t["arm"] == "Variant"] == [chosen, chosen]
    standing = Standing(TINY, "quick", data)
    variant = TINY.arms[1]
    assert standing.values(variant, data["arms"]) == {"values_of": "Base", "chosen": chosen}
    assert all(standing.seed(variant, s, chosen) for s in data["arms"]["Variant"]["seeds"].values())
    # the lender's search no longer standing (its trials cut short): the variant has no values
    data["arms"]["Base"]["tuning"]["trials"] = data["arms"]["Base"]["tuning"]["trials"][:1]
    path.write_text(json.dumps(data))
    assert standing.values(variant, data["arms"]) is None
    assert not runner.is_cached(tmp_path / "res", "quick", TINY)


def test_status_and_page_name_the_lender(tmp_path, monkeypatch):
    _fake_training(monkeypatch)
    data = runner.run_experiment(TINY, "quick", tmp_path / "runs", tmp_path / "res",
                                 show_progress=False, log=QUIET)
    lines = status_lines([TINY], "quick", tmp_path / "res", tmp_path / "runs")
    assert any("Variant  no search, at Base's chosen values; seeds 2 of 2" in ln for ln in lines)
    assert any("Base     search finished; seeds 2 of 2" in ln for ln in lines)
    page = "\n".join(experiment_section(TINY, data, tmp_path, "quick")[0])
    assert "Without a search of its own, Variant trains at Base's chosen values" in page
    lr = data["arms"]["Base"]["tuning"]["chosen"]["lr"]
    assert f"lr {lr:.3g} (Base's)" in page and f"lr {lr:.3g} (2)" in page
    assert "earlier search" not in page
    # a search the variant had begun before it borrowed its values is not shown under way
    entry = {**data["arms"]["Variant"], "search_in_progress": {"trials": [{}], "trials_planned": 2}}
    begun = {**data, "complete": False, "arms": {**data["arms"], "Variant": entry}}
    assert "Search under way" not in "\n".join(experiment_section(TINY, begun, tmp_path,
                                                                   "quick")[0])


@pytest.mark.parametrize(("arms", "named"), [
    ((Arm("Base", "qrnn"), Arm("Variant", "qrnn", tuned_like="Other")), "'Other'"),
    ((Arm("Variant", "qrnn", tuned_like="Base"), Arm("Base", "qrnn")), "'Base'"),
    ((Arm("Base", "qrnn"), Arm("A", "qrnn", tuned_like="Base"),
      Arm("B", "qrnn", tuned_like="A")), "'A'"),
])
def test_tuned_like_names_an_earlier_arm_with_a_search(arms, named):
    with pytest.raises(ValueError, match=f"tuned_like must name an earlier arm with a search "
                                         f"of its own, got {named}"):
        _experiment(*arms)


def test_a_paper_scale_without_the_lender_searches_the_variant():
    scale = PaperScale(overrides={}, source="nowhere", only=("Variant",), tuning=SEARCH)
    exp = dataclasses.replace(TINY, paper_scale=scale)
    (variant,) = exp.at_paper_scale().arms
    assert variant.label == "Variant" and variant.tuned_like == ""
    assert exp.at_paper_scale().values_from(variant, "paper") is None


def test_every_borrowing_arm_is_its_lenders_model_with_a_component_changed():
    from ctrlrnn.reproduce.experiments import by_id

    borrowing = {}
    for exp in by_id().values():
        arms = {a.label: a for a in exp.arms}
        for arm in exp.arms:
            if arm.tuned_like:
                lender = arms[arm.tuned_like]
                assert arm.model == lender.model, (exp.id, arm.label)
                assert (arm.model_args, arm.task_args) != (lender.model_args, lender.task_args)
                borrowing.setdefault(exp.id, []).append(arm.label)
    assert borrowing == {"qrnn-ptb-lm": ["QRNN + zoneout 0.1"],
                         "cas-ablations": ["lambda 0.25", "lambda 0.75", "trainable lambda",
                                           "no lambda", "peepholes"]}
