"""The probes' tables on the results pages are rendered from the probe files: every file an
experiment names is there and of a known kind, the committed pages show what the files hold,
and a probe run again changes its page's numbers with it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.probe_tables import ARM, BY_LENGTH, DATA_SIZE, EQUAL_STEPS, probe_lines

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "docs" / "results" / "data" / "probes"
WITH_PROBES = [e for e in EXPERIMENTS if e.probe_files]
TREE = next(e for e in EXPERIMENTS if e.id == "metagross-tree")


@pytest.mark.parametrize("exp", WITH_PROBES, ids=lambda e: e.id)
def test_the_committed_page_shows_its_probe_files(exp):
    for name in exp.probe_files:
        kind = json.loads((PROBES / name).read_text(encoding="utf-8"))["kind"]
        assert kind in (ARM, BY_LENGTH, DATA_SIZE, EQUAL_STEPS), name
    lines = probe_lines(exp, PROBES)
    assert not any("is not in this folder" in line for line in lines)
    page = (ROOT / "docs" / "results" / f"{exp.paper}.md").read_text(encoding="utf-8")
    assert "\n".join(lines) in page, "regenerate the pages: ctrlrnn reproduce --pages-only"


def test_every_probe_file_is_shown_by_an_experiment():
    shown = {name for e in WITH_PROBES for name in e.probe_files}
    assert {p.name for p in PROBES.glob("*.json")} == shown


#: how a note names a probe: a lowercase name with a hyphen in backticks (`trees-30000`);
#: settings (`task.glove=cache`) and commands hold a dot, an equals sign or a space
PROBE_NAME = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")


def _probe_names(exp) -> set[str]:
    names: set[str] = set()
    for name in exp.probe_files:
        data = json.loads((PROBES / name).read_text(encoding="utf-8"))
        for key in ("probes", "runs"):
            if isinstance(data.get(key), dict):
                names |= set(data[key])
    return names


@pytest.mark.parametrize("exp", WITH_PROBES, ids=lambda e: e.id)
def test_every_probe_a_note_names_is_in_its_files(exp):
    """A note that cites a probe by name cites a row its page shows: a probe file written by
    a stale copy once dropped a row that a note still cited."""
    cited = set(PROBE_NAME.findall(exp.note or ""))
    assert cited <= _probe_names(exp), sorted(cited - _probe_names(exp))


def _arm_file(tmp_path: Path, test_exact_match: float) -> Path:
    path = tmp_path / "tree.json"
    run = {"seed": 0, "settings": {"lr": 0.00284, "patience": 15, "task.train_size": 30000},
           "stop_reason": "patience", "step": 4524, "best_step": 2185, "steps_per_epoch": 156,
           "valid": {"exact_match": 0.652}, "train_seconds": 894.0,
           "test": {"exact_match": test_exact_match, "perplexity": 1.176},
           "load_start": 4.1, "load_end": 5.04}
    path.write_text(json.dumps({
        "kind": ARM, "experiment": "metagross-tree", "cpu_model": "Some CPU", "cpus": 2,
        "written": "2026-12-05T10:50:50+00:00",
        "probes": {"longer": {"arm": "BiLSTM", "overrides": {"patience": 15}, "runs": [run]}}}))
    return path


def test_an_arm_probe_renders_a_row_a_seed_and_follows_its_file(tmp_path):
    exp = replace(TREE, probe_files=("tree.json",))
    _arm_file(tmp_path, 0.642)
    lines = probe_lines(exp, tmp_path)
    assert any("last written 2026-12-05 10:50 UTC on Some CPU, 2 CPUs" in line for line in lines)
    assert any("`scripts/arm_probe.py metagross-tree BiLSTM patience=15 --name longer --seeds 0`"
               in line for line in lines)
    header = next(line for line in lines if line.startswith("| seed |"))
    assert "validation exact_match (%)" in header and "test perplexity" in header
    row = next(line for line in lines if line.startswith("| 0 |"))
    # epochs from steps (step 2,185 falls in epoch 15 of 156 steps; 4,524 ends epoch 29),
    # percentages scaled
    assert row == ("| 0 | lr 0.00284, patience 15, train_size 30,000 | patience | 15 / 29 | "
                   "65.2 | 64.2 | 1.176 | 14.9 | 4.1-5.0 |")
    _arm_file(tmp_path, 0.95)  # the probe run again
    assert "| 65.2 | 95.0 | 1.176 |" in next(
        line for line in probe_lines(exp, tmp_path) if line.startswith("| 0 |"))


def test_an_equal_steps_probe_renders_its_runs_and_their_curves(tmp_path):
    def run(loss: float) -> dict:
        return {"changes": "as defined", "parameters": 584922,
                "overrides": {"lr": "0.0037", "model.dropout": "0.02"},
                "run": {"training_seconds": 500.0, "load_mean": 4.2,
                        "final_valid": {"loss": loss, "token_accuracy": 0.6024, "bleu": 0.84}},
                "curve": [{"step": 250, "loss": loss + 0.5}, {"step": 500, "loss": loss}]}

    (tmp_path / "steps.json").write_text(json.dumps({
        "kind": EQUAL_STEPS, "seed": 0, "steps": 500, "eval_every": 250,
        "evaluation": "BLEU of greedy translations", "machine": {"processor": "x86_64",
                                                                  "cpus": 2},
        "written": "2026-12-04T19:43:06+00:00", "runs": {"lstm": run(1.358), "qrnn": run(1.3)}}))
    exp = replace(TREE, probe_files=("steps.json",))
    lines = probe_lines(exp, tmp_path)
    assert "| lstm | as defined | 584,922 | 0.0037 | 0.02 | 1.358 | 60.2 | 0.84 | 8.33 | 4.2 |" \
        in lines
    assert "| run | 250 | 500 |" in lines and "| qrnn | 1.8 | 1.3 |" in lines


def test_an_equal_steps_probe_lists_its_unfinished_runs_apart(tmp_path):
    done = {"changes": "bidirectional encoder", "parameters": 1062106,
            "overrides": {"lr": "0.0037", "model.dropout": "0.02"},
            "run": {"training_seconds": 60.0, "final_valid": {"loss": 0.7, "bleu": 18.2}},
            "curve": [{"step": 250, "loss": 0.7}]}
    waiting = {"changes": "the QRNN arm", "parameters": None, "overrides": {},
               "run": {"unfinished": True}, "curve": []}
    (tmp_path / "steps.json").write_text(json.dumps({
        "kind": EQUAL_STEPS, "seed": 0, "steps": 250, "eval_every": 250,
        "runs": {"qrnn": waiting, "lstm-bidir": done}}))
    lines = probe_lines(replace(TREE, probe_files=("steps.json",)), tmp_path)
    assert not any(line.startswith("| qrnn |") for line in lines)
    assert any(line.startswith("| lstm-bidir | bidirectional encoder | 1,062,106 |")
               for line in lines)
    assert "Not finished yet: qrnn (the same command goes on with them)." in lines


def test_a_missing_file_is_said_and_an_unknown_kind_refused(tmp_path):
    exp = replace(TREE, probe_files=("gone.json",))
    assert any("`data/probes/gone.json` is not in this folder" in line
               for line in probe_lines(exp, tmp_path))
    (tmp_path / "odd.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError,
                       match=r"odd\.json: kind None is none of arm, by-length, data-size"):
        probe_lines(replace(TREE, probe_files=("odd.json",)), tmp_path)


def _scored(em: dict[int, tuple[int, float]]) -> dict:
    return {"split": "test", "checkpoint": "runs/x/best.safetensors",
            "exact_match": sum(n * e for n, e in em.values()) / sum(n for n, _ in em.values()),
            "by_length": [{"length": k, "examples": n, "exact_match": e}
                          for k, (n, e) in em.items()]}


def test_a_length_probe_says_each_cells_count_where_runs_scored_other_trees(tmp_path):
    runs = {"same-a": _scored({10: (4, 0.5), 11: (4, 0.25)}),
            "same-b": _scored({10: (4, 1.0), 11: (4, 0.0)})}
    path = tmp_path / "tree5-by-length.json"
    path.write_text(json.dumps({"kind": BY_LENGTH, "experiment": "metagross-tree5",
                                "written": "2026-12-06T11:18:00+00:00", "runs": runs}))
    exp = replace(TREE, probe_files=(path.name,))
    text = "\n".join(probe_lines(exp, tmp_path))
    assert "| target length (test split) | examples | same-a | same-b |" in text
    assert "| 10 | 4 | 50.0 | 100.0 |" in text and "| all | 8 | 37.5 | 50.0 |" in text
    assert "metagross-tree5's checkpoints" in text and "load column" not in text
    assert "in another order" not in text  # scored before the probe counted reorderings
    runs["same-a"]["by_length"][1]["reordered"] = 2
    runs["same-a"]["by_length"][0]["reordered"] = 1
    path.write_text(json.dumps({"kind": BY_LENGTH, "experiment": "metagross-tree5",
                                "runs": runs}))
    text = "\n".join(probe_lines(exp, tmp_path))
    assert "in another order: same-a 3 of 5." in text  # 2 + 3 of the 8 are wrong
    runs["other"] = _scored({10: (2, 0.5), 12: (6, 0.0)})
    path.write_text(json.dumps({"kind": BY_LENGTH, "experiment": "metagross-tree5",
                                "runs": runs}))
    text = "\n".join(probe_lines(exp, tmp_path))
    assert "| target length (test split) | same-a | same-b | other |" in text
    assert "| 10 | 50.0 of 4 | 100.0 of 4 | 50.0 of 2 |" in text
    assert "| 12 | – | – | 0.0 of 6 |" in text
    assert "| all | 37.5 of 8 | 50.0 of 8 | 12.5 of 8 |" in text
