"""RCRN vs a 3-layer BiLSTM and CAS-LSTM vs a stacked LSTM: time ratios measured in one run.

Usage: ``python benchmarks/rcrn_cas_vs_lstm.py [--repeats 5] [--threads 0] [--only rcrn|cas]``.

* RCRN (200 units, bidirectional, B=32, T=256, input 200) vs ``torch.nn.LSTM(200, 200,
  num_layers=3, bidirectional=True)`` (the paper's runtime comparison, section 4.4);
* CAS-LSTM (2 layers of 256) vs ``torch.nn.LSTM(256, 256, num_layers=2)``.

Each case reports the median of ``--repeats`` interleaved runs (A B A B ...) of forward+backward
and of forward alone (no grad), and the ratio to the baseline, plus the GEMM throughput measured
in the same run so the times can be placed on a roofline.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from ctrlrnn import CASLSTM, RCRN


def interleaved_medians(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median wall time of each function, run in turn after one warm-up each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def train_step(m: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        out, _ = m(x)
        out.sum().backward()
        m.zero_grad(set_to_none=True)
        x.grad = None

    return run


def infer_step(m: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            m(x)

    return run


def gemm_gflops(n: int = 1024, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = interleaved_medians({"mm": lambda: torch.mm(a, b)}, repeats)["mm"]
    return 2 * n**3 / t / 1e9


def compare(
    name: str, ours: torch.nn.Module, base: torch.nn.Module, x: torch.Tensor, repeats: int
) -> None:
    fb = interleaved_medians({"ours": train_step(ours, x), "base": train_step(base, x)}, repeats)
    fo = interleaved_medians({"ours": infer_step(ours, x), "base": infer_step(base, x)}, repeats)
    print(
        f"{name}: fwd+bwd {fb['ours'] * 1e3:.0f} ms vs {fb['base'] * 1e3:.0f} ms "
        f"= {fb['ours'] / fb['base']:.2f}x | fwd {fo['ours'] * 1e3:.0f} ms vs "
        f"{fo['base'] * 1e3:.0f} ms = {fo['ours'] / fo['base']:.2f}x"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--only", choices=["rcrn", "cas"], default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"GEMM {gemm_gflops():.0f} GFLOP/s")  # fmt: skip
    if args.only in (None, "rcrn"):
        x = torch.randn(256, 32, 200, requires_grad=True)
        compare(
            "RCRN(200, bi) vs 3L-BiLSTM(200)",
            RCRN(200, 200, bidirectional=True),
            torch.nn.LSTM(200, 200, num_layers=3, bidirectional=True),
            x,
            args.repeats,
        )
    if args.only in (None, "cas"):
        x = torch.randn(256, 32, 256, requires_grad=True)
        compare(
            "CAS-LSTM(256, 2 layers) vs LSTM(256, 2 layers)",
            CASLSTM(256, 256, num_layers=2),
            torch.nn.LSTM(256, 256, num_layers=2),
            x,
            args.repeats,
        )


if __name__ == "__main__":
    main()
