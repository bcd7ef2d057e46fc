"""The abi3 wheel under a second CPython (issue 73: one wheel serves Python 3.10 to 3.13).

``scripts/build-wheel --variants native`` builds the wheel under this interpreter, its kernels
compiled against this venv's torch. The test installs it into a fresh virtual environment of
the interpreter that ``--other-python PATH`` names. That interpreter is another CPython minor
version whose torch is this torch's release, CPU or CUDA build: ``2.13.0+cu130`` serves for
``2.13.0+cpu`` (:func:`ctrlrnn.ops.prebuilt.mismatch`). The fresh environment sees that
interpreter's packages (torch, numpy) through a ``.pth`` line, after its own.

There, with no compiler (``CC`` and ``CXX`` set to ``/bin/false``) and an empty kernel cache,
a QRNN, an RCRN, a CAS-LSTM and two METAGROSS layers (one per kernel family) run forward and
backward on the wheel's kernels. The outputs and gradients are compared with a second run of
the same layers with ``CTRLRNN_BACKEND=reference``. Each layer then trains one SGD step on the
kernels. Nothing may be written to the cache, and nothing may be said about a build.

Without ``--other-python`` the test is skipped, as it is when the interpreter named is this
Python's version or has another torch release (docs/install.md says how to make one).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from install_helpers import build_wheel, no_compiler_env

from ctrlrnn.ops import prebuilt

pytestmark = [
    pytest.mark.wheel,
    pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                       reason="no C++ compiler to build the wheel's kernels"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                       reason="the wheel's CPU variants are x86-64 ones, built on Linux"),
]

#: What the interpreter is and has: its Python version, its torch and where torch and numpy lie.
PROBE = """
import json, os, sys
import numpy, torch
print(json.dumps({"python": list(sys.version_info[:2]), "torch": torch.__version__,
                  "torch_git": str(torch.version.git_version),
                  "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False)),
                  "site": os.path.dirname(os.path.dirname(torch.__file__)),
                  "numpy_site": os.path.dirname(os.path.dirname(numpy.__file__))}))
"""

#: Runs the layers forward and backward (on the kernels, or with ``CTRLRNN_BACKEND=reference``
#: set by the caller) and saves their outputs and gradients to ``sys.argv[1]``; with
#: ``sys.argv[2] == "train"`` each then takes one SGD step and must change its parameters. The
#: last line printed is JSON: the Python and torch versions, where ctrlrnn was imported from
#: and each kernel family's origin.
RUN = """
import json, sys
import torch
import ctrlrnn
from ctrlrnn.ops import _extension
torch.manual_seed(0)
x = torch.randn(7, 3, 8)
lengths = torch.tensor([7, 4, 2])
layers = {"qrnn": ctrlrnn.QRNN(8, 16, num_layers=2, bidirectional=True),
          "rcrn": ctrlrnn.RCRN(8, 16),
          "caslstm": ctrlrnn.CASLSTM(8, 16, bidirectional=True),
          "metagross_input": ctrlrnn.Metagross(8, 16, depth=2),
          "metagross_state": ctrlrnn.Metagross(8, 16, depth=2, gates="state")}
saved = {}
for name, m in layers.items():
    out = m(x, lengths=lengths)[0]
    out.square().sum().backward()
    saved[name] = [out.detach(), *(p.grad.clone() for p in m.parameters())]
    if sys.argv[2] == "train":
        before = [p.detach().clone() for p in m.parameters()]
        torch.optim.SGD(m.parameters(), lr=0.1).step()
        assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters())), name
torch.save(saved, sys.argv[1])
print(json.dumps({"python": list(sys.version_info[:2]), "torch": torch.__version__,
                  "file": ctrlrnn.__file__,
                  "origins": {n: s.origin for n, s in _extension._STATUS.items()}}))
