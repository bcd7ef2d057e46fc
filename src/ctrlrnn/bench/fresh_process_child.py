"""One fresh process of :mod:`ctrlrnn.bench.fresh_processes`:
``python -m ctrlrnn.bench.fresh_process_child SPEC OUT``.

It reads the case names, the point, the dtype, the thread count and the timing settings from
the JSON file ``SPEC``, times the cases at the point as the main run does
(:func:`ctrlrnn.bench.runner.time_point`, rows interleaved) and writes their records to the
JSON file ``OUT``. Before the rows it measures the GEMM rate at the point's shape, as the main
run does beside each point (:func:`ctrlrnn.bench.roofline.gemm_rate_at`), and records it in
every record: each process's time over its roofline floor divides by its own rate. A record
holding a non-finite number makes the process fail (strict JSON), and the parent records the
failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ctrlrnn.bench.cases import REGISTRY, Point
from ctrlrnn.bench.roofline import gemm_rate_at
from ctrlrnn.bench.runner import point_gemm_shape, time_point


def main(argv: Sequence[str] | None = None) -> int:
    """Time the cases of ``SPEC`` and write their records to ``OUT`` (module docstring)."""
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(int(spec["threads"]))
    cases = [REGISTRY[name] for name in spec["cases"]]
    point, dtype = Point(*spec["point"]), getattr(torch, spec["dtype"])
    shape = point_gemm_shape({"batch": point.batch, "length": point.length,
                              "width": point.width})  # fmt: skip
    rate = gemm_rate_at(shape, dtype)
    records = time_point(
        cases, point, dtype, warmup=spec["warmup"], repeats=spec["repeats"],
        max_seconds=spec["max_seconds"],
    )
    for r in records:
        r["gemm_rate_flops_per_s"] = rate
    Path(out_path).write_text(json.dumps(records, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
