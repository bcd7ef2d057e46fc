"""The papers' own recipes (issue 70, items 3-4): ``ctrlrnn reproduce --scale paper``.

Every paper-scale experiment trains a few steps of each arm, architecture kept and sizes
shrunk, on tiny files in its data's real format (:mod:`paper_data`); each model the papers
print a parameter count for is built at full size and held to it within 2%; ``--list`` names
every table of the five papers; the paper scale's results go to a folder of their own."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import paper_data
import pytest
import torch

from ctrlrnn.reproduce import runner
from ctrlrnn.reproduce.experiment_spec import PAPER
from ctrlrnn.reproduce.experiments import EXPERIMENTS, paper_scale_experiments

pytestmark = pytest.mark.usefixtures("one_thread")

DEFINED = {e.id: e for e in paper_scale_experiments()}

#: per task: the options that shrink a run to a few tiny steps (the architecture untouched)
SHRINK: dict[str, dict[str, Any]] = {
    "ptb-lm": {"task.bptt": 6, "task.eval_batch_size": 2},
}
COMMON = {"model.hidden_size": 8, "batch_size": 4, "max_steps": 2, "epochs": 1,
          "eval_batches": 1, "eval_every": 0, "patience": 0}


def user_files(exp, root: Path) -> dict[str, str]:
    """``--data`` for every data set ``exp`` needs, written tiny in its real format."""
    return {n.name: str(paper_data.WRITERS[n.name](root / n.name))
            for n in exp.paper_scale.needs}


def _prepared(exp, root: Path) -> dict[str, Any]:
    """Tiny files for the data the paper scale reads from here (none the user supplies)."""
    given = {f"task.{n.option}" for n in exp.paper_scale.needs}
    task = exp.paper_scale.task or exp.task
    return {k: v for k, v in paper_data.prepared(task, root / "prepared").items()
            if k not in given}


def _steps(task, model, cfg) -> list[float]:
    """Two optimizer steps on the first training batches; their losses."""
    from ctrlrnn.train.optim import build_optimizer

    opt = build_optimizer(cfg.optimizer, model.parameters(), lr=min(cfg.lr, 1e-3),
                          weight_decay=cfg.weight_decay, momentum=cfg.momentum)
    losses = []
    model.train()
    for batch in list(task.train_batches(0, cfg.batch_size))[:2]:
        opt.zero_grad()
        loss = task.loss(model, task.to_device(batch))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("exp_id", sorted(DEFINED))
def test_every_paper_scale_arm_trains_a_few_steps_on_its_format(exp_id, tmp_path):
    base = DEFINED[exp_id]
    given = user_files(base, tmp_path / "data")
    exp = base.at_paper_scale(given)
    assert not exp.missing_data(given)
    shrink = {**COMMON, **SHRINK.get(exp.task, {}), **_prepared(base, tmp_path)}
    tasks: dict[str, Any] = {}
    for arm in exp.arms:
        cfg, cls = runner.config_for(exp, arm, 0, PAPER, tmp_path / "run", shrink)
        key = repr(sorted(cfg.task_args.items()))
        if key not in tasks:
            tasks[key] = cls(cfg.task_args, 0)
            tasks[key].setup()
        task = tasks[key]
        torch.manual_seed(0)
        model = task.build_model(cfg.model, cfg.model_args)
        losses = _steps(task, model, cfg)
        assert len(losses) >= 1 and all(math.isfinite(x) for x in losses), (arm.label, losses)
        model.eval()
        with torch.no_grad():
            metrics = task.evaluate(model, "test", max_batches=1)
        assert math.isfinite(metrics[exp.metric]), (arm.label, metrics)
        for metric in exp.also:
            assert metric in metrics, (arm.label, metric)


def _counted(model: torch.nn.Module, counted: str) -> int:
    params = [p for p in model.parameters() if counted == "all" or p.requires_grad]
    return sum(p.numel() for p in params)


#: per experiment: the options that give its tasks the paper's vocabulary (the counts the papers
#: print include embeddings and softmax layers of that size), written as tiny files
def _vocabulary(exp, root: Path) -> dict[str, Any]:
    if exp.task == "ptb-lm":  # PTB's 10,000 words, <eos> among them
        return {"task.source": str(paper_data.text_lines(root / "ptb10k", n=4, vocab=9_998))}
    return _prepared(exp, root)


COUNTED = sorted((e.id, label) for e in DEFINED.values()
                 for label in (e.paper_scale.parameters if e.paper_scale else {}))


@pytest.mark.parametrize(("exp_id", "label"), COUNTED)
def test_parameter_counts_match_the_papers(exp_id, label, tmp_path):
    """Each arm the paper prints a count for, built at the paper's size (not trained)."""
    base = DEFINED[exp_id]
    exp = base.at_paper_scale(user_files(base, tmp_path / "data"))
    arm = next(a for a in exp.arms if a.label == label)
    cfg, cls = runner.config_for(exp, arm, 0, PAPER, tmp_path / "run",
                                 _vocabulary(exp, tmp_path / "vocab"))
    task = cls(cfg.task_args, 0)
    task.setup()
    model = task.build_model(cfg.model, cfg.model_args)
    ours = _counted(model, base.paper_scale.counted)
    paper = base.paper_scale.parameters[label]
    assert abs(ours - paper) <= 0.02 * paper, (exp_id, label, ours, paper)