"""


def _skip_unless_fitting(found: dict, path: str) -> None:
    """Skip, saying why, unless ``found`` (:data:`PROBE`'s answer) is another CPython of
    3.10 or later whose torch the wheel's manifest accepts."""
    here = prebuilt.torch_record()
    version = ".".join(map(str, found["python"]))
    if tuple(found["python"]) == sys.version_info[:2]:
        pytest.skip(f"--other-python {path} is Python {version}, this test's own version")
    if tuple(found["python"]) < (3, 10):
        pytest.skip(f"--other-python {path} is Python {version}; the wheel is cp310-abi3")
    if (prebuilt.release(found["torch"]) != prebuilt.release(here["torch"])
            or found["cxx11_abi"] != here["cxx11_abi"]):
        pytest.skip(f"--other-python {path} has torch {found['torch']} (C++11 ABI "
                    f"{int(found['cxx11_abi'])}); the wheel is built against {here['torch']} "
                    f"(C++11 ABI {int(here['cxx11_abi'])}), one wheel per torch release")


@pytest.fixture(scope="module")
def other_python(request: pytest.FixtureRequest) -> dict:
    """:data:`PROBE`'s answer for the ``--other-python`` interpreter, plus its ``path``."""
    path = request.config.getoption("--other-python")
    if not path:
        pytest.skip("no --other-python PATH: an interpreter of another CPython version with "
                    f"torch {prebuilt.release(torch.__version__)} (docs/install.md)")
    run = subprocess.run([path, "-c", PROBE], capture_output=True, text=True, timeout=300,
                         check=False)
    if run.returncode != 0:
        pytest.skip(f"--other-python {path} cannot import torch and numpy: "
                    f"{(run.stderr.strip().splitlines() or ['?'])[-1]}")
    found = json.loads(run.stdout.splitlines()[-1])
    _skip_unless_fitting(found, path)
    return {**found, "path": path}


@pytest.fixture(scope="module")
def installed(other_python: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a fresh virtual environment of the other interpreter, which
    sees that interpreter's torch and numpy through a ``.pth`` file."""
    wheel = build_wheel(tmp_path_factory.mktemp("dist"), "native")
    env_dir = tmp_path_factory.mktemp("venv-other")
    subprocess.run([other_python["path"], "-m", "venv", str(env_dir)], check=True, timeout=600)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    lines = dict.fromkeys([other_python["site"], other_python["numpy_site"]])
    Path(site.stdout.strip(), "outer.pth").write_text("".join(f"{p}\n" for p in lines))
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(wheel)], check=True, timeout=600)
    return env_dir


def _run(installed: Path, out: Path, mode: str, env: dict[str, str]) -> dict:
    """:data:`RUN` in the installed environment; its JSON line, after checking it succeeded."""
    run = subprocess.run([str(installed / "bin" / "python"), "-c", RUN, str(out), mode],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    assert not re.search(r"prebuilt|compil|build", run.stderr), run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_the_wheel_trains_and_matches_the_reference_under_another_python(
    other_python: dict, installed: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**no_compiler_env(cache), "CUDA_VISIBLE_DEVICES": ""}
    kernels = _run(installed, tmp_path / "kernels.pt", "train", env)
    assert kernels["python"] == other_python["python"] != list(sys.version_info[:2])
    assert kernels["torch"] == other_python["torch"], kernels
    assert kernels["file"].startswith(str(installed)), kernels
    assert kernels["origins"] == {"scan": "prebuilt", "cells": "prebuilt",
                                  "metagross": "prebuilt"}, kernels
    reference = _run(installed, tmp_path / "reference.pt", "check",
                     {**env, "CTRLRNN_BACKEND": "reference"})
    assert reference["origins"] == {}, reference  # no kernel library loaded
    assert sorted(p.name for p in cache.rglob("*")) == []
    got = torch.load(tmp_path / "kernels.pt")
    want = torch.load(tmp_path / "reference.pt")
    assert got.keys() == want.keys()
    for name in want:
        assert len(got[name]) == len(want[name]) > 1, name
        for i, (a, b) in enumerate(zip(got[name], want[name])):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4,
                                       msg=lambda m, n=name, i=i: f"{n} tensor {i}: {m}")
