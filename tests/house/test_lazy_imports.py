"""``import ctrlrnn`` loads the layers and the ops only (issue 72, item 5): the command line,
training, benchmarks, reproduction and tasks, and the packages only they need, load on use.

The imports are watched in a fresh interpreter. A third-party package counts only when
``import torch`` alone did not load it: torch's own ``torch.hub`` imports ``tqdm`` where it
is installed, which ctrlrnn cannot change.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import ctrlrnn
from ctrlrnn.settings import child_environment

#: ctrlrnn's parts that ``import ctrlrnn`` must not load
OWN = ("ctrlrnn.train", "ctrlrnn.bench", "ctrlrnn.reproduce", "ctrlrnn.tasks", "ctrlrnn.cli",
       "ctrlrnn.data", "ctrlrnn.models")
#: the optional packages those parts use
FOREIGN = ("rich", "matplotlib", "optuna", "tqdm")

_WATCH = """
import json, sys
import torch
after_torch = set(sys.modules)
import ctrlrnn
print(json.dumps({"torch": sorted(after_torch), "ctrlrnn": sorted(set(sys.modules))}))
"""


def _inside(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _loaded() -> tuple[set[str], set[str]]:
    """The modules loaded after ``import torch`` and after ``import ctrlrnn``, in a fresh
    interpreter."""
    res = subprocess.run([sys.executable, "-c", _WATCH], capture_output=True, text=True,
                         timeout=300, env=child_environment(OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    return set(seen["torch"]), set(seen["ctrlrnn"])


def test_import_ctrlrnn_loads_the_layers_and_ops_only() -> None:
    torch_only, everything = _loaded()
    assert {"ctrlrnn.nn", "ctrlrnn.ops"} <= everything
    own = sorted(m for m in everything if _inside(m, OWN))
    foreign = sorted(m for m in everything - torch_only if _inside(m, FOREIGN))
    assert own == [], f"import ctrlrnn loads: {own}"
    assert foreign == [], f"import ctrlrnn loads: {foreign}"


def test_the_lazy_names_load_on_first_access() -> None:
    from ctrlrnn.onnx_export import export_onnx
    from ctrlrnn.serialization import safe_globals

    assert ctrlrnn.export_onnx is export_onnx
    assert ctrlrnn.safe_globals is safe_globals
    assert set(ctrlrnn._LAZY) <= set(ctrlrnn.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'ctrlrnn' has no attribute 'nothing_here'"):
        _ = ctrlrnn.nothing_here  # type: ignore[attr-defined]
    assert not hasattr(ctrlrnn, "train_model")


def test_the_command_line_still_loads_its_parts() -> None:
    res = subprocess.run([sys.executable, "-m", "ctrlrnn", "--help"], capture_output=True,
                         text=True, timeout=300, env=child_environment(OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stderr
    for command in ("train", "bench", "reproduce", "info"):
        assert command in res.stdout
