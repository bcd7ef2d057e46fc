"""The fused cells on Triton (the CUDA kernels of the cell ops): one host loop for every cell.

Haste's recipe, as the CPU extension runs it. Per time step: one GEMM ``h_{t-1} @ U^T`` through
torch (cuBLAS on CUDA), then one Triton kernel for all the pointwise work of the step (gate
activations, cell update, length masking, saving what backward needs). Backward through time is
written the same way: per step one Triton kernel turns the incoming state gradients into the
gradient of the gate pre-activations, then one GEMM ``dgates_t @ U`` adds the recurrent part of
``dh_{t-1}``; the weight gradient is a single GEMM over all steps at the end
(``dU = dgates^T [h0; h_1..h_{T-1}]``). The step index is a runtime argument the kernels are
not specialised on, so one compiled kernel serves all steps.

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

from ctrlrnn.ops.cells import cas_lstm, gru, lstm, metagross_state, ncarnn
from ctrlrnn.ops.cells.shell import Cell, per_recurrence, stacked
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


def forward(cell: Cell, kernels: ModuleType, *args: Any) -> tuple[Tensor, ...]:
    """The cell op's forward (:mod:`ctrlrnn.ops.cells.shell`) on the cell's Triton kernels
    (a stack of recurrences: one after another)."""
    w = cell.args.index("weight_hh")
    if stacked(args[w]):
        return per_recurrence(partial(forward, cell, kernels), args, w, len(cell.args))
    a = SimpleNamespace(**dict(zip((*cell.args, "lengths", "save"), args, strict=True)))
    x = a.x_proj.contiguous()
    batch, steps, width = x.shape
    hidden = a.weight_hh.shape[1]
    states = [getattr(a, f"{s}0").clone().contiguous() for s in cell.states]
    seqs = [x.new_empty(batch, steps, hidden) for _ in cell.states]
    acts = x.new_empty(batch, steps, cell.acts_width(width, hidden))
    if batch and hidden:
        lens = _lengths(a.lengths, x)
        w_t = a.weight_hh.t()
        rec = x.new_empty(batch, a.weight_hh.shape[0])
        blk, warps = _block_of(kernels, hidden)
        grid = (batch, cdiv(hidden, blk))
        operands = {"x_ptr": x, "rec_ptr": rec, "acts_ptr": acts,
                    "len_ptr": lens if lens is not None else x,
                    **{f"{s}_ptr": v for s, v in zip(cell.states, states, strict=True)},
                    **{f"{s}seq_ptr": v for s, v in zip(cell.states, seqs, strict=True)},
                    **kernels.forward_operands(a)}  # fmt: skip
        bias_name = getattr(kernels, "RECURRENT_BIAS", None)
        bias = getattr(a, bias_name) if bias_name else None
        for t in range(steps):
            if bias is None:
                torch.mm(states[0], w_t, out=rec)
            else:
                torch.addmm(bias, states[0], w_t, out=rec)
            kernels.step_forward[grid](
                **operands, t=t, T=steps, H=hidden, HAS_LEN=lens is not None,
                ACC=acc_dtype(x.dtype), BLOCK=blk, num_warps=warps,
            )  # fmt: skip
    return (*seqs, *states, acts if a.save else x.new_empty(0))


def backward(cell: Cell, kernels: ModuleType, *args: Any) -> tuple[Tensor, ...]:
    """The cell op's backward through time on the cell's Triton kernels (a stack of
    recurrences: one after another)."""
    w = cell.backward_args.index("weight_hh")
    if stacked(args[w]):
        return per_recurrence(partial(backward, cell, kernels), args, w,
                              len(cell.backward_args) - 1)  # fmt: skip
    a = SimpleNamespace(**dict(zip(cell.backward_args, args, strict=True)))
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
    rows = a.weight_hh.shape[0]
    for t in range(steps - 1, -1, -1):
        kernels.step_backward[(batch, blocks)](
            **operands, t=t, T=steps, H=hidden, **flags, HAS_LEN=lens is not None,
            ACC=acc_dtype(acts.dtype), BLOCK=blk, num_warps=warps,
        )  # fmt: skip
        running[0].addmm_(drec[:, t, :rows], a.weight_hh)
    dw = drec[..., :rows].reshape(-1, rows).t() @ prev_states(a.h0, a.h_seq).reshape(-1, hidden)
    return tuple(kernels.backward_result(a, operands, dw, running))


def _like(a: SimpleNamespace, name: str) -> Tensor:
    """The tensor a zero gradient of input ``name`` is made like: the input where the backward
    has it, else the saved activations (same dtype and device)."""
    given = getattr(a, name, None)
    return given if isinstance(given, Tensor) else a.acts


def _bind(cell_module: ModuleType) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The cell's forward and backward on its ``triton_kernels`` module."""
    kernels = importlib.import_module(f"{cell_module.__name__}.triton_kernels")
    return partial(forward, cell_module.CELL, kernels), partial(backward, cell_module.CELL, kernels)


lstm_forward, lstm_backward = _bind(lstm)
gru_forward, gru_backward = _bind(gru)
cas_lstm_forward, cas_lstm_backward = _bind(cas_lstm)
ncarnn_forward, ncarnn_backward = _bind(ncarnn)
metagross_state_forward, metagross_state_backward = _bind(metagross_state)
