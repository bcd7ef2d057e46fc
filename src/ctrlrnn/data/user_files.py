"""The user's own copies of data sets that cannot be had here, registered once by name.

``ctrlrnn data add NAME PATH`` records ``PATH`` for ``NAME`` in ``user-files.json`` in the data
cache; ``ctrlrnn reproduce --scale paper`` then finds it without ``--data NAME=PATH`` (a
``--data`` given on the command line wins). The names are those of the paper-scale experiments'
data needs (:data:`ctrlrnn.data.user_needs.USER_DATA_SETS`). The record is written by a temporary
name and a rename, so it is never half-written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path

from ctrlrnn.data.cache import NOT_WRITABLE, resolve_cache_dir
from ctrlrnn.data.errors import CacheNotWritable, DataError
from ctrlrnn.files import dumps, writing

RECORD = "user-files.json"


def record_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the registrations are kept: ``user-files.json`` in the data cache."""
    return resolve_cache_dir(cache_dir) / RECORD


def registered(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Every registered name and its path (empty when none is); a record that is not a JSON
    object of strings is an error naming the file, never silently dropped."""
    path = record_path(cache_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{path} is not valid JSON ({exc}); fix it or delete it") from None
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise DataError(f"{path} must hold a JSON object of names to paths; fix it or delete it")
    return dict(data)


def _write(record: dict[str, str], cache_dir: str | os.PathLike[str] | None) -> Path:
    """Write ``record`` by a temporary name and a rename; a folder that cannot be written is
    :class:`CacheNotWritable` naming it and the settings that move it."""
    path = record_path(cache_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with writing(path):
            tmp.write_text(dumps(dict(sorted(record.items())), indent=2) + "\n",
                           encoding="utf-8")
            os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only folder refuses the unlink too
            tmp.unlink(missing_ok=True)
        if exc.errno in NOT_WRITABLE:
            raise CacheNotWritable(path.parent, os.strerror(exc.errno or errno.EACCES),
                                   f"{RECORD} holds the registered data sets") from None
        raise
    return path


def add(name: str, path: str | os.PathLike[str], known: dict[str, str],
        cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Register ``path`` (made absolute) for ``name``, one of ``known`` (name -> the files it
    needs, in words); returns the path registered. An unknown name or a path that does not
    exist is an error naming it."""
    if name not in known:
        raise DataError(f"unknown data set {name!r} (known: {', '.join(sorted(known))})")
    target = Path(path).expanduser().resolve()
    if not target.exists():
        raise DataError(f"{name}: {target} does not exist; it should be {known[name]}")
    record = registered(cache_dir)
    record[name] = str(target)
    _write(record, cache_dir)
    return target


def remove(name: str, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """Forget ``name``; whether it was registered."""
    record = registered(cache_dir)
    if record.pop(name, None) is None:
        return False
    _write(record, cache_dir)
    return True