def test_ptb_lm_is_the_papers_recipe():
    """QRNN 3.2: 2 layers of 640, SGD at lr 1 for 6 epochs then x0.95 an epoch to 72, L2
    2e-4, gradient norm 10, batches of 20 x 105."""
    exp = DEFINED["qrnn-ptb-lm"].at_paper_scale()
    for arm in exp.arms:
        cfg, _ = runner.config_for(exp, arm, 0, PAPER, Path("."))
        assert (cfg.optimizer, cfg.lr, cfg.momentum) == ("sgd", 1.0, 0.0)
        assert (cfg.lr_decay, cfg.lr_decay_start, cfg.epochs) == (0.95, 6, 72)
        assert (cfg.weight_decay, cfg.clip_norm) == (2e-4, 10.0)
        assert (cfg.batch_size, cfg.task_args["bptt"]) == (20, 105)
        assert cfg.model_args["num_layers"] == 2
        assert cfg.model_args["hidden_size"] == (650 if arm.label == "LSTM" else 640)
    ours = runner.config_for(EXPERIMENTS[0], EXPERIMENTS[0].arms[1], 0, "full", Path("."))[0]
    assert ours.model_args["hidden_size"] == 256  # our machine scale stays the default


def _args(**kw: Any) -> argparse.Namespace:
    base = dict(quick=False, only=None, rerun=None, runs="runs/reproduce",
                results="docs/results/data", docs=None, pages_only=False, no_speed=True,
                no_progress=True, estimate=None, jobs=1, threads=None, pages="all",
                scale=None, list=False, data=None, storage=None)
    return argparse.Namespace(**{**base, **kw})


def test_list_names_every_table_of_the_five_papers(capsys):
    from ctrlrnn.reproduce import cli
    from ctrlrnn.reproduce.paper_tables import TABLES

    assert cli.run(_args(list=True, scale=PAPER)) == 0
    shown = capsys.readouterr().out
    for page, tables in PRINTED.items():
        for table in tables:
            assert f"| {page} | {table} |" in shown, (page, table)
    known = {e.id for e in (*EXPERIMENTS, *DEFINED.values())}
    for table in TABLES:
        assert table.experiments or table.missing, table
        for exp_id in table.experiments:
            assert exp_id in DEFINED, (table.table, exp_id)  # every one at the paper's scale
            assert exp_id in known


#: the tables each paper prints (its appendix for the QRNN's copy and addition)
PRINTED = {
    "qrnn": ["table 1", "table 2", "table 3", "appendix"],
    "rcrn": [f"table {n}" for n in range(1, 11)],
    "cas-lstm": [f"table {n}" for n in range(1, 7)],
    "metagross": [f"table {n}" for n in range(1, 10)],
    "carnn": [f"table {n}" for n in range(1, 5)],
}


def test_paper_scale_refuses_before_training_without_its_data(tmp_path, capsys, monkeypatch):
    from ctrlrnn.reproduce import cli

    monkeypatch.setenv("CTRLRNN_DATA", str(tmp_path / "cache"))  # nothing registered
    needing = next(e for e in DEFINED.values() if e.paper_scale.needs)
    monkeypatch.setattr(runner, "run_experiment", lambda *a, **k: pytest.fail("trained"))
    code = cli.run(_args(scale=PAPER, only=[needing.id], results=str(tmp_path / "r"),
                         runs=str(tmp_path / "runs")))
    out = capsys.readouterr().out
    name = needing.paper_scale.needs[0].name
    assert code == 2 and f"register it once with `ctrlrnn data add {name} PATH`" in out
    assert cli.run(_args(scale=PAPER, data=["nosuch=/x"])) == 2
    assert cli.run(_args(data=["imdb=/x"])) == 2  # --data belongs to the paper's scale


