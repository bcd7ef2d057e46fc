"""Run logs: one JSON object per line (``log.jsonl``) and the same rows as CSV (``log.csv``).

Nothing in them can be lost to a kill: rows are appended (and flushed) one at a time, and a
file is only ever replaced whole — written under a temporary name unique to the writer,
fsynced, then renamed over the old one — so at every instant the complete old or the complete
new file is on disk. Truncating for a resume streams the rows to keep from the old file into
the new one, never holding the only copy in memory.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ctrlrnn import files


def replace_atomically(path: Path, write: Callable[[TextIO], None], *,
                       newline: str | None = None) -> None:
    """Write ``path`` whole through ``write(fh)``: a temporary file in the same directory
    (named after this process), fsync, rename over ``path``, fsync the directory. The file
    keeps the permissions of the one it replaces (a new one: those the umask gives).

    A full disk raises :class:`~ctrlrnn.files.NoSpaceLeft` naming ``path``, which is then
    as it was."""
    with files.writing(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=path.parent)
        try:
            os.fchmod(fd, _mode_for(path))
            with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory handles
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _mode_for(path: Path) -> int:
    """The permission bits a file written at ``path`` gets: those of the file there, else
    read-write for all less the process's umask (as ``open`` would create it)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022  # the usual default where the system does not say


def read_rows(jsonl: Path) -> Iterator[dict[str, Any]]:
    """The rows of the run log ``jsonl``, none where it does not exist; a row cut short by a
    kill mid-append (the only row that can be partial) is skipped."""
    if not jsonl.exists():
        return
    with open(jsonl, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class RunLog:
    """Append-only JSONL + CSV log. Reopening an existing run continues the same files."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "log.jsonl"
        self.csv = self.dir / "log.csv"

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` (strict JSON: a non-finite number is written as null)."""
        with files.writing(self.jsonl), open(self.jsonl, "a", encoding="utf-8") as fh:
            fh.write(files.dumps(row) + "\n")
            fh.flush()

    def export_csv(self) -> None:
        """Rewrite ``log.csv`` from the JSONL (columns: the union of all keys, in order)."""
        fields: list[str] = []
        for r in self._iter_rows():
            for k in r:
                if k not in fields:
                    fields.append(k)

        def write(fh: TextIO) -> None:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            for r in self._iter_rows():
                w.writerow(r)

        replace_atomically(self.csv, write, newline="")

    def _iter_rows(self) -> Iterator[dict[str, Any]]:
        return read_rows(self.jsonl)

    def rows(self) -> list[dict[str, Any]]:
        return list(self._iter_rows())

    def truncate_after(self, step: int, *, keep_final: bool = True) -> None:
        """Drop rows logged after ``step`` (a resumed run re-does those steps); with
        ``keep_final=False`` also the ``final`` rows (a finished run continued further).

        The kept rows are streamed into a new file that replaces the old one atomically: a
        kill at any point leaves the old log or the truncated one, whole."""
        if self.jsonl.exists():
            def write(fh: TextIO) -> None:
                for r in self._iter_rows():
                    if int(r.get("step", 0)) <= step and (keep_final
                                                          or r.get("split") != "final"):
                        fh.write(files.dumps(r) + "\n")

            replace_atomically(self.jsonl, write)
        self.export_csv()

    def clear(self) -> None:
        """Drop every row (a run that starts at step 0 again), replacing the files atomically."""
        if self.jsonl.exists():
            replace_atomically(self.jsonl, lambda fh: None)
        if self.csv.exists():
            replace_atomically(self.csv, lambda fh: None, newline="")
