"""The GPU check in one command (issue 18): install, CUDA tests, GPU benchmarks, results page.

``scripts/gpu-check OUT`` (``python -m ctrlrnn.bench.gpu_check OUT``) on a CUDA machine with no
network:

1. **install** ctrlrnn from the working tree into the machine's existing torch without
   downloads: ``python3 -m pip install --no-deps --no-build-isolation --no-index --target DIR .``
   (a fresh folder outside ``OUT``; torch and the system's site-packages are never touched). If
   pip cannot build (no setuptools), the working tree's ``src`` is used and the page says so;
2. **tests**: ``tests/gpu/test_cuda_layers.py`` (every layer forward and backward on CUDA
   against the CPU reference, fp32 and bf16, lengths and ``PackedSequence``) and
   ``tests/gpu/test_cuda_dispatch.py`` with native Triton (``CTRLRNN_TRITON_NATIVE=1``);
3. **benchmarks** (a subprocess on the installed package, CUDA events, warm-up, medians of
   repeats, the rows compared with each other timed in turn): the linear scan forward+backward
   at B=32, T=1024, C=1024 against the device's copy bandwidth measured in the same run; QRNN
   (320 units, window 2, fo-pooling) against cuDNN ``nn.LSTM`` over the QRNN paper's figure 4
   grid (batch 8-256 x length 32-1024), inference and training time per batch; RCRN against a
   3-layer cuDNN BiLSTM (RCRN paper table 10: dimension 200, batch 32, lengths 16-256);
   CAS-LSTM (2 layers) against a 2-layer cuDNN LSTM; METAGROSS against a cuDNN LSTM;
4. **results**: ``OUT/results.json``, ``OUT/gpu.md`` and ``docs/gpu.md`` (rendered from the
   results file by :func:`render_page`; ``--render results.json --page docs/gpu.md`` re-renders).

Everything fits a budget (:data:`BUDGET_S`, 7.5 minutes on an H100): every part has its own
share, benchmarks reduce their repeats when their share runs low and record what they skipped.
fp32 timings use full fp32 (TF32 off for both cuDNN and the GEMMs), as the papers' K40 and
GTX 1070 did.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctrlrnn import files

SCHEMA = 1
#: Whole check, seconds (the issue's limit is 8 minutes on an H100).
BUDGET_S = 450.0
#: Shares of the budget: install, tests, benchmarks (the rest is start-up and rendering).
#: (Triton compiles every kernel variant the CUDA tests meet on first use: most of the tests'
#: time; the benchmarks reuse that compile cache.)
SHARES = {"install": 30.0, "tests": 200.0, "bench": 200.0}
#: The benchmarks' own shares of theirs, in the order they run.
BENCH_SHARES = {"scan": 0.08, "qrnn_fig4": 0.44, "rcrn_table10": 0.16, "caslstm": 0.11,
                "metagross": 0.11, "metagross_state": 0.10}  # fmt: skip
QRNN_BATCH = (8, 16, 32, 64, 128, 256)
QRNN_LENGTH = (32, 64, 128, 256, 512, 1024)
QRNN_HIDDEN = 320  # QRNN paper figure 4 (right): "a 320-unit QRNN layer"
#: QRNN paper section 3.1 / figure 4 (right): "up to 16x" (K40, inference). The figure's cells
#: are not in the text we have, so the page quotes only this maximum beside the measured range.
QRNN_PAPER_MAX = 16.0
RCRN_LENGTH = (16, 32, 64, 128, 256)
RCRN_DIM, RCRN_BATCH = 200, 32  # RCRN paper section 5.7 / table 10
#: RCRN paper table 10 (ms, GTX 1070): (RCRN cuDNN + CUDA optimised, 3-layer BiLSTM cuDNN)
#: for training and inference, per length.
RCRN_PAPER = {
    16: ((10, 10), (4, 4)), 32: ((13, 14), (5, 5)), 64: ((21, 23), (8, 9)),
    128: ((40, 42), (15, 16)), 256: ((78, 80), (29, 32)),
}  # fmt: skip
ARCH_POINTS = ((32, 64, 256), (32, 256, 256))  # (batch, length, width) of CAS-LSTM / METAGROSS
SCAN_SHAPE = (32, 1024, 1024)
#: Forward+backward kernel pairs per timed sample of the scan kernels alone (so that the CPU's
#: launches run ahead of the GPU and the sample times the kernels, not the launch gaps).
SCAN_KERNEL_PAIRS = 10
TESTS = ("tests/gpu/test_cuda_layers.py", "tests/gpu/test_cuda_dispatch.py")

HOWTO = """\
## GPU check: how to run it

