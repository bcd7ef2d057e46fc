"""What every fused cell shares: its two custom ops, their fakes, the autograd formula, and the
choice between the kernels, the export scan and the reference.

A cell is described once, by a :class:`Cell`: the names of its op's inputs (in the order the
kernels take them), its carried states, which inputs a step reads per time step, what the
backward reads, the shapes of the saved activations and of the gradients, and its reference
step. From that :func:`define` makes

* ``ctrlrnn::<cell>_cell_fwd(<inputs>, lengths, save) -> (<state>_seq..., <state>_last...,
  acts)`` and ``ctrlrnn::<cell>_cell_bwd(grad_<state>_seq..., grad_<state>_last..., <saved>,
  lengths) -> (one gradient per input)``, each with its CPU kernel (the extension ``cells``'s
  ``<cell>_forward`` / ``<cell>_backward``, ``cells/<cell>/<cell>.cpp``) and its CUDA kernel (the
  same functions of :mod:`ctrlrnn.ops.cells.triton_host`, whose host loop runs the cell's
  Triton step kernels) registered on the same op (:mod:`ctrlrnn.ops.kernel_op`);
* their fake implementations, from the shapes;
* the forward's autograd formula (save what the backward reads, call the backward op, no
  gradient for an optional input that was not given) and its eager twin
  (:mod:`ctrlrnn.ops.compiled_op`);

and :func:`sequence` runs a cell's validated, cast arguments on the path the dispatch table
gives (:func:`ctrlrnn.ops.backend.path`): the op, the export scan of the reference step
(:func:`ctrlrnn.ops.scan_export.scan`) or the reference loop (:func:`.reference.run`).

The op's ``acts`` output holds what the backward needs of the forward's activations, written
only when ``save`` (autograd will need them; else it is empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.cells import reference
from ctrlrnn.ops.cells.checks import needs_grad
from ctrlrnn.ops.compiled_op import constant_under_compile, torchscript_tracing
from ctrlrnn.ops.kernel_op import Kernel, KernelOp
from ctrlrnn.ops.scan_export import Step


@dataclass(frozen=True)
class Cell:
    """One fused cell: what differs from the others (module docstring).

    ``inputs``: the op's tensor inputs in kernel order, an optional one (None allowed) marked
    by a trailing ``?``; the initial states are ``<state>0``. ``scanned``: the inputs read at
    each step ``t`` (the rest but the states are read whole by every step). ``saved``: the
    inputs and outputs (``<state>_seq``, ``acts``) the backward reads, in its order.
    ``acts_width(width, hidden)``: the last dimension of ``acts`` for an ``x_proj`` of that
    width. ``grad_shapes(a)``: the shapes of the backward's outputs, from its arguments by name.
    ``step(x_t, states, consts)``: the reference step (:data:`ctrlrnn.ops.scan_export.Step`).
    """

    name: str
    inputs: tuple[str, ...]
    states: tuple[str, ...]
    scanned: tuple[str, ...]
    saved: tuple[str, ...]
    acts_width: Callable[[int, int], int]
    grad_shapes: Callable[[Any], Sequence[Sequence[int]]]
    step: Step
    used_by: str

    @property
    def args(self) -> tuple[str, ...]:
        """The input names without their ``?``."""
        return tuple(n.rstrip("?") for n in self.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (*(f"{s}_seq" for s in self.states), *(f"{s}_last" for s in self.states), "acts")

    @property
    def backward_args(self) -> tuple[str, ...]:
        grads = (*(f"grad_{s}_seq" for s in self.states), *(f"grad_{s}_last" for s in self.states))
        return (*grads, *self.saved, "lengths")


def _schemas(cell: Cell) -> tuple[str, str]:
    optional = {n.rstrip("?") for n in cell.inputs if n.endswith("?")}

    def typed(name: str) -> str:
        return f"Tensor{'?' if name in optional or name.startswith('grad_') else ''} {name}"

    forward = ", ".join(typed(n) for n in cell.args)
    backward = ", ".join(typed(n) for n in cell.backward_args[:-1])
    outs = ", ".join(["Tensor"] * len(cell.outputs))
    grads = ", ".join(["Tensor"] * len(cell.inputs))
    return (f"({forward}, Tensor? lengths, bool save) -> ({outs})",
            f"({backward}, Tensor? lengths) -> ({grads})")  # fmt: skip


def split(cell: Cell, args: Sequence[Tensor | None]) -> tuple[list[Any], list[Any], list[Any]]:
    """``(states, xs, consts)`` of the reference loop from the op's inputs ``args``."""
    named = dict(zip(cell.args, args, strict=True))
    states = [named[f"{s}0"] for s in cell.states]
    xs = [named[n] for n in cell.scanned]
    initial = {f"{s}0" for s in cell.states}
    consts = [named[n] for n in cell.args if n not in cell.scanned and n not in initial]
    return states, xs, consts


