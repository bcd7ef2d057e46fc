"""Run logs: one JSON object per line (``log.jsonl``) and the same rows as CSV (``log.csv``)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any


class RunLog:
    """Append-only JSONL + CSV log. Reopening an existing run continues the same files."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "log.jsonl"
        self.csv = self.dir / "log.csv"

    def write(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in row.items()}
        with open(self.jsonl, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")
            fh.flush()

    def export_csv(self) -> None:
        """Rewrite ``log.csv`` from the JSONL (columns: the union of all keys, in order)."""
        rows = self.rows()
        fields: list[str] = []
        for r in rows:
            for k in r:
                if k not in fields:
                    fields.append(k)
        tmp = self.csv.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow(r)
        tmp.replace(self.csv)

    def rows(self) -> list[dict[str, Any]]:
        if not self.jsonl.exists():
            return []
        with open(self.jsonl, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def truncate_after(self, step: int, *, keep_final: bool = True) -> None:
        """Drop rows logged after ``step`` (a resumed run re-does those steps); with
        ``keep_final=False`` also the ``final`` rows (a finished run continued further)."""
        rows = [r for r in self.rows() if int(r.get("step", 0)) <= step
                and (keep_final or r.get("split") != "final")]
        with open(self.jsonl, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
        self.export_csv()
