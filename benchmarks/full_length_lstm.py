"""``nn.LSTM`` training over sequences of one length: torch's own layers (oneDNN on the CPU)
against the fused cells (:func:`ctrlrnn.models.torch_rnn_lengths.run_full`), over a grid of
shapes, each point in a fresh process:
``python benchmarks/full_length_lstm.py [--repeats 7] [--threads 1] [--json FILE]``.

Each point times one forward and backward of a batch-first ``nn.LSTM`` (input width = hidden
width, except the pixel rows' one input) on both paths in turn, so a load on the machine slows
both alike; the speed-up is the median of the rounds' ratios (> 1: the fused cells are
faster). A process of its own per point keeps the earlier points' allocations out of a later
point's timing: in one process the grid's larger shapes left torch's path up to a third
faster at the char-level decoder's shape than the same point timed alone
(``--one-process`` times them that way, to compare). The ``rule`` column says which path
:func:`fused_training_faster` takes there, so the table shows where its threshold (``batch *
steps * hidden ** 2`` at least :data:`~ctrlrnn.models.torch_rnn_lengths.FUSED_TRAINING_WORK`)
sits against the measurement.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from ctrlrnn.bench.fresh_processes import child_failure
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


def run_point_alone(point: tuple[int, int, int, int, int], repeats: int, threads: int) -> dict:
    """:func:`run_point` in a fresh Python process; its row comes back as JSON."""
    command = [sys.executable, __file__, "--point", ",".join(map(str, point)),
               "--repeats", str(repeats), "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise child_failure(done, f"the process timing point {point}")
    return json.loads(done.stdout.splitlines()[-1])


def _point(text: str) -> tuple[int, int, int, int, int]:
    message = f"--point: five positive integers layers,input,hidden,batch,steps, got {text!r}"
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None
    if len(values) != 5 or min(values) < 1:
        raise argparse.ArgumentTypeError(message)
    return values  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--one-process", action="store_true",
                        help="time every point in this process instead of one process each")
    parser.add_argument("--point", type=_point, help=argparse.SUPPRESS)  # one point's row as JSON
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.point is not None:
        print(json.dumps(run_point(args.point, args.repeats)))
        return
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), median of {args.repeats} rounds, "
          f"{'one process' if args.one_process else 'a process per point'}")
    print("| layers | input → hidden | batch × steps | torch (ms) | fused cells (ms) | speed-up "
          "| rule |\n|---|---|---|---|---|---|---|")
    rows = []
    for point in GRID:
        r = (run_point(point, args.repeats) if args.one_process
             else run_point_alone(point, args.repeats, args.threads))
        rows.append(r)
        print(f"| {r['layers']} | {r['input']} → {r['hidden']} | {r['batch']} × {r['steps']} "
              f"| {r['torch_ms']:.2f} | {r['fused_ms']:.2f} | {r['speedup']:.2f}x "
              f"| {r['rule']} |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads,
                       "fresh_process_per_point": not args.one_process, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
