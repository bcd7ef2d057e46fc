"""The GPU benchmarks of ``scripts/gpu-check``, each within a time :class:`Budget`: the linear
scan against the copy bandwidth measured in the same run; the QRNN against cuDNN ``nn.LSTM``
over the QRNN paper's figure 4 grid; RCRN against a 3-layer cuDNN BiLSTM (RCRN paper table 10),
with its defaults (on CUDA the fused-cell engine) and with its controllers on cuDNN;
CAS-LSTM against a 2-layer cuDNN LSTM; nCARNN and METAGROSS (both readings) against a cuDNN
LSTM; the
fused cells' step loops launched step by step against the same loops replayed as CUDA graphs
(``CTRLRNN_CUDA_GRAPHS``).

Timings are medians of repeats after a warm-up, timed by CUDA events, the compared rows one
sample each in turn (:func:`ctrlrnn.timing.interleave`); a benchmark reduces its repeats
when its budget runs low and records the points it had no time for.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ctrlrnn import CARNN, CASLSTM, QRNN, RCRN, Metagross, __version__
from ctrlrnn.ops import backend, gpu
from ctrlrnn.ops.gpu import step_graphs
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.timing import Timer, cuda_event_seconds, interleave

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


class Budget:
    """Seconds left before a deadline (``time.monotonic``)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.deadline - time.monotonic()

    def share(self, seconds: float) -> Budget:
        """A sub-budget of ``seconds`` (never past this one's deadline)."""
        sub = Budget(0.0)
        sub.deadline = min(self.deadline, time.monotonic() + seconds)
        return sub


