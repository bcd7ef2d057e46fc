"""One custom op per op, serving every device: the registration every compiled op shares.

A compiled op is a pair of :mod:`torch.library` custom ops, ``ctrlrnn::<name>`` and its backward,
each with

* a kernel per device type (:data:`DEVICES`), registered on the op with ``register_kernel``:
  the kernel asks the dispatch table (:func:`ctrlrnn.ops.backend.kernel_for`) for the module
  implementing the op's family on that device (the compiled CPU extension on ``"cpu"``, the
  Triton kernels on ``"cuda"``) and calls its function of the kernel's name; the CPU extension
  and the Triton module of a family have the same functions with the same signatures;
* a fallback, the op's default body (and what a kernel runs when the table has no module: a
  graph traced with a kernel, run where it cannot be had);
* a fake (meta) implementation, so that it traces under ``torch.compile`` and ``torch.export``,
  and what the op computes on the ``meta`` device (the outputs' shapes);

and the forward's autograd formula is registered once, through
:class:`ctrlrnn.ops.compiled_op.CompiledOp` (with its eager twin), the backward's is the
double-backward error of :mod:`ctrlrnn.ops.double_backward`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ctrlrnn.ops import backend, compiled_op
from ctrlrnn.ops.compiled_op import CompiledOp, backward_of
from ctrlrnn.ops.double_backward import forbid_double_backward

#: The device types every op registers a kernel for.
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Kernel:
    """One direction of an op: the family module's function ``name``, the ``fallback`` that
    runs without one, the ``fake`` for tracing and, where the fallback's annotations cannot give
    it, the op's ``schema``."""

    name: str
    fallback: Callable[..., Any]
    fake: Callable[..., Any]
    schema: str | None = None


def _cuda_device_of(args: tuple[Any, ...]) -> torch.device | None:
    """The device of the first CUDA tensor among ``args`` where it is not the current CUDA
    device (a model on ``cuda:1`` with ``cuda:0`` current), else None."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            at = a.device
            if at.index is not None and at.index != torch.cuda.current_device():
                return at
            return None
    return None


def _records_graph(args: tuple[Any, ...]) -> bool:
    """Whether a call on ``args`` may record autograd (reverse or forward mode)."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return True
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _on(family: str, device: str, kernel: Kernel) -> Callable[..., Any]:
    where = torch.device(device)

    def run(*args: Any) -> Any:
        module = backend.kernel_for(family, where)
        if module is None:
            return kernel.fallback(*args)
        fn = getattr(module, kernel.name)
        # Triton launches on the current CUDA device and its stream: make that the inputs'
        # device, as the device guard of torch's own CUDA kernels does
        other = _cuda_device_of(args) if device == "cuda" else None
        if other is None:
            out = fn(*args)
        else:
            with torch.cuda.device(other):
                out = fn(*args)
        # a C++ kernel returns its tensors as a list: autograd and the op want a tuple
        return tuple(out) if isinstance(out, list) else out

    run.__name__ = f"{kernel.name}_{device}"
    return run


def device_op(name: str, family: str, kernel: Kernel) -> tuple[Any, Callable[..., Any]]:
    """``(op, impl)``: the custom op ``ctrlrnn::<name>`` with a kernel per device type, its
    fake and its fallback, and ``impl``, the same table called directly (the eager path)."""
    op = torch.library.custom_op(
        f"ctrlrnn::{name}", kernel.fallback, mutates_args=(), schema=kernel.schema
    )
    kernels = {device: _on(family, device, kernel) for device in DEVICES}
    for device, fn in kernels.items():
        op.register_kernel(device, fn)
    op.register_fake(kernel.fake)

    def impl(*args: Any) -> Any:
        device = next(a.device.type for a in args if isinstance(a, torch.Tensor))
        if device == "meta":  # shapes only: what the op's meta kernel, its fake, gives
            return kernel.fake(*args)
        return kernels.get(device, kernel.fallback)(*args)

    return op, impl


class KernelOp(CompiledOp):
    """A forward op and its backward op (:func:`device_op`), the forward differentiable.

    ``setup_context(ctx, inputs, output)`` and ``backward_fn(ctx, *grads)`` are the forward's
    autograd formula; ``backward_fn`` calls :meth:`run_backward` for the backward op. Calling
    the object runs the forward (:class:`CompiledOp`: its eager twin outside tracing).
    """

    def __init__(self, name: str, family: str, forward: Kernel, backward: Kernel, *,
                 setup_context: Callable[..., None], backward_fn: Callable[..., Any],
                 used_by: str, backward_name: str | None = None) -> None:  # fmt: skip
        op, impl = device_op(name, family, forward)
        self.family, self.forward_kernel = family, forward
        self.backward_op, self.backward_impl = device_op(
            backward_name or f"{name}_backward", family, backward
        )
        super().__init__(name, op, impl, setup_context, backward_fn)
        self.impl = impl
        forbid_double_backward(self.backward_op, name, used_by)

    def __call__(self, *args: Any) -> Any:
        """The forward: the custom op while anything traces, else the eager twin, or, where
        no autograd graph can be recorded (grad mode off, or no argument requiring grad, and
        no forward-mode AD level open), the kernel table itself: no ``Function`` node."""
        if not compiled_op.eager_ok(*args):  # (read from the module: tests replace it)
            return self.op(*args)
        if _records_graph(args):
            return self.eager(*args)
        return self.impl(*args)

    def resolved(self, device: torch.device) -> Callable[..., Any]:
        """The forward on ``device`` as :meth:`__call__` runs it where no graph can be
        recorded and nothing traces, with the dispatch table asked now instead of at every
        call: for a caller that runs it many times while the table cannot change (the steps
        of one decode). On the CPU the family module's function itself (it returns a list
        where the table returns a tuple), elsewhere the table (:attr:`impl`)."""
        if device.type == "cpu":
            module = backend.kernel_for(self.family, device)
            if module is not None:
                return getattr(module, self.forward_kernel.name)
        return self.impl

    def run_backward(self, *args: Any) -> Any:
        """The backward op on ``args``, or its table directly where no graph of the backward is
        being built (:func:`ctrlrnn.ops.compiled_op.backward_of`)."""
        return backward_of(self.backward_op, self.backward_impl, *args)(*args)
