"""``nn.LSTM`` training over sequences of one length: torch's own layers (oneDNN on the CPU)
against the fused cells (:func:`ctrlrnn.models.torch_rnn_lengths.run_full`), timed in
alternation in one process, over a grid of shapes:
``python benchmarks/full_length_lstm.py [--repeats 7] [--threads 1] [--json FILE]``.

Each point times one forward and backward of a batch-first ``nn.LSTM`` (input width = hidden
width, except the pixel rows' one input) on both paths in turn, so a load on the machine slows
both alike; the speed-up is the median of the rounds' ratios (> 1: the fused cells are
faster). The ``rule`` column says which path :func:`fused_training_faster` takes there, so the
table shows where its threshold (``batch * steps * hidden ** 2`` at least
:data:`~ctrlrnn.models.torch_rnn_lengths.FUSED_TRAINING_WORK`) sits against the measurement.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.models.torch_rnn_lengths import fused_training_faster

#: (layers, input width, hidden width, batch, steps)
GRID = [(layers, hidden, hidden, batch, steps)
        for layers in (1, 2) for hidden in (64, 128, 256) for batch in (16, 64)
        for steps in (8, 32, 128, 512)]
#: the pixel classifier's and the char-level translation decoder's shapes
GRID += [(1, 1, 128, 64, 784), (2, 64, 128, 16, 170)]


def _timer(rnn: nn.LSTM, x: torch.Tensor, fused: bool) -> Callable[[], float]:
    def once() -> float:
        start = time.perf_counter()
        if fused:
            out, _ = torch_rnn_lengths._fused(rnn, x, None, None)
        else:
            out, _ = rnn(x)
        out.sum().backward()
        return time.perf_counter() - start
    return once


def run_point(point: tuple[int, int, int, int, int], repeats: int) -> dict:
    layers, width, hidden, batch, steps = point
    torch.manual_seed(0)
    rnn = nn.LSTM(width, hidden, num_layers=layers, batch_first=True)
    x = torch.randn(batch, steps, width, requires_grad=True)
    torch_path, fused = _timer(rnn, x, False), _timer(rnn, x, True)
    torch_path(), fused()  # warm-up
    rounds = [(torch_path(), fused()) for _ in range(repeats)]
    return {"layers": layers, "input": width, "hidden": hidden, "batch": batch, "steps": steps,
            "torch_ms": 1e3 * statistics.median(t for t, _ in rounds),
            "fused_ms": 1e3 * statistics.median(f for _, f in rounds),
            "speedup": statistics.median(t / f for t, f in rounds),
            "rule": "fused" if fused_training_faster(rnn, x) else "torch"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), median of {args.repeats} rounds")
    print("| layers | input → hidden | batch × steps | torch (ms) | fused cells (ms) | speed-up "
          "| rule |\n|---|---|---|---|---|---|---|")
    rows = []
    for point in GRID:
        r = run_point(point, args.repeats)
        rows.append(r)
        print(f"| {r['layers']} | {r['input']} → {r['hidden']} | {r['batch']} × {r['steps']} "
              f"| {r['torch_ms']:.2f} | {r['fused_ms']:.2f} | {r['speedup']:.2f}x "
              f"| {r['rule']} |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
