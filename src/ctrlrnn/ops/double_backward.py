"""The compiled ops' backward passes are kernels without a derivative of their own: a double
backward (``create_graph=True``, then a second backward) that reaches one gets one clear error
naming the op, the layers that use it and the alternatives, instead of torch's internal "no
autograd formula" message.

The alternatives: ``CTRLRNN_BACKEND=reference`` (the reference path is plain autograd and
differentiates any number of times), or ``torch.func`` transforms, which take the reference path
by themselves (:func:`ctrlrnn.ops.backend.has_kernel`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def forbid_double_backward(backward_op: Any, op: str, used_by: str) -> None:
    """Give the custom op ``backward_op`` (the backward of ``ctrlrnn::<op>``) an autograd
    formula that raises the clear error; it runs only if a second backward reaches the op."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        return None

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise RuntimeError(_message(op, used_by))

    backward_op.register_autograd(backward, setup_context=setup_context)


def _message(op: str, used_by: str) -> str:
    return (
        f"ctrlrnn: double backward through the compiled op ctrlrnn::{op} (used by {used_by}) "
        "is not supported: its backward is a compiled kernel with no derivative. Set "
        "CTRLRNN_BACKEND=reference (the reference path is plain autograd and differentiates "
        "any number of times) or use torch.func transforms (which run the reference path)."
    )


def without_derivative(grads: tuple[Tensor | None, ...], op: str, used_by: str
                       ) -> tuple[Tensor | None, ...]:  # fmt: skip
    """Gradients that an autograd ``Function``'s backward computed with kernels: as they are,
    or, where the backward runs under ``create_graph=True`` (grad enabled), the same values
    whose own backward (a second derivative) raises the clear error of
    :func:`forbid_double_backward` for ``op``."""
    if not torch.is_grad_enabled():
        return grads
    given = [i for i, g in enumerate(grads) if g is not None]
    wrapped = _NoDerivative.apply(_REQUIRES_GRAD, (op, used_by), *(grads[i] for i in given))
    out = list(grads)
    for i, g in zip(given, wrapped, strict=True):
        out[i] = g
    return tuple(out)


#: An empty tensor that requires grad: makes :class:`_NoDerivative`'s outputs require grad, so
#: that a second backward reaches its error.
_REQUIRES_GRAD = torch.empty(0, requires_grad=True)


class _NoDerivative(torch.autograd.Function):
    """Identity on a kernel backward's gradients; its backward is the double-backward error."""

    @staticmethod
    def forward(ctx: Any, _anchor: Tensor, names: tuple[str, str],  # type: ignore[override]
                *grads: Tensor) -> Any:  # fmt: skip
        ctx.names = names
        return tuple(g.clone() for g in grads)

    @staticmethod
    def backward(ctx: Any, *_grads: Any) -> Any:  # type: ignore[override]
        raise RuntimeError(_message(*ctx.names))
