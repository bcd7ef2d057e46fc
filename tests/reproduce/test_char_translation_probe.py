"""scripts/char_translation_probe.py's budgets: ``--steps N`` hands the trainer its own
``--max-steps N`` and sets no clock (a run paused from outside is waited for, not stopped);
``--minutes`` stays the default budget; the two are refused together. A run killed mid-way
resumes; a results file of another budget is not overwritten. Nothing is trained here
(``--toy`` runs it end to end, by hand)."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import pytest
from script_modules import script_module


@pytest.fixture(scope="module")
def probe():
    with script_module("char_translation_probe") as module:
        yield module


def _args(probe, *argv: str) -> argparse.Namespace:
    args = probe._parser().parse_args(list(argv))
    args.runs = Path("runs")
    return args


def _max_steps(command: list[str]) -> str | None:
    return command[command.index("--max-steps") + 1] if "--max-steps" in command else None


def test_steps_is_the_trainers_max_steps(probe):
    args = _args(probe, "--steps", "1500")
    command = probe._train_command("lstm", args)
    assert _max_steps(command) == "1500"
    assert "--task" in command and command[command.index("--task") + 1] == "translate-char"
    assert "batch_size" not in " ".join(command)  # the task's own batch size (16)


def test_minutes_alone_sets_no_step_limit(probe):
    assert _max_steps(probe._train_command("qrnn", _args(probe, "--minutes", "5"))) is None
    assert _max_steps(probe._train_command(
        "qrnn", _args(probe, "--minutes", "5", "--max-steps", "40"))) == "40"


@pytest.mark.parametrize("argv", [["--steps", "10", "--minutes", "5"],
                                  ["--steps", "10", "--max-steps", "5"],
                                  ["--steps", "-1"], ["--minutes", "0"]])
def test_refused(probe, argv, tmp_path):
    with pytest.raises(SystemExit) as stop:
        probe.main([*argv, "--runs", str(tmp_path), "--json", str(tmp_path / "p.json")])
    assert stop.value.code not in (0, None)
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("budget", [["--steps", "1500"], ["--minutes", "1"]])
def test_steps_run_has_no_clock(probe, tmp_path, monkeypatch, budget):
    """Under --steps the probe never signals its run, however long it takes (a run stopped
    with SIGSTOP for an hour ends at its step like any other); under --minutes the same slow
    run gets SIGTERM."""
    clock = iter(range(0, 10**7, 10**5))  # 100,000 s between polls
    monkeypatch.setattr(probe.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(probe.time, "sleep", lambda s: None)
    monkeypatch.setattr(probe, "_final_eval", lambda run, device, env: None)
    signals: list[int] = []

    class Proc:
        pid, returncode, polls = 1, None, 0

        def __init__(self, *a, **k) -> None:
            pass

        def poll(self):
            Proc.polls += 1
            if Proc.polls == 2:
                (tmp_path / "lstm" / "log.jsonl").write_text("{}\n")
            if Proc.polls > 4:
                self.returncode = 0
            return self.returncode

        def send_signal(self, sig) -> None:
            signals.append(sig)

    monkeypatch.setattr(probe.subprocess, "Popen", Proc)
    args = _args(probe, *budget)
    args.runs = tmp_path
    probe._run_one("lstm", args, set)
    meta = json.loads((tmp_path / "lstm" / "probe.json").read_text())
    assert meta["exit"] == 0
    if args.steps:
        assert signals == [] and not meta["stopped_by_budget"]
        assert meta["steps"] == 1500 and meta["minutes"] is None
    else:
        assert signals == [signal.SIGTERM] and meta["stopped_by_budget"]


def test_variants_of_an_earlier_invocation_are_kept_under_the_same_budget(probe, tmp_path):
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({
        "steps": 1500, "eval_every": 250, "commit": "abc", "written": "then",
        "runs": {"lstm": {"run": {"exit": 0}}, "lstm-layers": {"run": {"unfinished": True}}},
    }))  # fmt: skip
    args = _args(probe, "--steps", "1500", "--json", str(path))
    previous = probe._previous(args)
    assert previous["lstm"]["commit"] == "abc" and previous["lstm"]["written"] == "then"
    merged = probe._merge(previous, {"lstm-layers": {"run": {"exit": 0}}}, "def", "now")
    assert list(merged) == [name for name in probe.RUNS if name in {"lstm", "lstm-layers"}]
    assert merged["lstm-layers"] == {"commit": "def", "written": "now", "run": {"exit": 0}}
    assert merged["lstm"]["commit"] == "abc"
    # another budget's runs are not comparable: nothing is kept
    assert probe._previous(_args(probe, "--steps", "1000", "--json", str(path))) == {}
    assert probe._previous(_args(probe, "--steps", "1500", "--eval-every", "100",
                                 "--json", str(path))) == {}  # fmt: skip
    assert probe._previous(_args(probe, "--minutes", "5", "--json", str(path))) == {}


class _Recorder:
    """A stand-in for the trainer's process: records its command and finishes at once."""

    commands: list[list[str]] = []

    def __init__(self, command, *a, **k) -> None:
        _Recorder.commands.append(list(command))
        self.pid, self.returncode = 1, 0

    def poll(self):
        return self.returncode


