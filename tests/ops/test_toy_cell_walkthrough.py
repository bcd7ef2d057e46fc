"""docs/adding-a-unit.md's walkthrough of a fused cell: the toy tanh RNN, built from the files as
the page prints them, touches only its own folder and the list of ops, and its compiled kernels
(and, where Triton is installed, its Triton kernels in Triton's interpreter) match its reference.

The files go to a temporary folder made part of ``ctrlrnn.ops.cells``; the toy's entry is the
page's line of the list, put in an extension of its own (``toy``), so the real ``cells``
extension is not rebuilt; its op's CPU kernels are routed there."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
import torch

import ctrlrnn.ops.cells
from ctrlrnn.ops import _extension, backend, registry

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-unit.md"
FOLDER = "src/ctrlrnn/ops/cells/tanh_rnn/"
LIST = "src/ctrlrnn/ops/registry.py"


def walkthrough() -> dict[str, str]:
    """The page's files: path -> text, in the order printed."""
    text = PAGE.read_text(encoding="utf-8")
    return dict(re.findall(r'```\w+ title="([^"]+)"\n(.*?)```', text, flags=re.DOTALL))


def test_the_walkthrough_touches_only_its_own_folder_and_the_list() -> None:
    files = walkthrough()
    own = {FOLDER + name for name in ("reference.py", "__init__.py", "tanh_rnn.cpp",
                                      "triton_kernels.py")}
    assert set(files) == own | {LIST}
    assert files[LIST].strip() == '_cell("tanh_rnn"),'


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[ModuleType, ModuleType, Path]]:  # fmt: skip
    """``(the toy's Python module, its compiled extension, the folder holding its package)``, the
    extension built (or taken from the kernel cache) from the page's files."""
    files = walkthrough()
    folder = tmp_path_factory.mktemp("ops") / "cells" / "tanh_rnn"
    folder.mkdir(parents=True)
    for path, text in files.items():
        if path.startswith(FOLDER):
            (folder / path.removeprefix(FOLDER)).write_text(text, encoding="utf-8")
    entry = eval(files[LIST].strip().rstrip(","), vars(registry))  # the page's line
    op = replace(entry, family="toy", folder=str(folder))
    saved = (registry.OPS, dict(registry.FAMILIES), dict(_extension.EXTENSIONS),
             list(ctrlrnn.ops.cells.__path__))
    registry.OPS = (*registry.OPS, op)
    registry.FAMILIES["toy"] = registry.Family("toy", "the toy cell of docs/adding-a-unit.md",
                                               flags=("runs_recurrences_concurrently",))
    _extension.EXTENSIONS["toy"] = registry.sources("toy")
    ctrlrnn.ops.cells.__path__.append(str(folder.parent))
    try:
        module = importlib.import_module("ctrlrnn.ops.cells.tanh_rnn")
        ext = _extension.load("toy")
        assert ext is not None, _extension.status("toy").reason
        yield module, ext, folder.parent
    finally:
        registry.OPS, ctrlrnn.ops.cells.__path__[:] = saved[0], saved[3]
        registry.FAMILIES.clear()
        registry.FAMILIES.update(saved[1])
        _extension.EXTENSIONS.clear()
        _extension.EXTENSIONS.update(saved[2])
        for name in [n for n in sys.modules if n.startswith("ctrlrnn.ops.cells.tanh_rnn")]:
            del sys.modules[name]


def _inputs(dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 4, generator=g, dtype=dtype)
    w = torch.randn(4, 4, generator=g, dtype=dtype) * 0.5
    h0 = torch.randn(3, 4, generator=g, dtype=dtype)
    return x, w, h0, torch.tensor([5, 2, 0])


def test_the_toy_cell_builds_and_matches_its_reference(toy, monkeypatch) -> None:
    module, ext, _ = toy
    real = backend.kernel_for
    monkeypatch.setattr(backend, "kernel_for", lambda family, device: ext if (
        family == "cells" and device.type == "cpu") else real(family, device))
    x, w, h0, lengths = _inputs()
    args = [t.clone().requires_grad_() for t in (x, w, h0)]
    refs = [t.clone().requires_grad_() for t in (x, w, h0)]
    got = module.tanh_rnn_sequence(*args, lengths=lengths)
    want = module.tanh_rnn_sequence_ref(*refs, lengths=lengths)
    assert backend.path("cells", x.device) == backend.KERNEL
    for g_, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g_, w_)
    weights = [torch.randn_like(t) for t in want]
    torch.autograd.backward(got, weights)
    torch.autograd.backward(want, weights)
    for a, r in zip(args, refs, strict=True):
        torch.testing.assert_close(a.grad, r.grad)
    assert torch.autograd.gradcheck(
        lambda *t: module.tanh_rnn_sequence(*t, lengths=lengths),
        tuple(t.clone().requires_grad_() for t in (x, w, h0)))


def test_the_toy_kernels_run_a_stack_of_recurrences(toy) -> None:
    """A stack of two recurrences in one call (weight_hh (R, H, H)) equals one call each."""
    _, ext, _ = toy
    x, w, h0, lengths = _inputs(torch.float32)
    xs, ws, hs = torch.stack([x, x.flip(1)]), torch.stack([w, -w]), torch.stack([h0, h0 * 2])
    stacked = ext.tanh_rnn_forward(xs, ws, hs, lengths, True)
    for r in range(2):
        one = ext.tanh_rnn_forward(xs[r], ws[r], hs[r], lengths, True)
        for s, o in zip(stacked, one, strict=True):
            torch.testing.assert_close(s[r], o)


TRITON_CHECK = """
import os
os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are decorated: before any import
import sys
import torch
import ctrlrnn.ops.cells
ctrlrnn.ops.cells.__path__.append(sys.argv[1])
from ctrlrnn.ops.cells import tanh_rnn, triton_host
forward, backward = triton_host._bind(tanh_rnn)
g = torch.Generator().manual_seed(0)
x, w = torch.randn(3, 5, 4, generator=g), torch.randn(4, 4, generator=g) * 0.5
h0, lengths = torch.randn(3, 4, generator=g), torch.tensor([5, 2, 0])
h_seq, h_last, acts = forward(x, w, h0, lengths, True)
want = tanh_rnn.tanh_rnn_sequence_ref(x, w, h0, lengths)
torch.testing.assert_close(h_seq, want[0])
torch.testing.assert_close(h_last, want[1])
grad = torch.randn(h_seq.shape, generator=g)
got = backward(grad, None, w, h0, h_seq, acts, lengths)
refs = [t.clone().requires_grad_() for t in (x, w, h0)]
torch.autograd.backward(tanh_rnn.tanh_rnn_sequence_ref(*refs, lengths)[0], grad)
for a, r in zip(got, refs, strict=True):
    torch.testing.assert_close(a, r.grad, rtol=1e-4, atol=1e-5)
print("ok")
"""


def test_the_toy_triton_kernels_match_the_reference(toy) -> None:
    """In Triton's interpreter, in a process of its own (the interpreter is chosen when the
    kernels and their helpers are decorated, before anything imports them)."""
    pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]'): "
                                         "the toy cell's Triton kernels are checked where it is")
    _, _, package = toy
    env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_TRITON_NATIVE"}
    done = subprocess.run([sys.executable, "-c", TRITON_CHECK, str(package)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
