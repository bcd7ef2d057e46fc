"""The export-time path of the recurrent ops: every loop over time as one ``torch`` scan.

Why this path exists. The compiled ops are ``torch.library`` custom ops (``ctrlrnn::linear_scan``,
``ctrlrnn::lstm_cell_fwd``, ...) that no exporter can translate, and the readable references are
Python loops over time, which any tracer unrolls into a graph of fixed length. For ONNX export
(:mod:`ctrlrnn.onnx_export`, ``docs/onnx.md``) each public op therefore switches, while an export
is traced, to the functions below: the same equations as the references, with the loop over time
written as torch's higher-order scan operator (``torch._higher_order_ops.scan``). ``torch.export``
captures that operator with a symbolic length, and the dynamo ONNX exporter of torch (2.13:
``torch/onnx/_internal/exporter/_torchlib/ops/hop.py``) translates it to one ONNX ``Scan`` whose
body is the step: the graph runs for any batch size and any sequence length. A METAGROSS level
runs its reference composition (gates for all steps, then :func:`linear_scan` below).

Why not the alternatives. Translating each custom op into hand-written ONNX (an onnxscript
function per op given as ``custom_translation_table``) would need eight ONNX implementations
kept equal to the references by hand, would only work when the user passes that table, and
would not cover ``CTRLRNN_BACKEND=reference`` (whose ops are plain loops, not custom ops). The
scan path reuses the step functions of :mod:`ctrlrnn.ops.cells_ref` as they are, works with a
plain ``torch.onnx.export(..., dynamo=True)``, and is the same whichever backend is active.
Each fused cell hands :func:`scan` its reference step (``ctrlrnn.ops.cells.<cell>``); the
linear scan is below, and QRNN pooling's export path (:mod:`ctrlrnn.ops.qrnn_pooling`) runs on it.

When it runs (:func:`active`): while the dynamo ONNX exporter of torch runs
(``torch.onnx.export(..., dynamo=True)``, the default from torch 2.9), or inside
:func:`scan_mode` (which :func:`ctrlrnn.export_onnx` enters, and which tests use to run this path
eagerly against the references). ``torch.compile`` and a plain ``torch.export`` keep the custom
ops. The TorchScript exporter (``dynamo=False``) would trace the custom ops (unsupported) or
unroll the reference loops into a fixed length, so :func:`active` refuses it with an error
naming the exporter to use.

Variable lengths follow the references exactly: a step ``t >= lengths[b]`` keeps row ``b``'s
state and outputs zeros (the mask is a second scanned input). float16/bfloat16 inputs of the
linear scan and QRNN pooling are accumulated in float32, as in the references.

The path is forward only: the scan's inputs are detached, so no gradient flows through it.
An exported graph is for inference, and torch's scan operator differentiated while the exporter
re-runs the graph (torch 2.13) saves the symbolic sizes of its body's runtime shape checks for
backward and fails; detached, the operator has no autograd to run.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops.compiled_op import constant_under_compile
from ctrlrnn.ops.padding import length_mask, reverse_padded

__all__ = ["active", "linear_scan", "scan", "scan_mode"]

_HALF = (torch.float16, torch.bfloat16)
_forced = 0  # depth of nested scan_mode() contexts

#: The modules whose flags say an ONNX export is running: torch's dynamo exporter, then the
#: TorchScript exporter's globals (module path of torch >= 2.6, then of older torch).
_DYNAMO_FLAGS = "torch.onnx._internal.exporter._flags"
_LEGACY_GLOBALS = ("torch.onnx._internal.torchscript_exporter._globals", "torch.onnx._globals")

LEGACY_EXPORTER_ERROR = (
    "ctrlrnn: the TorchScript ONNX exporter (torch.onnx.export(..., dynamo=False)) cannot export "
    "ctrlrnn layers: it would unroll the loop over time into a graph of one fixed sequence "
    "length. Use torch.onnx.export(..., dynamo=True) with dynamic_shapes, or "
    "ctrlrnn.export_onnx(model, args, path), which sets them (the 'ONNX export' page of "
    "ctrlrnn's documentation has examples)."
)


def _onnx_exporter_running() -> tuple[bool, bool]:
    """``(dynamo, torchscript)``: whether torch's dynamo or TorchScript ONNX exporter is running.

    Read from the exporters' own flags in ``sys.modules``: an exporter module that was never
    imported is not running, and this check must cost nothing on every op call.
    """
    flags = sys.modules.get(_DYNAMO_FLAGS)
    dynamo = bool(getattr(flags, "_is_onnx_exporting", False))
    legacy = False
    for name in _LEGACY_GLOBALS:
        module = sys.modules.get(name)
        if module is not None:
            legacy = legacy or bool(getattr(module.GLOBALS, "in_onnx_export", False))
    return dynamo, legacy


@constant_under_compile
def active() -> bool:
    """Whether the ops take this module's scan path (module docstring): inside
    :func:`scan_mode`, or while torch's dynamo ONNX exporter runs.

    Raises:
        RuntimeError: while the TorchScript ONNX exporter runs (it cannot export a loop of
            symbolic length from these ops).
    """
    if _forced:
        return True
    dynamo, legacy = _onnx_exporter_running()
    if dynamo:
        return True
    if legacy:
        raise RuntimeError(LEGACY_EXPORTER_ERROR)
    return False


@contextlib.contextmanager
def scan_mode() -> Iterator[None]:
    """Run every ctrlrnn op on the scan path inside the ``with`` block, whatever the backend:
    for ``torch.export.export`` of a program to be converted to ONNX later, and for checking the
    path eagerly against the references."""
    global _forced
    _forced += 1
    try:
        yield
    finally:
        _forced -= 1


# ------------------------------------------------------------------------------------------------
# The loop over time
# ------------------------------------------------------------------------------------------------

#: ``step(x_t, states, consts) -> new states``: the tensors read at step ``t`` (None where an
#: optional one is absent), the carried states, and the tensors every step reads.
Step = Callable[
    [Sequence[Tensor | None], Sequence[Tensor], Sequence[Tensor | None]], Sequence[Tensor]
]


def _given(tensors: Sequence[Tensor | None]) -> tuple[list[Tensor], Callable[..., list[Any]]]:
    """The tensors of ``tensors`` that are not None, and the function that puts a sequence of
    that many back in their places, None in the others."""
    present = [k for k, x in enumerate(tensors) if x is not None]

    def placed(values: Sequence[Tensor]) -> list[Any]:
        out: list[Any] = [None] * len(tensors)
        for k, v in zip(present, values, strict=True):
            out[k] = v
        return out

    return [tensors[k] for k in present], placed  # type: ignore[misc]


def scan(
    step: Step,
    states: Sequence[Tensor],
    xs: Sequence[Tensor | None],
    consts: Sequence[Tensor | None],
    lengths: Tensor | None,
) -> tuple[list[Tensor], list[Tensor]]:
    """``states = step(xs[:, t], states, consts)`` for every ``t``, as one scan over time.

    ``states``: ``(B, S)`` tensors; ``xs``: batch-first ``(B, T, ...)`` tensors; ``consts``: the
    tensors every step reads (weights), passed to the scan explicitly rather than captured; an
    optional entry of ``xs`` or ``consts`` may be None (the step gets None). With ``lengths``, a
    step ``t >= lengths[b]`` keeps row ``b``'s states and outputs zeros (the rule of
    :func:`ctrlrnn.ops.cells.reference.run`). Returns the per-state output sequences
    ``(B, T, S)`` and the final states.

    The scan is the operator ``scan_op`` itself, not the ``scan`` wrapper of
    :mod:`torch._higher_order_ops.scan`: the wrapper first compiles every call with dynamo (to
    find the tensors the step captures), which costs seconds per scan; here they are ``consts``.
    Its inputs are detached (module docstring: forward only).
    """
    from torch._higher_order_ops.scan import scan_op

    xs, place_xs = _given(xs)
    consts, place_consts = _given(consts)
    unique: list[Tensor] = []  # each tensor once: the scan's inputs must not alias
    where: list[int] = []
    for c in consts:
        at = next((k for k, u in enumerate(unique) if u is c), len(unique))
        if at == len(unique):
            unique.append(c)
        where.append(at)
    scanned = [x.movedim(1, 0) for x in xs]  # the operator scans dim 0
    if lengths is not None:
        valid = length_mask(lengths.to(scanned[0].device), scanned[0].shape[0])
        scanned.append(valid.t().unsqueeze(-1))  # (T, B, 1)
    n_states, n_xs = len(states), len(xs)

    def body(*args: Tensor) -> list[Tensor]:
        carry = args[:n_states]
        x_t = place_xs(args[n_states : n_states + n_xs])
        given = args[n_states + len(scanned) :]
        new = list(step(x_t, carry, place_consts([given[k] for k in where])))
        if lengths is None:
            return [*new, *(n.clone() for n in new)]  # outputs must not alias the carry
        valid_t = args[n_states + n_xs]
        kept = [torch.where(valid_t, n, s) for n, s in zip(new, carry, strict=True)]
        return [*kept, *(torch.where(valid_t, n, torch.zeros_like(n)) for n in new)]

    out = scan_op(
        body,
        [s.detach() for s in states],
        [x.detach() for x in scanned],
        tuple(c.detach() for c in unique),
    )
    return [y.movedim(0, 1) for y in out[n_states:]], list(out[:n_states])


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


# ------------------------------------------------------------------------------------------------
# The ops (same arguments as the references, already validated by the public functions)
# ------------------------------------------------------------------------------------------------


def linear_scan(
    a: Tensor, b: Tensor, h0: Tensor | None, lengths: Tensor | None, reverse: bool
) -> tuple[Tensor, Tensor]:
    """``h_t = a_t h_{t-1} + b_t`` (:func:`ctrlrnn.ops.linear_scan.reference.linear_scan_ref`)
    -> ``(h, h_last)``."""
    out_dtype = a.dtype
    acc = _acc_dtype(a.dtype)
    a, b = a.to(acc), b.to(acc)
    if reverse:
        a, b = reverse_padded(a, lengths), reverse_padded(b, lengths)
    h = a.new_zeros(a.shape[0], a.shape[2]) if h0 is None else h0.to(acc)
    (out,), (last,) = scan(lambda x, s, _: (x[0] * s[0] + x[1],), [h], [a, b], [], lengths)
    if reverse:
        out = reverse_padded(out, lengths)
    return out.to(out_dtype), last.to(out_dtype)

