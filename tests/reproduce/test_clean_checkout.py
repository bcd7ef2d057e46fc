"""``ctrlrnn reproduce`` on a checkout whose results are all cached trains nothing and changes
no tracked file (both modes); ``--pages-only`` rewrites the committed pages identically, from
the results files alone (no runs directory, no checkpoint)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "docs" / "results", repo / "docs" / "results")
    (repo / ".gitignore").write_text("runs/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "results")
    return repo


def _reproduce(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "ctrlrnn", "reproduce", "--no-progress", *args],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def _cached(repo: Path, mode: list[str]) -> list[str]:
    """The experiments whose results in ``repo`` are complete for their current definition
    (an experiment redefined since its results were committed trains again, as it should)."""
    from ctrlrnn.reproduce.experiments import EXPERIMENTS
    from ctrlrnn.reproduce.runner import is_cached

    results = repo / "docs" / "results" / "data"
    return [e.id for e in EXPERIMENTS
            if is_cached(results, "quick" if mode else "full", e)]


@pytest.mark.parametrize("mode", [[], ["--quick"]], ids=["full", "quick"])
def test_cached_reproduce_changes_nothing(checkout, mode):
    cached = _cached(checkout, mode)
    if not mode and not cached:  # every full-mode search was redefined (successive halving)
        pytest.skip("no full-mode results file matches its experiment's definition yet")
    assert len(cached) >= (10 if mode else 1), cached
    only = [arg for name in cached for arg in ("--only", name)]
    run = _reproduce(checkout, *mode, *only)
    assert run.returncode == 0, run.stderr
    assert "nothing trained, pages left as they are" in run.stdout
    assert _git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.parametrize("mode", [[], ["--quick"]], ids=["full", "quick"])
def test_pages_regenerate_identically(checkout, mode):
    run = _reproduce(checkout, *mode, "--pages-only")
    assert run.returncode == 0, run.stderr
    assert not (checkout / "runs").exists()
    changed = _git(checkout, "status", "--porcelain", "--untracked-files=all", "--", "*.md")
    assert changed == "", f"pages differ from the committed ones:\n{changed}" + _git(
        checkout, "diff", "--", "*.md")[:3000]
    # the figures are drawn again too (their bytes depend on the matplotlib version)
    assert "depth-gates" in (checkout / "docs" / "results" / ("quick" if mode else "") /
                             "metagross.md").read_text()
    _git(checkout, "checkout", "-q", "--", ".")


def test_rerun_names_are_checked(checkout):
    run = _reproduce(checkout, "--rerun", "no-such-experiment")
    assert run.returncode == 2
    assert "--rerun: unknown experiment 'no-such-experiment'" in run.stdout
    assert _git(checkout, "status", "--porcelain", "--untracked-files=all") == ""


def test_only_rewrites_every_page(checkout, monkeypatch):
    """``--only`` trains the chosen experiment, but the pages it writes still show every
    experiment's results (they once kept the chosen experiments alone)."""
    import argparse

    from ctrlrnn.reproduce import cli, runner

    trained: list[str] = []
    monkeypatch.setattr(runner, "is_cached", lambda results, mode, exp: False)
    monkeypatch.setattr(runner, "run_experiment",
                        lambda exp, mode, runs, results, show_progress, **kwargs:
                        trained.append(exp.id) or {"errors": {}})
    monkeypatch.chdir(checkout)
    args = argparse.Namespace(quick=True, only=["qrnn-copy"], rerun=None, runs="runs/reproduce",
                              results="docs/results/data", docs=None, pages_only=False,
                              no_speed=True, no_progress=True, estimate=None, jobs=1,
                              threads=None, pages="all", scale=None, list=False, data=None,
                              storage=None)
    try:
        assert cli.run(args) == 0
        assert trained == ["qrnn-copy"]
        summary = (checkout / "docs" / "results" / "quick" / "README.md").read_text()
        for page in ("qrnn", "rcrn", "cas-lstm", "metagross", "carnn", "translation"):
            assert f"[{page}]({page}.md)" in summary, page
        changed = _git(checkout, "status", "--porcelain", "--untracked-files=all", "--",
                       "*.md")
        assert changed == "", f"pages differ from the committed ones:\n{changed}"
    finally:
        _git(checkout, "checkout", "-q", "--", ".")
