"""``nn.LSTM`` / ``nn.GRU`` over variable-length CPU batches: torch's packed run against the
fused cells (:mod:`ctrlrnn.models.torch_rnn_lengths`), timed in alternation in one process:
``python benchmarks/variable_length_encoders.py [--repeats 7] [--threads 1] [--json FILE]``.

Each case times one training call, forward and backward, of a ``SequenceEncoder`` at the
shapes of an experiment's baseline: the batch, the longest source, the lengths drawn uniformly
from a third of it to all of it (the longest present), the width and layers of its arm. A
round times both paths once each, in turn, so a load on the machine slows both alike; each
path's figure is its median over ``--repeats`` rounds, the speed-up the median of the rounds'
ratios. The outputs of the two paths are checked equal first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from ctrlrnn.models import torch_rnn_lengths
from ctrlrnn.models.encoders import SequenceEncoder

#: (name, unit, batch, longest, input width, hidden, layers, bidirectional)
CASES = [
    ("tree traversal n=5, BiLSTM", "lstm", 64, 63, 64, 64, 1, True),
    ("tree traversal n=5, S-BiLSTM", "lstm", 64, 63, 64, 64, 3, True),
    ("char translation, LSTM encoder", "lstm", 16, 200, 128, 128, 2, False),
    ("sentence pairs, BiLSTM", "lstm", 32, 40, 50, 128, 1, True),
    ("sentence pairs, BiGRU", "gru", 32, 40, 50, 128, 1, True),
]


@contextlib.contextmanager
def _path(fused: bool) -> Iterator[None]:
    """The fused cells where they apply (``fused``), else torch's packed run."""
    original = torch_rnn_lengths.fused_path
    if not fused:
        torch_rnn_lengths.fused_path = lambda rnn, x: False
    try:
        yield
    finally:
        torch_rnn_lengths.fused_path = original


def _timer(enc: SequenceEncoder, x: torch.Tensor, lengths: torch.Tensor,
           fused: bool) -> Callable[[], float]:
    def once() -> float:
        with _path(fused):
            start = time.perf_counter()
            out, _, _ = enc(x, lengths)
            out.sum().backward()
            return time.perf_counter() - start
    return once


def run_case(case: tuple, repeats: int) -> dict:
    name, unit, batch, longest, width, hidden, layers, bidirectional = case
    torch.manual_seed(0)
    enc = SequenceEncoder(unit, width, {"hidden_size": hidden, "num_layers": layers,
                                        "bidirectional": bidirectional})
    x = torch.randn(batch, longest, width)
    lengths = torch.randint(longest // 3, longest + 1, (batch,))
    lengths[0] = longest
    packed, fused = _timer(enc, x, lengths, False), _timer(enc, x, lengths, True)
    with torch.no_grad():
        outputs = []
        for fused_cells in (False, True):
            with _path(fused_cells):
                outputs.append(enc(x, lengths)[0])
        torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)
    packed(), fused()  # warm-up
    rounds = [(packed(), fused()) for _ in range(repeats)]
    return {"case": name, "packed_ms": 1e3 * statistics.median(p for p, _ in rounds),
            "fused_ms": 1e3 * statistics.median(f for _, f in rounds),
            "speedup": statistics.median(p / f for p, f in rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [run_case(case, args.repeats) for case in CASES]
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), median of {args.repeats} rounds")
    print("| case | packed (ms) | fused cells (ms) | speed-up |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['packed_ms']:.1f} | {r['fused_ms']:.1f} "
              f"| {r['speedup']:.2f}x |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"torch": torch.__version__, "threads": args.threads, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