def stacked(weight_hh: Any) -> bool:
    """Whether an op call carries a stack of recurrences (``weight_hh`` (R, G_h, H))."""
    return isinstance(weight_hh, Tensor) and weight_hh.dim() == 3


def per_recurrence(fn: Callable[..., Any], args: Sequence[Any], weight_at: int,
                    lengths_at: int) -> Any:  # fmt: skip
    """``fn`` on every recurrence of a stacked call (each tensor but the lengths sliced on its
    first dimension), the outputs stacked: what the CPU kernels do (``csrc/recurrences.h``)."""
    outs = [fn(*(a[r] if isinstance(a, Tensor) and i != lengths_at else a
                 for i, a in enumerate(args)))
            for r in range(args[weight_at].shape[0])]  # fmt: skip
    return tuple(torch.stack(list(parts)) for parts in zip(*outs, strict=True))


def define(cell: Cell) -> KernelOp:
    """The cell's forward and backward ops with their kernels, fakes and autograd."""
    n_states = len(cell.states)

    def missing(*args: Any) -> Any:
        raise RuntimeError(
            "ctrlrnn: the compiled 'cells' kernels are not available, but this call was traced "
            "(torch.compile / torch.export) while they were; after changing CTRLRNN_BACKEND, "
            "call torch._dynamo.reset() (or trace again)"
        )

    def fake_forward(*args: Any) -> tuple[Tensor, ...]:
        w = cell.args.index("weight_hh")
        if stacked(args[w]):
            return per_recurrence(fake_forward, args, w, lengths_at=len(cell.args))
        a = SimpleNamespace(**dict(zip((*cell.args, "lengths", "save"), args, strict=True)))
        x = a.x_proj
        batch, steps, width = x.shape
        hidden = a.weight_hh.shape[1]
        seqs = [x.new_empty(batch, steps, hidden) for _ in cell.states]
        last = [getattr(a, f"{s}0").new_empty(batch, hidden) for s in cell.states]
        acts = x.new_empty(batch, steps, cell.acts_width(width, hidden)) if a.save else (
            x.new_empty(0))  # fmt: skip
        return (*seqs, *last, acts)

    def fake_backward(*args: Any) -> tuple[Tensor, ...]:
        w = cell.backward_args.index("weight_hh")
        if stacked(args[w]):
            return per_recurrence(fake_backward, args, w, lengths_at=len(cell.backward_args) - 1)
        a = SimpleNamespace(**dict(zip(cell.backward_args, args, strict=True)))
        return tuple(a.acts.new_empty(tuple(shape)) for shape in cell.grad_shapes(a))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        named = {**dict(zip(cell.outputs, output, strict=True)),
                 **dict(zip((*cell.args, "lengths", "save"), inputs, strict=True))}  # fmt: skip
        ctx.save_for_backward(*(named[n] for n in cell.saved), named["lengths"])
        ctx.given = tuple(named[n] is not None for n in cell.args)
        ctx.saved_acts = bool(named["save"])
        ctx.set_materialize_grads(False)

    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Any, ...]:
        if not ctx.saved_acts:
            # the kernel's backward reads the forward's activations; with save=False ``acts``
            # is empty, and reading it would crash the process rather than raise. The flag,
            # not ``acts.numel()``, decides: an empty batch or sequence has an empty ``acts``
            # that is correct to read.
            raise RuntimeError(
                f"ctrlrnn::{cell.name}_cell_fwd: backward through a forward that ran with "
                "save=False, which keeps no activations for it; call the op with save=True "
                "whenever a gradient may be asked (ctrlrnn's layers pass needs_grad(...))"
            )
        dinputs = op.run_backward(*grads[: 2 * n_states], *ctx.saved_tensors)
        kept = (d if given else None for d, given in zip(dinputs, ctx.given, strict=True))
        return (*kept, None, None)

    schema_forward, schema_backward = _schemas(cell)
    op = KernelOp(
        f"{cell.name}_cell_fwd",
        "cells",
        Kernel(f"{cell.name}_forward", missing, fake_forward, schema_forward),
        Kernel(f"{cell.name}_backward", missing, fake_backward, schema_backward),
        setup_context=setup_context,
        backward_fn=backward,
        used_by=cell.used_by,
        backward_name=f"{cell.name}_cell_bwd",
    )
    return op


