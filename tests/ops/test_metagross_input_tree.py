"""The METAGROSS tree as one autograd node (ops/metagross_input_tree.py) against the per-level
custom ops it replaces on the eager CPU path, and its own guarantees."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
import torch

import ctrlrnn
from ctrlrnn.nn import metagross_tree
from ctrlrnn.ops import backend
from ctrlrnn.ops.metagross_level.input_tree import ROW_MULTIPLE, input_tree

pytestmark = pytest.mark.skipif(
    not backend.has_kernel("metagross", torch.device("cpu")),
    reason="the one-node tree runs on the compiled CPU kernels only",
)

D64 = torch.float64


def _run(m, x, hx, lengths, one_node: bool, monkeypatch):
    """Outputs, gates and every gradient of a loss that reads all of them."""
    with monkeypatch.context() as mp:
        if not one_node:
            mp.setattr(metagross_tree, "_one_node", lambda unit, x: False)
        xx = x.detach().clone().requires_grad_()
        out, h_n, (alpha, beta) = m(xx, hx, lengths=lengths, return_gates=True)
        weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        loss = (out * weights).sum() + (h_n**2).sum() + (0.3 * alpha).sum() + (beta**2).sum()
        wrt = [xx, *m.parameters()] + ([hx] if hx is not None else [])
        return [out, h_n, alpha, beta, *torch.autograd.grad(loss, wrt)]


CASES = list(itertools.product([1, 2, 3], ["h", "c"], [(True, 5), (False, 5), (False, 7)],
                               [True, False]))  # fmt: skip


@pytest.mark.parametrize("depth,recurrence,residual_d,bias", CASES)
def test_equals_per_level_ops(depth, recurrence, residual_d, bias, monkeypatch) -> None:
    residual, D = residual_d
    torch.manual_seed(depth * 7 + D)
    m = Metagross_double(D, depth, recurrence, residual, bias)
    assert metagross_tree._one_node(m.unit(0), torch.zeros(1, 1, D, dtype=D64))
    x = torch.randn(3, 6, D, dtype=D64)
    hx = torch.randn(1, 3, (2**depth - 1) * 5, dtype=D64, requires_grad=True)
    for lengths, h in ((None, None), (torch.tensor([6, 2, 1]), hx)):
        got = _run(m, x, h, lengths, True, monkeypatch)
        want = _run(m, x, h, lengths, False, monkeypatch)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=f"result {i}")


def Metagross_double(D: int, depth: int, recurrence: str, residual: bool, bias: bool):
    return ctrlrnn.Metagross(D, 5, depth=depth, recurrence=recurrence, residual=residual,
                             bias=bias, batch_first=True).double()  # fmt: skip


@pytest.mark.parametrize("h_form", [True, False])
def test_gradcheck(h_form: bool) -> None:
    torch.manual_seed(3)
    B, T, H, L = 2, 4, 3, 2
    N, I = 2**L - 1, 2 ** (L - 1) - 1
    x = torch.randn(B, T, H, dtype=D64, requires_grad=True)
    weight = (0.5 * torch.randn(3 * N * H, H, dtype=D64)).requires_grad_()
    bias = (0.1 * torch.randn(3 * N * H, dtype=D64)).requires_grad_()
    dw = (0.5 * torch.randn(2 * I, H, dtype=D64)).requires_grad_()
    db = (0.1 * torch.randn(2 * I, dtype=D64)).requires_grad_()
    s0 = (0.5 * torch.randn(B, N * H, dtype=D64)).requires_grad_()
    lengths = torch.tensor([4, 2])

    def f(*args):
        return input_tree(*args, lengths, L, H, h_form, True)

    assert torch.autograd.gradcheck(f, (x, weight, bias, dw, db, s0))


def test_other_configurations_take_the_per_level_ops() -> None:
    x = torch.zeros(1, 2, 4)
    taken = {
        "default": ctrlrnn.Metagross(4, 4, depth=2),
        "static depth gate": ctrlrnn.Metagross(4, 4, depth=2, depth_gate="static", causal=False),
        "scalar depth gate": ctrlrnn.Metagross(4, 4, depth=2, depth_gate="scalar"),
        "residual projection": ctrlrnn.Metagross(6, 4, depth=2),
        "gru base": ctrlrnn.Metagross(4, 4, depth=2, base="gru"),
    }
    got = {name: metagross_tree._one_node(m.unit(0), x[..., : m.input_size])
           for name, m in taken.items()}  # fmt: skip
    assert got == {"default": True, "static depth gate": False, "scalar depth gate": False,
                   "residual projection": False, "gru base": False}  # fmt: skip


def test_padding_columns_never_leak_stale_memory(monkeypatch) -> None:
    """The joint GEMM's rows are padded to whole cache lines; the gradient block comes from the
    output cache, whose blocks hold whatever their last user wrote: the padding's columns must
    be cleared, or NaN there would reach x's gradient through the zero rows (0 * NaN)."""
    torch.manual_seed(5)
    B, T, H = 8, 64, 64
    m = ctrlrnn.Metagross(H, H, depth=2, batch_first=True).double()
    rows = 3 * 3 * H + 2
    width = rows + (-rows % ROW_MULTIPLE)
    assert width > rows and B * T * width * 8 >= 1 << 20  # padded, and from the output cache
    ext = backend.kernel_for("metagross", torch.device("cpu"))
    x = torch.randn(B, T, H, dtype=D64)
    want = _run(m, x, None, None, False, monkeypatch)
    for _ in range(3):  # stale NaN blocks of the gradient block's size class in the cache
        stale = [ext.pooled_empty([B, T, width], x).fill_(float("nan")) for _ in range(3)]
        del stale
        got = _run(m, x, None, None, True, monkeypatch)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_no_reference_cycle_keeps_the_graph_alive() -> None:
    """The node holds its outputs through save_for_backward only: with the garbage collector
    off, dropping the outputs frees the graph (and the tree's cached blocks with it)."""
    m = ctrlrnn.Metagross(4, 4, depth=3, batch_first=True)
    x = torch.randn(2, 5, 4, requires_grad=True)
    gc.collect()
    gc.disable()
    try:
        out, h_n, (alpha, beta) = m(x, return_gates=True)
        node = weakref.ref(out.grad_fn)
        probes = [weakref.ref(t) for t in (out, alpha, beta)]
        del out, h_n, alpha, beta
        assert node() is None and all(p() is None for p in probes)
    finally:
        gc.enable()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_low_precision_matches_per_level_ops(dtype, monkeypatch) -> None:
    torch.manual_seed(2)
    m = ctrlrnn.Metagross(16, 16, depth=2, batch_first=True).to(dtype)
    x = torch.randn(3, 7, 16, dtype=dtype)
    got = _run(m, x, None, torch.tensor([7, 4, 1]), True, monkeypatch)
    want = _run(m, x, None, torch.tensor([7, 4, 1]), False, monkeypatch)
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-5
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("batch,lengths", [(0, None), (0, []), (2, [0, 0]), (3, [4, 0, 2])])
def test_empty_batches_and_zero_lengths(batch, lengths, monkeypatch) -> None:
    torch.manual_seed(4)
    m = Metagross_double(5, 2, "h", True, True)
    x = torch.randn(batch, 4, 5, dtype=D64)
    lens = None if lengths is None else torch.tensor(lengths, dtype=torch.long)
    got = _run_layer(m, x, lens, True, monkeypatch)
    want = _run_layer(m, x, lens, False, monkeypatch)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _run_layer(m, x, lengths, one_node: bool, monkeypatch):
    """The unit's pass (lengths of 0 allowed there) and every gradient of a loss reading it."""
    with monkeypatch.context() as mp:
        if not one_node:
            mp.setattr(metagross_tree, "_one_node", lambda unit, x: False)
        xx = x.detach().clone().requires_grad_()
        unit = m.unit(0)
        out, last, _base, alpha, beta = unit(xx, lengths, None, None)
        loss = out.sum() + (last**2).sum() + alpha.sum() + (beta**2).sum()
        wrt = [xx, *unit.parameters()]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        return [out, last, alpha, beta, *[g if g is not None else torch.zeros(()) for g in grads]]