def test_paper_scale_results_and_pages_go_to_their_own_folders(tmp_path, monkeypatch):
    """The runner end to end at the paper's scale (PTB LM, shrunk): results in
    ``RESULTS/paper``, runs in ``RUNS/paper``, pages in the docs folder given."""
    import dataclasses

    from ctrlrnn.reproduce import cli, experiments

    base = DEFINED["qrnn-ptb-lm"]
    tiny = dataclasses.replace(
        base, arms=base.arms[1:2],
        paper_scale=dataclasses.replace(base.paper_scale, overrides={
            **base.paper_scale.overrides, **COMMON, **SHRINK["ptb-lm"],
            **paper_data.prepared("ptb-lm", tmp_path / "prepared")}))
    monkeypatch.setattr(experiments, "paper_scale_experiments", lambda: (tiny,))
    results, runs, docs = tmp_path / "results", tmp_path / "runs", tmp_path / "docs"
    code = cli.run(_args(scale=PAPER, only=["qrnn-ptb-lm"], results=str(results),
                         runs=str(runs), docs=str(docs)))
    assert code == 0
    assert (results / PAPER / "qrnn-ptb-lm.json").is_file()
    assert not (results / "full").exists() and (runs / PAPER / "qrnn-ptb-lm").is_dir()
    page = (docs / "qrnn.md").read_text(encoding="utf-8")
    assert "Mode: **paper**" in page and "ctrlrnn reproduce --scale paper" in (
        docs / "README.md").read_text(encoding="utf-8")


def test_each_paper_scale_is_the_recipe_its_paper_states():
    """Where an experiment's "paper vs here" table states the paper's value in our terms
    (width, layers, optimiser, batch, epochs), its paper scale trains that value."""
    from ctrlrnn.reproduce import paper_vs_here

    checked = 0
    for exp in EXPERIMENTS:
        ps = exp.paper_setting
        if exp.paper_scale is None or ps is None:
            continue
        scaled = exp.at_paper_scale()
        cfgs = paper_vs_here.configs(scaled, PAPER)
        first = next(iter(cfgs.values()))
        if isinstance(ps.width, int):
            assert ps.width in {c.model_args["hidden_size"] for c in cfgs.values()}, exp.id
            checked += 1
        if isinstance(ps.depth, dict):
            for label, n in ps.depth.items():
                assert cfgs[label].model_args.get("num_layers", 1) == n, (exp.id, label)
        elif isinstance(ps.depth, int):
            unit = next(a.label for a in scaled.arms if a.model != "lstm" or len(cfgs) == 1)
            assert cfgs[unit].model_args.get("num_layers", 1) == ps.depth, exp.id
        if ps.optimizer:
            assert first.optimizer == ps.optimizer, exp.id
        if ps.batch is not None:
            assert paper_vs_here._batch_here(first) == str(ps.batch), exp.id
        if ps.epochs and not ps.early_stopping:
            assert first.epochs == ps.epochs, exp.id
    assert checked >= 6


_TORCHRUN_SCRIPT = """
import dataclasses, sys
sys.path.insert(0, {tests!r})
import paper_data
from pathlib import Path
from ctrlrnn.reproduce import cli, experiments
from ctrlrnn.reproduce.experiments import paper_scale_experiments

base = next(e for e in paper_scale_experiments() if e.id == "qrnn-ptb-lm")
tiny = dataclasses.replace(base, arms=base.arms[1:], paper_scale=dataclasses.replace(
    base.paper_scale, overrides={{**base.paper_scale.overrides, **{common!r}, "task.bptt": 6,
    "task.eval_batch_size": 2, **paper_data.prepared("ptb-lm", Path({root!r}))}}))
experiments.paper_scale_experiments = lambda: (tiny,)
parser = __import__("argparse").ArgumentParser()
sub = parser.add_subparsers()
cli.register(sub)
args = parser.parse_args(["reproduce", "--scale", "paper", "--only", "qrnn-ptb-lm",
                          "--results", {results!r}, "--runs", {runs!r}, "--docs", {docs!r},
                          "--no-progress"])
sys.exit(cli.run(args))
"""


