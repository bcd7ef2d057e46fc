"""Exact match at each target length: the sequence-to-sequence tasks' breakdown
(``Seq2SeqTask.exact_match_by_length``), ``ctrlrnn eval --by-length``, and the length probe
(``scripts/length_probe.py``) whose file a page renders."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from script_modules import script_module

from ctrlrnn.cli import main
from ctrlrnn.reproduce.experiments import EXPERIMENTS
from ctrlrnn.reproduce.probe_tables import BY_LENGTH, probe_lines
from ctrlrnn.tasks import task_class
from ctrlrnn.train.config import check_options

TINY = {"train_size": 64, "valid_size": 48, "test_size": 16, "embedding_size": 8,
        "max_depth": 4}


def _task(**opts):
    cls = task_class("tree-traversal")
    task = cls({**dict.fromkeys(cls.options), **{k: v[1] for k, v in cls.options.items()},
                **TINY, **opts}, 0)
    task.setup()
    return task


def _answer(target: list[int]) -> list[int]:
    """The oracle's output for ``target``: the target itself at an even length, the target
    reversed at lengths 1, 5, 9... (a reordering from 5 on), nothing at lengths 3, 7, 11..."""
    if len(target) % 2 == 0:
        return list(target)
    return list(reversed(target)) if len(target) % 4 == 1 else []


def _expected(length: int) -> tuple[bool, bool]:
    """(exact, wrong only in order) of the oracle's output at a target ``length``."""
    return length % 2 == 0 or length == 1, length % 4 == 1 and length > 1


def _oracle(task, split: str, model) -> None:
    """Make ``model`` decode :func:`_answer` of every example's target, by greedy decoding
    and by beam search."""
    answers = {tuple(src): tgt for src, tgt in task.encoded[split]}

    def decode(src, lengths, *args, max_len: int = 0, **kwargs):
        model.decoded_to.append(max_len or args[-1])
        return [_answer(answers[tuple(row[:n])])
                for row, n in zip(src.tolist(), lengths.tolist(), strict=True)]

    model.decoded_to = []  # the length limit of each call, to compare two decodings
    model.greedy = decode
    model.beam_search = decode


def _check_counts(counts, targets: list[int]) -> None:
    assert list(counts) == sorted(set(targets))
    for length, score in counts.items():
        exact, reordered = _expected(length)
        assert score.examples == targets.count(length)
        assert score.exact == (score.examples if exact else 0), length
        assert score.reordered == (score.examples if reordered else 0), length
    # each kind of outcome is there, so each check can fail
    assert {_expected(length) for length in targets} == {(True, False), (False, True),
                                                         (False, False)}


@pytest.mark.parametrize("beam", [1, 2])
def test_each_length_counts_its_examples_exact_matches_and_reorderings(beam):
    task = _task(beam=beam)
    model = task.build_model("lstm", {"hidden_size": 8})
    model.eval()
    _oracle(task, "valid", model)
    counts = task.exact_match_by_length(model, "valid")
    targets = [len(t) for _, t in task.encoded["valid"]]
    _check_counts(counts, targets)
    with torch.no_grad():
        overall = task.evaluate(model, "valid")["exact_match"]
    assert overall == sum(c.exact for c in counts.values()) / len(targets)


@pytest.mark.parametrize("name", ["translate-char", "translate-word"])
def test_a_translation_counts_what_its_evaluation_counts(name):
    """Translations are scored on their detokenised text, decoded to a length set by the
    source: the breakdown counts exactly the evaluation's exact matches."""
    pytest.importorskip("sacrebleu")
    words = ["el perro", "el gato", "ve el", "el gato chico come pan", "el gato come"]
    pairs = {split: [(w.replace("el", "the"), w) for w in words]
             for split in ("train", "valid", "test")}
    cls = task_class(name)
    opts = check_options("task", name, {"embedding_size": 8}, cls.options)
    task = cls(opts, seed=0, pairs=pairs)
    task.setup()
    model = task.build_model("lstm", {"hidden_size": 8})
    model.eval()
    _oracle(task, "valid", model)
    counts = task.exact_match_by_length(model, "valid")
    _check_counts(counts, [len(t) for _, t in task.encoded["valid"]])
    limits, model.decoded_to = model.decoded_to, []
    with torch.no_grad():
        overall = task.evaluate(model, "valid")["exact_match"]
    assert overall == sum(c.exact for c in counts.values()) / len(words)
    assert limits == model.decoded_to  # one batch each, decoded to the same length


def test_the_outputs_an_evaluation_stored_are_counted_without_decoding_again():
    task = _task()
    model = task.build_model("lstm", {"hidden_size": 8})
    model.eval()
    _oracle(task, "valid", model)
    outputs: dict[int, list[int]] = {}
    with torch.no_grad():
        overall = task.evaluate(model, "valid", outputs=outputs)["exact_match"]
    calls = len(model.decoded_to)
    counts = task.exact_match_by_length(model, "valid", outputs)
    assert len(model.decoded_to) == calls  # nothing decoded a second time
    _check_counts(counts, [len(t) for _, t in task.encoded["valid"]])
    assert overall == sum(c.exact for c in counts.values()) / len(outputs)
    assert counts == task.exact_match_by_length(model, "valid")  # the same, decoded here


def test_outputs_of_part_of_a_split_are_refused():
    task = _task(eval_batch_size=16)
    model = task.build_model("lstm", {"hidden_size": 8})
    model.eval()
    _oracle(task, "valid", model)
    outputs: dict[int, list[int]] = {}
    with torch.no_grad():
        task.evaluate(model, "valid", max_batches=1, outputs=outputs)
    assert 0 < len(outputs) < len(task.encoded["valid"])
    with pytest.raises(ValueError, match="outputs: expected one output for each of the 48"):
        task.exact_match_by_length(model, "valid", outputs)


