"""What every fused cell shares: its two custom ops, their fakes, the autograd formula, and the
choice between the kernels, the export scan and the reference.

A cell is described once, by a :class:`Cell`: the names of its op's inputs (in the order the
kernels take them), its carried states, which inputs a step reads per time step, what the
backward reads, the shapes of the saved activations and of the gradients, and its reference
step. From that :func:`define` makes

* ``ctrlrnn::<cell>_cell_fwd(<inputs>, lengths, save) -> (<state>_seq..., <state>_last...,
  acts)`` and ``ctrlrnn::<cell>_cell_bwd(grad_<state>_seq..., grad_<state>_last..., <saved>,
  lengths) -> (one gradient per input)``, each with its CPU kernel (the extension ``cells``'s
  ``<cell>_forward`` / ``<cell>_backward``, ``ops/csrc/<cell>.cpp``) and its CUDA kernel (the
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

from torch import Tensor

from ctrlrnn.ops import backend, scan_export
from ctrlrnn.ops.cells import reference
from ctrlrnn.ops.cells.checks import needs_grad
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
        a = SimpleNamespace(**dict(zip(cell.backward_args, args, strict=True)))
        return tuple(a.acts.new_empty(tuple(shape)) for shape in cell.grad_shapes(a))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        named = {**dict(zip(cell.outputs, output, strict=True)),
                 **dict(zip((*cell.args, "lengths", "save"), inputs, strict=True))}  # fmt: skip
        ctx.save_for_backward(*(named[n] for n in cell.saved), named["lengths"])
        ctx.given = tuple(named[n] is not None for n in cell.args)
        ctx.set_materialize_grads(False)

    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Any, ...]:
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
        out = op(*args, lengths, needs_grad(*args))
        return tuple(out[: 2 * len(cell.states)])
    states, xs, consts = split(cell, args)
    loop = scan_export.scan if route == backend.EXPORT else reference.run
    seqs, last = loop(cell.step, states, xs, consts, lengths)
    return (*seqs, *last)
