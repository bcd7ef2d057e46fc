"""The Triton METAGROSS unit as printed (METAGROSS paper section 2, eq 2-1..2-6) against the
reference, in Triton's CPU interpreter.

As ``test_triton_fused_cells.py``: ``conftest.py`` sets ``TRITON_INTERPRET=1``, and
:func:`kernel_routes.metagross_state_sequence` runs the op's Triton kernels on CPU tensors; it
is compared with :func:`ctrlrnn.ops.cells_ref.metagross_state_sequence_ref` in float64
differentiated by autograd: the output sequence, the final state and the gradients of every
input (``x_proj``, ``weight_hh``, ``alpha``, ``beta``, ``res``, ``h0``), for trees of depth 1, 2
and 3, with and without the residual of eq 2-6, with lengths (a zero length among them), in
float32 and float16.
A forced small channel block splits the hidden size into several blocks (the last one partial),
so the depth gates' gradients are reduced over blocks. The dispatch tests route the cell ops'
CPU kernels to the Triton module (what a CUDA tensor gets) and check that the
public op and the ``Metagross(gates="state")`` layer reach the kernel and equal the reference
path. Shapes are tiny (B = 3, T = 3, H = 8) because the interpreter's cost grows with every
row, step and tree node; the depths, the residual and the lengths are crossed pairwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")

import kernel_routes as cells_triton  # noqa: E402
from kernel_routes import Spy, route, triton_cells, triton_module  # noqa: E402,F401
from triton_tolerances import INF, NAN, close, parity  # noqa: E402

from ctrlrnn.nn.metagross import Metagross  # noqa: E402
from ctrlrnn.ops import cells_ref, fused_cells  # noqa: E402

pytestmark = pytest.mark.usefixtures("triton_cells")

B, T, H = 3, 3, 8
#: a full row, an empty one and a partial one
LENGTHS = [3, 0, 2]
NAMES = ("x_proj", "weight_hh", "alpha", "beta", "res", "h0")


def _args(
    depth: int, res: bool, seed: int, hidden: int = H, steps: int = T, batch: int = B
) -> list[Tensor | None]:
    """(x_proj, weight_hh, alpha, beta, res, h0) as the reference takes them; the depth gates in
    (0, 1) as the layer's sigmoids give them."""
    nodes = 2**depth - 1
    internal = (nodes - 1) // 2
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, steps, 3 * nodes * hidden, generator=g),
        0.4 * torch.randn(3 * nodes * hidden, hidden, generator=g),
        torch.rand(batch, steps, internal, generator=g),
        torch.rand(batch, steps, internal, generator=g),
        torch.randn(batch, steps, hidden, generator=g) if res else None,
        torch.randn(batch, hidden, generator=g),
    ]


def _compare(
    args: Sequence[Tensor | None], lengths: Tensor | None, dtype: torch.dtype, seed: int
) -> tuple[list[Tensor], dict[str, Tensor]]:
    """Kernel (inputs in ``dtype``) against the float64 reference on the same rounded inputs:
    outputs and the gradients of every input for a random weighting of both outputs."""
    leaves = [a.to(dtype).requires_grad_() if a is not None else None for a in args]
    leaves64 = [a.to(dtype).double().requires_grad_() if a is not None else None for a in args]
    outs = cells_triton.metagross_state_sequence(*leaves, lengths=lengths)
    ref = cells_ref.metagross_state_sequence_ref(*leaves64, lengths=lengths)
    for name, x, y in zip(("h_seq", "h_last"), outs, ref, strict=True):
        close(x, y, dtype, name)
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(x.shape, generator=g) for x in outs]
    names = [n for n, a in zip(NAMES, leaves, strict=True) if a is not None]
    got = torch.autograd.grad(outs, [a for a in leaves if a is not None],
                              [w.to(dtype) for w in ws])  # fmt: skip
    # alpha, beta of a depth-1 tree are (B, T, 0): unused by the reference
    want = torch.autograd.grad(ref, [a for a in leaves64 if a is not None],
                               [w.double() for w in ws], allow_unused=True,
                               materialize_grads=True)  # fmt: skip
    for name, x, y in zip(names, got, want, strict=True):
        close(x, y, dtype, f"d {name}")
    return list(outs), dict(zip(names, got, strict=True))


def _case(dtype: torch.dtype, depth: int, res: bool, lengths: bool) -> Any:
    name = {torch.float32: "fp32", torch.float16: "fp16"}[dtype]
    return pytest.param(dtype, depth, res, LENGTHS if lengths else None,
                        id=f"{name}-depth{depth}-{'res' if res else 'nores'}-"
                           f"{'len' if lengths else 'full'}")  # fmt: skip


