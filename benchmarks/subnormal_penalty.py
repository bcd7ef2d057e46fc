"""What subnormal float32 numbers cost this CPU: torch's ``mul`` over cache-resident tensors of
normal values against subnormal operands and normal operands with subnormal products, with and
without ``torch.set_flush_denormal(True)``:
``python benchmarks/subnormal_penalty.py [--values 65536] [--calls 2000] [--repeats 7]``.

The elementwise recurrences' kernels flush subnormals on x86 (``parallel_recurrence`` in
``ops/csrc/kernel_common.h``) because a long sequence's carried gradient decays into them;
this script shows whether the machine at hand would have paid for them. Each figure is the
median over the rounds of one ``mul``'s time, one thread.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

#: case -> (operand, multiplier)
CASES = {
    "normal": (1.0, 0.5),
    "subnormal operands and products": (1e-39, 0.999),
    "normal operands, subnormal products": (1e-37, 1e-2),
}


def time_mul(value: float, factor: float, values: int, calls: int, repeats: int) -> float:
    """Microseconds one ``torch.mul(x, g, out=...)`` takes, the median of ``repeats`` rounds."""
    x, g = torch.full((values,), value), torch.full((values,), factor)
    out = torch.empty_like(x)
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.mul(x, g, out=out)
        rounds.append((time.perf_counter() - start) / calls)
    return 1e6 * statistics.median(rounds)


def measure(values: int, calls: int, repeats: int) -> list[dict]:
    """Every case without flushing, then with it where the CPU can flush; flushing is left off
    (torch's default) after."""
    rows = []
    try:
        for flush in (False, True):
            if not torch.set_flush_denormal(flush) and flush:
                break  # the CPU cannot flush (not x86 with SSE3)
            base = None
            for case, (value, factor) in CASES.items():
                us = time_mul(value, factor, values, calls, repeats)
                base = base or us
                rows.append({"flush": flush, "case": case, "us": us, "ratio": us / base})
    finally:
        torch.set_flush_denormal(False)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=1 << 16)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, one "
          f"thread, {args.values} float32 values, median of {args.repeats} rounds of "
          f"{args.calls} calls")
    print("| flush | case | µs a call | against normal |\n|---|---|---|---|")
    for r in measure(args.values, args.calls, args.repeats):
        print(f"| {'on' if r['flush'] else 'off'} | {r['case']} | {r['us']:.1f} "
              f"| {r['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