On a machine with a CUDA GPU, Python with torch (CUDA build), Triton and pytest, and no network
needed, from the repository root:

```
scripts/gpu-check OUT        # e.g. scripts/gpu-check /tmp/gpu-out
```

It installs ctrlrnn from the working tree with `pip install --no-deps --no-build-isolation
--no-index --target <temp dir> .` (no downloads; the machine's torch is not touched), runs the
CUDA tests (`tests/gpu/test_cuda_layers.py`: every layer forward and backward on CUDA against
the CPU reference, fp32 and bf16, lengths and packed input; `tests/gpu/test_cuda_dispatch.py`),
then the GPU benchmarks, and writes `OUT/results.json`, `OUT/gpu.md` and this page. It is
budgeted to finish within 8 minutes on an H100 (each part has a time share; benchmarks reduce
their repeats when it runs low). `PYTHON=...` picks the interpreter (default `python3`);
`--skip-install`, `--skip-tests`, `--skip-bench` leave parts out. To re-render this page from a
results file: `python -m ctrlrnn.bench.gpu_check --render OUT/results.json --page docs/gpu.md`.

Timings are medians of repeats timed with CUDA events after a warm-up, the rows compared with
each other timed in turn; every ratio on this page comes from one run on one device. fp32 runs
with TF32 off for both sides (cuDNN and the GEMMs), as on the papers' K40 and GTX 1070.
"""


# ------------------------------------------------------------------ budget and progress


class Budget:
    """Seconds left before a deadline (``time.monotonic``)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def share(self, seconds: float) -> Budget:
        """A sub-budget of ``seconds`` (never past this one's deadline)."""
        sub = Budget(0.0)
        sub.deadline = min(self.deadline, time.monotonic() + seconds)
        return sub


def say(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------ install


def install_command(repo: Path, target: Path, python: str = sys.executable) -> list[str]:
    """The pip command installing the working tree into ``target`` with no network and no
    dependencies (torch stays the machine's own)."""
    return [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
            "--no-cache-dir", "--disable-pip-version-check", "--target", str(target),
            str(repo)]  # fmt: skip


def offline_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the environment) with pip forced offline and no proxy to reach anything."""
    env = dict(os.environ if base is None else base)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):  # fmt: skip
        env.pop(key, None)
    env["PIP_NO_INDEX"] = "1"
    env["PIP_NO_DEPS"] = "1"
    return env


def install(repo: Path, target: Path, timeout: float, python: str = sys.executable,
            run: Callable[..., Any] = subprocess.run) -> dict[str, Any]:  # fmt: skip
    """Install into ``target``; returns what happened, with ``path`` the folder to put first on
    ``PYTHONPATH`` (``target``, or the working tree's ``src`` when pip failed)."""
    cmd = install_command(repo, target, python)
    t0 = time.monotonic()
    try:
        res = run(cmd, cwd=str(repo), env=offline_env(), capture_output=True, text=True,
                  timeout=max(timeout, 1.0))  # fmt: skip
        ok, log = res.returncode == 0, (res.stdout or "") + (res.stderr or "")
    except (subprocess.TimeoutExpired, OSError) as exc:
        ok, log = False, f"{type(exc).__name__}: {exc}"
    ok = ok and (target / "ctrlrnn" / "__init__.py").exists()
    return {
        "command": cmd, "ok": ok, "seconds": round(time.monotonic() - t0, 1),
        "path": str(target if ok else repo / "src"),
        "mode": "pip --target" if ok else "working tree src (pip install failed)",
        "log_tail": log[-2000:],
    }  # fmt: skip


# ------------------------------------------------------------------ tests


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and the failing tests' names from a pytest ``--junitxml`` file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    for s in suites:
        for key in counts:
            counts[key] += int(s.get(key, 0))
        for case in s.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"passed": passed, "failed": counts["failures"], "errors": counts["errors"],
            "skipped": counts["skipped"], "failing": failed}  # fmt: skip


def run_tests(repo: Path, out: Path, pythonpath: str, timeout: float,
              python: str = sys.executable) -> dict[str, Any]:  # fmt: skip
    xml = out / "tests.xml"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *TESTS]
    env = dict(os.environ, PYTHONPATH=pythonpath, CTRLRNN_TRITON_NATIVE="1")
    env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=str(repo), env=env, capture_output=True, text=True,
                             timeout=max(timeout, 1.0))  # fmt: skip
        log, rc = (res.stdout or "") + (res.stderr or ""), res.returncode
    except subprocess.TimeoutExpired as exc:
        log, rc = f"timed out after {timeout:.0f} s\n{exc.stdout or ''}", -1
    (out / "tests.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    result: dict[str, Any] = {"command": " ".join(cmd[1:]), "returncode": rc,
                              "seconds": round(time.monotonic() - t0, 1), "files": list(TESTS)}
    if xml.exists():
        result.update(parse_junit(xml))
    else:
        result.update(passed=0, failed=0, errors=1, skipped=0, failing=["(no junit report)"])
    result["ok"] = rc == 0 and result["failed"] == 0 and result["errors"] == 0
    result["log_tail"] = log[-3000:] if isinstance(log, str) else ""
    return result


