"""``torch.nn.LSTM`` and ``torch.nn.GRU`` over variable-length CPU batches, without packing.

On the CPU, torch runs a packed sequence one step at a time over slices of the layer's input
projection, and the backward of each slice writes a zero tensor as large as the whole
projection: a batch's backward then grows with the square of its length, and most of a
training step of a baseline over sentences goes to those zeros. :func:`run_with_lengths` runs
the same recurrence on the fused cells (:func:`~ctrlrnn.ops.cells.lstm.lstm_sequences`,
:func:`~ctrlrnn.ops.cells.gru.gru_sequences`), which take the lengths themselves, as ctrlrnn's
own layers run them (:func:`~ctrlrnn.nn.base.run_directions`): both directions' input
projections in one op, both recurrences in one call, the backward direction over each
sequence reversed within its length. It reads the module's own parameters, so checkpoints are
those of the module; outputs are zero at padded steps and each final state is the one at its
sequence's end, as with packing (equal up to rounding: another summation order).

:func:`fused_path` says where that applies: CPU tensors with the compiled cells loaded, outside
ONNX export, TorchScript tracing and ``torch.func`` transforms, for modules without
``proj_size``. Elsewhere :func:`run_with_lengths` packs, as torch does (cuDNN runs packed
sequences in one call).

Over sequences of one length, :func:`run_full` trains an ``nn.LSTM`` on the fused cells where
they were measured faster than torch's oneDNN layers, forward and backward together
(:func:`fused_training_faster`; docs/internals.md): where a layer's recurrence does enough
work, ``batch * steps * hidden ** 2`` at least :data:`FUSED_TRAINING_WORK` (a batch of 64
over 128 steps 128 wide, or pixel-by-pixel images). Below it oneDNN was faster at most
points measured; inference, where oneDNN's forward is faster, stays torch's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ctrlrnn.nn.base import DirectionCall, run_directions
from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.cells.gru import gru_sequences
from ctrlrnn.ops.cells.lstm import lstm_sequences
from ctrlrnn.ops.compiled_op import torchscript_tracing
from ctrlrnn.ops.padding import reverse_padded, zero_padding

__all__ = ["fused_path", "fused_training_faster", "run_full", "run_with_lengths"]

#: From this much work, ``batch * steps * hidden ** 2``, an ``nn.LSTM`` trains faster on the
#: fused cells than on torch's own layers.
FUSED_TRAINING_WORK = 2**27


def fused_path(rnn: nn.Module, x: Tensor) -> bool:
    """Whether :func:`run_with_lengths` serves ``rnn`` (an ``nn.LSTM`` or ``nn.GRU``) on
    ``x``."""
    if not isinstance(rnn, (nn.LSTM, nn.GRU)) or getattr(rnn, "proj_size", 0):
        return False
    if x.device.type != "cpu" or scan_export.active() or torchscript_tracing():
        return False
    return backend.has_kernel("cells", x.device)


def fused_training_faster(rnn: nn.Module, x: Tensor) -> bool:
    """Whether :func:`run_full` runs ``rnn`` on ``x`` (``(B, T, input_size)``) on the fused
    cells: a batch-first ``nn.LSTM`` where :func:`fused_path` applies, outside autocast (its
    dtype is torch's to choose), while autograd records a step (some parameter or ``x``
    needs a gradient), doing at least :data:`FUSED_TRAINING_WORK`."""
    if not isinstance(rnn, nn.LSTM) or not rnn.batch_first or not fused_path(rnn, x):
        return False
    if autocast_dtype(x.device) is not None or not torch.is_grad_enabled():
        return False
    if not (x.requires_grad or any(p.requires_grad for p in rnn.parameters())):
        return False
    return x.shape[0] * x.shape[1] * rnn.hidden_size**2 >= FUSED_TRAINING_WORK


def run_full(rnn: nn.Module, x: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
    """``rnn(x, hx)`` for a batch-first recurrent module and ``x`` ``(B, T, input_size)`` of
    one length: on the fused cells where :func:`fused_training_faster` says so, else the
    module itself."""
    if fused_training_faster(rnn, x):
        return _fused(rnn, x, None, hx)  # type: ignore[arg-type]
    return rnn(x, hx)


def _parameters(rnn: nn.LSTM | nn.GRU, layer: int, direction: int) -> list[Tensor | None]:
    """``[weight_ih, weight_hh, bias_ih, bias_hh]`` of one layer and direction (biases None
    when the module has none)."""
    suffix = f"_l{layer}" + ("_reverse" if direction else "")
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if rnn.bias else [])
    found: list[Tensor | None] = [getattr(rnn, name + suffix) for name in names]
    return found + [None] * (4 - len(found))


def _initial(rnn: nn.LSTM | nn.GRU, hx: Any) -> tuple[Tensor | None, Tensor | None]:
    """``(h0, c0)`` as given to the module, each ``(L * D, B, H)`` or None."""
    if hx is None:
        return None, None
    if isinstance(rnn, nn.LSTM):
        return hx[0], hx[1]
    return hx, None


def _direction(rnn: nn.LSTM | nn.GRU, x: Tensor, layer: int, direction: int,
               h0: Tensor | None, c0: Tensor | None) -> DirectionCall:
    """One layer and direction over ``x`` as a recurrence of the fused cells, its input
    projection left to :func:`~ctrlrnn.nn.base.run_directions` (one op for both directions)."""
    w_ih, w_hh, b_ih, b_hh = _parameters(rnn, layer, direction)
    index = layer * (2 if rnn.bidirectional else 1) + direction
    h = None if h0 is None else h0[index]
    if isinstance(rnn, nn.LSTM):  # CAS-LSTM eq 1-6: W x_t + b with both biases summed
        bias = None if b_ih is None else b_ih + b_hh
        return DirectionCall(lstm_sequences,
                             {"weight_hh": w_hh, "h0": h, "c0": None if c0 is None else c0[index]},
                             lambda r: (r[0], [r[2], r[3]]), (x, w_ih, bias))
    # torch.nn.GRU: b_hn stays inside the reset product, so b_hh goes to the cell apart
    return DirectionCall(gru_sequences, {"weight_hh": w_hh, "bias_hh": b_hh, "h0": h},
                         lambda r: (r[0], [r[1]]), (x, w_ih, b_ih))


def run_with_lengths(rnn: nn.LSTM | nn.GRU, x: Tensor, lengths: Tensor,
                     hx: Any = None) -> tuple[Tensor, Any]:
    """``rnn(pack(x, lengths), hx)`` unpacked: ``(output, h_n)`` for a batch-first module and
    ``x`` ``(B, T, input_size)``; ``output`` ``(B, T, D * H)`` is zero past each length, and
    ``h_n`` (``(h_n, c_n)`` for the LSTM), ``(L * D, B, H)``, holds each layer's and
    direction's state where its pass over the sequence ends. On the fused cells where
    :func:`fused_path` says so, else packed."""
    if fused_path(rnn, x):
        return _fused(rnn, x, lengths, hx)
    if x.shape[0] == 0:  # torch cannot pack an empty batch, and it has no padding to skip
        return rnn(x, hx)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = rnn(packed, hx)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out, h_n


def _fused(rnn: nn.LSTM | nn.GRU, x: Tensor, lengths: Tensor | None,
           hx: Any) -> tuple[Tensor, Any]:
    """:func:`run_with_lengths` on the fused cells (``lengths`` None: every sequence whole)."""
    lengths = None if lengths is None else lengths.to(x.device)
    h0, c0 = _initial(rnn, hx)
    directions = 2 if rnn.bidirectional else 1
    finals: list[list[Tensor]] = []  # each layer's and direction's, as torch orders h_n
    out = zero_padding(x, lengths)  # packing never reads the padding: NaN there stays out
    for layer in range(rnn.num_layers):
        if layer and rnn.training and rnn.dropout:  # torch drops each output but the last
            out = F.dropout(out, rnn.dropout, training=True)
        inputs = [out if d == 0 else reverse_padded(out, lengths) for d in range(directions)]
        done = run_directions([_direction(rnn, inputs[d], layer, d, h0, c0)
                               for d in range(directions)], lengths)
        outs = [o if d == 0 else reverse_padded(o, lengths) for d, (o, _) in enumerate(done)]
        out = outs[0] if directions == 1 else torch.cat(outs, dim=-1)
        finals.extend(states for _, states in done)
    h_n = torch.stack([states[0] for states in finals])
    if isinstance(rnn, nn.LSTM):
        return out, (h_n, torch.stack([states[1] for states in finals]))
    return out, h_n
