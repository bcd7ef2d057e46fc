"""The prebuilt kernels' choice (:mod:`ctrlrnn.ops.prebuilt`), without building a wheel: a
manifest for another torch, or for CPU flags this machine lacks, is refused with one line on
stderr saying why and the build on first use follows; a fitting variant is chosen best first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctrlrnn.ops import prebuilt


def _manifest(folder: Path, **overrides: object) -> Path:
    """A manifest with two variants (one needing a flag no CPU has), libraries as empty files."""
    variants = [
        {"name": "future", "cpu_flags": ["no_cpu_has_this_flag"],
         "libraries": {"scan": {"file": "future/ctrlrnn_scan.so", "namespace": "ns_future"}}},
        {"name": "x86-64", "cpu_flags": [],
         "libraries": {"scan": {"file": "x86-64/ctrlrnn_scan.so", "namespace": "ns_base"}}},
    ]
    manifest = {**prebuilt.torch_record(), "variants": variants, **overrides}
    for v in variants:
        for lib in v["libraries"].values():
            (folder / lib["file"]).parent.mkdir(parents=True, exist_ok=True)
            (folder / lib["file"]).write_bytes(b"")
    (folder / prebuilt.MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def fresh_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A per-test answer of :func:`prebuilt.choice`, its kernels folder ``tmp_path``."""
    monkeypatch.setattr(prebuilt, "_CHOSEN", [])
    monkeypatch.setattr(prebuilt, "_WHY", [""])
    monkeypatch.setattr(prebuilt, "KERNELS_DIR", tmp_path)
    return tmp_path


def test_a_fitting_variant_is_chosen_best_first(fresh_choice: Path, capsys) -> None:
    _manifest(fresh_choice)
    chosen = prebuilt.choice()
    assert chosen is not None and chosen.variant == "x86-64"
    assert chosen.libraries["scan"] == (fresh_choice / "x86-64/ctrlrnn_scan.so", "ns_base")
    assert capsys.readouterr().err == ""
    assert prebuilt.describe().startswith("x86-64, built for torch ")


def test_another_torch_falls_back_with_one_line_saying_why(fresh_choice: Path, capsys) -> None:
    _manifest(fresh_choice, torch="2.10.0+cpu")
    assert prebuilt.choice() is None
    assert prebuilt.choice() is None  # asked again: said once
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert "built for torch 2.10.0+cpu" in err[0] and "building them on first use" in err[0]
    assert prebuilt.describe().startswith("not used: they were built for torch 2.10.0+cpu")


def test_another_build_of_this_release_is_chosen(fresh_choice: Path, capsys) -> None:
    """Kernels built on ``2.13.0+cpu`` serve ``2.13.0+cu130`` (the same release and commit): the
    local build tag is not compared (docs/install.md has the run that showed it works)."""
    here = prebuilt.torch_record()["torch"]
    other = prebuilt.release(here) + ("+cu130" if "+cpu" in here else "+cpu")
    _manifest(fresh_choice, torch=other)
    chosen = prebuilt.choice()
    assert chosen is not None and chosen.torch == other
    assert capsys.readouterr().err == ""


def test_the_release_drops_only_the_local_tag() -> None:
    assert prebuilt.release("2.13.0+cpu") == prebuilt.release("2.13.0+cu130") == "2.13.0"
    assert prebuilt.release("2.13.1") == "2.13.1"
    assert prebuilt.release("2.13.0.dev20261201+cpu") == "2.13.0.dev20261201"


def test_another_commit_of_this_release_falls_back(fresh_choice: Path, capsys) -> None:
    _manifest(fresh_choice, torch_git="0123456789abcdef")
    assert prebuilt.choice() is None
    err = capsys.readouterr().err
    assert "commit 0123456789ab)" in err and "building them on first use" in err


def test_a_manifest_without_a_commit_compares_the_release(fresh_choice: Path) -> None:
    _manifest(fresh_choice)
    manifest = json.loads((fresh_choice / prebuilt.MANIFEST).read_text())
    del manifest["torch_git"]
    (fresh_choice / prebuilt.MANIFEST).write_text(json.dumps(manifest))
    assert prebuilt.choice() is not None


def test_another_cxx_abi_falls_back(fresh_choice: Path, capsys) -> None:
    here = prebuilt.torch_record()["cxx11_abi"]
    _manifest(fresh_choice, cxx11_abi=not here)
    assert prebuilt.choice() is None
    assert f"C++11 ABI {int(not here)}" in capsys.readouterr().err


def test_no_variant_for_this_cpu_falls_back(fresh_choice: Path, capsys) -> None:
    _manifest(fresh_choice)
    manifest = json.loads((fresh_choice / prebuilt.MANIFEST).read_text())
    manifest["variants"] = manifest["variants"][:1]
    (fresh_choice / prebuilt.MANIFEST).write_text(json.dumps(manifest))
    assert prebuilt.choice() is None
    assert "flags of none of their variants (future)" in capsys.readouterr().err


def test_a_source_install_has_none_and_says_nothing(fresh_choice: Path, capsys) -> None:
    assert prebuilt.choice() is None
    assert capsys.readouterr().err == ""
    assert prebuilt.describe().startswith("none in this install")


def test_the_variant_flags_are_cumulative() -> None:
    levels = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
    for lower, higher in zip(levels, levels[1:]):
        assert set(prebuilt.VARIANT_FLAGS[lower]) < set(prebuilt.VARIANT_FLAGS[higher])