def sequence(
    cell: Cell, op: KernelOp, args: Sequence[Tensor | None], lengths: Tensor | None
) -> tuple[Tensor, ...]:
    """``(<state>_seq..., <state>_last...)`` of the cell over the sequence: ``args`` are its
    op's inputs, validated and in the compute dtype."""
    x_proj = args[0]
    assert x_proj is not None
    route = backend.path("cells", x_proj.device)
    if route == backend.KERNEL:
        if torchscript_tracing() and not backend.has_kernel("cells", x_proj.device):
            raise RuntimeError(untraceable(cell, x_proj.device))
        out = op(*args, lengths, needs_grad(*args))
        return tuple(out[: 2 * len(cell.states)])
    states, xs, consts = split(cell, args)
    loop = scan_export.scan if route == backend.EXPORT else reference.run
    seqs, last = loop(cell.step, states, xs, consts, lengths)
    return (*seqs, *last)


def sequences(
    cell: Cell, op: KernelOp, calls: Sequence[Sequence[Tensor | None]], lengths: Tensor | None
) -> list[tuple[Tensor, ...]]:
    """Independent recurrences of the cell over one batch (the directions of a layer, RCRN's
    three RNNs...): ``calls`` holds each one's op inputs, validated, in the compute dtype and
    of equal sizes; returns each one's ``(<state>_seq..., <state>_last...)``.

    On the CPU kernels they run as one op call on their inputs stacked (``csrc/recurrences.h``:
    concurrently, a thread each, where one recurrence cannot fill the threads), on the Triton
    kernels as one batch of rows for the cells that allow it (one batched GEMM and one launch
    per step); elsewhere (the other cells on Triton, the references) one call each."""
    if not calls:
        return []
    x_proj = calls[0][0]
    assert x_proj is not None
    stack = len(calls) > 1 and backend.path("cells", x_proj.device) == backend.KERNEL
    if not (stack and _takes_stack(cell.name, x_proj.device.type)):
        return [sequence(cell, op, args, lengths) for args in calls]
    stacked: list[Tensor | None] = []
    for name, parts in zip(cell.args, zip(*calls, strict=True), strict=True):
        given = [p is not None for p in parts]
        if not any(given):
            stacked.append(None)
            continue
        if not all(given):
            raise ValueError(f"{name}: given for some recurrences and None for others")
        # sizes as ints: under TorchScript tracing a size reads as a 0-d tensor, and equal
        # tensors are distinct members of a set
        shapes = {tuple(int(n) for n in p.shape) for p in parts if p is not None}
        if len(shapes) > 1:
            raise ValueError(f"{name}: the recurrences differ in shape: {sorted(shapes)}")
        stacked.append(stack_or_base([p for p in parts if p is not None]))
    out = op(*stacked, lengths, needs_grad(*stacked))
    # unbind, not indexing: its backward gathers the recurrences' gradients in one tensor,
    # where R selects would each build a zero tensor of the whole stack
    per_output = [o.unbind(0) for o in out[: 2 * len(cell.states)]]
    return [tuple(o[r] for o in per_output) for r in range(len(calls))]


def untraceable(cell: Cell, device: torch.device) -> str:
    """The error of ``torch.jit.trace`` over a cell without its kernels: the other op families
    run their reference inside the custom op, which a trace records as one node; a cell's op
    has no such fallback (its backward reads the kernel's saved activations), and its reference
    loop would be recorded unrolled, for the traced length only."""
    return (
        f"ctrlrnn: torch.jit.trace of the fused {cell.name} cell ({cell.used_by}) needs the "
        f"compiled 'cells' kernels for {device.type} tensors, which are not available here "
        "(`ctrlrnn info` says why); "
        "without them the recurrence is a Python loop over time, which a trace would record "
        "unrolled, for the traced length only. Build the kernels, or export with "
        "ctrlrnn.export_onnx (any batch and length, with or without them)"
    )


@constant_under_compile
def _takes_stack(cell: str, device_type: str) -> bool:
    """Whether the cells' kernel module for ``device_type`` runs a stack of ``cell``'s
    recurrences better than one call each: the CPU extension where it runs them concurrently,
    the Triton host for the cells it batches (:func:`ctrlrnn.ops.cells.triton_host.takes_stack`).
    A constant under ``torch.compile``, as :func:`ctrlrnn.ops.backend.has_kernel` is: finding
    the module reads the environment and the extension loader, which torch 2.4's dynamo cannot
    trace."""
    module = backend.kernel_for("cells", torch.device(device_type))
    if module is None:
        return False
    takes = getattr(module, "takes_stack", None)
    if callable(takes):
        return bool(takes(cell))
    return bool(getattr(module, "runs_recurrences_concurrently", False))


