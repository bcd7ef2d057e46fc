"""The METAGROSS unit as printed (METAGROSS paper section 2, gates reading ``h_{t-1}``): one tree
of ``2^L - 1`` units per step.
"""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.cells import checks
from ctrlrnn.ops.cells.metagross_state.reference import (
    metagross_state_sequence_ref,
    metagross_state_step,
    step,
)
from ctrlrnn.ops.cells.shell import Cell, define, plural, sequence

__all__ = [
    "metagross_state_sequence",
    "metagross_state_sequences",
    "metagross_state_sequence_ref",
    "metagross_state_step",
    "metagross_tree_size",
]


CELL = Cell(
    name="metagross_state",
    inputs=("x_proj", "weight_hh", "alpha", "beta", "res?", "h0"),
    states=("h",),
    scanned=("x_proj", "alpha", "beta", "res"),
    saved=("weight_hh", "alpha", "beta", "res", "h0", "h_seq", "acts"),
    acts_width=lambda width, hidden: width,  # the pre-activations P of every base map
    # dres is empty without res
    grad_shapes=lambda a: (
        a.acts.shape, a.weight_hh.shape, a.alpha.shape, a.beta.shape,
        a.h_seq.shape if a.res is not None else (0,), a.h0.shape,
    ),  # fmt: skip
    step=step,
    used_by="Metagross(gates='state')",
)
OP = define(CELL)


def metagross_tree_size(width: int, hidden: int) -> tuple[int, int]:
    """``(N, I)``: units and internal units of a METAGROSS tree whose base maps are ``width =
    3*N*hidden`` wide (``N = 2^L - 1``); ValueError naming ``x_proj`` otherwise."""
    nodes = width // (3 * hidden) if hidden > 0 else 0
    if hidden <= 0 or nodes * 3 * hidden != width or nodes < 1 or (nodes + 1) & nodes:
        raise ValueError(
            f"x_proj: last dimension must be 3*N*hidden with N = 2^depth - 1 units (hidden = "
            f"weight_hh.shape[1] = {hidden}), got {width}"
        )
    return nodes, (nodes - 1) // 2


def metagross_state_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor | None = None,
    beta: Tensor | None = None,
    res: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run the METAGROSS unit as printed (METAGROSS paper section 2) over a batch-first sequence.

    Per step, for the ``N = 2^L - 1`` units of one tree (heap order; unit ``k``'s gate children
    ``2k+1``, ``2k+2``), all reading the root's previous output ``h_{t-1}``::

        P      = x_proj[:, t] + h_{t-1} @ weight_hh^T          F^*_k(x_t, h_{t-1}), all k
        f_k    = sig(P^F_k + alpha_k (h_{2k+1} - P^F_k))      (2-1)
        o_k    = sig(P^O_k + beta_k  (h_{2k+2} - P^O_k))      (2-2)
        z_k    = tanh(P^Z_k)                                  (2-3)
        h_k    = o_k ((1 - f_k) h_{t-1} + f_k z_k) (+ res_t)  (2-4..2-6)

    (leaves: ``f = sig(P^F)``, ``o = sig(P^O)``); the root's ``h_0`` is the new state.

    Args:
        x_proj: (B, T, 3NH) the input part of every base map with its bias, level-major (the
            layout of ``ctrlrnn.ops.metagross_level.layout.base_index``).
        weight_hh: (3NH, H) the recurrent part of every base map, same row order.
        alpha, beta: (B, T, I) depth gates of the ``I = (N-1)/2`` internal units in heap order
            (None when ``N == 1``).
        res: (B, T, H) residual term added to every unit's output (eq 2-6), or None.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    args, lengths = _arguments(x_proj, weight_hh, alpha, beta, res, h0, lengths=lengths)
    out = sequence(CELL, OP, args, lengths)
    return checks.uncast(out, x_proj.dtype)  # type: ignore[return-value]



def _arguments(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor | None = None,
    beta: Tensor | None = None,
    res: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[tuple[Tensor | None, ...], Tensor | None]:
    """:func:`metagross_state_sequence`'s arguments checked and cast to the compute dtype: the op's
    inputs and the lengths."""
    if not isinstance(x_proj, Tensor) or x_proj.dim() != 3 or not x_proj.is_floating_point():
        raise ValueError("x_proj: expected a 3-D floating-point tensor (batch, time, 3*N*hidden)")
    if not isinstance(weight_hh, Tensor) or weight_hh.dim() != 2:
        raise ValueError("weight_hh: expected a 2-D tensor (3*N*hidden, hidden)")
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    _, internal = metagross_tree_size(width, hidden)
    checks.check_tensor("weight_hh", weight_hh, (width, hidden), x_proj)
    if alpha is None or beta is None:
        if internal:
            raise ValueError(f"alpha: expected (B, T, {internal}) depth gates, got None")
        alpha = beta = x_proj.new_zeros(batch, steps, 0)
    checks.check_tensor("alpha", alpha, (batch, steps, internal), x_proj)
    checks.check_tensor("beta", beta, (batch, steps, internal), x_proj)
    if res is not None:
        checks.check_tensor("res", res, (batch, steps, hidden), x_proj)
    h0 = checks.state("h0", h0, batch, hidden, x_proj)
    lengths = checks.checked_lengths(lengths, batch, steps, x_proj)
    dtype = checks.compute_dtype(x_proj)
    xp, w, a, b, r, h = checks.cast((x_proj, weight_hh, alpha, beta, res, h0), dtype)
    return (xp, w, a, b, r, h), lengths


metagross_state_sequences = plural(CELL, OP, _arguments, metagross_state_sequence)
