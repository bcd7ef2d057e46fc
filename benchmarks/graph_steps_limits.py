"""Where a short call that records a graph runs faster by steps than by the whole-sequence path:
forward+backward of an RCRN and a METAGROSS layer (both gate forms) at batches 1 and 4, widths
8 to 256, lengths 1 to 4, each path timed in the same process (medians of 5 repeats), one
thread. The limits in ``graph_steps`` (ctrlrnn/nn/rcrn.py, ctrlrnn/nn/metagross.py) come from
this table; docs/overhead.md has it.

Usage: python benchmarks/graph_steps_limits.py [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import ctrlrnn
from ctrlrnn.nn import base


def _median_us(fn: Callable[[], None], calls: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


UNITS: dict[str, Callable[[int], torch.nn.Module]] = {
    "RCRN": lambda H: ctrlrnn.RCRN(H, H),
    "METAGROSS": lambda H: ctrlrnn.Metagross(H, H),
    "METAGROSS as printed": lambda H: ctrlrnn.Metagross(H, H, gates="state"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fits = base.graph_steps_fit
    print("| unit | H | B | T | weight-gradient work | by steps (us) | whole (us) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, make in UNITS.items():
        for H in (8, 64, 256):
            for B in (1, 4):
                for T in (1, 2, 4):
                    layer, x = make(H), torch.randn(T, B, H)
                    with torch.no_grad():
                        state = layer(x)[1]

                    def call(layer: torch.nn.Module = layer, x: torch.Tensor = x,
                             state: object = state) -> None:
                        layer(x, state)[0].sum().backward()

                    calls = max(3, 20000 // (H * T * B))
                    base.graph_steps_fit = lambda module, x: True
                    steps = _median_us(call, calls)
                    base.graph_steps_fit = lambda module, x: False
                    whole = _median_us(call, calls)
                    base.graph_steps_fit = fits
                    work = B * T * sum(p.numel() for p in layer.parameters())
                    print(f"| {name} | {H} | {B} | {T} | {work:.2g} | {steps:.0f} | "
                          f"{whole:.0f} | {steps / whole:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