def stack_or_base(parts: Sequence[Tensor]) -> Tensor:
    """``torch.stack(parts)``, or the tensor they are the consecutive slices of, which needs no
    copy and whose gradient arrives in one piece: ``base[0]``, ``base[1]``, ... (the K base
    RNNs of a METAGROSS unit hold their inputs and weights so), or consecutive contiguous
    blocks of a contiguous base of any shape (RCRN's projections of a layer, one batched GEMM's
    output). Not under ``torch.compile``, whose tracer has no storage offsets: it stacks, and
    its graph optimises the copy; nor under TorchScript tracing, whose graph holds the views but
    not the base they were taken from."""
    base = None if torch.compiler.is_compiling() or torchscript_tracing() else parts[0]._base
    if base is None:
        return torch.stack(list(parts))
    first = parts[0]
    if (
        base.dim() == first.dim() + 1
        and base.shape[0] == len(parts)
        and all(p._base is base and p.shape == base.shape[1:] and p.stride() == base.stride()[1:]
                and p.storage_offset() == base.storage_offset() + r * base.stride(0)
                for r, p in enumerate(parts))
    ):  # fmt: skip
        return base
    if (
        base.is_contiguous()
        and base.numel() == len(parts) * first.numel()
        and all(p._base is base and p.shape == first.shape and p.is_contiguous()
                and p.storage_offset() == base.storage_offset() + r * first.numel()
                for r, p in enumerate(parts))
    ):  # fmt: skip
        return base.view(len(parts), *first.shape)
    return torch.stack(list(parts))


def many(
    cell: Cell,
    op: KernelOp,
    arguments: Callable[..., tuple[Sequence[Tensor | None], Tensor | None]],
    calls: Sequence[dict[str, Any]],
    lengths: Tensor | None,
) -> list[tuple[Tensor, ...]]:
    """A cell's public ``<cell>_sequences``: each of ``calls`` (the keyword arguments of its
    ``<cell>_sequence`` but ``lengths``) validated and cast by ``arguments(**call, lengths=...)``,
    all run by :func:`sequences`, each result cast back to its call's ``x_proj`` dtype."""
    if isinstance(calls, dict) or not all(isinstance(c, dict) for c in calls):
        raise ValueError("calls: expected a sequence of dicts of keyword arguments, one per "
                         "recurrence")  # fmt: skip
    prepared = [arguments(**call, lengths=lengths) for call in calls]
    if not prepared:
        return []
    dtypes = {c["x_proj"].dtype for c in calls}
    if len(dtypes) > 1:
        raise ValueError(f"x_proj: the recurrences differ in dtype: {sorted(map(str, dtypes))}")
    outs = sequences(cell, op, [args for args, _ in prepared], prepared[0][1])
    dtype = calls[0]["x_proj"].dtype
    return [tuple(o.to(dtype) if o.dtype != dtype else o for o in out) for out in outs]


def plural(
    cell: Cell,
    op: KernelOp,
    arguments: Callable[..., tuple[Sequence[Tensor | None], Tensor | None]],
    singular: Callable[..., Any],
) -> Callable[..., list[tuple[Tensor, ...]]]:
    """The public ``<cell>_sequences`` of a cell whose one-recurrence function is ``singular``
    (its arguments checked and cast by ``arguments``): :func:`many` with its docstring."""
    name = singular.__name__

    def run(calls: Sequence[dict[str, Any]], lengths: Tensor | None = None
            ) -> list[tuple[Tensor, ...]]:  # fmt: skip
        return many(cell, op, arguments, calls, lengths)

    run.__name__ = run.__qualname__ = f"{name}s"
    run.__module__ = singular.__module__
    run.__doc__ = f"""Independent recurrences of :func:`{name}` over one batch, in one call.

    ``calls``: one dict per recurrence of :func:`{name}`'s keyword arguments but ``lengths``
    (all of equal sizes and dtype); ``lengths`` is shared. Returns what :func:`{name}` returns
    for each.

    On CPU they run as one op on their stacked inputs, concurrently where one recurrence cannot
    fill the threads (the two directions of a bidirectional layer at a small batch); the results
    are those of one call each.
    """
    return run