# depth, residual and lengths cross pairwise: each value of one meets each value of another
# in some case (the full product adds no branch of the kernels that these miss)
FWD_BWD = [
    _case(torch.float32, 1, False, False),
    _case(torch.float32, 1, True, True),
    _case(torch.float32, 2, False, True),
    _case(torch.float32, 2, True, False),
    _case(torch.float32, 3, False, False),
    _case(torch.float32, 3, True, True),
    _case(torch.float16, 3, True, True),
    _case(torch.float16, 2, False, False),
]


@pytest.mark.parametrize(("dtype", "depth", "res", "lengths"), FWD_BWD)
def test_forward_backward(dtype, depth, res, lengths):
    lens = torch.tensor(lengths) if lengths is not None else None
    args = _args(depth, res, seed=depth)
    outs, grads = _compare(args, lens, dtype, seed=10 + depth)
    if lens is not None:
        pad = torch.arange(T)[None, :] >= lens[:, None]
        assert not outs[0][pad].any()
        for name in ("x_proj", "alpha", "beta", "res"):
            if name in grads:
                assert not grads[name][pad].any(), f"d {name} at padded steps"
        # the zero-length row keeps h0
        assert torch.equal(outs[1][1], args[5][1].to(dtype))


def test_channel_blocks(monkeypatch):
    """H = 24 in blocks of 16 (16 + 8): the depth gates' gradients are summed over the blocks'
    partial sums, and the partial last block is masked."""
    calls: list[int] = []

    def small(hidden: int) -> tuple[int, int]:
        calls.append(hidden)
        return 16, 1

    import ctrlrnn.ops.cells.metagross_state.triton_kernels as kernels

    monkeypatch.setattr(kernels, "block", small)
    lens = torch.tensor([3, 2, 0])
    _compare(_args(3, True, seed=20, hidden=24), lens, torch.float32, seed=21)
    assert calls and all(c == 24 for c in calls)  # forward and backward both split


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(30)
    hid, nodes = 2, 3
    args = [
        torch.randn(2, 3, 3 * nodes * hid, generator=g, dtype=torch.float64),
        0.5 * torch.randn(3 * nodes * hid, hid, generator=g, dtype=torch.float64),
        torch.rand(2, 3, 1, generator=g, dtype=torch.float64),
        torch.rand(2, 3, 1, generator=g, dtype=torch.float64),
        torch.randn(2, 3, hid, generator=g, dtype=torch.float64),
        torch.randn(2, hid, generator=g, dtype=torch.float64),
    ]
    lens = torch.tensor([3, 2])
    assert torch.autograd.gradcheck(
        lambda *a: cells_triton.metagross_state_sequence(*a, lengths=lens),
        [a.requires_grad_() for a in args],
        fast_mode=True,
    )


@pytest.mark.parametrize(("batch", "steps"), [(0, 4), (2, 0)], ids=["B0", "T0"])
def test_empty_shapes(batch, steps):
    g = torch.Generator().manual_seed(40)
    nodes = 3
    x = torch.randn(batch, steps, 3 * nodes * H, generator=g).requires_grad_()
    w = torch.randn(3 * nodes * H, H, generator=g).requires_grad_()
    alpha = torch.rand(batch, steps, 1, generator=g).requires_grad_()
    beta = torch.rand(batch, steps, 1, generator=g).requires_grad_()
    res = torch.randn(batch, steps, H, generator=g).requires_grad_()
    h0 = torch.randn(batch, H, generator=g).requires_grad_()
    h_seq, h_last = cells_triton.metagross_state_sequence(x, w, alpha, beta, res, h0)
    assert h_seq.shape == (batch, steps, H) and h_last.shape == (batch, H)
    if steps == 0:
        assert torch.equal(h_last, h0.detach())
    (h_seq.sum() + h_last.sum()).backward()
    for t in (x, alpha, beta, res):
        assert t.grad is not None and t.grad.shape == t.shape and not t.grad.any()
    assert w.grad is not None and not w.grad.any()
    assert h0.grad is not None and torch.equal(h0.grad, torch.ones_like(h0))


