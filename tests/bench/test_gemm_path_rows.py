"""The benchmark's GEMM path: each row records the path its kernels took, ``--gemm`` runs
under one path, ``--compare`` sets another run beside this one, and the floors use the GEMM
rate at each row's own point."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from ctrlrnn.bench import report, runner
from ctrlrnn.bench.cases import select
from ctrlrnn.ops import _extension, gemm_path

pytestmark = pytest.mark.skipif(_extension.load("scan") is None,
                                reason="needs the compiled kernels")
TINY_ROOF = {"gemm_shape": (64, 32, 48), "copy_bytes": 1 << 20, "roofline_repeats": 3}


def _run(path: str) -> dict:
    with gemm_path.use(path):
        return runner.run(select(["qrnn_fo", "fused_lstm"]), grid="tiny", warmup=1, repeats=2,
                          max_seconds=None, argv=["ctrlrnn", "bench", "(test)"], **TINY_ROOF)


def _parser() -> argparse.ArgumentParser:
    from ctrlrnn.bench.cli import register

    parser = argparse.ArgumentParser(prog="ctrlrnn")
    register(parser.add_subparsers(dest="command"))
    return parser


def test_rows_record_the_forced_path_and_per_point_floors():
    doc = _run("blas")
    assert doc["gemm"]["path"] == "blas"
    rows = {r["case"]: r for r in doc["results"] if r.get("status") == "ok"}
    assert rows["lstm"].get("gemm_uses") == {}  # torch's own kernel: none of ours
    # the QRNN's only product, its gate projection, is this small: F.linear
    # (ops/cached_linear.py's SMALL_MACS), so none of ours either
    assert rows["qrnn_fo"].get("gemm_uses") == {}
    used = rows["fused_lstm"]["gemm_uses"]
    assert used and {p for p, _ in used.values()} == {"blas"}, used
    assert any(k.startswith("step ") for k in used)
    for name in ("qrnn_fo", "fused_lstm"):
        assert rows[name]["gemm_rate_flops_per_s"] > 0
        shape = runner.point_gemm_shape(rows[name])
        assert shape == (2 * 8, 8, 32)  # the tiny point: B=2, T=8, C=8


def test_markdown_lists_paths_and_sets_runs_side_by_side(tmp_path: Path):
    if not _extension.load("scan").gemm_onednn_usable():
        pytest.skip("this torch runs no float32 GEMM on oneDNN")
    blas = report.save_json(_run("blas"), tmp_path / "blas.json")
    onednn = report.save_json(_run("onednn"), tmp_path / "onednn.json")
    md = tmp_path / "B.md"
    args = _parser().parse_args(["bench", "--from", str(onednn), "--markdown", str(md),
                                 "--compare", f"BLAS only={blas}"])
    assert args.func(args) == 0
    text = md.read_text()
    assert "## GEMM path" in text and "forced to `onednn`" in text
    assert "| `fused_lstm` | 2 | 8 | 8 | step onednn, bulk onednn |" in text
    assert "## Beside BLAS only" in text
    assert "| `qrnn_fo` | 2 | 8 | 8 |" in text.split("## Beside BLAS only")[1]


def test_bad_options_are_refused(tmp_path: Path):
    parser = _parser()
    args = parser.parse_args(["bench", "--tiny", "--compare", "no-equals-sign"])
    assert args.func(args) == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--gemm", "mkl"])


def test_gemm_rate_at_is_cached_per_shape():
    from ctrlrnn.bench import roofline

    a = roofline.gemm_rate_at((64, 32, 48))
    assert a > 0 and roofline.gemm_rate_at((64, 32, 48)) == a
    assert (64, 32, 48, str(torch.float32), torch.get_num_threads()) in roofline._RATES


def test_backend_is_a_readable_list_not_a_json_blob():
    from ctrlrnn.bench.benchmarks_page import backend_lines

    backend = {
        "cache": "/c", "compiler": "g++ 12", "forced_reference": False,
        "require_compiled": True,
        "families": {"scan": {"ops": "linear scan", "cpu": "compiled", "reason": "cached",
                              "parallel_threads": 2, "cuda": "triton kernels"},
                     "cells": {"cpu": "reference", "reason": "no compiler", "cuda": "none"}},
        "cuda": {"available": False, "device": None, "triton": None},
        "gemm": {"requested": "auto", "forced": "auto", "onednn_usable": True,
                 "classes": {"a": {"path": "blas"}, "b": {"path": "onednn"},
                             "c": {"path": "blas"}}},
    }
    lines = backend_lines(backend)
    assert lines[0].startswith("- ctrlrnn backend: compiled kernels cached in `/c`")
    assert "compiled kernels required: yes" in lines[0]
    assert "  - `scan` (linear scan): CPU compiled, cached, 2 parallel threads; CUDA: " \
           "triton kernels" in lines
    assert "  - `cells`: CPU reference, no compiler; CUDA: none" in lines
    assert "  - CUDA device: none; Triton: not installed" in lines
    assert "3 shape classes measured on this CPU: 2 blas, 1 onednn" in lines[-1]
    assert not any("{" in ln for ln in lines)
    # a run saved before the backend was recorded, or by an older ctrlrnn (no GEMM map)
    assert backend_lines(None) == ["- ctrlrnn backend: not recorded"]
    older = backend_lines({"cache": "/c", "families": {}})
    assert len(older) == 1 and "GEMM" not in older[0]
