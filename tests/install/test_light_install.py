"""A layer user's install: ``pip install ctrlrnn`` with no extras pulls torch, numpy and ninja
only; ``import ctrlrnn`` and every layer work without the extras' packages, and the command line
says which extra to install when a command needs one.

The extras' packages are made unimportable in a fresh process (``sys.modules[name] = None``,
which is how Python marks a module as absent), so this runs in the normal test environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import pytest
from install_helpers import TRAIN_EVERY_LAYER, fresh_env, run_python

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_PACKAGES = ["rich", "safetensors", "matplotlib", "sacrebleu", "music21", "pysword",
                   "pyarrow", "triton", "tqdm", "pytest", "onnx", "onnxscript", "onnxruntime"]
WITHOUT_EXTRAS = f"""
import sys
BLOCKED = {EXTRAS_PACKAGES!r}
for name in BLOCKED:
    sys.modules[name] = None
"""


def test_core_dependencies_are_torch_numpy_and_ninja() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split(";")[0].strip()
             for dep in project["dependencies"]}
    assert names == {"torch", "numpy", "ninja", "tomli"}  # tomli only on Python < 3.11
    train = " ".join(project["optional-dependencies"]["train"])
    for package in ("rich", "safetensors", "matplotlib"):
        assert package in train


def test_license_is_an_spdx_expression_setuptools_takes_without_warning() -> None:
    import os
    import warnings

    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "MIT"  # PEP 639: an SPDX expression, not a table
    for pattern in data["project"].get("license-files", []):
        assert list(ROOT.glob(pattern)), pattern
    assert "setuptools>=77" in data["build-system"]["requires"][0]  # the first to read it
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} predates PEP 639")
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    finally:
        os.chdir(cwd)
    assert [str(w.message) for w in caught if "licen" in str(w.message).lower()] == []
    assert dist.metadata.license_expression == "MIT"


def test_every_layer_trains_without_the_extras(tmp_path: Path) -> None:
    code = WITHOUT_EXTRAS + TRAIN_EVERY_LAYER + """
print(json.dumps({"loaded": [n for n in BLOCKED if sys.modules.get(n) is not None]}))
"""
    proc = run_python(code, fresh_env(tmp_path, CTRLRNN_CACHE=None))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[-2])["warnings"] == []
    assert json.loads(lines[-1])["loaded"] == []


def test_commands_name_the_missing_extra(tmp_path: Path) -> None:
    code = WITHOUT_EXTRAS + """
from ctrlrnn.cli import main
codes = {}
for argv in (["train", "--task", "copy", "--model", "qrnn", "--out", sys.argv[1]],
             ["data", "list"],
             ["reproduce", "--quick", "--only", "qrnn-copy", "--results", sys.argv[1] + "-r",
              "--runs", sys.argv[1] + "-runs", "--docs", sys.argv[1] + "-docs"], ["info"]):
    codes[argv[0]] = main(argv)
print(codes)
"""
    proc = run_python(code, fresh_env(tmp_path, CTRLRNN_CACHE=None), str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "{'train': 2, 'data': 2, 'reproduce': 2, 'info': 0}")
    # (``info`` compiles the kernels where the default cache lacks them, and says so)
    errors = [line for line in proc.stderr.strip().splitlines()
              if not line.startswith("ctrlrnn: compiling the C++ kernels")]
    assert len(errors) == 3, proc.stderr
    for line, command in zip(errors, ("train", "data", "reproduce")):
        assert line.startswith(f"ctrlrnn {command}: needs the optional package ")
        assert "pip install 'ctrlrnn[train]'" in line


COMMANDS = ["info", "build", "bench", "data", "train", "eval", "reproduce"]
NEED_TRAIN = ["bench", "data", "train", "eval", "reproduce"]


def _help_entries(text: str) -> dict[str, str]:
    """``ctrlrnn --help``'s list of commands (printed unwrapped): command -> its line."""
    entries: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        words = line.split()
        if line.startswith("    ") and not line.startswith("     ") and words[0] in COMMANDS:
            last = words[0]
            entries[last] = " ".join(words[1:])
        elif last is not None and line.startswith("      ") and words:  # a long name's help
            entries[last] = " ".join([entries[last], *words]).strip()
        else:
            last = None
    return entries


def test_help_lists_every_command_with_the_extra_it_needs(tmp_path: Path) -> None:
    code = WITHOUT_EXTRAS + """
from ctrlrnn.cli import main
main(["--help"])
"""
    proc = run_python(code, fresh_env(tmp_path, CTRLRNN_CACHE=None, COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    entries = _help_entries(proc.stdout)
    assert list(entries) == COMMANDS
    for command in COMMANDS:
        needs = command in NEED_TRAIN
        assert entries[command].endswith("[needs the 'train' extra: not installed]") == needs
        assert not entries[command].startswith("[")  # the command's own summary comes first
    assert "need: pip install 'ctrlrnn[train]'" in proc.stdout


def test_every_command_that_needs_the_extra_says_so_before_any_work(tmp_path: Path) -> None:
    code = WITHOUT_EXTRAS + """
from ctrlrnn.cli import main
print({argv[0]: main(argv) for argv in (["bench", "--quick"], ["eval", "--checkpoint", "x"],
                                       ["data", "prepare", "mr"])})
"""
    proc = run_python(code, fresh_env(tmp_path, CTRLRNN_CACHE=None, CTRLRNN_DATA=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "{'bench': 2, 'eval': 2, 'data': 2}"
    errors = proc.stderr.strip().splitlines()
    assert [line.split(":")[0] for line in errors] == [
        "ctrlrnn bench", "ctrlrnn eval", "ctrlrnn data"]
    assert all("pip install 'ctrlrnn[train]'" in line for line in errors)
    assert list(tmp_path.iterdir()) == []  # the data cache untouched: nothing was started


def test_a_full_install_lists_every_command_without_notes(tmp_path: Path) -> None:
    proc = run_python("from ctrlrnn.cli import main\nmain(['--help'])",
                      fresh_env(tmp_path, CTRLRNN_CACHE=None, COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    entries = _help_entries(proc.stdout)
    assert list(entries) == COMMANDS
    assert "not installed" not in proc.stdout
