"""``ctrlrnn data add NAME PATH``: the user's copies of data sets that cannot be had here."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_read_only_cache import _read_only_prefix

from ctrlrnn.data import cli, user_files
from ctrlrnn.data.errors import DataError


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ctrlrnn")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_add_list_and_remove(tmp_path: Path, capsys) -> None:
    cache, copy = tmp_path / "cache", tmp_path / "aclImdb"
    copy.mkdir()
    assert _run(["data", "add", "imdb", str(copy), "--cache-dir", str(cache)]) == 0
    assert user_files.registered(cache) == {"imdb": str(copy.resolve())}
    record = json.loads((cache / user_files.RECORD).read_text(encoding="utf-8"))
    assert record == {"imdb": str(copy.resolve())}
    capsys.readouterr()
    assert _run(["data", "list", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "your files" in out and "imdb" in out and str(copy.resolve())[:20] in flat
    supply = flat[flat.index("Only you can supply"):]
    assert "snli" in supply and "imdb" not in supply and "ctrlrnn data add NAME PATH" in supply
    assert _run(["data", "remove", "imdb", "--cache-dir", str(cache)]) == 0
    assert user_files.registered(cache) == {}
    assert _run(["data", "remove", "imdb", "--cache-dir", str(cache)]) == 1
    assert "imdb is not registered" in capsys.readouterr().err


@pytest.mark.parametrize("name, exists, says", [
    ("nosuch", True, "unknown data set 'nosuch' (known:"),
    ("imdb", False, "does not exist; it should be the `aclImdb` folder"),
])
def test_add_refuses_a_bad_name_or_path(tmp_path: Path, capsys, name, exists, says) -> None:
    path = tmp_path / "copy"
    if exists:
        path.mkdir()
    assert _run(["data", "add", name, str(path), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctrlrnn data add: ") and says in err
    assert not (tmp_path / "c" / user_files.RECORD).exists()


def test_a_broken_record_is_an_error_naming_it(tmp_path: Path, capsys) -> None:
    (tmp_path / user_files.RECORD).write_text('{"imdb": 3}', encoding="utf-8")
    with pytest.raises(DataError, match=user_files.RECORD):
        user_files.registered(tmp_path)
    (tmp_path / user_files.RECORD).write_text("{", encoding="utf-8")
    assert _run(["data", "remove", "imdb", "--cache-dir", str(tmp_path)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err


def test_a_read_only_cache_is_named(tmp_path: Path) -> None:
    """In a cache that cannot be written (a read-only bind mount as root, else permissions),
    ``add`` is one line naming the file and the setting that moves the cache, exit 2."""
    cache, copy = tmp_path / "cache", tmp_path / "copy"
    cache.mkdir()
    copy.mkdir()
    prefix = _read_only_prefix(cache)
    if not prefix:
        cache.chmod(0o500)
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "ctrlrnn", "data", "add", "imdb",
                               str(copy), "--cache-dir", str(cache)],
                              capture_output=True, text=True, timeout=120)
    finally:
        cache.chmod(0o700)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"ctrlrnn data add: {cache}: cannot be written"), done.stderr
    assert "CTRLRNN_DATA" in done.stderr and len(done.stderr.splitlines()) == 1


def test_each_add_rewrites_the_whole_record_by_a_rename(tmp_path: Path) -> None:
    for name in ("imdb", "snli"):
        (tmp_path / name).mkdir()
        user_files.add(name, tmp_path / name, {"imdb": "x", "snli": "y"}, tmp_path / "c")
    assert sorted(user_files.registered(tmp_path / "c")) == ["imdb", "snli"]
    assert [p.name for p in (tmp_path / "c").iterdir()] == [user_files.RECORD]
