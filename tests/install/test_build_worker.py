"""The build worker names the library it built whatever torch's builder returns: the path
(recent torch) or nothing (torch 2.4, which only loads the library)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils import cpp_extension

from ctrlrnn.ops import _build_worker


def _spec(folder: Path) -> dict:
    return {"module": "ctrlrnn_tiny", "sources": ["tiny.cpp"], "include_dirs": [],
            "cflags": ["-O2"], "ldflags": [], "build_dir": str(folder)}


@pytest.mark.parametrize("returns_path", [True, False])
def test_the_library_is_named_whatever_the_builder_returns(tmp_path, monkeypatch, returns_path):
    library = tmp_path / f"ctrlrnn_tiny{cpp_extension.LIB_EXT}"
    calls = []

    def load(**kwargs):
        calls.append(kwargs)
        library.write_bytes(b"")
        return str(library) if returns_path else None

    monkeypatch.setattr(cpp_extension, "load", load)
    assert _build_worker.build(_spec(tmp_path)) == str(library)
    (call,) = calls
    assert call["name"] == "ctrlrnn_tiny" and call["build_directory"] == str(tmp_path)
    assert call["is_python_module"] is False


@pytest.mark.parametrize("named", ["None", "{folder}/missing.so"])
def test_a_build_that_names_no_library_file_says_so(tmp_path, monkeypatch, named):
    from ctrlrnn.ops import _build

    def worker(spec, log, env):
        log.write("[1/1] c++ tiny.o -shared -o tiny.so\n"
                  f"CTRLRNN_LIBRARY={named.format(folder=tmp_path)}\n")
        return 0

    monkeypatch.setattr(_build, "ninja_dir", lambda: str(tmp_path))
    monkeypatch.setattr(_build, "run_worker", worker)
    job = _build.Job(module="ctrlrnn_tiny", sources=["tiny.cpp"], include_dirs=[], cflags=[],
                     ldflags=[], folder=tmp_path, log_name="build.log", header="tiny")
    library, cause, _seconds, remembered = _build.compile_extension(job)
    assert library is None and remembered
    assert cause == f"the build named no library file ({named.format(folder=tmp_path)!r})"
