"""benchmarks/mechanisms.py: the variants it runs, the settings each gets, and its ratio table."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from ctrlrnn import settings

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mechanisms.py"


@pytest.fixture(scope="module")
def mechanisms():
    spec = importlib.util.spec_from_file_location("mechanisms_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_switchable_mechanism_has_a_variant(mechanisms) -> None:
    off = {env.get("CTRLRNN_RUNTIME_OFF") for env in mechanisms.VARIANTS.values()}
    assert set(settings.RUNTIME_MECHANISMS) <= off
    for env in mechanisms.VARIANTS.values():
        for name in env:
            assert name in settings.SETTINGS, name


def test_variants_are_chosen_in_table_order_and_unknown_names_named(mechanisms) -> None:
    assert mechanisms.chosen_variants("") == list(mechanisms.VARIANTS)
    assert mechanisms.chosen_variants("no-poly-exp, tuned") == ["tuned", "no-poly-exp"]
    with pytest.raises(SystemExit, match="--variants: no-such"):
        mechanisms.chosen_variants("tuned,no-such")


def test_run_starts_one_bench_process_per_chosen_variant_with_its_settings(
        mechanisms, monkeypatch, tmp_path) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(cmd, env, check):
        calls.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(mechanisms.subprocess, "run", fake_run)
    mechanisms.run("tiny", ["qrnn"], tmp_path, ["tuned", "no-stacked-outputs"])
    assert [Path(c[c.index("--out") + 1]).name for c, _ in calls] == [
        "tuned.json", "no-stacked-outputs.json"]
    assert all("--tiny" in c and c[c.index("--only") + 1] == "qrnn" for c, _ in calls)
    assert "CTRLRNN_RUNTIME_OFF" not in calls[0][1] or calls[0][1]["CTRLRNN_RUNTIME_OFF"] == ""
    assert calls[1][1]["CTRLRNN_RUNTIME_OFF"] == "stacked_outputs"


def _results(path: Path, rows: dict[tuple[str, int], float]) -> Path:
    doc = {"results": [
        {"kind": "time", "status": "ok", "case": case, "batch": batch, "length": 8, "width": 8,
         "fwd": {"median_s": t}, "fwdbwd": {"median_s": 2 * t}}
        for (case, batch), t in rows.items()]}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_ratios_pair_rows_by_shape_and_keep_torch_rows_apart(mechanisms, tmp_path) -> None:
    base = _results(tmp_path / "a.json", {("qrnn", 1): 1.0, ("qrnn", 2): 2.0, ("lstm", 1): 1.0})
    other = _results(tmp_path / "b.json", {("qrnn", 1): 1.5, ("qrnn", 2): 2.0, ("lstm", 1): 0.5})
    assert mechanisms.ratios(base, other) == {"fwd": [1.5, 1.0], "fwdbwd": [1.5, 1.0]}
    assert mechanisms.ratios(base, other, torch_rows=True) == {"fwd": [0.5], "fwdbwd": [0.5]}
    row = mechanisms.line("x", mechanisms.ratios(base, other))
    assert row == "| x | 1.250 (1.00-1.50; 1/2 > 1.05) | 1.250 (1.00-1.50; 1/2 > 1.05) |"


def test_repeated_runs_give_each_rows_median_before_the_ratio(mechanisms, tmp_path) -> None:
    base = [_results(tmp_path / f"a{i}.json", {("qrnn", 1): t, ("qrnn", 2): 2.0})
            for i, t in enumerate((1.0, 9.0, 2.0))]  # one drifting run: its 9.0 is outvoted
    other = [_results(tmp_path / f"b{i}.json", {("qrnn", 1): t}) for i, t in enumerate((3.0, 5.0))]
    assert mechanisms.ratios(base, other) == {"fwd": [2.0], "fwdbwd": [2.0]}
    assert mechanisms.main(["--pair", f"x={'+'.join(map(str, base))},{other[0]}"]) == 0