def test_paper_scale_trains_under_torchrun_with_rank_0_keeping_the_books(tmp_path):
    """Two CPU processes under torchrun (gloo): both train each run together, rank 0 alone
    writes the results file and the pages; the runs' numbers are one run's."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    results, runs, docs = tmp_path / "results", tmp_path / "runs", tmp_path / "docs"
    script.write_text(_TORCHRUN_SCRIPT.format(
        tests=str(Path(__file__).parent), common={**COMMON, "batch_size": 4},
        root=str(tmp_path / "data"), results=str(results), runs=str(runs), docs=str(docs)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CTRLRNN_DEVICE": "cpu"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "2", str(script)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[:6000]
    saved = json.loads((results / PAPER / "qrnn-ptb-lm.json").read_text())
    assert saved["complete"] and set(saved["arms"]) == {"QRNN", "QRNN + zoneout 0.1"}
    for arm in saved["arms"].values():
        assert arm["seeds"]["0"]["steps"] == 2
    assert (docs / "qrnn.md").is_file()


def test_torchrun_refuses_what_it_cannot_share(monkeypatch, capsys):
    from ctrlrnn.reproduce import cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert cli.run(_args(only=["qrnn-copy"], jobs=2)) == 2
    assert "drop --jobs" in capsys.readouterr().out
    assert cli.run(_args(only=["qrnn-copy"])) == 2  # our scale searches: rank 0 alone can
    assert "without a search" in capsys.readouterr().out
    assert cli.run(_args(scale=PAPER, only=["qrnn-copy"], storage="sqlite:///x.db")) == 2


def test_files_registered_with_data_add_reach_the_paper_scale(tmp_path, capsys, monkeypatch):
    """``ctrlrnn data add NAME PATH`` once; ``reproduce --scale paper`` then trains with that
    path in the task option, and a ``--data`` on the command line wins over it."""
    from ctrlrnn.data import cli as data_cli
    from ctrlrnn.reproduce import cli, experiments

    monkeypatch.setenv("CTRLRNN_DATA", str(tmp_path / "cache"))
    needing = next(e for e in DEFINED.values() if len(e.paper_scale.needs) == 1)
    need = needing.paper_scale.needs[0]
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    parser = argparse.ArgumentParser(prog="ctrlrnn")
    data_cli.register(parser.add_subparsers(dest="command"))
    add = parser.parse_args(["data", "add", need.name, str(mine)])
    assert add.func(add) == 0
    given: list[dict[str, str]] = []
    monkeypatch.setattr(experiments, "at_scale", lambda scale, data=None: (
        given.append(dict(data or {})), (needing.at_paper_scale(data),))[1])
    monkeypatch.setattr(runner, "run_experiment", lambda *a, **k: pytest.fail("trained"))
    run = {"scale": PAPER, "only": [needing.id], "estimate": 0}  # refused before any training
    cli.run(_args(**run))
    assert given[-1][need.name] == str(mine.resolve())
    exp = needing.at_paper_scale(given[-1])
    assert exp.task_args[need.option] == need.value(str(mine.resolve()))
    assert not exp.missing_data(given[-1])
    cli.run(_args(**run, data=[f"{need.name}={other}"]))
    assert given[-1][need.name] == str(other)
    assert data_cli.cmd_remove(argparse.Namespace(name=need.name, cache_dir=None)) == 0
    cli.run(_args(**run))
    assert need.name not in given[-1]


def test_a_paper_scale_reports_the_metrics_its_data_give():
    ours = DEFINED["carnn-dialog"]
    paper = ours.at_paper_scale()
    assert "proposal_accuracy" in ours.also and paper.also == ("dialog_accuracy",)
    assert any(c.metric == "proposal_accuracy" for c in ours.claims)
    assert paper.claims and all(not c.metric or c.metric in paper.also for c in paper.claims)
    # a scale that names no metrics of its own keeps the experiment's, claims included
    kept = DEFINED["metagross-logic"]
    assert kept.at_paper_scale().also == kept.also
    assert {c.metric for c in kept.at_paper_scale().claims} == {c.metric for c in kept.claims}
