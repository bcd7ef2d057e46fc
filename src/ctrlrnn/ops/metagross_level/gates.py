"""The elementwise part of one METAGROSS level (METAGROSS paper eq 2-1..2-6), fused.

For the ``k`` units of one level, from their base pre-activations ``P = (F^F, F^O, F^Z)``, the
outputs of their children ``(m^F, m^O)``, the depth gates ``alpha``, ``beta`` and the residual::

    f = sig(pf + alpha (m^F - pf))        (eq 2-1: alpha m^F + (1 - alpha) F^F)
    o = sig(po + beta  (m^O - po))        (eq 2-2)
    z = tanh(pz)                          (eq 2-3)
    "h" form: a = o (1 - f),  b = o f z (+ x)    -> h_t = a h_{t-1} + b   (eq 2-4..2-6)
    "c" form: a = 1 - f,      b = f z            -> c_t = a c_{t-1} + b,  h_t = o c_t (+ x)

:func:`level_gates` returns ``(a, b, o)`` and saves only its inputs; backward recomputes
``f, o, z`` and returns the gradients of ``P``, the children, ``alpha``, ``beta`` and the
residual in one pass. (It saves nothing else: this work is bound by memory traffic, and saved
activations would cost more to write and read back than the sigmoid and tanh cost to
recompute.) Both passes are plain tensor functions; for large float inputs they run through
``torch.compile`` (one fused loop each instead of some 30 separate elementwise kernels), small
or float64 inputs run them eagerly. :func:`gate_backend` says which path a tensor takes;
:func:`set_gate_backend` forces one. The METAGROSS level (:mod:`ctrlrnn.ops.metagross_level`)
composes them with the linear scan; ``ctrlrnn.nn.metagross_gates`` re-exports the public names.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ctrlrnn.ops.backend import functorch_active, reference_forced

__all__ = ["gate_backend", "level_gates", "set_gate_backend"]

#: Smallest number of elements of ``P`` for which ``"auto"`` uses the compiled functions.
COMPILE_MIN_NUMEL = 1 << 18
_COMPILABLE = (torch.float32, torch.float16, torch.bfloat16)
_mode = "auto"
_compiled: dict[str, Callable[..., Any]] = {}
_compile_failed: str | None = None


def _forward_math(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, h_form: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """``P`` (B, T, 3, k, H), ``child`` (B, T, k, 2, H), ``alpha``/``beta`` (B, T, k, 1),
    ``res`` (B, T, 1, H) -> ``a``, ``b``, ``o``, ``f``, ``z`` (B, T, k, H)."""
    pf, po, pz = P.unbind(2)
    if child is not None and alpha is not None and beta is not None:
        cf, co = child.unbind(3)
        pf = pf + alpha * (cf - pf)
        po = po + beta * (co - po)
    f = torch.sigmoid(pf)
    o = torch.sigmoid(po)
    z = torch.tanh(pz)
    if h_form:
        a = o * (1 - f)
        b = o * f * z
        if res is not None:
            b = b + res
    else:
        a = 1 - f
        b = f * z
    return a, b, o, f, z


def _backward_math(
    f: Tensor, o: Tensor, z: Tensor, P: Tensor | None, child: Tensor | None,
    alpha: Tensor | None, beta: Tensor | None, ga: Tensor, gb: Tensor, go: Tensor | None,
    h_form: bool, has_res: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None, Tensor | None]:  # fmt: skip
    """Gradients of :func:`_forward_math` w.r.t. ``P``, ``child``, ``alpha``, ``beta``, ``res``
    given the activations ``f, o, z``."""
    if h_form:  # a = o (1 - f), b = o f z
        g_o = ga * (1 - f) + gb * f * z
        g_f = o * (gb * z - ga)
        g_z = gb * o * f
        if go is not None:
            g_o = g_o + go
    else:  # a = 1 - f, b = f z; o reaches only the output o c
        g_o = go if go is not None else torch.zeros_like(f)
        g_f = gb * z - ga
        g_z = gb * f
    g_sf = g_f * f * (1 - f)
    g_so = g_o * o * (1 - o)
    g_pz = g_z * (1 - z * z)
    dchild = dalpha = dbeta = None
    if P is not None and child is not None and alpha is not None and beta is not None:
        pf, po, _ = P.unbind(2)
        cf, co = child.unbind(3)
        # g - g alpha, not g (1 - alpha): the same for finite g, and Inf (not NaN) for an
        # infinite g, as autograd differentiates pf + alpha (cf - pf) and as the kernels do
        dP = torch.stack([g_sf - g_sf * alpha, g_so - g_so * beta, g_pz], 2)
        dchild = torch.stack([g_sf * alpha, g_so * beta], 3)
        dalpha = (g_sf * (cf - pf)).sum(-1, keepdim=True)
        dbeta = (g_so * (co - po)).sum(-1, keepdim=True)
    else:
        dP = torch.stack([g_sf, g_so, g_pz], 2)
    dres = gb.sum(2, keepdim=True) if (has_res and h_form) else None
    return dP, dchild, dalpha, dbeta, dres


def _forward_lean(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, h_form: bool,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """:func:`_forward_math` writing only ``a, b, o`` (backward recomputes ``f, z``)."""
    a, b, o, _f, _z = _forward_math(P, child, alpha, beta, res, h_form)
    return a, b, o


def _backward_recompute(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None, ga: Tensor,
    gb: Tensor, go: Tensor | None, h_form: bool, has_res: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None, Tensor | None]:  # fmt: skip
    """:func:`_backward_math` recomputing ``f, o, z`` from the inputs (one fused pass)."""
    pf, po, pz = P.unbind(2)
    if child is not None and alpha is not None and beta is not None:
        cf, co = child.unbind(3)
        pf = pf + alpha * (cf - pf)
        po = po + beta * (co - po)
    f, o, z = torch.sigmoid(pf), torch.sigmoid(po), torch.tanh(pz)
    return _backward_math(f, o, z, P, child, alpha, beta, ga, gb, go, h_form, has_res)


def set_gate_backend(mode: str) -> None:
    """``"auto"`` (compiled for float inputs of at least :data:`COMPILE_MIN_NUMEL` elements),
    ``"compiled"`` (always, whatever the size) or ``"eager"`` (never)."""
    global _mode
    if mode not in ("auto", "compiled", "eager"):
        raise ValueError(f"mode: expected 'auto', 'compiled' or 'eager', got {mode!r}")
    _mode = mode


def gate_backend(P: Tensor | None = None) -> str:
    """Which path :func:`level_gates` takes for pre-activations like ``P``: ``"compiled"`` or
    ``"eager"`` (with the reason when ``torch.compile`` failed earlier)."""
    if _compile_failed is not None:
        return f"eager (torch.compile failed: {_compile_failed})"
    if _mode == "eager" or torch.compiler.is_compiling():
        return "eager"
    if _mode == "compiled":
        return "compiled"
    if P is None:
        return f"compiled for float32/16 inputs of >= {COMPILE_MIN_NUMEL} elements, else eager"
    if P.dtype in _COMPILABLE and P.numel() >= COMPILE_MIN_NUMEL:
        return "compiled"
    return "eager"


def _call(name: str, fn: Callable[..., Any], P: Tensor, *args: Any) -> Any:
    global _compile_failed
    if gate_backend(P) != "compiled":
        return fn(P, *args)
    compiled = _compiled.get(name)
    if compiled is None:
        compiled = _compiled[name] = torch.compile(fn, dynamic=True)
    try:
        return compiled(P, *args)
    except Exception as exc:  # noqa: BLE001 - fall back once, loudly
        _compile_failed = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        warnings.warn(
            "ctrlrnn: torch.compile of the METAGROSS gate functions failed; running them "
            f"eagerly from now on (slower). {_compile_failed}",
            RuntimeWarning,
            stacklevel=3,
        )
        return fn(P, *args)


class _LevelGates(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
        res: Tensor | None, h_form: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        a, b, o = _call("forward", _forward_lean, P, child, alpha, beta, res, h_form)
        ctx.save_for_backward(P, child, alpha, beta)
        ctx.h_form = h_form
        ctx.has_res = res is not None
        ctx.res_shape = None if res is None else res.shape
        return a, b, o

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, ga: Tensor | None, gb: Tensor | None, go: Tensor | None):  # type: ignore[override]
        P, child, alpha, beta = ctx.saved_tensors
        B, T, _, k, H = P.shape
        if ga is None:
            ga = P.new_zeros(B, T, k, H)
        if gb is None:
            gb = P.new_zeros(B, T, k, H)
        dP, dchild, dalpha, dbeta, dres = _call(
            "backward", _backward_recompute, P, child, alpha, beta, ga, gb, go, ctx.h_form,
            ctx.has_res,
        )  # fmt: skip
        if ctx.has_res and dres is None:
            dres = P.new_zeros(ctx.res_shape)
        return dP, dchild, dalpha, dbeta, dres, None


def level_gates(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, h_form: bool,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``(a, b, o)`` of one level (module docstring), differentiable w.r.t. all tensor inputs.

    ``P`` (B, T, 3, k, H); ``child`` (B, T, k, 2, H) or None at the leaves; ``alpha``,
    ``beta`` (B, T, k, 1) or None; ``res`` (B, T, 1, H) or None.
    """
    if functorch_active() or reference_forced():
        # the reference path: plain autograd, so torch.func transforms and higher derivatives
        # go through (_LevelGates recomputes in backward to save memory, once differentiable)
        return _forward_lean(P, child, alpha, beta, res, h_form)
    out = _LevelGates.apply(P, child, alpha, beta, res, h_form)
    return out[0], out[1], out[2]
