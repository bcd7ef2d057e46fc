"""A METAGROSS tree's passes over a sequence (METAGROSS paper section 2).

A tree of maximum depth ``L`` holds ``2^L - 1`` units in heap order (the root is node 0, node
``k``'s children ``2k+1`` and ``2k+2``); its ``3N`` base functions are laid out level-major
(:mod:`ctrlrnn.ops.metagross_layout`, which the kernels share). The functions below compute a
tree's pass from the parameters of a :class:`~ctrlrnn.nn.metagross.MetagrossUnit` (``unit``):
the base functions' pre-activations (:func:`base_preactivations`), the soft depth gates
(:func:`depth_gates`), and the whole pass in either reading (:func:`forward_input_gates`,
:func:`forward_as_printed`); :mod:`ctrlrnn.nn.metagross` gives the equations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_choice
from ctrlrnn.nn.weight_drop import drop_weight
from ctrlrnn.ops.cached_linear import cached_linear, cached_linear_grouped
from ctrlrnn.ops.fused_cells import gru_sequences, lstm_sequences, metagross_state_sequences
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.metagross_level.input_tree import applies as tree_applies
from ctrlrnn.ops.metagross_level.input_tree import input_tree
from ctrlrnn.ops.metagross_level.layout import level_columns, level_slice
from ctrlrnn.ops.padding import length_mask

BASES = ("linear", "lstm", "gru")
DEPTH_GATES = ("token", "static", "scalar")
RECURRENCES = ("h", "c")
GATES = ("input", "state")


def check_gates(gates: str, recurrence: str) -> str:
    """Validated ``gates``; ``"state"`` (section 2 as printed) exists with ``recurrence="h"``
    only (the ``c_{t-1}`` form comes from the authors' later code, whose gates read ``x_t``)."""
    gates = check_choice("gates", gates, GATES)
    if gates == "state" and recurrence != "h":
        raise ValueError(
            "recurrence: gates='state' is section 2 as printed, whose recurrence reads h_{t-1} "
            "(recurrence='h'); the c_{t-1} form belongs to the authors' later code, whose gates "
            "read x_t only (gates='input')"
        )
    return gates


def base_preactivations(
    unit: nn.Module,
    x: Tensor,
    lengths: Tensor | None,
    base_state: Tensor | None,
    weight_drop: float = 0.0,
) -> tuple[list[Tensor], Tensor | None, Tensor | None]:
    """``F^*_k(x_t)`` of all of ``unit``'s base functions, one block ``(B, T, 3*k*H)`` per level.

    Blocks are listed root level first, each in the level-major order of
    :func:`~ctrlrnn.ops.metagross_layout.base_index`. Linear base (section 2.2): one GEMM per level
    (no split or concatenation of a single large output, whose backward would copy it again), into a
    cached output block on CPU (:func:`~ctrlrnn.ops.cached_linear.cached_linear`); the root level's
    GEMM also yields the token depth-gate logits (returned second, ``(B, T, 2I)``, else None). RNN
    base: one GEMM for the input projections of all ``3N`` RNNs, then each RNN's recurrence on the
    fused-cell engine, from zero states (the paper) or from ``base_state`` ``(B, base_state_size)``;
    the third result is the RNNs' final states (None for the linear base). ``weight_drop``:
    DropConnect on the base RNNs' ``base_weight_hh`` in training (:mod:`ctrlrnn.nn.weight_drop`).
    """
    B, T, _ = x.shape
    N, H, L = unit.num_nodes, unit.hidden_size, unit.depth
    rows = [level_columns(n, H) for n in range(1, L + 1)]  # each level's rows, root first
    if unit.base == "linear":
        blocks: list[Tensor] = []
        logits = None
        for n, (r0, r1) in enumerate(rows, 1):
            w = unit.weight[r0:r1]
            b = None if unit.bias is None else unit.bias[r0:r1]
            if n == 1 and (unit.depth_gate == "token" and unit.depth_weight is not None):
                assert unit.depth_weight is not None
                w = torch.cat([w, unit.depth_weight])
                if b is not None and unit.depth_bias is not None:
                    b = torch.cat([b, unit.depth_bias])
                proj = cached_linear(x, w, b)
                block, logits = proj.split([3 * H, 2 * unit.num_internal], -1)
                blocks.append(block)
            else:
                blocks.append(cached_linear(x, w, b))
        return blocks, logits, None
    K = 3 * N
    # (K, B, T, G * H) with G = unit.base_gates: each RNN's input projection contiguous, as
    # the cell kernels read it
    proj = cached_linear_grouped(x, unit.base_weight_ih, unit.base_bias_ih, K)
    per = 2 if unit.base == "lstm" else 1
    st = None if base_state is None else base_state.view(B, K, per, H)
    base_weight_hh = drop_weight(unit.base_weight_hh, weight_drop, unit.training)
    # the K base RNNs are independent recurrences over the same batch: one call runs them all
    # (on CPU concurrently where one cannot fill the threads)
    outs: list[Tensor] = []
    finals: list[Tensor] = []
    if unit.base == "lstm":
        calls = [{"x_proj": proj[k], "weight_hh": base_weight_hh[k],
                  "h0": None if st is None else st[:, k, 0],
                  "c0": None if st is None else st[:, k, 1]} for k in range(K)]  # fmt: skip
        for h_seq, _c_seq, h_last, c_last in lstm_sequences(calls, lengths):
            outs.append(h_seq)
            finals.append(torch.stack([h_last, c_last], 1))
    else:
        calls = [{"x_proj": proj[k], "weight_hh": base_weight_hh[k],
                  "bias_hh": None if unit.base_bias_hh is None else unit.base_bias_hh[k],
                  "h0": None if st is None else st[:, k, 0]} for k in range(K)]  # fmt: skip
        for h_seq, h_last in gru_sequences(calls, lengths):
            outs.append(h_seq)
            finals.append(h_last.unsqueeze(1))
    blocks = [
        torch.cat(outs[r0 // H : r1 // H], -1) for r0, r1 in rows
    ]
    return blocks, None, torch.stack(finals, 1).reshape(B, K * per * H)


def linear_base_products(unit: nn.Module, x: Tensor) -> tuple[list[Tensor], list[Tensor | None]]:
    """The linear base's ``W x_t`` of each level (one GEMM per level into a cached output
    block, ``(B, T, 3*k*H)``, root level first) and each level's bias ``(3*k*H,)`` (None without
    biases), for :func:`ctrlrnn.ops.metagross_level.metagross_level` to add inside its kernels
    (section 2.2: ``F = W x_t + b``): no pass over the GEMM's output to put the bias in, nor one
    over its gradient to sum the bias's gradient out."""
    H, L = unit.hidden_size, unit.depth
    rows = [level_columns(n, H) for n in range(1, L + 1)]  # each level's rows, root first
    blocks = [cached_linear(x, unit.weight[r0:r1]) for r0, r1 in rows]
    biases = [None if unit.bias is None else unit.bias[r0:r1] for r0, r1 in rows]
    return blocks, biases


def depth_gates(
    unit: nn.Module, x: Tensor, lengths: Tensor | None, logits: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``alpha``, ``beta`` ``(B, T, I)`` in ``[0, 1]`` (section 2.1) for the internal nodes.

    ``logits``: the token gate's pre-activations when the caller already has them.
    """
    B, T, _ = x.shape
    I = unit.num_internal
    if I == 0:
        empty = x.new_zeros(B, T, 0)
        return empty, empty
    if unit.depth_gate == "token":
        if logits is None:
            logits = F.linear(x, unit.depth_weight, unit.depth_bias)
        g = torch.sigmoid(logits)
    elif unit.depth_gate == "static":
        xs = x if lengths is None else x * length_mask(lengths, T).unsqueeze(-1).to(x)
        total = xs.sum(1, keepdim=True)  # sum_{t} x_t over the valid steps
        g = torch.sigmoid(F.linear(total, unit.depth_weight, unit.depth_bias))
        g = g.expand(B, T, 2 * I)
    else:
        assert unit.depth_logit is not None
        g = torch.sigmoid(unit.depth_logit).expand(B, T, 2 * I)
    return g[..., :I], g[..., I:]


def residual(unit: nn.Module, x: Tensor) -> Tensor | None:
    """The residual of eq 2-6: ``x`` (projected when ``D != H``), or None without one."""
    if not unit.residual:
        return None
    return x if unit.residual_weight is None else F.linear(x, unit.residual_weight)


def _one_node(unit: nn.Module, x: Tensor) -> bool:
    """Whether :func:`forward_input_gates` runs the tree as one autograd node
    (:func:`ctrlrnn.ops.metagross_input_tree.input_tree`): a linear base, token depth gates
    (or none, at depth 1), a residual that is ``x`` itself or none, on the eager CPU path."""
    if unit.base != "linear" or unit.residual_weight is not None:
        return False
    if unit.num_internal > 0 and (unit.depth_gate != "token" or unit.depth_weight is None):
        return False
    return tree_applies(x, unit.weight, unit.bias, unit.depth_weight, unit.depth_bias)


def forward_input_gates(
    unit: nn.Module,
    x: Tensor,
    lengths: Tensor | None = None,
    state: Tensor | None = None,
    base_state: Tensor | None = None,
    weight_drop: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:
    """``gates="input"``: level by level from the leaves up, all gates of a level for all
    steps at once and its units' scans in one fused pass (module docstring); the arguments and
    results of :meth:`MetagrossUnit.forward <ctrlrnn.nn.metagross.MetagrossUnit.forward>`."""
    B, T, _ = x.shape
    H, L = unit.hidden_size, unit.depth
    x = x.contiguous()  # read by several GEMMs
    if _one_node(unit, x):  # the whole tree as one autograd node (ops/metagross_input_tree.py)
        out, last, alpha, beta = input_tree(
            x, unit.weight, unit.bias, unit.depth_weight, unit.depth_bias, state, lengths, L, H,
            unit.recurrence == "h", unit.residual,
        )  # fmt: skip
        return out, last, None, alpha, beta
    biases: list[Tensor | None]
    if unit.base == "linear":  # W x_t per level; the levels add b themselves
        blocks, biases = linear_base_products(unit, x)
        logits, base_last = None, None
    else:
        blocks, logits, base_last = base_preactivations(unit, x, lengths, base_state, weight_drop)
        biases = [None] * L
    alpha, beta = depth_gates(unit, x, lengths, logits)
    res: Tensor | None = None
    if unit.residual:
        res = x if unit.residual_weight is None else F.linear(x, unit.residual_weight)
        res = res.unsqueeze(2)
    h_form = unit.recurrence == "h"
    child: Tensor | None = None  # outputs (B, T, 2k, H) of the level below
    finals: list[Tensor] = []
    for level in range(L, 0, -1):
        sl = level_slice(level)
        k = sl.stop - sl.start
        Pn = blocks[level - 1].view(B, T, 3, k, H)
        a_ = b_ = ch = None
        if child is not None:  # eq 2-1, 2-2 mix the children with the base
            ch = child.view(B, T, k, 2, H)
            a_, b_ = alpha[..., sl].unsqueeze(-1), beta[..., sl].unsqueeze(-1)
        s0 = None if state is None else state[:, sl.start * H : sl.stop * H]
        # eq 2-1..2-6 for the k units of this level, gates and scan in one pass: "h" form
        # h_t = o(1-f) h_{t-1} + o f z (+ x_t); "c" form c_t = (1-f) c_{t-1} + f z,
        # h_t = o c_t (+ x_t). Outputs (B, T, k*H) are zero past each length.
        child, s_last = metagross_level(
            Pn, ch, a_, b_, res, s0, lengths, h_form, bias=biases[level - 1]
        )
        finals.append(s_last)
    assert child is not None
    last = torch.cat(finals[::-1], dim=1)
    return child, last, base_last, alpha, beta


def forward_as_printed(
    unit: nn.Module, x: Tensor, lengths: Tensor | None, state: Tensor | None,
    base_state: Tensor | None, weight_drop: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:  # fmt: skip
    """``gates="state"`` (section 2 as printed): the input parts of all ``3N`` base maps
    for all steps at once (one GEMM, depth-gate rows included, or the base RNNs), then the
    fused recurrence of the whole tree (:mod:`ctrlrnn.nn.metagross`). ``state``: the root's
    ``(B, H)``."""
    arguments, base_last, alpha, beta = printed_arguments(
        unit, x, lengths, state, base_state, weight_drop
    )
    out, last = metagross_state_sequences([arguments], lengths)[0]
    return out, last, base_last, alpha, beta


def printed_arguments(
    unit: nn.Module, x: Tensor, lengths: Tensor | None, state: Tensor | None,
    base_state: Tensor | None, weight_drop: float = 0.0, project: bool = True,
) -> tuple[dict[str, Tensor | None], Tensor | None, Tensor, Tensor]:  # fmt: skip
    """What :func:`forward_as_printed` runs before the fused tree: the keyword arguments of
    :func:`~ctrlrnn.ops.fused_cells.metagross_state_sequence` (but ``lengths``), the base
    RNNs' final states (None for the linear base) and the depth gates ``alpha``, ``beta``.
    The two directions of a layer run their trees in one call from these. ``project=False``
    leaves the linear base's projection ``x_proj`` None, for the caller to make
    (``F.linear(x, unit.weight, unit.bias)``) with the other direction's in one op."""
    x = x.contiguous()
    base_last: Tensor | None = None
    proj: Tensor | None
    if unit.base == "linear":
        # all 3N maps in one GEMM into a cached block (the layer's largest tensor); the
        # depth gates' few rows apart, so the big GEMM keeps its round width 3NH
        proj = cached_linear(x, unit.weight, unit.bias) if project else None
    else:
        blocks, _, base_last = base_preactivations(unit, x, lengths, base_state, weight_drop)
        proj = torch.cat(blocks, -1)
    alpha, beta = depth_gates(unit, x, lengths)
    assert unit.weight_hh is not None
    weight_hh = drop_weight(unit.weight_hh, weight_drop, unit.training)
    arguments = {"x_proj": proj, "weight_hh": weight_hh, "alpha": alpha, "beta": beta,
                 "res": residual(unit, x), "h0": state}  # fmt: skip
    return arguments, base_last, alpha, beta