# ------------------------------------------------------------------ timing (CUDA events)


def time_interleaved(fns: Sequence[Callable[[], Any]], warmup: int, repeats: int,
                     budget: Budget | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Median milliseconds of each of ``fns``, one sample of each in turn, by CUDA events.

    Stops adding repeats (at least one) when ``budget`` runs out.
    """
    import torch

    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        if r > 0 and budget is not None and budget.left() <= 0:
            break
        for i, fn in enumerate(fns):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples[i].append(start.elapsed_time(end))
    return [{"median_ms": statistics.median(s), "repeats": len(s),
             "spread_ms": (max(s) - min(s)) if len(s) > 1 else 0.0} for s in samples]  # fmt: skip


def _train_step(module: Any, inputs: Sequence[Any], grad_seed: int = 0) -> Callable[[], None]:
    """Forward + backward of ``module(*inputs)[0]`` with a fixed output gradient."""
    import torch

    with torch.no_grad():
        shape = module(*inputs)[0].shape
    gen = torch.Generator(device="cuda").manual_seed(grad_seed)
    grad = torch.randn(shape, device="cuda", generator=gen, dtype=inputs[0].dtype)
    params = [p for p in module.parameters() if p.requires_grad]
    leaves = [x for x in inputs if getattr(x, "requires_grad", False)]

    def step() -> None:
        for p in (*params, *leaves):
            p.grad = None
        module(*inputs)[0].backward(grad)

    return step


def _infer(module: Any, inputs: Sequence[Any]) -> Callable[[], None]:
    import torch

    def step() -> None:
        with torch.no_grad():
            module(*inputs)

    return step


def _reps(budget: Budget, cells_left: int, per_call_s: float, cap: int) -> int:
    """Repeats affordable for one of ``cells_left`` measurements (at least 3)."""
    if per_call_s <= 0:
        return cap
    affordable = budget.left() / max(cells_left, 1) / per_call_s
    return int(max(3, min(cap, affordable)))


# ------------------------------------------------------------------ benchmarks


def bench_scan(budget: Budget) -> dict[str, Any]:
    """Linear scan forward+backward vs the copy bandwidth measured on the same device."""
    import torch

    from ctrlrnn.ops.gpu.scan_triton import linear_scan_backward, linear_scan_forward
    from ctrlrnn.ops.linear_scan import linear_scan

    Bn, Tn, C = SCAN_SHAPE
    a = torch.rand(Bn, Tn, C, device="cuda").requires_grad_()
    b = torch.randn(Bn, Tn, C, device="cuda").requires_grad_()
    g = torch.randn(Bn, Tn, C, device="cuda")
    n = Bn * Tn * C * 4

    def scan() -> None:
        a.grad = b.grad = None
        linear_scan(a, b).backward(g)

    # forward reads a, b and writes h; backward reads g, a, h and writes da, db: 8 passes
    scan_bytes = 8 * n
    # the copy moves the scan's bytes: reads half of them and writes the other half
    half = scan_bytes // 16
    s1 = torch.empty(half, dtype=torch.float64, device="cuda")
    d1 = torch.empty_like(s1)

    def copy() -> None:
        d1.copy_(s1)

    a_, b_ = a.detach(), b.detach()

    def kernels() -> None:
        # the launchers the autograd op dispatches to, without the op: the kernels' own speed
        for _ in range(SCAN_KERNEL_PAIRS):
            out, _ = linear_scan_forward(a_, b_, None, None, False)
            linear_scan_backward(g, None, a_, out, None, None, False)

    def scans() -> None:
        # the autograd op called back to back, as a training loop calls it: the CPU's work per
        # call runs ahead of the GPU instead of adding to each sample
        for _ in range(SCAN_KERNEL_PAIRS):
            scan()

    t_scan, t_copy, t_kern, t_scans = time_interleaved([scan, copy, kernels, scans], warmup=3,
                                                       repeats=20, budget=budget)  # fmt: skip
    copy_bw = 2 * half * 8 / (t_copy["median_ms"] / 1e3) / 1e9
    scan_bw = scan_bytes / (t_scan["median_ms"] / 1e3) / 1e9
    pair_ms = t_kern["median_ms"] / SCAN_KERNEL_PAIRS
    kern_bw = scan_bytes / (pair_ms / 1e3) / 1e9
    steady_ms = t_scans["median_ms"] / SCAN_KERNEL_PAIRS
    steady_bw = scan_bytes / (steady_ms / 1e3) / 1e9
    return {"shape": list(SCAN_SHAPE), "dtype": "float32", "bytes": scan_bytes,
            "scan": t_scan, "copy": t_copy, "copy_bytes": 2 * half * 8,
            "scan_gbps": scan_bw, "copy_gbps": copy_bw, "fraction": scan_bw / copy_bw,
            "kernels": {**t_kern, "pairs": SCAN_KERNEL_PAIRS, "pair_ms": pair_ms},
            "kernels_gbps": kern_bw, "kernels_fraction": kern_bw / copy_bw,
            "steady": {**t_scans, "calls": SCAN_KERNEL_PAIRS, "call_ms": steady_ms},
            "steady_gbps": steady_bw, "steady_fraction": steady_bw / copy_bw,
            "goal": 0.8}  # fmt: skip


def bench_qrnn(budget: Budget) -> dict[str, Any]:
    """QRNN (320, window 2, fo) vs cuDNN ``nn.LSTM`` (320): figure 4's grid, inference and
    training time per batch; ratio = LSTM time / QRNN time."""
    import torch

    from ctrlrnn import QRNN

    torch.manual_seed(0)
    H = QRNN_HIDDEN
    qrnn = QRNN(H, H, window=2, pooling="fo", batch_first=True).cuda()
    lstm = torch.nn.LSTM(H, H, batch_first=True).cuda()
    cells: dict[str, Any] = {}
    skipped: list[str] = []
    grid = [(Bn, Tn) for Bn in QRNN_BATCH for Tn in QRNN_LENGTH]
    for i, (Bn, Tn) in enumerate(grid):
        if budget.left() <= 0:
            skipped.append(f"{Bn}x{Tn}")
            continue
        x = torch.randn(Bn, Tn, H, device="cuda")
        xr = x.clone().requires_grad_()
        reps = _reps(budget, 2 * (len(grid) - i), 2e-3 * (1 + Bn * Tn / 8192), cap=15)
        t_inf = time_interleaved([_infer(qrnn, [x]), _infer(lstm, [x])], 2, reps, budget)
        t_tr = time_interleaved([_train_step(qrnn, [xr]), _train_step(lstm, [xr])], 2, reps,
                                budget)  # fmt: skip
        cells[f"{Bn}x{Tn}"] = {
            "qrnn_infer_ms": t_inf[0]["median_ms"], "lstm_infer_ms": t_inf[1]["median_ms"],
            "qrnn_train_ms": t_tr[0]["median_ms"], "lstm_train_ms": t_tr[1]["median_ms"],
            "repeats": t_inf[0]["repeats"],
        }  # fmt: skip
        del x, xr
    return {"hidden": H, "window": 2, "pooling": "fo", "batch": list(QRNN_BATCH),
            "length": list(QRNN_LENGTH), "cells": cells, "skipped": skipped,
            "paper_max": QRNN_PAPER_MAX}  # fmt: skip


Builder = Callable[[int, int, int], tuple[Any, Any, list[Any]]]


def _pair_rows(budget: Budget, build: Builder, points: Sequence[tuple[int, int, int]]
               ) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Rows of (ours, baseline) inference and training times at each (batch, length, width)."""
    import torch

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for i, (Bn, Tn, W) in enumerate(points):
        if budget.left() <= 0:
            skipped.append(f"{Bn}x{Tn}x{W}")
            continue
        ours, base, extra = build(Bn, Tn, W)
        x = torch.randn(Bn, Tn, W, device="cuda")
        xr = x.clone().requires_grad_()
        reps = _reps(budget, 2 * (len(points) - i), 5e-3 * (1 + Bn * Tn / 4096), cap=15)
        t_inf = time_interleaved([_infer(ours, [x, *extra]), _infer(base, [x])], 2, reps, budget)
        t_tr = time_interleaved([_train_step(ours, [xr, *extra]), _train_step(base, [xr])], 2,
                                reps, budget)  # fmt: skip
        rows.append({"batch": Bn, "length": Tn, "width": W,
                     "ours_infer_ms": t_inf[0]["median_ms"], "base_infer_ms": t_inf[1]["median_ms"],
                     "ours_train_ms": t_tr[0]["median_ms"], "base_train_ms": t_tr[1]["median_ms"],
                     "repeats": t_inf[0]["repeats"]})  # fmt: skip
    return rows, skipped


def bench_rcrn(budget: Budget) -> dict[str, Any]:
    import torch

    from ctrlrnn import RCRN

    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = RCRN(W, W, bidirectional=True, batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, num_layers=3, bidirectional=True, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, [(RCRN_BATCH, t, RCRN_DIM) for t in RCRN_LENGTH])
    for r in rows:
        (p_tr, p_inf) = RCRN_PAPER.get(r["length"], ((None, None), (None, None)))
        r["paper_train_ratio"] = p_tr[0] / p_tr[1] if p_tr[0] else None
        r["paper_infer_ratio"] = p_inf[0] / p_inf[1] if p_inf[0] else None
    return {"ours": "RCRN (bidirectional, LSTM cells, per-direction listener)",
            "baseline": "cuDNN nn.LSTM, 3 layers, bidirectional", "rows": rows,
            "skipped": skipped}  # fmt: skip


def bench_caslstm(budget: Budget) -> dict[str, Any]:
    import torch

    from ctrlrnn import CASLSTM

    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = CASLSTM(W, W, num_layers=2, batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, num_layers=2, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "CASLSTM, 2 layers", "baseline": "cuDNN nn.LSTM, 2 layers", "rows": rows,
            "skipped": skipped}  # fmt: skip


def bench_metagross(budget: Budget) -> dict[str, Any]:
    import torch

    from ctrlrnn import Metagross

    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = Metagross(W, W, depth=2, base="linear", batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "Metagross, depth 2, linear base, token depth gates, residual",
            "baseline": "cuDNN nn.LSTM, 1 layer", "rows": rows, "skipped": skipped}


def bench_metagross_state(budget: Budget) -> dict[str, Any]:
    import torch

    from ctrlrnn import Metagross

    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = Metagross(W, W, depth=2, gates="state", batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "Metagross as printed (gates='state'), depth 2, linear base, residual",
            "baseline": "cuDNN nn.LSTM, 1 layer", "rows": rows, "skipped": skipped}


BENCHES: dict[str, Callable[[Budget], dict[str, Any]]] = {
    "scan": bench_scan, "qrnn_fig4": bench_qrnn, "rcrn_table10": bench_rcrn,
    "caslstm": bench_caslstm, "metagross": bench_metagross,
    "metagross_state": bench_metagross_state,
}  # fmt: skip


def device_info() -> dict[str, Any]:
    """The device and the software versions (of this process)."""
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "cudnn": None, "triton": None}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        info["triton"] = f"not importable: {exc}"
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(device=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                    memory_gib=round(p.total_memory / 2**30, 1))  # fmt: skip
    try:
        from ctrlrnn import __version__
        from ctrlrnn.ops import backend, gpu

        info["ctrlrnn"] = __version__
        # not backend_info(): it builds the CPU extensions, minutes of the budget
        info["cuda_backends"] = {f: backend._cuda_status(f) for f in gpu.FAMILIES}
    except Exception as exc:  # noqa: BLE001
        info["cuda_backends"] = {"error": f"{type(exc).__name__}: {exc}"}
    return info


