"""The fused cells on Triton (the CUDA kernels of the cell ops): one host loop for every cell.

Haste's recipe, as the CPU extension runs it. Per time step: one GEMM ``h_{t-1} @ U^T`` through
torch (cuBLAS on CUDA), then one Triton kernel for all the pointwise work of the step (gate
activations, cell update, length masking, saving what backward needs). Backward through time is
written the same way: per step one Triton kernel turns the incoming state gradients into the
gradient of the gate pre-activations, then one GEMM ``dgates_t @ U`` adds the recurrent part of
``dh_{t-1}``; the weight gradient is a single GEMM over all steps at the end
(``dU = dgates^T [h0; h_1..h_{T-1}]``). The step index is a runtime argument the kernels are
not specialised on, so one compiled kernel serves all steps.

A stack of R independent recurrences (the directions of a bidirectional layer, METAGROSS's base
RNNs, each with its own ``U``), where a cell's step kernels read nothing per recurrence but
``U`` and the recurrent bias (``ROWS_ONLY`` in its ``triton_kernels``: LSTM, GRU, nCARNN), runs
as one batch of ``R * B`` rows: per step one batched GEMM (``bmm``, each recurrence's rows with
its own ``U``) and one step kernel launch for all of them, instead of R of each.

This module exposes, for every cell, ``<cell>_forward`` and ``<cell>_backward`` with the
arguments and results of the CPU extension's functions of the same name (the op's schema,
:mod:`ctrlrnn.ops.cells.shell`), so :data:`ctrlrnn.ops.gpu.FAMILIES` names it as the ``cells``
family's CUDA module. The loops below are the same for every cell; each cell's
``triton_kernels.py`` supplies its two step kernels and the operands that differ:

* ``step_forward`` / ``step_backward``: the kernels, called with keyword operands; the loop
  passes ``x_ptr``, ``rec_ptr`` (the step's GEMM), ``<state>_ptr`` / ``<state>seq_ptr`` (the
  states, updated in place, and their sequences), ``acts_ptr``, ``len_ptr`` forward, and
  ``g<state>_ptr`` (output gradients), ``d<state>_ptr`` (running state gradients),
  ``acts_ptr``, ``len_ptr`` backward, with ``t``, ``T``, ``H``, ``HAS_LEN``, ``HAS_G<STATE>``,
  ``ACC`` and ``BLOCK``;
* ``forward_operands(a)``: the cell's other forward operands and constants;
* ``backward_operands(a, blocks)``: its other backward operands (the gradient buffers) and the
  buffer whose first ``weight_hh.shape[0]`` columns are the gradient of the step's GEMM;
* ``backward_result(a, operands, dweight_hh, running)``: the backward's outputs;
* optionally ``block(hidden)`` (channel block and warps) and ``RECURRENT_BIAS`` (an input added
  to the step's GEMM, GRU's ``bias_hh``).

Per-channel parameters shared by the batch get their gradients as per-row (or per channel
block) partial sums written by the backward kernels and reduced after the loop in a fixed
order: deterministic, no atomics. Variable lengths follow the references: for
``t >= lengths[b]`` row ``b`` keeps its state and its outputs are zero; gradients do not depend
on the padding. The ops' inputs arrive in the compute dtype (float32 for float16/bfloat16).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import registry
from ctrlrnn.ops.cells.shell import Cell, per_recurrence, stacked
from ctrlrnn.ops.gpu import step_graphs
from ctrlrnn.ops.gpu._common import acc_dtype


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block(hidden: int) -> tuple[int, int]:
    """Channel block and warps of the per-step kernels (not autotuned: they update state in
    place, so a benchmark re-run would corrupt it)."""
    blk = max(16, min(256, 1 << max(hidden - 1, 0).bit_length()))
    return blk, max(1, blk // 64)


def prev_states(h0: Tensor, h_seq: Tensor) -> Tensor:
    """``[h0, h_1, ..., h_{T-1}]`` ``(B, T, H)``: the state each step read (valid steps only)."""
    return torch.cat([h0.unsqueeze(1), h_seq[:, :-1]], dim=1)


def _lengths(lengths: Tensor | None, like: Tensor) -> Tensor | None:
    if lengths is None:
        return None
    return lengths.to(device=like.device, dtype=torch.int64).contiguous()


def _block_of(kernels: ModuleType, hidden: int) -> tuple[int, int]:
    return getattr(kernels, "block", block)(hidden)


def _per_recurrence_inputs(kernels: ModuleType) -> set[str]:
    """The inputs of a stacked call that are one per recurrence (the recurrent matrix, GRU's
    recurrent bias); every other input is one per batch row of each recurrence."""
    return {"weight_hh", getattr(kernels, "RECURRENT_BIAS", None) or "weight_hh"}


def batches_stacks(kernels: ModuleType) -> bool:
    """Whether a stack of the cell's recurrences runs as one batch of ``R * B`` rows (one
    batched GEMM and one step kernel launch per step for all of them): the cells whose step
    kernels read nothing per recurrence but the recurrent matrix and bias."""
    return bool(getattr(kernels, "ROWS_ONLY", False))


def _rows(v: Tensor | None, name: str, per_recurrence: set[str]) -> Tensor | None:
    """A stacked input ``(R, B, ...)`` as ``(R * B, ...)`` rows (per-recurrence ones as they
    are)."""
    if v is None or name in per_recurrence:
        return v
    return v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])


def _unrows(v: Tensor, name: str, per_recurrence: set[str], R: int) -> Tensor:
    if name in per_recurrence:
        return v
    if v.dim() == 1 and v.numel() == 0:  # acts not saved
        return v.new_empty(R, 0)
    return v.reshape(R, v.shape[0] // R, *v.shape[1:])


def forward(cell: Cell, kernels: ModuleType, *args: Any) -> tuple[Tensor, ...]:
    """The cell op's forward (:mod:`ctrlrnn.ops.cells.shell`) on the cell's Triton kernels. A
    stack of R recurrences runs as one batch of ``R * B`` rows where the cell allows it
    (:func:`batches_stacks`), else one recurrence after another."""
    w = cell.args.index("weight_hh")
    if stacked(args[w]):
        if not batches_stacks(kernels):
            return per_recurrence(partial(forward, cell, kernels), args, w, len(cell.args))
        R = args[w].shape[0]
        per = _per_recurrence_inputs(kernels)
        flat = [_rows(v, n, per) for n, v in zip(cell.args, args, strict=False)]
        lengths = args[len(cell.args)]
        out = _looped(_forward, cell, kernels, SimpleNamespace(
            **dict(zip(cell.args, flat, strict=True)),
            lengths=None if lengths is None else lengths.repeat(R), save=args[-1]), R)
        return tuple(_unrows(o, "", per, R) for o in out)
    a = SimpleNamespace(**dict(zip((*cell.args, "lengths", "save"), args, strict=True)))
    return _looped(_forward, cell, kernels, a, None)


Loop = Callable[[Cell, ModuleType, SimpleNamespace, "int | None"], tuple[Tensor, ...]]


def _looped(loop: Loop, cell: Cell, kernels: ModuleType, a: SimpleNamespace, R: int | None
            ) -> tuple[Tensor, ...]:  # fmt: skip
    """``loop`` (:func:`_forward` or :func:`_backward`) on ``a``, through a CUDA graph of the
    whole step loop where ``CTRLRNN_CUDA_GRAPHS`` asks for one (:mod:`..gpu.step_graphs`).
    The lengths go to the device first: a graph cannot capture a copy from the host."""
    seq = a.x_proj if loop is _forward else a.h_seq
    if a.lengths is not None:
        a.lengths = _lengths(a.lengths, seq)
    if seq.numel() == 0:
        return loop(cell, kernels, a, R)
    return step_graphs.GRAPHS.run((cell.name, loop.__name__, R), a,
                                  lambda ns: loop(cell, kernels, ns, R))


def _forward(cell: Cell, kernels: ModuleType, a: SimpleNamespace, R: int | None
             ) -> tuple[Tensor, ...]:  # fmt: skip
    """The forward on one batch of rows; ``R``: the rows are R recurrences' batches, each with
    its own ``weight_hh`` (``(R, G, H)``), so the step's product is one batched GEMM."""
    x = a.x_proj.contiguous()
    batch, steps, width = x.shape
    hidden = a.weight_hh.shape[-1]
    states = [getattr(a, f"{s}0").clone().contiguous() for s in cell.states]
    seqs = [x.new_empty(batch, steps, hidden) for _ in cell.states]
    acts = x.new_empty(batch, steps, cell.acts_width(width, hidden))
    if batch and hidden:
        lens = _lengths(a.lengths, x)
        w_t = a.weight_hh.transpose(-1, -2)
        rec = x.new_empty(batch, a.weight_hh.shape[-2])
        blk, warps = _block_of(kernels, hidden)
        grid = (batch, cdiv(hidden, blk))
        operands = {"x_ptr": x, "rec_ptr": rec, "acts_ptr": acts,
                    "len_ptr": lens if lens is not None else x,
                    **{f"{s}_ptr": v for s, v in zip(cell.states, states, strict=True)},
                    **{f"{s}seq_ptr": v for s, v in zip(cell.states, seqs, strict=True)},
                    **kernels.forward_operands(a)}  # fmt: skip
        bias_name = getattr(kernels, "RECURRENT_BIAS", None)
        bias = getattr(a, bias_name) if bias_name else None
        product = _step_product(states[0], w_t, bias, rec, R)
        for t in range(steps):
            product()
            kernels.step_forward[grid](
                **operands, t=t, T=steps, H=hidden, HAS_LEN=lens is not None,
                ACC=acc_dtype(x.dtype), BLOCK=blk, num_warps=warps,
            )  # fmt: skip
    return (*seqs, *states, acts if a.save else x.new_empty(0))


