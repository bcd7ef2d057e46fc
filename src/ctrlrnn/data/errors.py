"""Errors raised by the data layer."""

from __future__ import annotations

from pathlib import Path


class DataError(Exception):
    """Base class of every error raised by :mod:`ctrlrnn.data`."""


class MissingSourceError(DataError):
    """A data source is not available here; the message says exactly what to install."""

    def __init__(self, source: str, install: str, reason: str = "not available") -> None:
        self.source = source
        self.install = install
        self.reason = reason
        super().__init__(f"data source {source!r}: {reason}. Install it with: {install}")


class DataFormatError(DataError, ValueError):
    """A file does not have the expected format; names the file and (1-based) line."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")


class ChecksumError(DataError):
    """A prepared file no longer matches the sha256 recorded in its manifest."""


class CacheNotWritable(DataError):
    """The data directory cannot be written (read-only, or not this user's): a source that is
    not prepared there cannot be prepared; one that is can still be read. The message names
    the directory and the setting that moves the cache."""

    def __init__(self, path: str | Path, reason: str, what: str = "") -> None:
        self.path = Path(path)
        self.reason = reason
        self.what = what
        because = f"; {what}" if what else ""
        super().__init__(f"{self.path}: cannot be written ({reason}){because}; set CTRLRNN_DATA "
                         "(or --cache-dir) to a directory that can be")
