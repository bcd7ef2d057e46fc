"""The GPU check in one command: install, CUDA tests, GPU benchmarks, results page.

``scripts/gpu-check OUT`` (``python -m ctrlrnn.bench.gpu_check OUT``) on a CUDA machine with no
network:

1. **install** ctrlrnn from the working tree into the machine's existing torch without
   downloads (:mod:`ctrlrnn.bench.offline_install`): ``python3 -m pip install --no-deps
   --no-build-isolation --no-index --target DIR .`` (a fresh folder outside ``OUT``; torch and
   the system's site-packages are never touched). If pip cannot build (no setuptools), the
   working tree's ``src`` is used and the page says so;
2. **tests** (:mod:`ctrlrnn.bench.cuda_tests`): ``tests/gpu/test_cuda_layers.py`` (every layer
   forward and backward on CUDA against the CPU reference, fp32 and bf16, lengths and
   ``PackedSequence``), ``tests/gpu/test_cuda_dispatch.py`` and
   ``tests/gpu/test_cuda_training.py`` (``ctrlrnn train`` on CUDA) with native Triton
   (``CTRLRNN_TRITON_NATIVE=1``);
3. **benchmarks** (:mod:`ctrlrnn.bench.gpu_benchmarks`; a subprocess on the installed package,
   CUDA events, warm-up, medians of repeats, the rows compared with each other timed in turn):
   the linear scan forward+backward at B=32, T=1024, C=1024 against the device's copy bandwidth
   measured in the same run; QRNN (320 units, window 2, fo-pooling) against cuDNN ``nn.LSTM``
   over the QRNN paper's figure 4 grid (batch 8-256 x length 32-1024), inference and training
   time per batch; RCRN against a 3-layer cuDNN BiLSTM (RCRN paper table 10: dimension 200,
   batch 32, lengths 16-256); CAS-LSTM (2 layers) against a 2-layer cuDNN LSTM; METAGROSS
   against a cuDNN LSTM;
4. **results**: ``OUT/results.json``, ``OUT/gpu.md`` and ``docs/gpu.md`` (rendered from the
   results file by :func:`~ctrlrnn.bench.gpu_page.render_page`; ``--render results.json --page
   docs/gpu.md`` re-renders).

Everything fits a budget (:data:`BUDGET_S`, 7.5 minutes on an H100): every part has its own
share, benchmarks reduce their repeats when their share runs low and record what they skipped.
fp32 timings use full fp32 (TF32 off for both cuDNN and the GEMMs), as the papers' K40 and
GTX 1070 did.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files
from ctrlrnn.bench.cuda_tests import TESTS, parse_junit, run_tests
from ctrlrnn.bench.gpu_benchmarks import (
    ARCH_POINTS,
    QRNN_BATCH,
    QRNN_HIDDEN,
    QRNN_LENGTH,
    QRNN_PAPER_MAX,
    RCRN_PAPER,
    SCAN_SHAPE,
    Budget,
    bench_carnn,
    bench_caslstm,
    bench_cells_graphs,
    bench_metagross,
    bench_metagross_state,
    bench_qrnn,
    bench_rcrn,
    bench_rcrn_native,
    bench_scan,
    device_info,
    time_interleaved,
)
from ctrlrnn.bench.gpu_page import HOWTO, render_file, render_page
from ctrlrnn.bench.machine import git_changed, git_commit
from ctrlrnn.bench.offline_install import install, install_command, offline_env
from ctrlrnn.settings import child_environment, raw
from ctrlrnn.train.logs import replace_atomically

__all__ = [
    "ARCH_POINTS",
    "BENCHES",
    "BENCH_SHARES",
    "BUDGET_S",
    "HOWTO",
    "QRNN_BATCH",
    "QRNN_HIDDEN",
    "QRNN_LENGTH",
    "QRNN_PAPER_MAX",
    "RCRN_PAPER",
    "SCAN_SHAPE",
    "SCHEMA",
    "SHARES",
    "TESTS",
    "Budget",
    "device_info",
    "install",
    "install_command",
    "main",
    "offline_env",
    "parse_junit",
    "render_file",
    "render_page",
    "run_benchmarks",
    "run_check",
    "run_tests",
    "say",
    "time_interleaved",
    "write_results",
]

SCHEMA = 1
#: The seconds the whole check may take.
BUDGET_S = 450.0
#: Seconds of the budget for the install, the tests and the benchmarks.
#: Start-up and rendering take the rest.
#: The tests' share covers Triton's compiles of every kernel variant they meet.
#: The benchmarks reuse that compile cache.
SHARES = {"install": 30.0, "tests": 200.0, "bench": 200.0}
#: The benchmarks' own shares of theirs, in the order they run.
BENCH_SHARES = {"scan": 0.08, "qrnn_fig4": 0.28, "rcrn_table10": 0.14, "rcrn_native": 0.06,
                "caslstm": 0.11, "carnn": 0.06, "metagross": 0.11, "metagross_state": 0.10,
                "cells_graphs": 0.06}  # fmt: skip


def say(msg: str) -> None:
    """Print one progress line of the check, with the time."""
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


BENCHES: dict[str, Callable[[Budget], dict[str, Any]]] = {
    "scan": bench_scan, "qrnn_fig4": bench_qrnn, "rcrn_table10": bench_rcrn,
    "rcrn_native": bench_rcrn_native, "caslstm": bench_caslstm, "carnn": bench_carnn,
    "metagross": bench_metagross,
    "metagross_state": bench_metagross_state, "cells_graphs": bench_cells_graphs,
}  # fmt: skip


def run_benchmarks(seconds: float) -> dict[str, Any]:
    """Every benchmark of :data:`BENCHES` within ``seconds`` (in this process, on CUDA)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    total = Budget(seconds)
    result: dict[str, Any] = {"environment": device_info(), "settings": {
        "tf32": False, "timer": "CUDA events", "statistic": "median", "budget_s": seconds}}
    for name, fn in BENCHES.items():
        share = total.share(BENCH_SHARES[name] * seconds)
        say(f"benchmark {name} ({share.left():.0f} s)")
        t0 = time.monotonic()
        try:
            result[name] = fn(share)
        except Exception as exc:  # noqa: BLE001 - one failing benchmark must not end the check
            result[name] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
        result[name]["seconds"] = round(time.monotonic() - t0, 1)
        torch.cuda.empty_cache()
    return result