def _step_product(h: Tensor, w_t: Tensor, bias: Tensor | None, rec: Tensor, R: int | None
                  ) -> Callable[[], Any]:  # fmt: skip
    """The step's GEMM ``rec = h_{t-1} U^T (+ b)`` into ``rec``: one product, or for R
    recurrences' rows one batched product with each recurrence's own ``U`` (and ``b``)."""
    if R is None:
        if bias is None:
            return partial(torch.mm, h, w_t, out=rec)
        return partial(torch.addmm, bias, h, w_t, out=rec)
    h3 = h.view(R, -1, h.shape[-1])
    out = rec.view(R, -1, rec.shape[-1])
    if bias is None:
        return partial(torch.bmm, h3, w_t, out=out)
    return partial(torch.baddbmm, bias.unsqueeze(1), h3, w_t, out=out)


def backward(cell: Cell, kernels: ModuleType, *args: Any) -> tuple[Tensor, ...]:
    """The cell op's backward through time on the cell's Triton kernels (a stack of
    recurrences as one batch of rows where the cell allows it, as :func:`forward`)."""
    w = cell.backward_args.index("weight_hh")
    if stacked(args[w]):
        if not batches_stacks(kernels):
            return per_recurrence(partial(backward, cell, kernels), args, w,
                                  len(cell.backward_args) - 1)  # fmt: skip
        named = dict(zip(cell.backward_args, args, strict=True))
        if named["h_seq"].numel() == 0:  # nothing to batch: each recurrence's empty result
            return per_recurrence(partial(backward, cell, kernels), args, w,
                                  len(cell.backward_args) - 1)  # fmt: skip
        R = args[w].shape[0]
        per = _per_recurrence_inputs(kernels)
        a = SimpleNamespace(**{n: _rows(v, n, per) for n, v in named.items() if n != "lengths"})
        a.lengths = None if named["lengths"] is None else named["lengths"].repeat(R)
        grads = _looped(_backward, cell, kernels, a, R)
        return tuple(_unrows(g, n, per, R) for n, g in zip(cell.args, grads, strict=True))
    a = SimpleNamespace(**dict(zip(cell.backward_args, args, strict=True)))
    return _looped(_backward, cell, kernels, a, None)