def run_benchmarks(seconds: float) -> dict[str, Any]:
    """Every benchmark of :data:`BENCHES` within ``seconds`` (in this process, on CUDA)."""
    import torch

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


def _git_commit(repo: Path) -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, timeout=10)  # fmt: skip
        return res.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _git_changed(repo: Path) -> list[str]:
    """Tracked files that differ from the commit (what was measured is not exactly the commit)."""
    try:
        res = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(line[3:] for line in res.stdout.splitlines() if len(line) > 3)


def write_results(results: dict[str, Any], out: Path) -> Path:
    """``out/results.json`` (written whole, then renamed: never a half-written file)."""
    from ctrlrnn.train.logs import replace_atomically

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
    results: dict[str, Any] = {"schema": SCHEMA, "started": started, "commit": _git_commit(repo),
                               "changed": _git_changed(repo), "budget_s": args.budget}  # fmt: skip
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
            env = dict(os.environ, PYTHONPATH=pythonpath)
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


# ------------------------------------------------------------------ the page


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ratio(slow: float | None, fast: float | None) -> float | None:
    if not slow or not fast:
        return None
    return slow / fast


def _qrnn_tables(q: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    batches, lengths, cells = q.get("batch", []), q.get("length", []), q.get("cells", {})
    for kind, label in (("infer", "inference"), ("train", "training (forward + backward)")):
        lines += [f"**{label}**: cuDNN LSTM time / QRNN time (above 1: the QRNN is faster)", "",
                  "| batch \\ length | " + " | ".join(str(t) for t in lengths) + " |",
                  "|---|" + "---:|" * len(lengths)]  # fmt: skip
        for b in batches:
            row = []
            for t in lengths:
                c = cells.get(f"{b}x{t}")
                row.append(_f(_ratio(c[f"lstm_{kind}_ms"], c[f"qrnn_{kind}_ms"]), 1) if c else "-")
            lines.append(f"| {b} | " + " | ".join(row) + " |")
        lines.append("")
    small = [
        _ratio(c["lstm_infer_ms"], c["qrnn_infer_ms"])
        for k, c in cells.items() if int(k.split("x")[0]) <= 32
    ]  # fmt: skip
    small = [s for s in small if s]
    if small:
        lines += [f"At batch 8-32 the inference speedup ranges {min(small):.1f}x-"
                  f"{max(small):.1f}x (paper: up to {q.get('paper_max', QRNN_PAPER_MAX):.0f}x on "
                  "a K40).", ""]  # fmt: skip
    if q.get("skipped"):
        lines += [f"Not measured (time budget): {', '.join(q['skipped'])}.", ""]
    return lines


def _pair_table(d: dict[str, Any], paper: bool = False) -> list[str]:
    head = "| batch | length | width | train ms (ours) | train ms (baseline) | train ratio |" \
        " inference ms (ours) | inference ms (baseline) | inference ratio |"
    sep = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if paper:
        head += " paper train ratio | paper inference ratio |"
        sep += "---:|---:|"
    lines = [f"{d.get('ours', 'ours')} against {d.get('baseline', 'the baseline')}; ratio = "
             "our time / baseline time (below 1: faster than the baseline).", "", head, sep]
    for r in d.get("rows", []):
        cells = [r["batch"], r["length"], r["width"], _f(r["ours_train_ms"]),
                 _f(r["base_train_ms"]), _f(_ratio(r["ours_train_ms"], r["base_train_ms"])),
                 _f(r["ours_infer_ms"]), _f(r["base_infer_ms"]),
                 _f(_ratio(r["ours_infer_ms"], r["base_infer_ms"]))]  # fmt: skip
        if paper:
            cells += [_f(r.get("paper_train_ratio")), _f(r.get("paper_infer_ratio"))]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if d.get("skipped"):
        lines += ["", f"Not measured (time budget): {', '.join(d['skipped'])}."]
    return [*lines, ""]


def _section(title: str, d: dict[str, Any] | None, body: Callable[[dict[str, Any]], list[str]]
             ) -> list[str]:  # fmt: skip
    lines = [f"### {title}", ""]
    if not d:
        return [*lines, "Not run.", ""]
    if "error" in d:
        return [*lines, f"Failed: `{d['error']}`", ""]
    return lines + body(d)


def _scan_body(s: dict[str, Any]) -> list[str]:
    Bn, Tn, C = s["shape"]
    verdict = _goal_verdict(s, "fraction")
    return [f"Linear scan forward + backward at B={Bn}, T={Tn}, C={C} ({s['dtype']}): "
            f"{_f(s['scan']['median_ms'])} ms, moving {s['bytes'] / 1e9:.2f} GB (8 passes: read "
            "a, b, write h; read the output gradient, a, h, write da, db) at "
            f"{s['scan_gbps']:.0f} GB/s. The device's copy bandwidth in the same run (torch copy "
            f"of the same bytes): {s['copy_gbps']:.0f} GB/s. The scan reaches "
            f"**{100 * s['fraction']:.0f}%** of it through the autograd op, which {verdict} the "
            f"goal of {100 * s.get('goal', 0.8):.0f}%.", "", *_scan_kernels_line(s),
            *_scan_steady_line(s)]  # fmt: skip


def _goal_verdict(s: dict[str, Any], key: str) -> str:
    """Whether the scan's ``s[key]`` share of the copy bandwidth meets its goal."""
    return "meets" if s[key] >= s.get("goal", 0.8) else "is below"


def _scan_kernels_line(s: dict[str, Any]) -> list[str]:
    """The kernels-alone measurement (results from before it existed have none)."""
    if "kernels_fraction" not in s:
        return []
    verdict = _goal_verdict(s, "kernels_fraction")
    k = s["kernels"]
    return [f"The two Triton kernels alone (forward and backward launchers called back to back, "
            f"{k['pairs']} pairs per timed sample, no autograd): {_f(k['pair_ms'])} ms per pair, "
            f"{s['kernels_gbps']:.0f} GB/s, **{100 * s['kernels_fraction']:.0f}%** of the copy "
            f"bandwidth, which {verdict} the goal. The difference between the two figures is the "
            "autograd op's own cost per call (Python, the autograd engine, launches), which one "
            "call at this size does not hide.", ""]  # fmt: skip


def _scan_steady_line(s: dict[str, Any]) -> list[str]:
    """The autograd op called back to back (results from before it existed have none)."""
    if "steady_fraction" not in s:
        return []
    verdict = _goal_verdict(s, "steady_fraction")
    k = s["steady"]
    return [f"The autograd op called back to back, as a training loop calls it ({k['calls']} "
            f"forward+backward calls per timed sample, so the CPU's work runs ahead of the GPU): "
            f"{_f(k['call_ms'])} ms per call, {s['steady_gbps']:.0f} GB/s, "
            f"**{100 * s['steady_fraction']:.0f}%** of the copy bandwidth, which {verdict} the "
            "goal.", ""]  # fmt: skip


def render_page(results: dict[str, Any] | None) -> str:
    """``docs/gpu.md`` from a results dict (None: the page before any GPU run)."""
    lines = ["# ctrlrnn on the GPU", ""]
    if not results:
        lines += ["No GPU run has happened yet: the Triton kernels are tested in Triton's CPU "
                  "interpreter in CI (`tests/gpu/`), and the dispatch table by a test that mocks "
                  "CUDA. The first run of the check below replaces this page with its results.",
                  "", HOWTO]  # fmt: skip
        return "\n".join(lines)
    bench = results.get("bench", {})
    env = bench.get("environment", {}) if isinstance(bench, dict) else {}
    changed = results.get("changed") or []
    plus = f" with uncommitted changes to {', '.join(f'`{c}`' for c in changed)}" if changed else ""
    lines += [f"Measured by `scripts/gpu-check` on {results.get('started', '?')} (commit "
              f"`{(results.get('commit') or '?')[:12]}`{plus}, "
              f"{_f(results.get('elapsed_s'), 0)} s in all).", "",
              "| | |", "|---|---|",
              f"| device | {env.get('device', '?')} (compute capability "
              f"{env.get('capability', '?')}, {env.get('sms', '?')} SMs, "
              f"{env.get('memory_gib', '?')} GiB) |",
              f"| torch | {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}, cuDNN "
              f"{env.get('cudnn', '?')}) |",
              f"| triton | {env.get('triton', '?')} |",
              f"| python | {env.get('python', '?')} |"]  # fmt: skip
    inst = results.get("install")
    if inst:
        lines.append(f"| install | {inst['mode']} ({inst['seconds']} s) |")
    for fam, line in (env.get("cuda_backends") or {}).items():
        lines.append(f"| CUDA backend: {fam} | {line} |")
    lines.append("")
    tests = results.get("tests")
    lines += ["## CUDA tests", ""]
    if tests:
        status = "all passed" if tests.get("ok") else "**FAILURES**"
        lines += [f"`{tests['command']}`: {tests['passed']} passed, {tests['failed']} failed, "
                  f"{tests['errors']} errors, {tests['skipped']} skipped ({tests['seconds']} s): "
                  f"{status}.", ""]  # fmt: skip
        for name in tests.get("failing", [])[:40]:
            lines.append(f"- failed: `{name}`")
        if tests.get("failing"):
            lines.append("")
    else:
        lines += ["Not run.", ""]
    lines += ["## Benchmarks", ""]
    if isinstance(bench, dict) and "error" in bench:
        lines += [f"Failed: `{bench['error']}`", ""]
    else:
        st = bench.get("settings", {})
        lines += [f"Timer: {st.get('timer', '?')}, {st.get('statistic', '?')} of repeats after "
                  f"a warm-up; TF32 {'on' if st.get('tf32') else 'off'}; fp32.", ""]
        lines += _section("Linear scan vs copy bandwidth", bench.get("scan"), _scan_body)
        lines += _section(f"QRNN vs cuDNN LSTM (QRNN paper figure 4, {QRNN_HIDDEN} units)",
                          bench.get("qrnn_fig4"), _qrnn_tables)  # fmt: skip
        lines += _section("RCRN vs 3-layer cuDNN BiLSTM (RCRN paper table 10)",
                          bench.get("rcrn_table10"), lambda d: _pair_table(d, paper=True))
        lines += _section("CAS-LSTM vs 2-layer cuDNN LSTM", bench.get("caslstm"), _pair_table)
        lines += _section("METAGROSS vs cuDNN LSTM", bench.get("metagross"), _pair_table)
        lines += _section("METAGROSS as printed (gates='state') vs cuDNN LSTM",
                          bench.get("metagross_state"), _pair_table)
    lines += [HOWTO]
    return "\n".join(lines)


def render_file(results_path: Path, page: Path) -> None:
    """Re-render ``page`` from a results file."""
    page.write_text(render_page(json.loads(Path(results_path).read_text())))


# ------------------------------------------------------------------ command line


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", help="folder for results.json, gpu.md and the test logs")
    p.add_argument("--repo", default=str(Path(__file__).resolve().parents[3]),
                   help="the working tree to install and test (default: this one)")
    p.add_argument("--python", default=os.environ.get("PYTHON", sys.executable),
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
