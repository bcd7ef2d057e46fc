"""The grid points of the benchmark rows: (batch, length, width) of the quick and full runs."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ctrlrnn.bench.case_registry import Point


def _grid(batches: Iterable[int], lengths: Iterable[int], widths: Iterable[int]) -> list[Point]:
    return [Point(b, t, w) for b, t, w in itertools.product(batches, lengths, widths)]


#: The small-shape point: batch 2, width 64, where per-call and per-step costs (threading a tiny
#: GEMM, waking threads) rather than FLOPs decide the time.
SMALL = Point(2, 128, 64)
#: The inference point of the targets: batch 1, a long sequence.
B1_INFERENCE = Point(1, 1024, 256)
#: Layers, quick: the training point of the targets and the B=1 long-sequence inference point.
#: (20, 35, 650): a word-level language model's shape (the QRNN paper's PTB model: batch 20,
#: 35 steps of backpropagation through time, width 650); and the small-shape point.
LAYER_QUICK = (
    Point(32, 256, 256), B1_INFERENCE, Point(8, 512, 512), Point(20, 35, 650), SMALL
)  # fmt: skip
LAYER_FULL = tuple(_grid((1, 8, 32), (256, 1024), (256, 512, 1024)))
#: Scan: the bandwidth target point (8M elements).
SCAN_QUICK = (Point(32, 256, 1024),)
SCAN_FULL = (
    Point(32, 256, 1024),
    Point(1, 4096, 256),
    Point(8, 1024, 512),
    Point(32, 1024, 1024),
    Point(64, 512, 2048),
)
#: The Python loop over unbound steps is slow at long lengths; the full grid stops it at 1024.
SCAN_LOOP_FULL = tuple(p for p in SCAN_FULL if p.length <= 1024)
#: The indexing loop's backward moves O(T^2 * B * C) bytes (and so may the reference): only the
#: target point, where one fwd+bwd already takes seconds.
SCAN_INDEXED_FULL = SCAN_QUICK
#: Memory growth over T, up to 16,384 steps.
MEMORY_LENGTHS = (1024, 2048, 4096, 8192, 16384)
MEMORY_QUICK = tuple(Point(4, t, 256) for t in MEMORY_LENGTHS)
MEMORY_FULL = tuple(Point(b, t, 256) for b in (4, 16) for t in MEMORY_LENGTHS)
#: RCRN's benchmark of the RCRN paper table 10: dimension 200, batch 32.
RCRN_QUICK = (Point(32, 256, 200), SMALL)
RCRN_FULL = tuple(Point(32, t, 200) for t in (16, 32, 64, 128, 256))
#: The CAS-LSTM and METAGROSS targets are at (32, 256, 256).
TARGET_QUICK = (Point(32, 256, 256), SMALL)
