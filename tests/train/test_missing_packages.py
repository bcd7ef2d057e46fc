"""A missing optional package gives one line with the install command, in ``train`` as in
``data prepare`` (the package is made unimportable for the child process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [
    ["train", "--task", "chorales", "--model", "lstm", "--max-steps", "1", "--no-progress"],
    ["data", "prepare", "chorales"],
])
def test_missing_music21_is_one_line(tmp_path, argv):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "music21.py").write_text('raise ImportError("not installed", name="music21")\n')
    # the shim goes first on the path the process already has (ctrlrnn may be found through it)
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CTRLRNN_DATA": str(tmp_path / "data")}
    if argv[0] == "train":
        argv = [*argv, "--out", str(tmp_path / "run")]
    proc = subprocess.run([sys.executable, "-m", "ctrlrnn", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"ctrlrnn {argv[0]}")
    assert "pip install" in lines[0] and "music21" in lines[0]