def time_interleaved(fns: Sequence[Callable[[], Any]], warmup: int, repeats: int,
                     budget: Budget | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Median milliseconds of each of ``fns``, one sample of each in turn, by CUDA events.

    Stops adding repeats (at least one) when ``budget`` runs out.
    """
    deadline = None if budget is None else budget.deadline
    timers = [Timer(fn, warmup=warmup, repeats=repeats, min_repeats=1, deadline=deadline,
                    clock=cuda_event_seconds) for fn in fns]  # fmt: skip
    for t in timers:
        t.warm_up()
    torch.cuda.synchronize()
    out = []
    for timing in interleave(timers):
        ms = [s * 1e3 for s in timing.samples_s]
        out.append({"median_ms": timing.median_s * 1e3, "repeats": len(ms),
                    "spread_ms": (max(ms) - min(ms)) if len(ms) > 1 else 0.0})  # fmt: skip
    return out


def _train_step(module: Any, inputs: Sequence[Any], grad_seed: int = 0) -> Callable[[], None]:
    """Forward + backward of ``module(*inputs)[0]`` with a fixed output gradient."""
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
    # the Triton kernels' module imports triton (the `gpu` extra): only when this benchmark runs
    from ctrlrnn.ops.linear_scan.triton_kernels import linear_scan_backward, linear_scan_forward

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
    return {"ours": "RCRN (bidirectional, LSTM cells, per-direction listener; controllers="
                    "'auto')",
            "baseline": "cuDNN nn.LSTM, 3 layers, bidirectional", "rows": rows,
            "skipped": skipped}  # fmt: skip


#: The lengths of the RCRN rows with the controllers on cuDNN (a subset of table 10's).
RCRN_NATIVE_LENGTH = (16, 64, 256)


def bench_rcrn_native(budget: Budget) -> dict[str, Any]:
    """RCRN with ``controllers="native"``: its three RNNs a layer on cuDNN (both directions per
    call), the listener fused: the construction ``controllers="auto"`` took on CUDA before the
    fused engine measured faster."""
    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = RCRN(W, W, bidirectional=True, batch_first=True, controllers="native").cuda()
        base = torch.nn.LSTM(W, W, num_layers=3, bidirectional=True, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build,
                               [(RCRN_BATCH, t, RCRN_DIM) for t in RCRN_NATIVE_LENGTH])
    return {"ours": "RCRN (controllers='native': the three RNNs of a layer on cuDNN, the "
                    "listener fused)",
            "baseline": "cuDNN nn.LSTM, 3 layers, bidirectional", "rows": rows,
            "skipped": skipped}  # fmt: skip


def bench_caslstm(budget: Budget) -> dict[str, Any]:
    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = CASLSTM(W, W, num_layers=2, batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, num_layers=2, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "CASLSTM, 2 layers", "baseline": "cuDNN nn.LSTM, 2 layers", "rows": rows,
            "skipped": skipped}  # fmt: skip


#: The context vector's size in the CARNN rows.
CARNN_CONTEXT = 64


def bench_carnn(budget: Budget) -> dict[str, Any]:
    """nCARNN (gates from the input and an external context, eq 3-6 of the CARNN paper) against
    a cuDNN LSTM of the same width."""
    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = CARNN(W, W, CARNN_CONTEXT, variant="n", batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, batch_first=True).cuda()
        return ours, base, [torch.randn(Bn, CARNN_CONTEXT, device="cuda")]

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": f"CARNN, variant 'n' (nCARNN), context size {CARNN_CONTEXT}",
            "baseline": "cuDNN nn.LSTM, 1 layer", "rows": rows, "skipped": skipped}


def bench_metagross(budget: Budget) -> dict[str, Any]:
    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = Metagross(W, W, depth=2, base="linear", batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "Metagross, depth 2, linear base, token depth gates, residual",
            "baseline": "cuDNN nn.LSTM, 1 layer", "rows": rows, "skipped": skipped}


def bench_metagross_state(budget: Budget) -> dict[str, Any]:
    def build(Bn: int, Tn: int, W: int) -> tuple[Any, Any, list[Any]]:
        torch.manual_seed(0)
        ours = Metagross(W, W, depth=2, gates="state", batch_first=True).cuda()
        base = torch.nn.LSTM(W, W, batch_first=True).cuda()
        return ours, base, []

    rows, skipped = _pair_rows(budget, build, ARCH_POINTS)
    return {"ours": "Metagross as printed (gates='state'), depth 2, linear base, residual",
            "baseline": "cuDNN nn.LSTM, 1 layer", "rows": rows, "skipped": skipped}


#: The lengths of the CUDA-graph rows (batch 32, width 200: RCRN's table 10 setting).
GRAPHS_LENGTH = (16, 64, 256)


def _graphs(fn: Callable[[], None], on: bool) -> Callable[[], None]:
    """``fn`` with the fused cells' step loops as CUDA graphs (``on``) or launched per step."""
    def step() -> None:
        before = step_graphs.GRAPHS.force
        step_graphs.GRAPHS.force = on
        try:
            fn()
        finally:
            step_graphs.GRAPHS.force = before

    return step


def bench_cells_graphs(budget: Budget) -> dict[str, Any]:
    """RCRN on the fused engine (six LSTMs a layer as one stack) and a 2-layer CAS-LSTM, their
    step loops launched per step from Python against the same loops captured in CUDA graphs,
    beside the cuDNN baseline; the warm-up's second call captures each graph."""
    models: dict[str, Callable[[int], tuple[Any, Any]]] = {
        "RCRN (controllers='fused')": lambda W: (
            RCRN(W, W, bidirectional=True, batch_first=True, controllers="fused"),
            torch.nn.LSTM(W, W, num_layers=3, bidirectional=True, batch_first=True)),
        "CAS-LSTM, 2 layers": lambda W: (
            CASLSTM(W, W, num_layers=2, batch_first=True),
            torch.nn.LSTM(W, W, num_layers=2, batch_first=True)),
    }  # fmt: skip
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    points = [(name, t) for name in models for t in GRAPHS_LENGTH]
    for i, (name, Tn) in enumerate(points):
        if budget.left() <= 0:
            skipped.append(f"{name} T={Tn}")
            continue
        torch.manual_seed(0)
        ours, base = (m.cuda() for m in models[name](RCRN_DIM))
        x = torch.randn(RCRN_BATCH, Tn, RCRN_DIM, device="cuda")
        xr = x.clone().requires_grad_()
        captures = step_graphs.GRAPHS.captures
        reps = _reps(budget, 2 * (len(points) - i), 8e-3 * (1 + Tn / 64), cap=15)
        t_inf = time_interleaved([_graphs(_infer(ours, [x]), False),
                                  _graphs(_infer(ours, [x]), True), _infer(base, [x])],
                                 2, reps, budget)  # fmt: skip
        t_tr = time_interleaved([_graphs(_train_step(ours, [xr]), False),
                                 _graphs(_train_step(ours, [xr]), True),
                                 _train_step(base, [xr])], 2, reps, budget)  # fmt: skip
        row: dict[str, Any] = {"model": name, "batch": RCRN_BATCH, "length": Tn,
                               "width": RCRN_DIM}
        for what, timed in (("train", t_tr), ("infer", t_inf)):
            for k, how in enumerate(("launched", "graphs", "base")):
                row[f"{how}_{what}_ms"] = timed[k]["median_ms"]
        row["captures"] = step_graphs.GRAPHS.captures - captures
        row["repeats"] = t_tr[0]["repeats"]
        rows.append(row)
        step_graphs.GRAPHS.clear()  # each point's graphs hold its activations: free them
        del ours, base, x, xr
    return {"baseline": "cuDNN nn.LSTM (3-layer BiLSTM for RCRN, 2-layer LSTM for CAS-LSTM)",
            "rows": rows, "skipped": skipped}


def device_info() -> dict[str, Any]:
    """The device and the software versions (of this process)."""
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "cudnn": None, "triton": None}
    try:
        import triton  # the `gpu` extra: recorded as missing rather than failing the check

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
        info["ctrlrnn"] = __version__
        # not backend_info(): it builds the CPU extensions, minutes of the budget
        info["cuda_backends"] = {f: backend._cuda_status(f) for f in gpu.FAMILIES}
    except Exception as exc:  # noqa: BLE001
        info["cuda_backends"] = {"error": f"{type(exc).__name__}: {exc}"}
    return info
