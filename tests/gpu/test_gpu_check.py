"""The GPU check's parts that need no GPU (``scripts/gpu-check``, :mod:`ctrlrnn.bench.gpu_check`):
the offline install step, writing the results file, and rendering ``docs/gpu.md`` from one.

No pip, pytest or benchmark actually runs here: subprocesses are mocked, benchmarks faked.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from ctrlrnn.bench import gpu_check as gc

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ (a) install, offline


def test_install_command_is_offline_and_leaves_torch_alone(tmp_path):
    cmd = gc.install_command(REPO, tmp_path / "site", "python3")
    assert cmd[:4] == ["python3", "-m", "pip", "install"]
    for flag in ("--no-deps", "--no-build-isolation", "--no-index"):
        assert flag in cmd
    assert cmd[cmd.index("--target") + 1] == str(tmp_path / "site")
    assert cmd[-1] == str(REPO)
    assert not any(c.startswith(("--index-url", "--extra-index-url", "--find-links", "-U",
                                 "--upgrade", "http")) for c in cmd)  # fmt: skip
    assert "torch" not in " ".join(cmd[4:])


def test_install_runs_pip_offline_and_falls_back_to_src(tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("PIP_INDEX_URL", "http://index.invalid/simple")
    calls = []

    def fake_run(cmd, **kw):
        calls.append((cmd, kw))
        target = Path(cmd[cmd.index("--target") + 1])
        (target / "ctrlrnn").mkdir(parents=True)
        (target / "ctrlrnn" / "__init__.py").write_text("")
        return SimpleNamespace(returncode=0, stdout="Successfully installed ctrlrnn", stderr="")

    res = gc.install(REPO, tmp_path / "site", 30, "python3", run=fake_run)
    cmd, kw = calls[0]
    assert res["ok"] and res["path"] == str(tmp_path / "site") and res["command"] == cmd
    env = kw["env"]
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_NO_DEPS"] == "1"
    assert "HTTPS_PROXY" not in env and "PIP_INDEX_URL" not in env
    assert kw["cwd"] == str(REPO) and kw["timeout"] == 30

    def failing(cmd, **kw):
        return SimpleNamespace(returncode=1, stdout="", stderr="No module named setuptools")

    res = gc.install(REPO, tmp_path / "other", 30, "python3", run=failing)
    assert not res["ok"] and res["path"] == str(REPO / "src")
    assert "setuptools" in res["log_tail"] and "failed" in res["mode"]


def test_script_needs_an_output_folder():
    res = subprocess.run([str(REPO / "scripts" / "gpu-check")], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert res.returncode == 2 and "usage" in res.stderr


# ------------------------------------------------------------------ (b) results file


def test_parse_junit(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<testsuites><testsuite tests="4" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.gpu.test_cuda_layers" name="test_a[qrnn]"/>'
        '<testcase classname="tests.gpu.test_cuda_layers" name="test_b"><failure/></testcase>'
        '<testcase classname="x" name="c"><skipped/></testcase><testcase classname="x" name="d"/>'
        "</testsuite></testsuites>"
    )
    r = gc.parse_junit(xml)
    assert (r["passed"], r["failed"], r["errors"], r["skipped"]) == (2, 1, 0, 1)
    assert r["failing"] == ["tests.gpu.test_cuda_layers::test_b"]


def test_benchmarks_results_file_from_fake_measurements(tmp_path, monkeypatch):
    seen = {}

    def fake(name):
        def bench(budget):
            seen[name] = budget.left()
            return {"rows": [], "value": name}
        return bench

    def broken(budget):
        raise RuntimeError("no CUDA here")

    benches = {name: fake(name) for name in gc.BENCHES}
    benches["metagross"] = broken
    monkeypatch.setattr(gc, "BENCHES", benches)
    res = gc.run_benchmarks(10.0)
    assert set(seen) == set(gc.BENCHES) - {"metagross"}
    assert all(0 < s <= 10.0 for s in seen.values())  # every part within its share
    assert res["metagross"]["error"] == "RuntimeError: no CUDA here"
    assert res["settings"]["tf32"] is False and "torch" in res["environment"]
    path = gc.write_results({"schema": gc.SCHEMA, "bench": res}, tmp_path / "out")
    back = json.loads(path.read_text())
    assert back["bench"]["scan"]["value"] == "scan" and back["schema"] == gc.SCHEMA


def test_run_check_writes_results_and_page(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "install", lambda repo, target, timeout, python: {
        "command": ["pip"], "ok": True, "seconds": 1.0, "path": str(target),
        "mode": "pip --target", "log_tail": ""})  # fmt: skip
    monkeypatch.setattr(gc, "run_tests", lambda repo, out, pp, timeout, python: {
        "command": "pytest x", "ok": False, "passed": 3, "failed": 1, "errors": 0,
        "skipped": 0, "seconds": 2.0, "failing": ["t::bad"]})  # fmt: skip
    page = tmp_path / "gpu.md"
    args = argparse.Namespace(repo=str(REPO), out=str(tmp_path / "out"), budget=60.0,
                              python="python3", skip_install=False, skip_tests=False,
                              skip_bench=True, page=str(page))  # fmt: skip
    assert gc.run_check(args) == 1  # a failing test fails the check
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["tests"]["failing"] == ["t::bad"] and res["install"]["ok"]
    assert page.read_text() == (tmp_path / "out" / "gpu.md").read_text()
    assert "- failed: `t::bad`" in page.read_text()


# ------------------------------------------------------------------ (c) the page


def _sample() -> dict:
    cells = {f"{b}x{t}": {"qrnn_infer_ms": 1.0, "lstm_infer_ms": 2.0 * b / 8,
                          "qrnn_train_ms": 2.0, "lstm_train_ms": 5.0, "repeats": 5}
             for b in gc.QRNN_BATCH for t in gc.QRNN_LENGTH}  # fmt: skip
    del cells["256x1024"]
    row = {"batch": 32, "length": 64, "width": 200, "ours_train_ms": 9.0, "base_train_ms": 10.0,
           "ours_infer_ms": 3.0, "base_infer_ms": 4.0, "repeats": 5}  # fmt: skip
    return {
        "schema": 1, "started": "2026-11-30T10:00:00+0000", "commit": "abcdef1234567890",
        "elapsed_s": 401.0,
        "install": {"mode": "pip --target", "seconds": 4.2, "ok": True},
        "tests": {"command": "-m pytest tests/gpu/test_cuda_layers.py", "ok": True, "passed": 45,
                  "failed": 0, "errors": 0, "skipped": 0, "seconds": 80.0, "failing": []},
        "bench": {
            "environment": {"device": "NVIDIA H100 80GB HBM3", "capability": "9.0", "sms": 132,
                            "memory_gib": 79.1, "torch": "2.11.0+cu130", "cuda": "13.0",
                            "cudnn": 91000, "triton": "3.5.0", "python": "3.12.3",
                            "cuda_backends": {"scan": "triton 3.5.0 kernels: linear scan"}},
            "settings": {"tf32": False, "timer": "CUDA events", "statistic": "median"},
            "scan": {"shape": [32, 1024, 1024], "dtype": "float32", "bytes": 2**30,
                     "scan": {"median_ms": 0.5}, "copy": {"median_ms": 0.4},
                     "scan_gbps": 2147.0, "copy_gbps": 2684.0, "fraction": 0.8, "goal": 0.8},
            "qrnn_fig4": {"batch": list(gc.QRNN_BATCH), "length": list(gc.QRNN_LENGTH),
                          "cells": cells, "skipped": ["256x1024"], "paper_max": 16.0},
            "rcrn_table10": {"ours": "RCRN", "baseline": "BiLSTM-3",
                             "rows": [dict(row, paper_train_ratio=1.0, paper_infer_ratio=0.8)]},
            "rcrn_native": {"ours": "RCRN native", "baseline": "BiLSTM-3",
                           "rows": [dict(row, length=16)]},
            "caslstm": {"ours": "CASLSTM", "baseline": "LSTM-2", "rows": [row]},
            "carnn": {"ours": "nCARNN", "baseline": "LSTM-1", "rows": [row]},
            "metagross": {"error": "RuntimeError: out of memory"},
            "cells_graphs": {"baseline": "cuDNN", "skipped": ["CAS-LSTM T=256"], "rows": [
                {"model": "RCRN (controllers='fused')", "batch": 32, "length": 16, "width": 200,
                 "launched_train_ms": 20.0, "graphs_train_ms": 8.0, "base_train_ms": 10.0,
                 "launched_infer_ms": 6.0, "graphs_infer_ms": 3.0, "base_infer_ms": 4.0,
                 "captures": 4, "repeats": 5}]},
        },
    }  # fmt: skip


def test_render_page_tables():
    page = gc.render_page(_sample())
    assert "NVIDIA H100 80GB HBM3" in page and "2.11.0+cu130" in page and "3.5.0" in page
    assert "45 passed, 0 failed" in page and "all passed" in page
    assert "**80%**" in page and "meets the goal" in page
    lines = page.splitlines()
    header = "| batch \\ length | 32 | 64 | 128 | 256 | 512 | 1024 |"
    assert lines.count(header) == 2  # inference and training
    first = lines.index(header)
    assert lines[first + 2] == "| 8 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 |"  # LSTM / QRNN
    assert lines[first + 7].startswith("| 256 | 64.0 |") and lines[first + 7].endswith("| - |")
    assert "ranges 2.0x-8.0x" in page and "Not measured (time budget): 256x1024" in page
    rcrn = next(ln for ln in lines if ln.startswith("| 32 | 64 | 200 |"))
    assert rcrn.split(" | ")[5:7] == ["0.90", "3.00"] and rcrn.endswith("| 1.00 | 0.80 |")
    assert "### RCRN with its controllers on cuDNN vs 3-layer cuDNN BiLSTM" in page
    assert "### CARNN (nCARNN) vs cuDNN LSTM" in page
    assert any(ln.startswith("| 32 | 16 | 200 |") for ln in lines)
    assert "Failed: `RuntimeError: out of memory`" in page
    assert "### The fused cells' step loops as CUDA graphs" in page
    graphs = next(ln for ln in lines if ln.startswith("| RCRN (controllers='fused') |"))
    assert graphs.split(" | ")[4:10] == ["20.00", "8.00", "0.40", "10.00", "0.80", "6.00"]
    assert graphs.endswith("| 0.50 | 4.00 | 4 |")
    assert "Not measured (time budget): CAS-LSTM T=256" in page
    assert gc.HOWTO in page  # the how-to part stays on the rendered page


def test_render_before_any_run_and_from_a_file(tmp_path):
    empty = gc.render_page(None)
    assert "No GPU run has happened yet" in empty and gc.HOWTO in empty
    docs = (REPO / "docs" / "gpu.md").read_text()
    assert "## GPU check: how to run it" in docs and "scripts/gpu-check OUT" in docs
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_sample()))
    page = tmp_path / "page.md"
    assert gc.main(["--render", str(results), "--page", str(page)]) == 0
    assert page.read_text() == gc.render_page(_sample())


@pytest.mark.parametrize("bench", [{"error": "boom"}, {}])
def test_render_missing_or_failed_benchmarks(bench):
    page = gc.render_page({"bench": bench, "tests": None})
    assert "## Benchmarks" in page and gc.HOWTO in page


def test_render_page_scan_kernels_alone_and_uncommitted_changes():
    res = _sample()
    res["changed"] = ["src/ctrlrnn/ops/gpu/scan_triton.py"]
    scan = res["bench"]["scan"]
    scan.update(fraction=0.4, kernels={"median_ms": 5.0, "pairs": 10, "pair_ms": 0.5},
                kernels_gbps=2200.0, kernels_fraction=0.82)  # fmt: skip
    page = gc.render_page(res)
    assert "with uncommitted changes to `src/ctrlrnn/ops/gpu/scan_triton.py`" in page
    assert "**40%** of it through the autograd op, which is below the goal" in page
    assert "**82%** of the copy bandwidth, which meets the goal" in page
    # a results file from before the kernels-alone measurement renders without that line
    assert "kernels alone" not in gc.render_page(_sample())
    assert "uncommitted" not in gc.render_page(_sample())


def test_render_page_scan_called_back_to_back():
    res = _sample()
    scan = res["bench"]["scan"]
    scan.update(fraction=0.3, kernels={"median_ms": 5.0, "pairs": 10, "pair_ms": 0.5},
                kernels_gbps=2000.0, kernels_fraction=0.76,
                steady={"median_ms": 5.4, "calls": 10, "call_ms": 0.54},
                steady_gbps=1900.0, steady_fraction=0.72)  # fmt: skip
    page = gc.render_page(res)
    assert "10 forward+backward calls per timed sample" in page
    assert "0.54 ms per call" in page
    assert "**72%** of the copy bandwidth, which is below the goal" in page
    # results from before the back-to-back measurement render without that line
    assert "back to back, as a training loop" not in gc.render_page(_sample())
