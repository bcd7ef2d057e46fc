"""Independent recurrences in one call (``<cell>_sequences``; ``csrc/recurrences.h``): the same
outputs and gradients as one call each, for every cell, with lengths, whether the recurrences
run concurrently (a batch too small to split over the threads) or one after another; the
stacked op traces under ``torch.compile``; bad stacks are refused naming the argument."""

from __future__ import annotations

import os

os.environ["CTRLRNN_REQUIRE_COMPILED"] = "1"  # a broken build must fail, not fall back

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from ctrlrnn.ops import backend, fused_cells  # noqa: E402
from ctrlrnn.ops.kernel_op import KernelOp  # noqa: E402

D64 = torch.float64


def _inputs(cell: str, B: int, T: int, H: int, seed: int) -> dict[str, Any]:
    """One recurrence's keyword arguments (leaves requiring grad where differentiable)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, scale: float = 0.5) -> Tensor:
        return (scale * torch.randn(*shape, generator=g, dtype=D64)).requires_grad_()

    if cell == "lstm":
        return dict(x_proj=r(B, T, 4 * H), weight_hh=r(4 * H, H), h0=r(B, H), c0=r(B, H))
    if cell == "gru":
        return dict(x_proj=r(B, T, 3 * H), weight_hh=r(3 * H, H), bias_hh=r(3 * H), h0=r(B, H))
    if cell == "ncarnn":
        return dict(x_proj=r(B, T, 3 * H), weight_hh=r(2 * H, H), context_proj=r(B, 2 * H),
                    h0=r(B, H))  # fmt: skip
    if cell in ("cas_lstm", "cas_peephole"):
        peep = cell == "cas_peephole"
        lam = torch.rand(H, generator=g, dtype=D64).requires_grad_()
        return dict(x_proj=r(B, T, 5 * H), weight_hh=r((4 if peep else 5) * H, H),
                    lower_c=r(B, T, H), h0=r(B, H), c0=r(B, H), lambda_=lam,
                    peephole=r(2, H) if peep else None)  # fmt: skip
    gates = torch.rand(B, T, 1, generator=g, dtype=D64)  # depth 2: 3 units, 1 internal
    return dict(x_proj=r(B, T, 9 * H), weight_hh=r(9 * H, H), alpha=gates.requires_grad_(),
                beta=(1 - gates).detach().requires_grad_(), res=r(B, T, H), h0=r(B, H))


RUNS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "lstm": (fused_cells.lstm_sequence, fused_cells.lstm_sequences),
    "gru": (fused_cells.gru_sequence, fused_cells.gru_sequences),
    "ncarnn": (fused_cells.ncarnn_sequence, fused_cells.ncarnn_sequences),
    "cas_lstm": (fused_cells.cas_lstm_sequence, fused_cells.cas_lstm_sequences),
    "cas_peephole": (fused_cells.cas_lstm_sequence, fused_cells.cas_lstm_sequences),
    "metagross_state": (fused_cells.metagross_state_sequence,
                        fused_cells.metagross_state_sequences),
}  # fmt: skip


def _leaves(calls: list[dict[str, Any]]) -> list[Tensor]:
    return [v for c in calls for v in c.values() if isinstance(v, Tensor) and v.requires_grad]


def _loss(outs: list[tuple[Tensor, ...]]) -> Tensor:
    g = torch.Generator().manual_seed(7)
    return sum(((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum()
                for out in outs for o in out), torch.zeros((), dtype=D64))  # fmt: skip


@pytest.mark.parametrize("cell", list(RUNS))
@pytest.mark.parametrize("batch", [1, 3, 12])  # concurrent (1, 3) and one after another (12)
@pytest.mark.parametrize("count", [2, 3])
def test_recurrences_equal_one_call_each(cell, batch, count):
    one, many = RUNS[cell]
    T, H = 6, 5
    calls = [_inputs(cell, batch, T, H, seed=10 * k + batch) for k in range(count)]
    lengths = torch.tensor([T, 0, 3, 1, T, 2, 5, T, 4, 0, 1, 6][:batch])
    got = many(calls, lengths)
    want = [one(**c, lengths=lengths) for c in calls]
    assert len(got) == count
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w)
        for a, b in zip(g, w, strict=True):
            assert a.shape == b.shape
            # equal up to the GEMM's summation order (a product on one thread or several)
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)
    leaves = _leaves(calls)
    grads_got = torch.autograd.grad(_loss(got), leaves, allow_unused=True)
    grads_want = torch.autograd.grad(_loss(want), leaves, allow_unused=True)
    for a, b in zip(grads_got, grads_want, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("threads", [1, 2])
def test_concurrent_recurrences_with_every_thread_count(threads):
    """Two directions at batch 1: concurrent on two threads, sequential on one; same values."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        calls = [_inputs("lstm", 1, 9, 4, seed=s) for s in (1, 2)]
        got = fused_cells.lstm_sequences(calls)
    finally:
        torch.set_num_threads(before)
    for g, c in zip(got, calls, strict=True):
        for a, b in zip(g, fused_cells.lstm_sequence(**c), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


def test_the_stack_is_one_op_call(monkeypatch):
    if backend.path("cells", torch.device("cpu")) != backend.KERNEL:
        pytest.skip("the kernels are not in use")
    from ctrlrnn.ops.cells import gru

    seen: list[tuple[int, ...]] = []
    real = KernelOp.__call__

    def spy(self: KernelOp, *args: Any) -> Any:
        if self is gru.OP:
            seen.append(tuple(args[1].shape))  # weight_hh: (R, 3H, H) when stacked
        return real(self, *args)

    monkeypatch.setattr(KernelOp, "__call__", spy)
    calls = [_inputs("gru", 2, 4, 3, seed=s) for s in (3, 4)]
    fused_cells.gru_sequences(calls)
    assert seen == [(2, 9, 3)]


def test_stacked_op_traces_under_compile():
    calls = [_inputs("lstm", 3, 5, 4, seed=s) for s in (5, 6)]
    lengths = torch.tensor([5, 2, 0])
    compiled = torch.compile(lambda cs: fused_cells.lstm_sequences(cs, lengths), backend="eager")
    got = compiled(calls)
    for g, c in zip(got, calls, strict=True):
        for a, b in zip(g, fused_cells.lstm_sequence(**c, lengths=lengths), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


def test_bad_stacks_name_the_argument():
    a = _inputs("lstm", 2, 4, 3, seed=1)
    b = _inputs("lstm", 2, 4, 5, seed=2)
    with pytest.raises(ValueError, match="x_proj"):
        fused_cells.lstm_sequences([a, b])
    with pytest.raises(ValueError, match="calls"):
        fused_cells.lstm_sequences(a)  # type: ignore[arg-type]
    c = _inputs("cas_peephole", 2, 4, 3, seed=1)
    d = {**_inputs("cas_lstm", 2, 4, 3, seed=2), "weight_hh": c["weight_hh"]}
    with pytest.raises(ValueError, match="peephole|weight_hh"):
        fused_cells.cas_lstm_sequences([c, d])
    with pytest.raises(ValueError, match="x_proj"):
        fused_cells.lstm_sequences([a, {**a, "x_proj": a["x_proj"].float()}])
    assert fused_cells.lstm_sequences([]) == []


def test_slices_of_one_tensor_go_in_whole(monkeypatch):
    """Recurrences given as the consecutive slices of one tensor (METAGROSS's K base RNNs) reach
    the op as that tensor itself (no copy), with the same values and gradients as one call
    each; slices out of order are stacked."""
    if backend.path("cells", torch.device("cpu")) != backend.KERNEL:
        pytest.skip("the kernels are not in use")
    from ctrlrnn.ops.cells import lstm

    g = torch.Generator().manual_seed(8)
    R, B, T, H = 4, 3, 6, 5
    xp = torch.randn(R, B, T, 4 * H, generator=g, dtype=D64).requires_grad_()
    w = (0.4 * torch.randn(R, 4 * H, H, generator=g, dtype=D64)).requires_grad_()
    seen: list[bool] = []
    real = KernelOp.__call__

    def spy(self: KernelOp, *args: Any) -> Any:
        if self is lstm.OP:
            seen.append(args[0] is h_in)  # the stack is the tensor the slices came from
        return real(self, *args)

    monkeypatch.setattr(KernelOp, "__call__", spy)
    lengths = torch.tensor([6, 1, 0])
    h_in = xp * 1.0  # a non-leaf, as the projections are
    got = fused_cells.lstm_sequences(
        [{"x_proj": h_in[r], "weight_hh": w[r]} for r in range(R)], lengths)
    order = [2, 0, 1, 3]
    shuffled = fused_cells.lstm_sequences(
        [{"x_proj": h_in[r], "weight_hh": w[r]} for r in order], lengths)
    assert seen == [True, False]  # in order: the tensor itself; out of order: a stack
    want = [fused_cells.lstm_sequence(h_in[r], w[r], lengths=lengths) for r in range(R)]
    for r in range(R):
        for a, b, c in zip(got[r], want[r], shuffled[order.index(r)], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)
            torch.testing.assert_close(c, b, rtol=1e-13, atol=1e-14)
    grads = torch.autograd.grad(_loss(got), [xp, w], retain_graph=True)
    grads_want = torch.autograd.grad(_loss(want), [xp, w])
    for a, b in zip(grads, grads_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_blocks_of_one_flat_tensor_go_in_whole(monkeypatch):
    """Recurrences given as consecutive blocks of one contiguous tensor of another shape (a
    batched GEMM's ``(R, B*T, 4H)`` output viewed per recurrence: RCRN's projections) reach the
    op as a view of that tensor (no copy), with the same values and gradients as one call
    each."""
    if backend.path("cells", torch.device("cpu")) != backend.KERNEL:
        pytest.skip("the kernels are not in use")
    from ctrlrnn.ops.cells import lstm

    g = torch.Generator().manual_seed(9)
    R, B, T, H = 3, 2, 5, 4
    flat_leaf = torch.randn(R, B * T, 4 * H, generator=g, dtype=D64).requires_grad_()
    w = (0.4 * torch.randn(R, 4 * H, H, generator=g, dtype=D64)).requires_grad_()
    seen: list[bool] = []
    real = KernelOp.__call__

    def spy(self: KernelOp, *args: Any) -> Any:
        if self is lstm.OP:
            seen.append(args[0]._base is flat and args[0].data_ptr() == flat.data_ptr())
        return real(self, *args)

    monkeypatch.setattr(KernelOp, "__call__", spy)
    flat = flat_leaf * 1.0
    blocks = flat.view(R, B, T, 4 * H)
    got = fused_cells.lstm_sequences([{"x_proj": blocks[r], "weight_hh": w[r]} for r in range(R)])
    assert seen == [True]
    want = [fused_cells.lstm_sequence(blocks[r], w[r]) for r in range(R)]
    for r in range(R):
        for a, b in zip(got[r], want[r], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)
    grads = torch.autograd.grad(_loss(got), [flat_leaf, w], retain_graph=True)
    grads_want = torch.autograd.grad(_loss(want), [flat_leaf, w])
    for a, b in zip(grads, grads_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.usefixtures("tuned_runtime")  # the output cache and its stacked blocks
@pytest.mark.parametrize("batch", [1, 12])  # concurrent and one after another
def test_large_outputs_are_written_into_their_stack(batch):
    """The sequences, saved activations and input gradients each recurrence allocates are slices
    of one block per output (StackedBlocks, csrc/runtime/pool.h): the stack is that block, so a
    call takes one cached block per large output, not one per recurrence and one more for the
    copy; the values and gradients are one call's each."""
    if backend.path("cells", torch.device("cpu")) != backend.KERNEL:
        pytest.skip("the kernels are not in use")
    ext = backend.kernel_for("cells", torch.device("cpu"))
    T, H = 1024 // batch, 176  # each recurrence's h_seq over the cache's 1 MiB minimum
    calls = [_inputs("lstm", batch, T, H, seed=s) for s in (5, 6, 7)]
    for c in calls:  # a contracting recurrence: rounding differences do not grow over T
        c["weight_hh"] = (c["weight_hh"].detach() / H).requires_grad_()

    def blocks_taken() -> int:
        stats = ext.output_cache_stats()
        return stats[2] + stats[3]  # fresh allocations + reuses

    before = blocks_taken()
    got = fused_cells.lstm_sequences(calls)
    assert blocks_taken() - before == 3  # h_seq, c_seq, the saved activations
    assert got[0][0].data_ptr() != got[0][1].data_ptr()
    leaves = _leaves(calls)
    loss = _loss(got)
    before = blocks_taken()
    grads = torch.autograd.grad(loss, leaves)
    # the input gradients dx_proj; and the stack of the weight gradients, each recurrence's
    # the output of its own product (under the cache's minimum), copied into one
    assert blocks_taken() - before == 2
    want = torch.autograd.grad(_loss([fused_cells.lstm_sequence(**c) for c in calls]), leaves)
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
