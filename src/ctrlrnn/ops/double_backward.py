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


def forbid_double_backward(backward_op: Any, op: str, used_by: str) -> None:
    """Give the custom op ``backward_op`` (the backward of ``ctrlrnn::<op>``) an autograd
    formula that raises the clear error; it runs only if a second backward reaches the op."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        return None

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise RuntimeError(
            f"ctrlrnn: double backward through the compiled op ctrlrnn::{op} (used by "
            f"{used_by}) is not supported: its backward is a compiled kernel with no derivative. "
            f"Set CTRLRNN_BACKEND=reference (the reference path is plain autograd and "
            f"differentiates any number of times) or use torch.func transforms (which run the "
            f"reference path)."
        )

    backward_op.register_autograd(backward, setup_context=setup_context)