def _backward(cell: Cell, kernels: ModuleType, a: SimpleNamespace, R: int | None
              ) -> tuple[Tensor, ...]:  # fmt: skip
    """The backward on one batch of rows (``R`` as in :func:`_forward`)."""
    a.recurrences = R
    batch, steps, hidden = a.h_seq.shape
    running = []
    for s in cell.states:
        grad, init = getattr(a, f"grad_{s}_last"), getattr(a, f"{s}0")
        running.append(
            grad.clone().contiguous() if grad is not None else init.new_zeros(init.shape)
        )
    if batch == 0 or hidden == 0 or steps == 0:
        initial = {f"{s}0": r for s, r in zip(cell.states, running, strict=True)}
        return tuple(
            initial[n] if n in initial else _like(a, n).new_zeros(tuple(shape))
            for n, shape in zip(cell.args, cell.grad_shapes(a), strict=True)
        )
    acts = a.acts
    lens = _lengths(a.lengths, acts)
    blk, warps = _block_of(kernels, hidden)
    blocks = cdiv(hidden, blk)
    extra, drec = kernels.backward_operands(a, blocks)
    operands: dict[str, Any] = {"acts_ptr": acts, "len_ptr": lens if lens is not None else acts,
                                **extra}  # fmt: skip
    flags = {}
    for s, r in zip(cell.states, running, strict=True):
        grad = getattr(a, f"grad_{s}_seq")
        grad = grad.contiguous() if grad is not None else None
        operands[f"g{s}_ptr"] = grad if grad is not None else acts
        operands[f"d{s}_ptr"] = r
        flags[f"HAS_G{s.upper()}"] = grad is not None
    rows = a.weight_hh.shape[-2]
    if R is None:
        def recurrent(t: int) -> None:  # dh_{t-1} += dgates_t U
            running[0].addmm_(drec[:, t, :rows], a.weight_hh)
    else:  # each recurrence's rows with its own U
        dh3 = running[0].view(R, -1, hidden)
        drec4 = drec.view(R, batch // R, steps, drec.shape[-1])

        def recurrent(t: int) -> None:
            dh3.baddbmm_(drec4[:, :, t, :rows], a.weight_hh)

    for t in range(steps - 1, -1, -1):
        kernels.step_backward[(batch, blocks)](
            **operands, t=t, T=steps, H=hidden, **flags, HAS_LEN=lens is not None,
            ACC=acc_dtype(acts.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        recurrent(t)
    # dU = dgates^T [h0; h_1..h_{T-1}], per recurrence
    prev = prev_states(a.h0, a.h_seq)
    if R is None:
        dw = drec[..., :rows].reshape(-1, rows).t() @ prev.reshape(-1, hidden)
    else:
        dw = torch.bmm(drec4[..., :rows].reshape(R, -1, rows).transpose(1, 2),
                       prev.reshape(R, -1, hidden))  # fmt: skip
    return tuple(kernels.backward_result(a, operands, dw, running))


def _like(a: SimpleNamespace, name: str) -> Tensor:
    """The tensor a zero gradient of input ``name`` is made like: the input where the backward
    has it, else the saved activations (same dtype and device)."""
    given = getattr(a, name, None)
    return given if isinstance(given, Tensor) else a.acts


#: Each cell's Triton kernels module, by cell name.
_KERNELS: dict[str, ModuleType] = {}


def _bind(cell_module: ModuleType) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The cell's forward and backward on its ``triton_kernels`` module."""
    kernels = importlib.import_module(f"{cell_module.__name__}.triton_kernels")
    _KERNELS[cell_module.CELL.name] = kernels
    return partial(forward, cell_module.CELL, kernels), partial(backward, cell_module.CELL, kernels)


def takes_stack(cell: str) -> bool:
    """Whether a stack of ``cell``'s recurrences should reach this module as one call (it runs
    them as one batch: :func:`batches_stacks`); otherwise the caller makes one call each."""
    kernels = _KERNELS.get(cell)
    return kernels is not None and batches_stacks(kernels)


#: Each cell's ``<cell>_forward`` and ``<cell>_backward``, for every cell of the list of ops
#: (:mod:`ctrlrnn.ops.registry`).
__all__ = ["takes_stack"]
for _op in registry.ops_of("cells"):
    globals()[f"{_op.name}_forward"], globals()[f"{_op.name}_backward"] = _bind(
        importlib.import_module(_op.module))
    __all__ += [f"{_op.name}_forward", f"{_op.name}_backward"]