def _no_training(probe, monkeypatch, tmp_path):
    _Recorder.commands = []
    monkeypatch.setattr(probe.subprocess, "Popen", _Recorder)
    monkeypatch.setattr(probe.time, "sleep", lambda s: None)
    monkeypatch.setattr(probe, "_final_eval", lambda run, device, env: None)
    args = _args(probe, "--steps", "12500")
    args.runs = tmp_path
    return args


def test_a_run_stopped_mid_way_resumes_with_its_rows(probe, tmp_path, monkeypatch):
    """A checkpoint without probe.json (the probe killed mid-run) is resumed by the trainer
    (``--resume``); its log rows up to the checkpoint stay for the curve."""
    import ctrlrnn.train.checkpoint as checkpoint

    args = _no_training(probe, monkeypatch, tmp_path)
    run = tmp_path / "lstm-wide"
    run.mkdir()
    (run / "checkpoint.safetensors").write_bytes(b"stand-in")
    (run / "log.jsonl").write_text('{"split": "valid", "step": 5000}\n')
    monkeypatch.setattr(checkpoint, "stored_step", lambda path: 5000)
    probe._run_one("lstm-wide", args, set)
    assert _Recorder.commands[-1][-1] == "--resume"
    assert _max_steps(_Recorder.commands[-1]) == "12500"
    assert (run / "log.jsonl").read_text().startswith('{"split": "valid", "step": 5000}')
    meta = json.loads((run / "probe.json").read_text())
    assert meta["resumed_at_step"] == 5000 and meta["exit"] == 0


def test_a_fresh_run_starts_over_and_a_finished_one_is_skipped(probe, tmp_path, monkeypatch):
    args = _no_training(probe, monkeypatch, tmp_path)
    run = tmp_path / "lstm"
    run.mkdir()
    (run / "log.jsonl").write_text('{"stale": true}\n')  # no checkpoint: nothing to resume
    probe._run_one("lstm", args, set)
    assert "--resume" not in _Recorder.commands[-1] and not (run / "log.jsonl").exists()
    assert json.loads((run / "probe.json").read_text())["resumed_at_step"] is None
    probe._run_one("lstm", args, set)  # probe.json: finished, not trained again
    assert len(_Recorder.commands) == 1


def test_a_results_file_of_another_budget_is_not_overwritten(probe, tmp_path):
    path = tmp_path / "probe.json"
    held = json.dumps({"steps": 1500, "eval_every": 250, "runs": {"lstm": {"run": {}}}})
    path.write_text(held)
    for argv in (["--steps", "12500"], ["--steps", "1500", "--eval-every", "100"],
                 ["--minutes", "5"]):
        with pytest.raises(SystemExit, match="--json"):
            probe.main([*argv, "--collect", "--runs", str(tmp_path / "runs"),
                        "--json", str(path)])
    assert path.read_text() == held
    # the same budget keeps them (nothing new to collect: the file is written again)
    assert probe.main(["--steps", "1500", "--collect", "--runs", str(tmp_path / "runs"),
                       "--json", str(path)]) == 0
    assert "lstm" in json.loads(path.read_text())["runs"]
