"""Where prepared data lives, and the sha256 manifest that guards it.

The cache directory is, in order of precedence: an explicit argument (``--cache-dir``), the
environment variable ``CTRLRNN_DATA``, ``$XDG_CACHE_HOME/ctrlrnn/data``, and
``~/.cache/ctrlrnn/data``. Each source is prepared into its own sub-directory holding the
prepared files and ``manifest.json`` (format version, sha256 and size of every file, and the
statistics printed by ``ctrlrnn data prepare``).

A preparation builds in two places that it removes when it ends: a staging folder beside the
prepared ones, ``<cache>/.<name>.partial-<pid>.<host>``, renamed into place once complete, and a
work folder for the raw files in the system's temporary directory,
``ctrlrnn-<name>.<pid>.<host>.<random>``. A preparation that is killed leaves them behind;
:func:`remove_stale_partials`, run at the start of every preparation, deletes those whose
process is gone (never one of a live process, nor one written on another host: its PID means
nothing here).

Preparations of one source are serialised by a lock on ``<cache>/.<name>.lock``
(:func:`source_lock`): a second one waits for the first, then finds the source ready and uses
it; so the prepared folder is only ever replaced by one process at a time. A cache that cannot
be written (a read-only mount) holds no lock file: :func:`source_lock` raises
:class:`~ctrlrnn.data.errors.CacheNotWritable`, and what is prepared there is read without one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:  # POSIX file locks; without them (Windows) preparations of one source are not serialised
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS
    fcntl = None  # type: ignore[assignment]

from ctrlrnn.data.errors import CacheNotWritable, ChecksumError
from ctrlrnn.files import dumps
from ctrlrnn.processes import pid_alive
from ctrlrnn.settings import raw, value

ENV_VAR = "CTRLRNN_DATA"
MANIFEST = "manifest.json"

#: the ``errno`` values of a directory that cannot be written: a read-only file system, or
#: permissions that forbid it
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def default_cache_dir() -> Path:
    """The cache directory used when none is given explicitly."""
    env = value(ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = raw("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ctrlrnn" / "data"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir`` if given, else :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: Path, files: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """Record sha256 and size of ``files`` (relative to ``directory``) plus ``info`` (strict
    JSON: a non-finite statistic is written as null)."""
    entries = {
        name: {"sha256": sha256_file(directory / name), "bytes": (directory / name).stat().st_size}
        for name in files
    }
    manifest = {**info, "files": entries}
    (directory / MANIFEST).write_text(dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of ``directory``, or ``None`` when there is none (or it is unreadable)."""
    path = directory / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def manifest_complete(directory: Path, manifest: dict[str, Any]) -> bool:
    """Cheap check: every listed file exists with the recorded size (no hashing)."""
    for name, entry in manifest.get("files", {}).items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            return False
    return True


def verify_manifest(directory: Path) -> dict[str, Any]:
    """Re-hash every file listed in the manifest; raise :class:`ChecksumError` on a mismatch."""
    manifest = read_manifest(directory)
    if manifest is None:
        raise ChecksumError(f"{directory / MANIFEST}: missing or unreadable manifest")
    for name, entry in manifest["files"].items():
        path = directory / name
        if not path.is_file():
            raise ChecksumError(f"{path}: listed in the manifest but missing")
        actual = sha256_file(path)
        if actual != entry["sha256"]:
            raise ChecksumError(
                f"{path}: sha256 {actual} does not match the manifest ({entry['sha256']}); "
                "run `ctrlrnn data prepare --force` for this source"
            )
    return manifest


@contextmanager
def source_lock(cache_dir: Path, name: str) -> Iterator[bool]:
    """Hold the lock on preparing source ``name`` in ``cache_dir`` (which must exist) for the
    body; yields whether another process held it first (this one waited, saying so on
    stderr). The lock file stays: removing it would race with a process about to lock it.
    Raises :class:`~ctrlrnn.data.errors.CacheNotWritable` when the lock file cannot be
    created (nothing has been done then)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield False
        return
    path = Path(cache_dir) / f".{name}.lock"
    try:
        handle = open(path, "a+")  # noqa: SIM115 - closed by the ``with`` below
    except OSError as exc:
        if exc.errno in NOT_WRITABLE:
            raise CacheNotWritable(cache_dir, exc.strerror or str(exc)) from exc
        raise
    with handle as fh:
        waited = False
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            print(f"ctrlrnn: waiting for another process preparing {name} (lock {path})",
                  file=sys.stderr, flush=True)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield waited
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def host_tag() -> str:
    """This machine's name as it appears in staging and work folder names (``[A-Za-z0-9-]``)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", platform.node()) or "host"


def staging_dir(cache_dir: Path, name: str) -> Path:
    """The staging folder this process prepares source ``name`` into."""
    return Path(cache_dir) / f".{name}.partial-{os.getpid()}.{host_tag()}"


def work_dir_prefix(name: str) -> str:
    """Prefix of this process's temporary work folder for source ``name``."""
    return f"ctrlrnn-{name}.{os.getpid()}.{host_tag()}."


#: ``.<name>.partial-<pid>[.<host>]`` (folders written before the host was added have none)
_STAGING = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>[0-9]+)(?:\.(?P<host>[A-Za-z0-9-]+))?$")
#: ``ctrlrnn-<name>.<pid>.<host>.<random>``
_WORK = re.compile(r"^ctrlrnn-(?P<name>[^.]+)\.(?P<pid>[0-9]+)\.(?P<host>[A-Za-z0-9-]+)\.[^.]+$")


def _stale(match: re.Match[str] | None) -> bool:
    if match is None:
        return False
    host = match["host"]
    if host is not None and host != host_tag():
        return False  # another machine's: its PID cannot be checked from here
    return not pid_alive(int(match["pid"]))


def remove_stale_partials(
    cache_dir: str | os.PathLike[str] | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
) -> list[Path]:
    """Delete the staging folders (in ``cache_dir``) and work folders (in ``temp_dir``, default
    the system's temporary directory) that killed preparations left behind.

    Only folders named as :func:`staging_dir` and :func:`work_dir_prefix` name them are looked
    at, and only those whose process is gone from this machine are removed: one of a live
    process (this one included) or of another host is kept. Returns the folders removed;
    folders that cannot be removed are left, silently.
    """
    places = [
        (resolve_cache_dir(cache_dir), _STAGING),
        (Path(temp_dir) if temp_dir is not None else Path(tempfile.gettempdir()), _WORK),
    ]
    removed: list[Path] = []
    for directory, pattern in places:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False) or not _stale(pattern.match(entry.name)):
                    continue
            except OSError:
                continue
            path = Path(entry.path)
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(path)
    return removed
