"""Where the linear scan's autograd op spends its time on a CUDA GPU, and how fast its kernels run
at each launch configuration.

The GPU check (``scripts/gpu-check``, docs/gpu.md) reports the scan's forward+backward against
the device's copy bandwidth three ways: one call, the two kernels alone, and the autograd op
called back to back. This script explains the differences:

1. ``overhead``: the host's time per call of each layer of the op at a tiny shape, where the
   GPU's work is negligible and a loop of calls is bound by the host: one native torch launch,
   ``torch.cumsum`` forward+backward (torch's own autograd), the Triton launchers, the op
   without and with autograd, and a bare ``torch.autograd.Function`` around the launchers.
2. ``profile``: ``cProfile`` of the op's forward (with grad) and of the backward launcher at the
   tiny shape: the Python functions the host time goes to.
3. ``big``: at the benchmark's shape, CUDA-event medians of the copy, the kernels, the op and
   the bare Function, each called back to back (``--pairs`` calls a timing, 10 by default),
   and the host's own time to issue one call.
4. ``trace``: ``torch.profiler`` of three forward+backward calls at the benchmark's shape: every
   GPU kernel the op launches, with its time.
5. ``sweep``: the forward and backward kernels alone at the benchmark's shape for each channel
   block, warp count and time tile, as a fraction of the copy bandwidth.

Usage: ``python benchmarks/gpu_scan_overhead.py --out results.json [--skip sweep,trace]``.
With ``TRITON_INTERPRET=1`` and ``--device cpu`` it runs at tiny shapes on the CPU (a smoke test
of the script; its timings mean nothing).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import ctrlrnn
from ctrlrnn.ops.linear_scan import triton_kernels as tk
from ctrlrnn.timing import cuda_event_seconds

_scan_module = importlib.import_module("ctrlrnn.ops.linear_scan")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_us_per_call(fn: Callable[[], Any], device: torch.device, calls: int,
                     repeats: int = 5) -> float:  # fmt: skip
    """Median wall microseconds per call over ``calls`` calls then one synchronisation: the host's
    cost per call where the GPU's work per call is shorter than it."""
    for _ in range(max(3, calls // 10)):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def cuda_ms(fns: dict[str, Callable[[], Any]], repeats: int, device: torch.device
            ) -> dict[str, float]:  # fmt: skip
    """Median milliseconds of each function, one sample of each in turn (CUDA events on a GPU,
    the wall clock on the CPU)."""
    for fn in fns.values():
        fn()
        fn()
    _sync(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                times[name].append(cuda_event_seconds(fn) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


class _Bare(torch.autograd.Function):
    """The least an autograd op around the two launchers can do: no checks, no dispatch."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out, _ = tk.linear_scan_forward(a, b, None, None, False)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, out = ctx.saved_tensors
        da, db, _ = tk.linear_scan_backward(g, None, a, out, None, None, False)
        return da, db


def _inputs(shape: tuple[int, int, int], device: torch.device, grad: bool
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    a = torch.rand(*shape, device=device).requires_grad_(grad)
    b = torch.randn(*shape, device=device).requires_grad_(grad)
    return a, b, torch.randn(*shape, device=device)


def _layers(shape: tuple[int, int, int], device: torch.device) -> dict[str, Callable[[], Any]]:
    """The op's layers, each a call of no arguments."""
    a, b, g = _inputs(shape, device, grad=True)
    a_, b_ = a.detach(), b.detach()
    out_ = tk.linear_scan_forward(a_, b_, None, None, False)[0]
    x = torch.randn(*shape, device=device, requires_grad=True)

    def cumsum_fwd_bwd() -> None:
        x.grad = None
        x.cumsum(1).backward(g)

    def op_fwd_bwd() -> None:
        a.grad = b.grad = None
        ctrlrnn.linear_scan(a, b).backward(g)

    def bare_fwd_bwd() -> None:
        a.grad = b.grad = None
        _Bare.apply(a, b).backward(g)

    def empties() -> None:
        torch.empty_like(a_), torch.empty_like(a_), torch.empty_like(a_)

    import triton

    batch, length, channels = shape
    last_ = torch.empty(batch, channels, device=device)
    block = 16 if tk.interpreting() else 64

    def jit_direct() -> None:
        # the kernel the autotuner would launch, launched without it
        tk._scan_fwd_kernel[(batch, triton.cdiv(channels, block), 1)](
            a_,
            b_,
            a_,
            a_,
            out_,
            last_,
            a_,
            a_,
            batch,
            length,
            channels,
            length,
            1,
            HAS_INIT=False,
            HAS_LEN=False,
            REVERSE=False,
            SUMMARY=False,
            ACC=tk.acc_dtype(a_.dtype),
            STEPS=tk._STEPS_FWD,
            BLOCK=block,
            num_warps=1,
        )

    return {
        "torch add_ (one native launch)": lambda: a_.add_(0.0),
        "three torch.empty_like": empties,
        "torch cumsum fwd+bwd (torch's autograd)": cumsum_fwd_bwd,
        "forward launcher (autotuned kernel)": lambda: tk.linear_scan_forward(
            a_, b_, None, None, False
        ),
        "forward kernel launched without the autotuner": jit_direct,
        "backward launcher (autotuned kernel)": lambda: tk.linear_scan_backward(
            g, None, a_, out_, None, None, False
        ),
        "op, no grad": lambda: ctrlrnn.linear_scan(a_, b_),
        "op forward, with grad": lambda: ctrlrnn.linear_scan(a, b),
        "op fwd+bwd": op_fwd_bwd,
        "bare autograd.Function fwd+bwd": bare_fwd_bwd,
    }


def overhead(shape: tuple[int, int, int], device: torch.device, calls: int) -> dict[str, float]:
    return {
        name: host_us_per_call(fn, device, calls) for name, fn in _layers(shape, device).items()
    }


def profile(shape: tuple[int, int, int], device: torch.device, calls: int) -> dict[str, str]:
    """cProfile tables (top 25 by own time) of the op's forward with grad and of the backward
    launcher, ``calls`` calls each."""
    layers = _layers(shape, device)
    out = {}
    for name in ("op forward, with grad", "backward launcher (autotuned kernel)"):
        fn = layers[name]
        for _ in range(20):
            fn()
        _sync(device)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        _sync(device)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        out[name] = buf.getvalue()
    return out


def _timed_backward(cls: Any, stamps: list[int]) -> Callable[..., Any]:
    """Replace ``cls.backward`` by one that appends its entry and exit times to ``stamps``;
    returns the original, to put back."""
    original = cls.backward

    def backward(ctx: Any, *grads: Any) -> Any:
        stamps.append(time.perf_counter_ns())
        out = original(ctx, *grads)
        stamps.append(time.perf_counter_ns())
        return out

    cls.backward = staticmethod(backward)
    return original


def handoff(shape: tuple[int, int, int], device: torch.device, calls: int) -> dict[str, Any]:
    """Where a ``.backward()`` call's host time goes, for the op and for the bare Function:
    from the call to the Python backward's start (the engine and its thread taking over), the
    Python backward itself, and from its end to the call's return (medians, microseconds)."""
    a, b, g = _inputs(shape, device, grad=True)
    op_cls = _scan_module._linear_scan.eager.__self__
    res: dict[str, Any] = {}
    for name, cls, forward in (("op", op_cls, lambda: ctrlrnn.linear_scan(a, b)),
                               ("bare", _Bare, lambda: _Bare.apply(a, b))):  # fmt: skip
        stamps: list[int] = []
        original = _timed_backward(cls, stamps)
        rows = []
        try:
            for i in range(calls + 20):
                a.grad = b.grad = None
                out = forward()
                _sync(device)
                stamps.clear()
                t0 = time.perf_counter_ns()
                out.backward(g)
                t3 = time.perf_counter_ns()
                if i >= 20 and len(stamps) == 2:
                    rows.append((stamps[0] - t0, stamps[1] - stamps[0], t3 - stamps[1]))
        finally:
            cls.backward = staticmethod(original)
        res[name] = {part: statistics.median(r[k] for r in rows) / 1e3 for k, part in
                     enumerate(("to backward", "python backward", "after backward"))}  # fmt: skip
    return res


def big(shape: tuple[int, int, int], device: torch.device, repeats: int,
        pairs: int = 10) -> dict[str, Any]:
    """Back-to-back medians at the benchmark's shape (``pairs`` calls a timing), and the host's
    time to issue a call."""
    a, b, g = _inputs(shape, device, grad=True)
    a_, b_ = a.detach(), b.detach()
    n = a.numel() * a.element_size()
    scan_bytes = 8 * n
    src = torch.empty(scan_bytes // 2 // 4, device=device)
    dst = torch.empty_like(src)

    def kernels() -> None:
        for _ in range(pairs):
            out, _ = tk.linear_scan_forward(a_, b_, None, None, False)
            tk.linear_scan_backward(g, None, a_, out, None, None, False)

    def ops() -> None:
        for _ in range(pairs):
            a.grad = b.grad = None
            ctrlrnn.linear_scan(a, b).backward(g)

    def bares() -> None:
        for _ in range(pairs):
            a.grad = b.grad = None
            _Bare.apply(a, b).backward(g)

    def forwards() -> None:
        for _ in range(pairs):
            tk.linear_scan_forward(a_, b_, None, None, False)

    out_ = tk.linear_scan_forward(a_, b_, None, None, False)[0]

    def backwards() -> None:
        for _ in range(pairs):
            tk.linear_scan_backward(g, None, a_, out_, None, None, False)

    ms = cuda_ms({"copy": lambda: dst.copy_(src), "kernels": kernels, "op": ops, "bare": bares,
                  "forward kernel": forwards, "backward kernel": backwards},
                 repeats, device)  # fmt: skip
    copy_gbps = scan_bytes / (ms["copy"] / 1e3) / 1e9
    res: dict[str, Any] = {"shape": list(shape), "scan_bytes": scan_bytes, "copy_ms": ms["copy"],
                           "copy_gbps": copy_gbps}  # fmt: skip
    for name, passes in (("kernels", 8), ("op", 8), ("bare", 8), ("forward kernel", 3),
                         ("backward kernel", 5)):  # fmt: skip
        per_call = ms[name] / pairs
        gbps = passes * n / (per_call / 1e3) / 1e9
        res[name] = {"ms_per_call": per_call, "gbps": gbps, "fraction": gbps / copy_gbps}
    # the host's time to issue one op call (no synchronisation inside the timed loop)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(pairs):
        a.grad = b.grad = None
        ctrlrnn.linear_scan(a, b).backward(g)
    res["op host ms per call (issue only)"] = (time.perf_counter() - t0) / pairs * 1e3
    _sync(device)
    return res


def trace(shape: tuple[int, int, int], device: torch.device) -> str:
    """torch.profiler's table of three forward+backward calls: every kernel and host op."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    a, b, g = _inputs(shape, device, grad=True)
    for _ in range(3):
        a.grad = b.grad = None
        ctrlrnn.linear_scan(a, b).backward(g)
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with tprofile(activities=acts) as prof:
        for _ in range(3):
            a.grad = b.grad = None
            ctrlrnn.linear_scan(a, b).backward(g)
        _sync(device)
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=30)


def sweep(shape: tuple[int, int, int], device: torch.device, repeats: int,
          blocks: list[tuple[int, int]], steps: list[int]) -> list[dict[str, Any]]:  # fmt: skip
    """The sequential kernels alone for each (channel block, warps) and time tile."""
    import triton

    batch, length, channels = shape
    a, b, g = _inputs(shape, device, grad=False)
    n = a.numel() * a.element_size()
    src = torch.empty(8 * n // 2 // 4, device=device)
    dst = torch.empty_like(src)
    out = torch.empty_like(a)
    last = torch.empty(batch, channels, device=device)
    da, db = torch.empty_like(a), torch.empty_like(a)
    dh0 = torch.empty_like(last)
    acc = tk.acc_dtype(a.dtype)
    rows = []
    for st in steps:
        for block, warps in blocks:
            grid = (batch, triton.cdiv(channels, block), 1)
            common = dict(HAS_LEN=False, REVERSE=False, ACC=acc, STEPS=st, BLOCK=block,
                          num_warps=warps, SUMMARY=False)  # fmt: skip

            def fwd(grid=grid, common=common) -> None:
                tk._scan_fwd_kernel[grid](a, b, a, a, out, last, a, a, batch, length, channels,
                                          length, 1, HAS_INIT=False, **common)  # fmt: skip

            def bwd(grid=grid, common=common) -> None:
                tk._scan_bwd_kernel[grid](g, a, out, a, a, a, da, db, dh0, a, a, batch, length,
                                          channels, length, 1, HAS_G=True, HAS_INIT=False,
                                          HAS_H0=False, **common)  # fmt: skip

            try:
                ms = cuda_ms({"copy": lambda: dst.copy_(src), "fwd": fwd, "bwd": bwd}, repeats,
                             device)  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - a configuration that does not compile
                rows.append({"steps": st, "block": block, "warps": warps,
                             "error": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip
                continue
            copy_gbps = 8 * n / (ms["copy"] / 1e3) / 1e9
            pair = ms["fwd"] + ms["bwd"]
            rows.append({
                "steps": st, "block": block, "warps": warps,
                "fwd_ms": ms["fwd"], "bwd_ms": ms["bwd"],
                "fwd_fraction": 3 * n / (ms["fwd"] / 1e3) / 1e9 / copy_gbps,
                "bwd_fraction": 5 * n / (ms["bwd"] / 1e3) / 1e9 / copy_gbps,
                "pair_fraction": 8 * n / (pair / 1e3) / 1e9 / copy_gbps,
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--device", default="cuda")
    p.add_argument("--skip", default="", help="comma-separated parts to skip")
    p.add_argument("--shape", default="32,1024,1024", help="B,T,C of the big parts")
    p.add_argument("--tiny", default="2,8,64", help="B,T,C of the host-bound parts")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--pairs", type=int, default=10, help="back-to-back calls a timing of big")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--blocks", default="32:1,64:1,64:2,128:1,128:2,128:4,256:1,256:2,256:4,512:4")
    p.add_argument("--steps", default="8,16,32")
    args = p.parse_args(argv)
    # checked before any part runs: a count of 0 would end the run in a later part, after the
    # earlier parts' device time was spent
    for name in ("calls", "pairs", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected a positive count, got {getattr(args, name)}")
    device = torch.device(args.device)
    skip = set(filter(None, args.skip.split(",")))
    shape = tuple(int(v) for v in args.shape.split(","))
    tiny = tuple(int(v) for v in args.tiny.split(","))
    res: dict[str, Any] = {
        "torch": torch.__version__,
        "device": (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
    }
    try:
        import triton

        res["triton"] = triton.__version__
    except ImportError:
        pass
    print(json.dumps(res), flush=True)

    def save() -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)

    if "overhead" not in skip:
        res["overhead_us"] = overhead(tiny, device, args.calls)
        print(json.dumps(res["overhead_us"], indent=1), flush=True)
        save()
    if "handoff" not in skip:
        res["handoff_us"] = handoff(tiny, device, args.calls)
        print(json.dumps(res["handoff_us"], indent=1), flush=True)
        save()
    if "profile" not in skip:
        res["profile"] = profile(tiny, device, args.calls)
        for name, text in res["profile"].items():
            print(f"--- {name}\n{text}", flush=True)
        save()
    if "big" not in skip:
        res["big"] = big(shape, device, args.repeats, args.pairs)
        print(json.dumps(res["big"], indent=1), flush=True)
        save()
    if "trace" not in skip:
        res["trace"] = trace(shape, device)
        print(res["trace"], flush=True)
        save()
    if "sweep" not in skip:
        blocks = [tuple(int(v) for v in s.split(":")) for s in args.blocks.split(",")]
        steps = [int(s) for s in args.steps.split(",")]
        res["sweep"] = sweep(shape, device, max(3, args.repeats // 2), blocks, steps)
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
