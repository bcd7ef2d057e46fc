"""Helpers of the install tests: run Python code in a fresh process with a chosen environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_env(tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    """This process's environment with an empty kernel cache under ``tmp_path``, no backend
    settings, and ``overrides`` (None removes a variable)."""
    env = dict(os.environ)
    env.pop("CTRLRNN_REQUIRE_COMPILED", None)
    env.pop("CTRLRNN_BACKEND", None)
    env["CTRLRNN_CACHE"] = str(tmp_path / "cache")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def build_wheel(out: Path, variant: str) -> Path:
    """The wheel ``scripts/build-wheel --variants <variant>`` writes into ``out``."""
    subprocess.run(["bash", str(ROOT / "scripts" / "build-wheel"), "--out", str(out),
                    "--variants", variant], check=True, timeout=3600, cwd=ROOT)
    return next(out.glob("ctrlrnn-*.whl"))


def no_compiler_env(cache: Path) -> dict[str, str]:
    """This process's environment with no ``CTRLRNN_*`` setting, no C/C++ compiler (``CC`` and
    ``CXX`` are ``/bin/false``), the kernel cache ``cache`` and one OpenMP thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRNN_")}
    return {**env, "CC": "/bin/false", "CXX": "/bin/false", "CTRLRNN_CACHE": str(cache),
            "OMP_NUM_THREADS": "1"}


def line_of(code: str, marker: str) -> int:
    """The line number of ``marker`` in ``code`` as run by :func:`run_python`."""
    lines = textwrap.dedent(code).splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def run_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` with ``python -c`` in a fresh interpreter (this one's) and ``env``."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)

#: Trains every layer one optimizer step (bidirectional, stacked, with lengths) and prints, as
#: its last line, JSON with the warnings raised and the backend used.
TRAIN_EVERY_LAYER = """
import json
import warnings
import torch
import ctrlrnn
warnings.simplefilter("always")
torch.manual_seed(0)
x = torch.randn(5, 3, 4)
lengths = torch.tensor([5, 3, 1])
layers = [
    ctrlrnn.QRNN(4, 6, num_layers=2, bidirectional=True, zoneout=0.1),
    ctrlrnn.RCRN(4, 6, bidirectional=True),
    ctrlrnn.CASLSTM(4, 6, num_layers=2, bidirectional=True),
    ctrlrnn.CARNN(4, 6, context_size=3, variant="n"),
    ctrlrnn.CARNN(4, 4, context_size=3, variant="s"),
    ctrlrnn.Metagross(4, 6, depth=2, bidirectional=True),
    ctrlrnn.Metagross(4, 6, depth=2, base="lstm"),
    ctrlrnn.MetagrossFFN(4, depth=2),
]
with warnings.catch_warnings(record=True) as caught:
    for m in layers:
        args = (x, torch.randn(3, 3)) if isinstance(m, ctrlrnn.CARNN) else (x,)
        kwargs = {} if isinstance(m, ctrlrnn.MetagrossFFN) else {"lengths": lengths}
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        before = [p.detach().clone() for p in m.parameters()]
        out = m(*args, **kwargs)  # call site
        out = out[0] if isinstance(out, tuple) else out
        out.square().sum().backward()
        opt.step()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
        assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
print(json.dumps({"warnings": [[str(w.message), w.filename, w.lineno] for w in caught],
                  "backend": ctrlrnn.backend_info()["families"]["scan"]["cpu"]}))
"""

#: A tiny extension that compiles in seconds, for the tests of the build cache: one op in the
#: namespace the build names (``CTRLRNN_OPS_NAMESPACE``, passed through one macro to expand it).
#: It uses the LibTorch stable ABI's header, a quarter of ``<torch/library.h>``'s compile time.
TINY_CPP = """
#include <torch/csrc/stable/library.h>
int64_t twice(int64_t x) { return 2 * x; }
#define TINY_LIBRARY(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define TINY_IMPL(ns, k, m) STABLE_TORCH_LIBRARY_IMPL(ns, k, m)
TINY_LIBRARY(CTRLRNN_OPS_NAMESPACE, m) { m.def("twice(int x) -> int"); }
TINY_IMPL(CTRLRNN_OPS_NAMESPACE, CompositeExplicitAutograd, m) {
  m.impl("twice", TORCH_BOX(&twice));
}
"""

# Point the loader at the tiny extension, then report what happened to it.
TINY_PRELUDE = """
import json, sys
from pathlib import Path
from ctrlrnn.ops import _extension as e
e.SOURCE_ROOT = e.CSRC = Path(sys.argv[1])
e.EXTENSIONS = {"tiny": ["tiny.cpp"]}
"""
