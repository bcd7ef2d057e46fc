"""Reference RCRN listener (RCRN paper eq 15-16), written straight from the equations.

Over batch-first ``(B, T, C)`` controller and base outputs ``h1``, ``h2``, ``h3``:

    c4_t = sigmoid(h1_t) * c4_{t-1} + (1 - sigmoid(h1_t)) * h3_t     (eq 15)
    h4_t = gate(h2_t) * c4_t                                         (eq 16)

with ``gate = sigmoid`` (the paper's text, the authors' code) or the identity (eq 16 as
printed). Channels ``[0, split)`` run forward in time, channels ``[split, C)`` run each sequence
backwards from its own last valid step (a bidirectional layer's backward direction, its inputs
in forward time). Eq 15 is :func:`ctrlrnn.ops.linear_scan.reference.linear_scan_ref` with
``a = sigmoid(h1)``, ``b = (1 - a) h3``; autograd differentiates it. It is the oracle the fused
kernels (:mod:`ctrlrnn.ops.rcrn_listener`) are tested against, and their fallback.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers (the backward below is the fallback of a custom op) as written.

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops.linear_scan.reference import linear_scan_ref

__all__ = ["rcrn_listener_ref", "rcrn_listener_ref_backward"]

#: The output gates of eq 16: ``"sigmoid"`` (the text) and ``"identity"`` (eq 16 as printed).
OUTPUT_GATES = ("sigmoid", "identity")


def _segment(
    h1: Tensor, h2: Tensor, h3: Tensor, c0: Tensor | None, lengths: Tensor | None,
    output_gate: str, reverse: bool, scan: Callable[..., Any],
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Eq 15-16 over one direction's channels: ``(h4, c4, c4_last)``."""
    a = torch.sigmoid(h1)
    b = torch.addcmul(h3, a, h3, value=-1.0)  # (1 - a) * h3
    c4, c_last = scan(a, b, c0, reverse=reverse, lengths=lengths, return_last=True)
    gate = torch.sigmoid(h2) if output_gate == "sigmoid" else h2
    return gate * c4, c4, c_last


def rcrn_listener_ref(
    h1: Tensor,
    h2: Tensor,
    h3: Tensor,
    c0: Tensor | None = None,
    *,
    lengths: Tensor | None = None,
    output_gate: str = "sigmoid",
    split: int | None = None,
    scan: Callable[..., Any] = linear_scan_ref,
) -> tuple[Tensor, Tensor, Tensor]:
    """Reference for :func:`ctrlrnn.ops.rcrn_listener.rcrn_listener` (same arguments; ``scan``
    runs eq 15: the reference scan, or :func:`ctrlrnn.linear_scan` where the listener is
    composed of the public ops, as in an ONNX export).

    Returns ``(h4, c4, c4_last)``: ``(B, T, C)``, ``(B, T, C)`` and ``(B, C)``; steps past a
    sequence's length are zero in ``h4`` and ``c4`` and leave the state unchanged.
    """
    C = h1.shape[2]
    split = C if split is None else split
    parts = []
    for lo, hi, reverse in ((0, split, False), (split, C, True)):
        if hi > lo:
            parts.append(_segment(
                h1[..., lo:hi], h2[..., lo:hi], h3[..., lo:hi],
                None if c0 is None else c0[:, lo:hi], lengths, output_gate, reverse, scan,
            ))  # fmt: skip
    if len(parts) == 1:
        return parts[0]
    if not parts:  # no channels
        return h1.new_zeros(h1.shape), h1.new_zeros(h1.shape), h1.new_zeros(h1.shape[0], 0)
    return tuple(torch.cat(xs, dim=-1) for xs in zip(*parts))  # type: ignore[return-value]


def rcrn_listener_ref_backward(
    grad_out: Tensor | None,
    grad_last: Tensor | None,
    h1: Tensor,
    h2: Tensor,
    h3: Tensor,
    c4: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    split: int,
    sigmoid_gate: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dh1, dh2, dh3, dc0)`` of :func:`rcrn_listener_ref` given the gradients of ``h4`` and
    ``c4_last`` (None for zero), by autograd through the reference (``c4``, the forward's
    state sequence, is recomputed). The backward of the fused op where it has no kernel."""
    del c4  # recomputed
    gate = "sigmoid" if sigmoid_gate else "identity"
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(True) for x in (h1, h2, h3)]
        init = (c0 if c0 is not None else h1.new_zeros(h1.shape[0], h1.shape[2])).detach()
        init.requires_grad_(True)
        h4, _c4, last = rcrn_listener_ref(*leaves, init, lengths=lengths, output_gate=gate,
                                          split=split)
        outs, grads = [], []
        for out, g in ((h4, grad_out), (last, grad_last)):
            if g is not None:
                outs.append(out)
                grads.append(g)
        if not outs:
            zeros = [torch.zeros_like(x) for x in (*leaves, init)]
            return tuple(zeros)  # type: ignore[return-value]
        d = torch.autograd.grad(outs, [*leaves, init], grads, allow_unused=True)
    return tuple(  # type: ignore[return-value]
        torch.zeros_like(x) if g is None else g for g, x in zip(d, (*leaves, init)))