def test_an_unknown_split_is_named():
    task = _task()
    with pytest.raises(ValueError, match="split: expected one of"):
        task.exact_match_by_length(task.build_model("lstm", {"hidden_size": 8}), "train2")


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("copy") / "run"
    assert main(["train", "--task", "copy", "--model", "lstm", "--max-steps", "6", "--out",
                 str(out), "--no-progress", "model.hidden_size=8", "task.train_size=64",
                 "task.valid_size=40", "task.test_size=24", "task.embedding_size=8",
                 "batch_size=16"]) == 0
    return out / "best.safetensors"


def test_eval_by_length_prints_a_row_a_length_and_json_rows(copy_run, capsys):
    assert main(["eval", "--checkpoint", str(copy_run), "--split", "valid", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["eval", "--checkpoint", str(copy_run), "--split", "valid", "--json",
                 "--by-length"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exact_match"] == plain["exact_match"]
    rows = data["by_length"]
    assert sum(r["examples"] for r in rows) == 40
    assert [r["length"] for r in rows] == sorted(r["length"] for r in rows)
    assert sum(r["examples"] * r["exact_match"] for r in rows) == pytest.approx(
        40 * data["exact_match"])
    assert all(0 <= r["reordered"] <= 1 - r["exact_match"] for r in rows)
    assert main(["eval", "--checkpoint", str(copy_run), "--by-length"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].split() == ["target", "length", "examples", "exact", "match", "(%)",
                                  "wrong", "only", "in", "order", "(%)"]
    assert sum(int(line.split()[1]) for line in printed[2:]) == 24  # the test split


def test_eval_by_length_decodes_the_split_once(copy_run, capsys, monkeypatch):
    from ctrlrnn.tasks.seq2seq_tasks import Seq2SeqTask

    decode, calls = Seq2SeqTask._decode, []

    def counted(self, *args, **kwargs):
        calls.append(1)
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(Seq2SeqTask, "_decode", counted)
    assert main(["eval", "--checkpoint", str(copy_run), "--split", "valid", "--json"]) == 0
    plain = len(calls)
    assert main(["eval", "--checkpoint", str(copy_run), "--split", "valid", "--json",
                 "--by-length"]) == 0
    capsys.readouterr()
    assert plain >= 1 and len(calls) == 2 * plain


def test_eval_by_length_refuses_a_task_that_decodes_nothing(tmp_path, capsys):
    out = tmp_path / "logic"
    assert main(["train", "--task", "logic", "--model", "lstm", "--max-steps", "2", "--out",
                 str(out), "--no-progress", "model.hidden_size=8", "task.train_size=64",
                 "task.valid_size=16", "task.test_per_count=4", "batch_size=16"]) == 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--by-length"]) == 2
    assert "--by-length: task 'logic' decodes no sequences" in capsys.readouterr().err


@pytest.fixture()
def length_probe():
    with script_module("length_probe") as module:
        yield module


def _probe(module, monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    module.main()


def test_the_length_probe_records_each_run_and_its_page_shows_them(
        length_probe, copy_run, tmp_path, monkeypatch):
    out = tmp_path / "probes" / "qrnn-copy-by-length.json"
    out.parent.mkdir()
    _probe(length_probe, monkeypatch, "qrnn-copy", f"first={copy_run}", "--json", str(out))
    _probe(length_probe, monkeypatch, "qrnn-copy", f"again={copy_run}", "--split", "valid",
           "--json", str(out))
    data = json.loads(out.read_text())
    assert data["kind"] == BY_LENGTH and data["written"].endswith("+00:00")
    first, again = data["runs"]["first"], data["runs"]["again"]
    assert (first["split"], again["split"]) == ("test", "valid")
    assert first["task"] == "copy" and 1 <= first["step"] <= 6 and first["seed"] == 0
    assert sum(r["examples"] for r in first["by_length"]) == 24
    assert all(isinstance(r["reordered"], int) for r in first["by_length"])
    exp = replace(next(e for e in EXPERIMENTS if e.id == "qrnn-copy"),
                  probe_files=(out.name,))
    text = "\n".join(probe_lines(exp, out.parent))
    steps = (first["step"], again["step"])
    assert f"| target length (test split) | examples | first (step {steps[0]}) |" in text
    assert f"| target length (valid split) | examples | again (step {steps[1]}) |" in text
    assert f"first={copy_run}" in text
    for run, size in ((first, 24), (again, 40)):
        assert f"| all | {size} | {100 * run['exact_match']:.1f} |" in text
    rows = len(first["by_length"]) + len(again["by_length"])
    assert text.count("\n| ") == 2 * 2 + rows  # a header and a total a split
    assert "Wrong outputs that hold exactly their target's tokens in another order: first " in text


def test_the_length_probe_refuses_what_it_cannot_score(length_probe, tmp_path, monkeypatch):
    other = tmp_path / "arm.json"
    other.write_text(json.dumps({"kind": "arm", "probes": {}}))
    with pytest.raises(SystemExit, match="runs: expected NAME=CHECKPOINT"):
        _probe(length_probe, monkeypatch, "qrnn-copy", "no-path")
    with pytest.raises(SystemExit, match="runs: "):
        _probe(length_probe, monkeypatch, "qrnn-copy", f"x={tmp_path / 'none.safetensors'}",
               "--json", str(tmp_path / "p.json"))
    with pytest.raises(SystemExit, match="arm: qrnn-copy has no arm 'Nope'"):
        _probe(length_probe, monkeypatch, "qrnn-copy", "x=y", "--arm", "Nope")
    with pytest.raises(SystemExit, match="not 'by-length'"):
        _probe(length_probe, monkeypatch, "qrnn-copy", "x=y", "--json", str(other))