# ------------------------------------------------------------------ the whole check


def write_results(results: dict[str, Any], out: Path) -> Path:
    """``out/results.json`` (written whole, then renamed: never a half-written file)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    replace_atomically(path, lambda fh: fh.write(
        files.dumps(results, indent=1, sort_keys=True, default=str) + "\n"))
    return path


def run_check(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget)
    python = args.python
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results: dict[str, Any] = {"schema": SCHEMA, "started": started, "commit": git_commit(repo),
                               "changed": git_changed(repo), "budget_s": args.budget}  # fmt: skip
    pythonpath = str(repo / "src")
    site = Path(tempfile.mkdtemp(prefix="ctrlrnn-gpu-check-"))
    try:
        if not args.skip_install:
            say(f"install into {site} (no network, no dependencies)")
            results["install"] = install(repo, site / "site", SHARES["install"], python)
            pythonpath = results["install"]["path"]
            say(f"install: {results['install']['mode']} ({results['install']['seconds']} s)")
        if not args.skip_tests:
            share = min(SHARES["tests"], budget.left() - SHARES["bench"])
            say(f"CUDA tests ({share:.0f} s)")
            results["tests"] = run_tests(repo, out, pythonpath, share, python)
            t = results["tests"]
            say(f"tests: {t['passed']} passed, {t['failed']} failed, {t['errors']} errors, "
                f"{t['skipped']} skipped ({t['seconds']} s)")  # fmt: skip
        write_results(results, out)
        if not args.skip_bench:
            share = max(30.0, budget.left() - 20.0)
            say(f"benchmarks ({share:.0f} s)")
            bench_json = out / "bench.json"
            cmd = [python, "-m", "ctrlrnn.bench.gpu_check", "--bench-only", str(bench_json),
                   "--budget", str(share)]  # fmt: skip
            env = child_environment(PYTHONPATH=pythonpath)
            env.pop("TRITON_INTERPRET", None)
            try:
                rc = subprocess.run(cmd, cwd=str(repo), env=env, timeout=share + 25).returncode
            except subprocess.TimeoutExpired:
                rc = -1
            if bench_json.exists():
                results["bench"] = json.loads(bench_json.read_text())
            else:
                results["bench"] = {"error": f"benchmark process ended with {rc}, no results"}
        results["elapsed_s"] = round(args.budget - budget.left(), 1)
        results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        path = write_results(results, out)
        page = render_page(results)
        (out / "gpu.md").write_text(page)
        if args.page:
            Path(args.page).write_text(page)
        say(f"results: {path}; page: {out / 'gpu.md'}" + (f" and {args.page}" if args.page else ""))
    finally:
        shutil.rmtree(site, ignore_errors=True)
    tests_ok = results.get("tests", {}).get("ok", True)
    return 0 if tests_ok else 1


# ------------------------------------------------------------------ command line


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", help="folder for results.json, gpu.md and the test logs")
    p.add_argument("--repo", default=str(Path(__file__).resolve().parents[3]),
                   help="the working tree to install and test (default: this one)")
    p.add_argument("--python", default=raw("PYTHON") or sys.executable,
                   help="interpreter with torch + CUDA, Triton and pytest")
    p.add_argument("--page", default="docs/gpu.md", help="also write the page here ('' : no)")
    p.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for the whole check")
    p.add_argument("--skip-install", action="store_true")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--render", metavar="RESULTS", help="only render --page from a results file")
    p.add_argument("--bench-only", metavar="JSON", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.render:
        render_file(Path(args.render), Path(args.page))
        print(f"wrote {args.page}")
        return 0
    if args.bench_only:
        Path(args.bench_only).write_text(files.dumps(run_benchmarks(args.budget), indent=1,
                                                    default=str))  # fmt: skip
        return 0
    if not args.out:
        p.error("the output folder is required")
    if args.page and not Path(args.page).is_absolute():
        args.page = str(Path(args.repo) / args.page)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
