"""The eager path of the compiled ops: the same kernels and autograd formulas, less dispatch.

Every compiled op is a :mod:`torch.library` custom op with its autograd formula registered
(``register_autograd``), so that it traces under ``torch.compile`` and ``torch.export``. Called
from eager Python, a custom op with autograd pays, on every call forward and backward, for the
dispatcher and for the wrapper ``torch.library`` builds around the formula: a fixed cost per
call that does not shrink with the work, and that a GPU, whose kernels are short, waits on.

So each op registers its autograd formula through :class:`CompiledOp`, which also builds the
op's eager twin from the same functions (:func:`autograd_function`: the op's own
implementation, ``setup_context`` and backward, so both paths compute the same thing) and picks
one of the two per call: the twin when nothing traces (:func:`eager_ok`). The backward
calls the backward kernel's implementation directly (:func:`backward_of`) unless a graph of the
backward is being built (``create_graph=True``): then it goes through the backward custom op,
whose double-backward error (:mod:`ctrlrnn.ops.double_backward`) therefore stays. Under
``torch.compile``, ``torch.export``, TorchScript tracing, and for tensor subclasses (fake
tensors, functional tensors), the custom op runs as before.

:func:`constant_under_compile` marks the questions the dispatch asks (is there a kernel, is an
export running) as constants while dynamo traces, so they are answered once, eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def constant_under_compile(fn: Any) -> Any:
    """``torch.compiler.assume_constant_result(fn)``, without its import of ``torch._dynamo``
    (seconds at ``import ctrlrnn``): the decorator only sets this attribute, which dynamo reads
    when it meets ``fn``."""
    fn._dynamo_marked_constant = True
    return fn


def torchscript_tracing() -> bool:
    """Whether ``torch.jit.trace`` is recording this call (never while dynamo traces, where
    the question is answered before the tracer's state is read)."""
    return not torch.compiler.is_compiling() and torch.jit.is_tracing()


def eager_ok(*args: Any) -> bool:
    """Whether an op called with ``args`` may skip its custom op: no ``torch.compile`` or
    ``torch.export`` tracing, no TorchScript tracing, and only plain tensors among ``args``."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    exporting = getattr(torch.compiler, "is_exporting", None)  # torch >= 2.5
    if exporting is not None and exporting():
        return False
    return all(type(a) in _PLAIN for a in args if isinstance(a, torch.Tensor))


def autograd_function(
    name: str,
    impl: Callable[..., Any],
    setup_context: Callable[[Any, tuple[Any, ...], Any], None],
    backward: Callable[..., Any],
) -> Callable[..., Any]:
    """``apply`` of a :class:`torch.autograd.Function` whose forward is ``impl`` (the custom
    op's implementation) followed by ``setup_context(ctx, inputs, output)``, and whose backward
    is ``backward(ctx, *grads)``: the custom op's autograd formula, called directly."""

    def forward(ctx: Any, *inputs: Any) -> Any:
        output = impl(*inputs)
        setup_context(ctx, inputs, output)
        return output

    def backward_(ctx: Any, *grads: Any) -> Any:
        return backward(ctx, *grads)

    body = {
        "forward": staticmethod(forward),
        "backward": staticmethod(backward_),
        "__doc__": f"Eager autograd of ctrlrnn::{name} (see ctrlrnn.ops.compiled_op).",
    }
    fn = type(name, (torch.autograd.Function,), body)
    return fn.apply


class CompiledOp:
    """A custom op with its autograd formula, callable: the eager twin when :func:`eager_ok`
    holds for the call's arguments, the custom op ``op`` otherwise.

    Registers ``backward`` / ``setup_context`` on ``op`` (``register_autograd``; ``op`` is
    ``ctrlrnn::<name>``) and builds the twin from ``impl`` (the function ``op`` was made from)
    and the same two functions.
    """

    def __init__(self, name: str, op: Any, impl: Callable[..., Any],
                 setup_context: Callable[[Any, tuple[Any, ...], Any], None],
                 backward: Callable[..., Any]) -> None:  # fmt: skip
        op.register_autograd(backward, setup_context=setup_context)
        self.op = op
        self.eager = autograd_function(name, impl, setup_context, backward)

    def __call__(self, *args: Any) -> Any:
        return (self.eager if eager_ok(*args) else self.op)(*args)


def backward_of(op: Callable[..., Any], impl: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """The backward custom op ``op``, or its implementation ``impl`` when no graph of the
    backward is being built (grad mode is off inside a backward without ``create_graph``) and
    :func:`eager_ok` holds for ``args``."""
    if torch.is_grad_enabled() or not eager_ok(*args):
        return op
    return impl


@contextmanager
def untraced() -> Iterator[None]:
    """TorchScript's tracer paused. A model traced before any eager call imports its
    extensions inside ``torch.jit.trace``; their set-up calls ops that return settings and
    thread counts, which the tracer cannot record and which are not part of the traced
    computation."""
    state = torch._C._get_tracing_state()
    if state is None:
        yield
        return
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)
