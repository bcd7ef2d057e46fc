"""Where prepared data lives, and the sha256 manifest that guards it.

The cache directory is, in order of precedence: an explicit argument (``--cache-dir``), the
environment variable ``CTRLRNN_DATA``, ``$XDG_CACHE_HOME/ctrlrnn/data``, and
``~/.cache/ctrlrnn/data``. Each source is prepared into its own sub-directory holding the
prepared files and ``manifest.json`` (format version, sha256 and size of every file, and the
statistics printed by ``ctrlrnn data prepare``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ctrlrnn.data.errors import ChecksumError

ENV_VAR = "CTRLRNN_DATA"
MANIFEST = "manifest.json"


def default_cache_dir() -> Path:
    """The cache directory used when none is given explicitly."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
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
    """Record sha256 and size of ``files`` (relative to ``directory``) plus ``info``."""
    entries = {
        name: {"sha256": sha256_file(directory / name), "bytes": (directory / name).stat().st_size}
        for name in files
    }
    manifest = {**info, "files": entries}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
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