# ------------------------------------------------------------------------------------------------
# NaN / +-Inf parity with the reference
# ------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nonfinite():
    h = 5
    args = _args(2, True, seed=50, hidden=h, steps=5)  # the pokes below reach step 4
    x = args[0].clone()
    # depth 2, maps in units of h: root F 0, O 1, Z 2; leaves F 3, 4, O 5, 6, Z 7, 8. A NaN in a
    # leaf's F map, +Inf in the root's O map, -Inf in a leaf's Z map, saturating values
    for idx, value in (((0, 4, 3 * h + 1), NAN), ((1, 1, 1 * h + 2), INF),
                       ((1, 2, 7 * h + 3), -INF), ((2, 0, 2 * h), 1e4),
                       ((2, 3, 8 * h + 4), -1e4)):  # fmt: skip
        x[idx] = value
    args[0] = x
    res = args[4]
    assert res is not None
    res = res.clone()
    res[2, 2, 1] = INF
    args[4] = res
    leaves = [a.clone().requires_grad_() if a is not None else None for a in args]
    ref_leaves = [a.clone().requires_grad_() if a is not None else None for a in args]
    outs = cells_triton.metagross_state_sequence(*leaves)
    ref = cells_ref.metagross_state_sequence_ref(*ref_leaves)
    for k, (o, r) in enumerate(zip(outs, ref, strict=True)):
        parity(o.detach(), r.detach(), f"output {k}")
    g = torch.Generator().manual_seed(51)
    ws = [torch.randn(o.shape, generator=g) for o in outs]
    got = torch.autograd.grad(outs, [a for a in leaves if a is not None], ws)
    want = torch.autograd.grad(ref, [a for a in ref_leaves if a is not None], ws)
    for name, a, b in zip(NAMES, got, want, strict=True):
        parity(a, b, f"d {name}")
    assert torch.isnan(outs[0]).any() and torch.isfinite(outs[0]).any()


# ------------------------------------------------------------------------------------------------
# the public op and the layer reach the kernel (the dispatch a CUDA tensor gets)
# ------------------------------------------------------------------------------------------------


def _force(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> Spy:
    """Route the cell ops as for CUDA tensors: their Triton kernels (``gpu``, counted) or no
    kernel (the reference path)."""
    spy = Spy(triton_module("cells"))
    route(monkeypatch, "cells", spy if gpu else None)
    return spy


@pytest.mark.parametrize("depth", [1, 3])
def test_public_op_reaches_the_kernel(monkeypatch, depth):
    """``fused_cells.metagross_state_sequence`` (float16 inputs, h0 and, for depth 1, the depth
    gates left to their defaults) runs the kernel and equals the reference path."""
    x, w, alpha, beta, res, _ = _args(depth, True, seed=60 + depth)
    lens = torch.tensor([2, 3, 0])

    def run(gpu: bool) -> tuple[Tensor, ...]:
        spy = _force(monkeypatch, gpu)
        xh = x.half().requires_grad_()
        gates = (alpha.half(), beta.half()) if depth > 1 else (None, None)
        outs = fused_cells.metagross_state_sequence(xh, w.half(), *gates, res=res.half(),
                                                    lengths=lens)  # fmt: skip
        assert spy.calls == ({"metagross_state_forward": 1} if gpu else {})
        assert all(o.dtype == torch.float16 for o in outs)
        (dx,) = torch.autograd.grad(outs[0].float().sum() + outs[1].float().sum(), xh)
        return (*outs, dx)

    got, want = run(True), run(False)
    for name, a, b in zip(("h_seq", "h_last", "d x_proj"), got, want, strict=True):
        close(a, b, torch.float16, name)


def test_layer_runs_the_kernel(monkeypatch):
    torch.manual_seed(70)
    model = Metagross(4, 6, num_layers=2, batch_first=True, bidirectional=True, depth=2,
                      gates="state")  # fmt: skip
    x = torch.randn(B, T, 4)
    lengths = torch.tensor([3, 1, 2])

    def call() -> list[Tensor]:
        model.zero_grad()
        out, h_n = model(x, lengths=lengths)
        w = torch.randn(out.numel() + h_n.numel(), generator=torch.Generator().manual_seed(71))
        flat = torch.cat([out.flatten(), h_n.flatten()])
        (flat * w).sum().backward()
        return [flat.detach()] + [p.grad.clone() for p in model.parameters()]

    spy = _force(monkeypatch, gpu=True)
    got = call()
    assert spy.calls == {"metagross_state_forward": 4,  # 2 layers x 2 directions
                         "metagross_state_backward": 4}  # fmt: skip
    _force(monkeypatch, gpu=False)
    want = call()
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        close(a, b, torch.float32, f"tensor {k}")


def test_custom_op_passes_opcheck():
    """Schema, fake (meta) registration, autograd registration and AOT dispatch of
    ``ctrlrnn::metagross_state_cell_fwd`` on its Triton kernels (its backward is reached through
    autograd). opcheck runs the op a dozen times: two rows of two steps suffice."""
    for res, lengths in ((True, torch.tensor([2, 0])), (False, None)):
        x, w, alpha, beta, r, h0 = _args(2, res, seed=80, steps=2, batch=2)
        leaves = [a.requires_grad_() if a is not None else None for a in (x, w, alpha, beta, r)]
        args = (*leaves, h0.requires_grad_(), lengths, True)
        torch.library.opcheck(torch.ops.ctrlrnn.metagross_state_cell_fwd.default, args)
