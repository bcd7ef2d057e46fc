"""METAGROSS (depth 2, linear base) vs torch.nn.LSTM: forward+backward time, one run.

Usage: ``python benchmarks/metagross_vs_lstm.py [--hidden 256 --batch 32 --steps 256]``.
Prints the median of several repeats for each layer and their ratio (both measured here, in
the same process), plus a GEMM-throughput reference so the numbers can be put on a roofline.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from ctrlrnn.nn.metagross import Metagross


def interleaved_medians(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median wall time of each function, run in turn (A B C A B C ...) after one warm-up each,
    so that a change in machine load hits all of them alike."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--recurrence", default="h")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    H, B, T = args.hidden, args.batch, args.steps
    x = torch.randn(T, B, H, requires_grad=True)
    lstm = torch.nn.LSTM(H, H)
    mg = Metagross(H, H, depth=args.depth, base="linear", recurrence=args.recurrence)

    def step(m: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            out, _ = m(x)
            out.sum().backward()
            m.zero_grad(set_to_none=True)
            x.grad = None

        return run

    a = torch.randn(B * T, 4 * H)
    w = torch.randn(4 * H, 2 * H)
    xa = torch.randn(B * T, 2 * H)
    fns = {
        "gemm": lambda: torch.mm(xa, w.t()),
        "copy": lambda: a.clone(),
        "lstm": step(lstm),
        "metagross": step(mg),
    }
    t = interleaved_medians(fns, args.repeats)
    gflops = 2 * B * T * 2 * H * 4 * H / t["gemm"] / 1e9
    gbs = 2 * a.numel() * 4 / t["copy"] / 1e9
    print(f"threads={torch.get_num_threads()} H={H} B={B} T={T} depth={args.depth} "
          f"recurrence={args.recurrence}")
    print(f"GEMM {gflops:.1f} GFLOP/s, copy {gbs:.1f} GB/s (same run)")
    print(f"torch.nn.LSTM   fwd+bwd median {t['lstm'] * 1e3:8.1f} ms")
    print(f"Metagross       fwd+bwd median {t['metagross'] * 1e3:8.1f} ms")
    print(f"ratio Metagross / LSTM = {t['metagross'] / t['lstm']:.2f}")


if __name__ == "__main__":
    main()
