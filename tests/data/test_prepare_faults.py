"""Two preparations of one source at once are serialised (the second uses what the first
prepared); a full disk while preparing is one line and leaves the prepared folder as it was."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctrlrnn.cli import main
from ctrlrnn.data import cache as cache_mod
from ctrlrnn.data import cli as data_cli
from ctrlrnn.data.source import PreparedSource
from ctrlrnn.data.stats import DatasetStats, SplitStats


class FakeSource(PreparedSource):
    """A source that needs no client: ``build`` writes one small file (``text``)."""

    name = "fake"
    summary = "a fake source"
    size = "1 file"
    origin = "this test"
    licence = "-"
    install = "nothing"

    def __init__(self, text: str = "a b c\n", fail: OSError | None = None) -> None:
        self.text, self.fail = text, fail

    def build(self, work: Path, out: Path) -> None:
        with open(out / "train.txt", "w") as fh:
            fh.write(self.text)
            if self.fail is not None:
                raise self.fail

    def compute_stats(self, out: Path) -> DatasetStats:
        words = (out / "train.txt").read_text().split()
        return DatasetStats(self.name, [SplitStats("train", 1, len(words))], len(set(words)))


#: a child process: waits for the go file, then prepares the fake source with ``--force``
#: semantics three times; removing the prepared folder is made slow (as on a busy disk), which
#: opens the window between removing the old folder and renaming the new one into place
CHILD = textwrap.dedent("""
    import shutil, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from test_prepare_faults import FakeSource

    real_rmtree = shutil.rmtree

    def slow_rmtree(path, *args, **kwargs):
        real_rmtree(path, *args, **kwargs)
        if Path(path).name == "fake":
            time.sleep(0.3)

    shutil.rmtree = slow_rmtree
    cache, go = Path(sys.argv[1]), Path(sys.argv[2])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.005)
    for i in range(3):
        FakeSource(f"words of run {i}\\n").prepare(cache, force=True)
    print("done", flush=True)
""")


def test_two_forced_preparations_at_once_are_serialised(tmp_path: Path) -> None:
    cache, go = tmp_path / "cache", tmp_path / "go"
    here = str(Path(__file__).parent)
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(cache), str(go), here],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        go.touch()
        outcomes = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    for child, (out, err) in zip(children, outcomes):
        assert child.returncode == 0, err
        assert out.split() == ["done"]  # after the "ready" read above
        assert "Traceback" not in err
    assert any("waiting for another process preparing fake" in err for _out, err in outcomes)
    manifest = cache_mod.verify_manifest(cache / "fake")
    assert list(manifest["files"]) == ["train.txt"]
    assert not [p for p in cache.iterdir() if ".partial-" in p.name]


def test_a_waiting_preparation_uses_what_the_first_prepared(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_prepare_faults import FakeSource
        from ctrlrnn.data.cache import source_lock
        with source_lock(Path({str(cache)!r}), "fake"):
            print("held", flush=True)
            FakeSource("prepared by the first\\n")._prepare_into(Path({str(cache)!r}) / "fake")
            time.sleep(0.5)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    stats = FakeSource("never built\n").prepare(cache, force=True)
    holder.wait(timeout=60)
    assert time.monotonic() - started > 0.2  # it waited for the lock
    assert stats.splits[0].total_length == 4  # the first one's words
    assert (cache / "fake" / "train.txt").read_text() == "prepared by the first\n"


def test_a_full_disk_while_preparing_is_one_line_and_keeps_the_prepared_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    FakeSource("the prepared words\n").prepare(cache)
    before = (cache / "fake" / "train.txt").read_text()
    full = FakeSource("new words\n", fail=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(data_cli, "get_entry", lambda name: full)
    capsys.readouterr()
    code = main(["data", "prepare", "fake", "--force", "--cache-dir", str(cache)])
    assert code == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"ctrlrnn: no space left on device while writing {cache / 'fake'}"]
    assert (cache / "fake" / "train.txt").read_text() == before
    cache_mod.verify_manifest(cache / "fake")
    assert not [p for p in cache.iterdir() if ".partial-" in p.name]
