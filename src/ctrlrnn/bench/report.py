"""Presenting a benchmark run: the result document's file, the screen, BENCHMARKS.md.

Everything here reads the result document of :func:`ctrlrnn.bench.runner.run`, so a JSON file
saved today can be re-rendered (``ctrlrnn bench --from results.json --markdown BENCHMARKS.md``)
without measuring again. The document is saved and loaded here; the rest lives by what it
renders:

* :mod:`ctrlrnn.bench.machine`: the machine description and the git stamp;
* :mod:`ctrlrnn.bench.result_rows`: the rows as table cells;
* :mod:`ctrlrnn.bench.targets`: the performance goals beside the measured values;
* :mod:`ctrlrnn.bench.screen`: the terminal's tables;
* :mod:`ctrlrnn.bench.benchmarks_page`: BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ctrlrnn import files
from ctrlrnn.bench.benchmarks_page import busy_warning, markdown, repeats_text, write_markdown
from ctrlrnn.bench.machine import machine, machine_summary
from ctrlrnn.bench.result_rows import (
    LOW_CPU_SHARE,
    MIB,
    fmt_mib,
    fmt_ratio,
    fmt_share,
    fmt_time,
    memory_rows,
    time_rows,
)
from ctrlrnn.bench.runner import SCHEMA
from ctrlrnn.bench.screen import print_report
from ctrlrnn.bench.targets import TARGETS, Target, target_notes, target_rows

__all__ = [
    "LOW_CPU_SHARE",
    "MIB",
    "TARGETS",
    "Target",
    "busy_warning",
    "fmt_mib",
    "fmt_ratio",
    "fmt_share",
    "fmt_time",
    "load_json",
    "machine",
    "machine_summary",
    "markdown",
    "memory_rows",
    "print_report",
    "repeats_text",
    "save_json",
    "target_notes",
    "target_rows",
    "time_rows",
    "write_markdown",
]


def save_json(doc: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the result document to ``path`` (parent folders created); return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(files.dumps(doc, indent=2, sort_keys=False, default=str) + "\n",
                 encoding="utf-8")
    return p


def load_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a result document written by :func:`save_json`."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"path: {path} is not a ctrlrnn bench result ({SCHEMA})")
    return doc
