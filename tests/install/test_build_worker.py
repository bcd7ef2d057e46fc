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
