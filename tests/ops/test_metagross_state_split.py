"""METAGROSS as printed (gates='state') on CPU splits a unidirectional call's work over the
threads by the batch or by the hidden units (metagross_state.cpp): both give the same values and
gradients, the automatic choice follows the measured rule, and CTRLRNN_METAGROSS_SPLIT forces
either."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import ctrlrnn
from ctrlrnn.ops.backend import cpu_extension

BATCH, HIDDEN = 1, 2  # metagross_state_split modes (0: auto)


@pytest.fixture
def cells():
    ext = cpu_extension("cells")
    if ext is None:
        pytest.skip("the compiled cells are not available here")
    before = ext.metagross_state_split(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield ext
    torch.set_num_threads(threads)
    ext.metagross_state_split(before)


def _run(layer, x, lengths, weights):
    layer.zero_grad(set_to_none=True)
    x.grad = None
    out, h_n = layer(x, lengths=lengths)
    ((out * weights).sum() + 0.3 * h_n.sum()).backward()
    return [out.detach().clone(), h_n.detach().clone(), x.grad.clone()] + [
        p.grad.clone() for p in layer.parameters() if p.grad is not None]


# (batch, steps, hidden, depth, residual, lengths): hidden sizes off the 16-unit quantum, a
# batch of one, a tree of one unit (depth 1) and of seven (depth 3), rows of length 1
CASES = [
    (4, 7, 20, 2, False, None),
    (3, 9, 37, 3, True, [9, 1, 5]),
    (1, 5, 64, 2, True, None),
    (5, 6, 33, 1, False, [6, 1, 2, 6, 3]),
    (8, 4, 64, 3, False, [4, 4, 1, 2, 3, 4, 1, 1]),
    (2, 3, 8, 2, True, None),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32: MKL's packed path
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}-T{}-H{}-d{}-res{}-len{}".format(
    *c[:5], c[5] is not None))
def test_the_hidden_split_gives_the_batch_splits_values_and_gradients(cells, case, dtype):
    B, T, H, depth, residual, lengths = case
    torch.manual_seed(B * 100 + H)
    layer = ctrlrnn.Metagross(12, H, depth=depth, gates="state", residual=residual,
                              batch_first=True).to(dtype)
    x = torch.randn(B, T, 12, dtype=dtype, requires_grad=True)
    lens = torch.tensor(lengths) if lengths is not None else None
    weights = torch.randn(B, T, H, dtype=dtype)
    got = {}
    for mode in (BATCH, HIDDEN):
        cells.metagross_state_split(mode)
        got[mode] = _run(layer, x, lens, weights)
    assert cells.metagross_state_parts(B, T, H) >= (2 if H > 16 else 1)  # mode HIDDEN splits
    tol = 1e-12 if dtype == torch.float64 else 2e-5  # float32: other GEMM shapes, rounding
    for a, b in zip(got[BATCH], got[HIDDEN], strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_gradcheck_through_the_hidden_split(cells):
    cells.metagross_state_split(HIDDEN)
    torch.manual_seed(0)
    layer = ctrlrnn.Metagross(5, 40, depth=2, gates="state", batch_first=True).double()
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2, 3])
    assert cells.metagross_state_parts(3, 4, 40) == 2
    # fast mode checks a random projection of the Jacobian: the full one takes a backward pass
    # for each of the 480 outputs, through 40 units the split needs
    assert torch.autograd.gradcheck(lambda v: layer(v, lengths=lengths)[0], (x,), fast_mode=True)


def test_the_automatic_split_follows_the_measured_rule(cells):
    parts = cells.metagross_state_parts
    assert parts(4, 128, 128) == 2 and parts(2, 128, 64) == 2  # the batch cannot split
    assert parts(2, 128, 48) == 1  # parts of fewer than 32 units
    assert parts(8, 128, 512) == 2 and parts(16, 128, 256) == 2  # <= 8 rows a thread
    assert parts(8, 128, 128) == 1 and parts(16, 128, 128) == 1  # narrow: the batch split
    assert parts(32, 256, 256) == 1 and parts(64, 64, 512) == 1  # 16+ rows a thread
    assert parts(0, 5, 256) == 1 and parts(4, 0, 256) == 1  # nothing to split
    cells.metagross_state_split(BATCH)
    assert parts(4, 128, 128) == 1
    cells.metagross_state_split(HIDDEN)
    assert parts(32, 256, 256) == 2
    torch.set_num_threads(1)
    assert parts(32, 256, 256) == 1  # one thread: nothing to split over
    with pytest.raises(RuntimeError, match="mode must be 0"):
        cells.metagross_state_split(3)


@pytest.mark.not_plain("a setting read in child processes; no kernel's values")
@pytest.mark.parametrize(("value", "parts"), [
    ("hidden", 2), ("batch", 1), ("auto", 1), ("sideways", None)])
def test_the_environment_variable_forces_a_split(cells, value, parts):
    """CTRLRNN_METAGROSS_SPLIT reaches the kernel when the extension loads; a value it does not
    take is an error naming the variable."""
    code = ("import torch, warnings\ntorch.set_num_threads(2)\nwarnings.simplefilter('always')\n"
            "from ctrlrnn.ops.backend import cpu_extension\n"
            "print(cpu_extension('cells').metagross_state_parts(32, 256, 256))\n")
    env = {**os.environ, "CTRLRNN_METAGROSS_SPLIT": value}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    if parts is None:
        assert done.returncode != 0
        assert "SettingError: CTRLRNN_METAGROSS_SPLIT='sideways'" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert int(done.stdout.strip().splitlines()[-1]) == parts
