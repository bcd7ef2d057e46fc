"""scripts/char_translation_probe.py's budgets (issue 71): ``--steps N`` hands the trainer its own
``--max-steps N`` and sets no clock (a run paused from outside is waited for, not stopped);
``--minutes`` stays the default budget; the two are refused together. Nothing is trained here
(``--toy`` runs it end to end, by hand)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location(
        "char_translation_probe", ROOT / "scripts" / "char_translation_probe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


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
