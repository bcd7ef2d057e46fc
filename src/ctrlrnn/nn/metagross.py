"""Meta Gated Recursive Controller units (METAGROSS paper section 2): ``Metagross``.

Two readings of the paper, chosen by ``gates``:

* ``gates="input"`` (default; section 2.2's ``F_n(x_t) = W x_t + b`` and the authors' later public
  code): no gate reads a METAGROSS state, so each unit is a diagonal linear scan (below);
* ``gates="state"`` (section 2 as printed): every base map reads ``(x_t, h_{t-1})`` and the
  children are called on the caller's ``(x_t, h_{t-1})``, a nonlinear recurrence run by the fused
  cell :func:`~ctrlrnn.ops.fused_cells.metagross_state_sequence` (section "As printed" below).

The unit of level ``n`` (section 2; ``sig`` the sigmoid, ``tanh`` the paper's sigma_r), as
``gates="input"`` reads it::

    f^n_t = sig(alpha_t M^F_{n+1,t} + (1 - alpha_t) F^F_n(x_t))        (2-1)
    o^n_t = sig(beta_t  M^O_{n+1,t} + (1 - beta_t)  F^O_n(x_t))        (2-2)
    z^n_t = tanh(F^Z_n(x_t))                                           (2-3)
    c^n_t = (1 - f^n_t) h^n_{t-1} + f^n_t z^n_t                        (2-4)
    h^n_t = o^n_t c^n_t                                                (2-5)
    h^n_t = h^n_t + x_t          (optional residual)                   (2-6)

and at the maximum depth ``L`` simply ``f^L_t = sig(F^F_L(x_t))``, ``o^L_t = sig(F^O_L(x_t))``.
``M^F_{n+1}`` and ``M^O_{n+1}`` are two *separate* instances of the level-``n+1`` unit (the
"left" and "right" gates of the paper's figures), so depth ``L`` is a binary tree of
``2^L - 1`` units, each with its own parameters and its own recurrent state. Nodes are numbered
in heap order: the root is node 0, node ``k``'s forget-gate child is ``2k+1`` and its
output-gate child ``2k+2``; level ``n`` (1-based) holds nodes ``2^(n-1)-1 .. 2^n-2``.

Nothing in any gate reads a METAGROSS state: the base functions ``F`` are linear maps of
``x_t`` or RNNs over ``x`` with their *own* states (section 2.2), and the children are separate
units. Hence, level by level from the leaves up, every gate is computed for all steps at once
and each unit's recurrence is a diagonal linear scan ``s_t = a_t s_{t-1} + b_t``:

* ``recurrence="h"`` (as printed, eq 2-4..2-6; the carried state is the unit's output ``h``,
  residual included): ``a_t = o_t (1 - f_t)``, ``b_t = o_t f_t z_t (+ x_t)``, output ``s_t``;
* ``recurrence="c"`` (the ``c_{t-1}`` form of the authors' later public code; the carried
  state is ``c``): ``c_t = (1 - f_t) c_{t-1} + f_t z_t``, so ``a_t = 1 - f_t``,
  ``b_t = f_t z_t``, output ``h_t = o_t c_t (+ x_t)``.

All units of one level run as one GEMM for all their projections (the root level's also holds
the depth gates) and one fused level op (:func:`ctrlrnn.ops.metagross_level.metagross_level`:
gates and scan over the level's concatenated channels in one pass over time, forward and
backward, in compiled C++ on CPU): a layer direction costs ``L`` GEMMs and ``L`` level passes,
with no Python loop over time.

As printed (``gates="state"``): with ``s = h_{t-1}`` the root's previous output (residual
included), for every unit ``k`` of the tree ``F^g_k(x_t, s) = W^g_k x_t + U^g_k s + b^g_k``
(linear base; ``weight_hh`` holds all ``U``) or ``RNN^g_k(x)_t + U^g_k s`` (RNN base: the base
RNN of section 2.2 over ``x_t`` with its own zero-initialised state, plus the map of ``s``), and::

    f_k = sig(alpha M^F_{n+1}(x_t, s) + (1 - alpha) F^F_k(x_t, s))      (2-1)
    o_k = sig(beta  M^O_{n+1}(x_t, s) + (1 - beta)  F^O_k(x_t, s))      (2-2)
    z_k = tanh(F^Z_k(x_t, s))     (the printed F^Z(x_t, h_t) can only mean the previous state:
                                   h_t is what the step computes)        (2-3)
    c_k = (1 - f_k) s + f_k z_k,  h_k = o_k c_k (+ x_t)                  (2-4..2-6)

The children are the same functions one level down, evaluated on the same ``(x_t, s)``; the
only carried state is the root's ``h`` (``(B, H)`` per layer direction), and the recurrence is
nonlinear in it (only ``recurrence="h"``, the printed one, exists in this reading).

Soft dynamic recursion (section 2.1), ``depth_gate``: ``"token"``: ``alpha_t = sig(W_a x_t +
b_a)`` per token and internal node (a scalar each, as in the paper's figures), likewise
``beta_t``; ``"static"``: the same maps applied to ``sum_t x_t`` over the whole (valid)
sequence, so it sees the future and is refused for causal use; ``"scalar"``: one trainable
``alpha``, ``beta`` per internal node. The paper's ``F_alpha`` is linear and unbounded; the
sigmoid bounds the mixing weights to ``[0, 1]`` as the soft-depth reading requires.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.arguments import check_choice, check_flag, check_positive_int
from ctrlrnn.nn.base import RecurrentBase, State
from ctrlrnn.nn.registry import BenchRow, register_unit
from ctrlrnn.nn.weight_drop import check_weight_drop, drop_weight, refuse_weight_drop
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.cells_ref import metagross_maps
from ctrlrnn.ops.fused_cells import gru_sequence, lstm_sequence, metagross_state_sequence
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.padding import length_mask, reverse_padded

BASES = ("linear", "lstm", "gru")
DEPTH_GATES = ("token", "static", "scalar")
RECURRENCES = ("h", "c")
GATES = ("input", "state")


def tree_nodes(depth: int) -> int:
    """Units in a METAGROSS tree of maximum depth ``depth``: ``2^depth - 1``."""
    return 2**depth - 1


def level_slice(level: int) -> slice:
    """Heap indices of the units at ``level`` (1-based): ``2^(level-1)-1 .. 2^level-2``."""
    return slice(2 ** (level - 1) - 1, 2**level - 1)


def base_index(gate: int, node: int) -> int:
    """Index of base function ``F^gate_node`` (gate 0 F, 1 O, 2 Z) in the level-major layout.

    Levels follow each other from the root down; inside level ``n`` (nodes ``s .. s+k-1`` with
    ``s = 2^(n-1) - 1``, ``k = 2^(n-1)``) come the ``k`` F maps, then the ``k`` O maps, then the
    ``k`` Z maps, so one level's pre-activations are one contiguous block ``(3, k, H)``.
    """
    return metagross_maps(node)[gate]


class MetagrossUnit(nn.Module):
    """One METAGROSS tree (one layer, one direction): all nodes' parameters and the forward.

    Parameters (``N = 2^depth - 1`` nodes, ``I = 2^(depth-1) - 1`` internal nodes, ``H`` hidden),
    all ``3N`` base functions in the level-major order of :func:`base_index`:

    * linear base: ``weight`` ``(3*N*H, D)`` and ``bias`` ``(3*N*H,)``: rows
      ``base_index(g, k) * H ...`` hold ``W^g_k``, ``b^g_k``;
    * RNN base (``G = 4`` for LSTM, ``3`` for GRU, torch gate order): RNN ``j = base_index(g,
      k)`` has ``base_weight_ih[j*G*H : (j+1)*G*H]`` ``(G*H, D)``, ``base_bias_ih`` likewise (for
      LSTM ``b_ih + b_hh`` in one), ``base_weight_hh[j]`` ``(G*H, H)`` and for GRU
      ``base_bias_hh[j]`` ``(3H,)``;
    * ``depth_weight`` ``(2I, D)`` and ``depth_bias`` ``(2I,)``: ``[alpha | beta]`` maps of the
      internal nodes in heap order (``"token"``, ``"static"``), or ``depth_logit`` ``(2I,)``
      (``"scalar"``);
    * ``residual_weight`` ``(H, D)``: only when ``residual`` and ``D != H`` (a projection
      shortcut; the paper adds ``x_t`` itself, which needs ``D == H``);
    * ``weight_hh`` ``(3*N*H, H)``: only with ``gates="state"``, the maps ``U^g_k`` of the
      previous state, rows in the order of ``weight`` (``base_index(g, k) * H ...``).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        depth: int = 2,
        base: str = "linear",
        depth_gate: str = "token",
        residual: bool = True,
        recurrence: str = "h",
        bias: bool = True,
        gates: str = "input",
    ) -> None:
        super().__init__()
        self.gates = check_gates(gates, recurrence)
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.depth = check_positive_int("depth", depth)
        self.base = check_choice("base", base, BASES)
        self.depth_gate = check_choice("depth_gate", depth_gate, DEPTH_GATES)
        self.recurrence = check_choice("recurrence", recurrence, RECURRENCES)
        self.residual = check_flag("residual", residual)
        D, H = input_size, hidden_size
        N = self.num_nodes = tree_nodes(depth)
        I = self.num_internal = tree_nodes(depth - 1)
        self.depth_weight: nn.Parameter | None = None
        self.depth_bias: nn.Parameter | None = None
        self.depth_logit: nn.Parameter | None = None
        if base == "linear":
            self.weight = nn.Parameter(torch.empty(3 * N * H, D))
            self.bias = nn.Parameter(torch.empty(3 * N * H)) if bias else None
        else:
            G = self.base_gates
            K = 3 * N
            self.base_weight_ih = nn.Parameter(torch.empty(K * G * H, D))
            self.base_bias_ih = nn.Parameter(torch.empty(K * G * H)) if bias else None
            self.base_weight_hh = nn.Parameter(torch.empty(K, G * H, H))
            self.base_bias_hh = (
                nn.Parameter(torch.empty(K, G * H)) if bias and base == "gru" else None
            )
        if I > 0 and depth_gate in ("token", "static"):
            self.depth_weight = nn.Parameter(torch.empty(2 * I, D))
            self.depth_bias = nn.Parameter(torch.empty(2 * I)) if bias else None
        if I > 0 and depth_gate == "scalar":
            self.depth_logit = nn.Parameter(torch.empty(2 * I))
        self.residual_weight = (
            nn.Parameter(torch.empty(H, D)) if self.residual and D != H else None
        )
        self.weight_hh = (
            nn.Parameter(torch.empty(3 * N * H, H)) if self.gates == "state" else None
        )
        self.reset_parameters()

    @property
    def base_gates(self) -> int:
        """Gate blocks of one base RNN (4 for LSTM, 3 for GRU, 0 for the linear base)."""
        return {"linear": 0, "lstm": 4, "gru": 3}[self.base]

    @property
    def tree_state_size(self) -> int:
        """Width of the tree's carried state: every unit's ``(2^L - 1) * H`` with
        ``gates="input"``, the root's ``H`` with ``gates="state"``."""
        return self.hidden_size if self.gates == "state" else self.num_nodes * self.hidden_size

    @property
    def base_state_size(self) -> int:
        """Width of the carried state of all base RNNs together (``h`` and, for LSTM, ``c``)."""
        per = {"linear": 0, "lstm": 2, "gru": 1}[self.base]
        return 3 * self.num_nodes * per * self.hidden_size

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)
        if self.residual_weight is not None:
            nn.init.uniform_(self.residual_weight, -1 / math.sqrt(self.input_size),
                             1 / math.sqrt(self.input_size))  # fmt: skip

    # ------------------------------------------------------------------ pieces
    def _token_gate_rows(self) -> bool:
        return self.depth_gate == "token" and self.depth_weight is not None

    def base_preactivations(
        self,
        x: Tensor,
        lengths: Tensor | None,
        base_state: Tensor | None,
        weight_drop: float = 0.0,
    ) -> tuple[list[Tensor], Tensor | None, Tensor | None]:
        """``F^*_k(x_t)`` of all base functions, one block ``(B, T, 3*k*H)`` per level.

        Blocks are listed root level first, each in the level-major order of
        :func:`base_index`. Linear base (section 2.2): one GEMM per level (no split or
        concatenation of a single large output, whose backward would copy it again), into a
        cached output block on CPU (:func:`~ctrlrnn.ops.cached_linear.cached_linear`); the
        root level's GEMM also yields the token depth-gate logits (returned second,
        ``(B, T, 2I)``, else None). RNN base: one GEMM for the input projections of all ``3N``
        RNNs, then each RNN's recurrence on the fused-cell engine, from zero states (the paper)
        or from ``base_state`` ``(B, base_state_size)``; the third result is the RNNs' final
        states (None for the linear base). ``weight_drop``: DropConnect on the base RNNs'
        ``base_weight_hh`` in training (:mod:`ctrlrnn.nn.weight_drop`).
        """
        B, T, _ = x.shape
        N, H, L = self.num_nodes, self.hidden_size, self.depth
        bounds = [3 * H * (2 ** (n - 1) - 1) for n in range(1, L + 2)]  # rows per level
        if self.base == "linear":
            blocks: list[Tensor] = []
            logits = None
            for n in range(1, L + 1):
                w = self.weight[bounds[n - 1] : bounds[n]]
                b = None if self.bias is None else self.bias[bounds[n - 1] : bounds[n]]
                if n == 1 and self._token_gate_rows():
                    assert self.depth_weight is not None
                    w = torch.cat([w, self.depth_weight])
                    if b is not None and self.depth_bias is not None:
                        b = torch.cat([b, self.depth_bias])
                    proj = cached_linear(x, w, b)
                    block, logits = proj.split([3 * H, 2 * self.num_internal], -1)
                    blocks.append(block)
                else:
                    blocks.append(cached_linear(x, w, b))
            return blocks, logits, None
        K, G = 3 * N, self.base_gates
        proj = F.linear(x, self.base_weight_ih, self.base_bias_ih).view(B, T, K, G * H)
        proj = proj.permute(2, 0, 1, 3).contiguous()  # (K, B, T, G*H), each RNN contiguous
        per = 2 if self.base == "lstm" else 1
        st = None if base_state is None else base_state.view(B, K, per, H)
        base_weight_hh = drop_weight(self.base_weight_hh, weight_drop, self.training)
        outs: list[Tensor] = []
        finals: list[Tensor] = []
        for k in range(K):
            if self.base == "lstm":
                h0 = None if st is None else st[:, k, 0]
                c0 = None if st is None else st[:, k, 1]
                h_seq, _c_seq, h_last, c_last = lstm_sequence(
                    proj[k], base_weight_hh[k], h0, c0, lengths
                )
                finals.append(torch.stack([h_last, c_last], 1))
            else:
                h0 = None if st is None else st[:, k, 0]
                bhh = None if self.base_bias_hh is None else self.base_bias_hh[k]
                h_seq, h_last = gru_sequence(proj[k], base_weight_hh[k], bhh, h0, lengths)
                finals.append(h_last.unsqueeze(1))
            outs.append(h_seq)
        blocks = [
            torch.cat(outs[bounds[n - 1] // H : bounds[n] // H], -1) for n in range(1, L + 1)
        ]
        return blocks, None, torch.stack(finals, 1).reshape(B, K * per * H)

    def depth_gates(
        self, x: Tensor, lengths: Tensor | None, logits: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``alpha``, ``beta`` ``(B, T, I)`` in ``[0, 1]`` (section 2.1) for the internal nodes.

        ``logits``: the token gate's pre-activations when the caller already has them.
        """
        B, T, _ = x.shape
        I = self.num_internal
        if I == 0:
            empty = x.new_zeros(B, T, 0)
            return empty, empty
        if self.depth_gate == "token":
            if logits is None:
                logits = F.linear(x, self.depth_weight, self.depth_bias)
            g = torch.sigmoid(logits)
        elif self.depth_gate == "static":
            xs = x if lengths is None else x * length_mask(lengths, T).unsqueeze(-1).to(x)
            total = xs.sum(1, keepdim=True)  # sum_{t} x_t over the valid steps
            g = torch.sigmoid(F.linear(total, self.depth_weight, self.depth_bias))
            g = g.expand(B, T, 2 * I)
        else:
            assert self.depth_logit is not None
            g = torch.sigmoid(self.depth_logit).expand(B, T, 2 * I)
        return g[..., :I], g[..., I:]

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: Tensor,
        lengths: Tensor | None = None,
        state: Tensor | None = None,
        base_state: Tensor | None = None,
        weight_drop: float = 0.0,
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:
        """Run the tree over batch-first ``x`` ``(B, T, D)``.

        Args:
            state: ``(B, N*H)`` the units' carried states in heap order (``h`` or ``c``,
                per ``recurrence``); zeros when None.
            base_state: ``(B, base_state_size)`` the base RNNs' states; zeros when None.
            weight_drop: DropConnect probability on the recurrent matrices (``weight_hh``
                with ``gates="state"``, the base RNNs' ``base_weight_hh``) in training: one
                mask per matrix for the whole sequence (:mod:`ctrlrnn.nn.weight_drop`).

        Returns:
            ``(output, last_state, last_base_state, alpha, beta)``: the root's output
            ``(B, T, H)`` (zero past each length), the final carried states ``(B, N*H)``, the
            base RNNs' final states (None for the linear base), and the depth gates
            ``(B, T, I)``.
        """
        if self.gates == "state":
            return self._forward_state(x, lengths, state, base_state, weight_drop)
        B, T, _ = x.shape
        H, L = self.hidden_size, self.depth
        x = x.contiguous()  # read by several GEMMs
        blocks, logits, base_last = self.base_preactivations(
            x, lengths, base_state, weight_drop
        )
        alpha, beta = self.depth_gates(x, lengths, logits)
        res: Tensor | None = None
        if self.residual:
            res = x if self.residual_weight is None else F.linear(x, self.residual_weight)
            res = res.unsqueeze(2)
        h_form = self.recurrence == "h"
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
            child, s_last = metagross_level(Pn, ch, a_, b_, res, s0, lengths, h_form)
            finals.append(s_last)
        assert child is not None
        last = torch.cat(finals[::-1], dim=1)
        return child, last, base_last, alpha, beta

    def _residual(self, x: Tensor) -> Tensor | None:
        if not self.residual:
            return None
        return x if self.residual_weight is None else F.linear(x, self.residual_weight)

    def _forward_state(
        self, x: Tensor, lengths: Tensor | None, state: Tensor | None,
        base_state: Tensor | None, weight_drop: float = 0.0,
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]:  # fmt: skip
        """``gates="state"`` (section 2 as printed): the input parts of all ``3N`` base maps
        for all steps at once (one GEMM, depth-gate rows included, or the base RNNs), then the
        fused recurrence of the whole tree (module docstring). ``state``: the root's ``(B, H)``."""
        x = x.contiguous()
        base_last: Tensor | None = None
        if self.base == "linear":
            # all 3N maps in one GEMM into a cached block (the layer's largest tensor); the
            # depth gates' few rows apart, so the big GEMM keeps its round width 3NH
            proj = cached_linear(x, self.weight, self.bias)
        else:
            blocks, _, base_last = self.base_preactivations(
                x, lengths, base_state, weight_drop
            )
            proj = torch.cat(blocks, -1)
        alpha, beta = self.depth_gates(x, lengths)
        assert self.weight_hh is not None
        weight_hh = drop_weight(self.weight_hh, weight_drop, self.training)
        out, last = metagross_state_sequence(
            proj, weight_hh, alpha, beta, self._residual(x), state, lengths
        )
        return out, last, base_last, alpha, beta

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, depth={self.depth}, base={self.base!r}, "
            f"depth_gate={self.depth_gate!r}, residual={self.residual}, "
            f"recurrence={self.recurrence!r}, gates={self.gates!r}"
        )


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


class MetagrossCell(nn.Module):
    """One METAGROSS tree (one layer direction) for step-by-step use (decoding).

    ``forward(input, state=None) -> (h, state')`` with ``input`` ``(B, input_size)`` (or
    ``(input_size,)``); ``state`` is the tree's carried states ``(B, (2^L - 1) * H)`` (heap
    order, root first; the root's ``(B, H)`` alone with ``gates="state"``), or ``(tree, base)``
    with an RNN base, zeros when None, exactly the per-layer-direction slice of
    :class:`Metagross`'s ``hx``. Feeding a sequence step by step
    gives the outputs of the layer with the same weights (``Metagross.cell(layer, direction)``
    shares them). ``depth_gate="static"`` reads the whole sequence and is refused here.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        depth: int = 2,
        base: str = "linear",
        depth_gate: str = "token",
        residual: bool = True,
        recurrence: str = "h",
        bias: bool = True,
        gates: str = "input",
        unit: MetagrossUnit | None = None,
    ) -> None:
        super().__init__()
        if unit is None:
            unit = MetagrossUnit(
                input_size, hidden_size, depth=depth, base=base, depth_gate=depth_gate,
                residual=residual, recurrence=recurrence, bias=bias, gates=gates,
            )  # fmt: skip
        if unit.depth_gate == "static":
            raise ValueError(
                "depth_gate: 'static' computes alpha, beta from the whole sequence (section "
                "2.1) and cannot run step by step; use 'token' or 'scalar'"
            )
        self.unit = unit

    def forward(
        self, input: Tensor, state: Tensor | tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor]]:
        u = self.unit
        if not isinstance(input, Tensor) or input.dim() not in (1, 2):
            raise ValueError("input: expected a (B, input_size) or (input_size,) tensor")
        unbatched = input.dim() == 1
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[-1] != u.input_size:
            raise ValueError(f"input: expected input_size={u.input_size}, got {x.shape[-1]}")
        B = x.shape[0]
        rnn = u.base != "linear"
        tree: Tensor | None = None
        base_state: Tensor | None = None
        if state is not None:
            parts = list(state) if isinstance(state, (tuple, list)) else [state]
            if len(parts) != (2 if rnn else 1):
                want = "a tuple (tree, base)" if rnn else "a Tensor"
                raise ValueError(f"state: expected {want}")
            if unbatched:
                parts = [p.unsqueeze(0) for p in parts]
            sizes = [u.tree_state_size, u.base_state_size][: len(parts)]
            for p, size in zip(parts, sizes):
                if tuple(p.shape) != (B, size):
                    raise ValueError(f"state: expected shape {(B, size)}, got {tuple(p.shape)}")
            tree = parts[0]
            base_state = parts[1] if rnn else None
        out, last, base_last, _, _ = u(x.unsqueeze(1), None, tree, base_state)
        h = out[:, 0]
        new: Tensor | tuple[Tensor, Tensor] = last if base_last is None else (last, base_last)
        if unbatched:
            h = h[0]
            new = new[0] if isinstance(new, Tensor) else (new[0][0], new[1][0])
        return h, new


@register_unit(
    "metagross",
    description="METAGROSS recursive controlled unit (METAGROSS paper); model.gates=state is "
                "section 2 as printed (gates reading h_{t-1})",
    options={"depth": (int, 2), "base": (str, "linear"), "depth_gate": (str, "token"),
             "residual": (bool, True), "recurrence": (str, "h"), "gates": (str, "input")},
    cell=MetagrossCell,
    bench=[
        BenchRow(
            "metagross",
            "ctrlrnn.Metagross, depth 2, linear base, token depth gates, residual",
            # depth 2: 3 units of 3 linear maps each, and the 2 depth gates of the one
            # internal node, all from x_t in one GEMM
            gemms=lambda C: [(C, 3 * 3 * C + 2 * 1)],
            # section 2 at depth 2: 14 values per unit forward (56 C bytes in fp32), 28 backward
            values=lambda C: [(C, 14, 28)],
            options={"depth": 2, "base": "linear"},
            grid="target",
        ),
        BenchRow(
            "metagross_state",
            "ctrlrnn.Metagross(gates='state'): as printed, depth 2, linear base, residual",
            # every base map reads (x_t, h_{t-1}): W x for all steps in one GEMM, U h_{t-1}
            # per step
            gemms=lambda C: [(C, 3 * 3 * C + 2 * 1), (C, 3 * 3 * C)],
            # per unit: read the 9 input maps, write the 9 pre-activations saved for backward,
            # read the residual, write h (20 values); backward reads them back with h_{t-1} and
            # the output gradient, writes dP and the residual's gradient (22)
            values=lambda C: [(C, 20, 22)],
            options={"depth": 2, "gates": "state"},
            grid="target",
        ),
    ],
)
class Metagross(RecurrentBase):
    """METAGROSS layer stack (section 2) with the ``torch.nn.LSTM`` contract.

    Args:
        input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional: as
            :class:`torch.nn.LSTM` (``dropout`` between layers).
        depth: maximum recursion depth ``L``; a tree of ``2^L - 1`` units per layer direction.
        base: level-wise base functions ``F`` (section 2.2): ``"linear"`` (``W x_t + b``),
            ``"lstm"`` or ``"gru"`` (one RNN per gate and unit over the input, on the fused-cell
            engine, zero initial states as in the paper).
        depth_gate: ``"token"`` (``alpha_t = sig(W x_t + b)``), ``"static"`` (from
            ``sum_t x_t``; sees the future, needs ``causal=False``) or ``"scalar"``.
        residual: add ``x_t`` to every unit's output (eq 2-6); with ``input_size !=
            hidden_size`` (e.g. the upper layers of a bidirectional stack) a learned projection
            ``W_r x_t`` replaces ``x_t``.
        recurrence: ``"h"`` (as printed: ``c_t = (1-f) h_{t-1} + f z``) or ``"c"``
            (``c_t = (1-f) c_{t-1} + f z``).
        causal: whether the layer is used causally (autoregressive decoding). ``None`` means
            ``not bidirectional``. ``depth_gate="static"`` with ``causal`` raises ``ValueError``.
        gates: ``"input"`` (default: gates from ``x_t``, section 2.2 and the authors' code; each
            unit a linear scan) or ``"state"`` (section 2 as printed: every gate and child reads
            ``(x_t, h_{t-1})``; a nonlinear recurrence on the fused cell; ``recurrence="h"``).
        weight_drop: DropConnect probability ``p`` on the recurrent matrices, as AWD-LSTM
            applies it (:mod:`ctrlrnn.nn.weight_drop`): the maps ``U^g_k`` of ``h_{t-1}``
            (``weight_hh``, ``gates="state"``) and the base RNNs' ``base_weight_hh``
            (``base="lstm"``/``"gru"``). In training each forward call draws one fresh mask
            per layer direction and matrix, shared by all time steps, the kept weights scaled
            by ``1 / (1 - p)``; in evaluation the weights as they are. ``gates="input"`` with
            the linear base has no recurrent matrix: ``weight_drop > 0`` raises ``ValueError``.
            A :class:`MetagrossCell` stepping the same weights does not drop them.

    ``forward(input, hx=None, lengths=None, return_gates=False)``. The state ``hx``/``h_n``
    holds every unit's carried state (``h`` or ``c``) in heap order, root first:
    ``(num_layers * num_directions, B, (2^L - 1) * hidden_size)``, so ``h_n[..., :H]`` is the
    root's; with ``gates="state"`` only the root's ``h`` is carried, ``(L*D, B, hidden_size)``.
    With an RNN base it is a tuple ``(tree, base)`` whose second entry holds the base
    RNNs' states ``(L*D, B, base_state_size)``. With ``return_gates=True`` the result is
    ``(output, h_n, (alpha, beta))``, each ``(num_layers * num_directions, B, T, I)``
    (time-major ``(L*D, T, B, I)`` unless ``batch_first``; zeros past each length) over the
    ``I = 2^(L-1) - 1`` internal units in heap order, for the figures of section 3.6.2.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        depth: int = 2,
        base: str = "linear",
        depth_gate: str = "token",
        residual: bool = True,
        recurrence: str = "h",
        causal: bool | None = None,
        gates: str = "input",
        weight_drop: float = 0.0,
    ) -> None:
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional
        )
        self.depth = check_positive_int("depth", depth)
        self.base = check_choice("base", base, BASES)
        self.depth_gate = check_choice("depth_gate", depth_gate, DEPTH_GATES)
        self.recurrence = check_choice("recurrence", recurrence, RECURRENCES)
        self.gates = check_gates(gates, self.recurrence)
        self.weight_drop = check_weight_drop(weight_drop)
        if self.gates == "input" and self.base == "linear":
            refuse_weight_drop(
                self.weight_drop, "Metagross(gates='input', base='linear')",
                "its gates read x_t only, each unit a linear scan; gates='state' or an RNN "
                "base has one",
            )  # fmt: skip
        self.residual = check_flag("residual", residual)
        if causal is not None and not isinstance(causal, bool):
            raise ValueError(f"causal: expected True, False or None, got {causal!r}")
        if causal and bidirectional:
            raise ValueError("causal: a bidirectional layer reads the future; causal=True "
                             "contradicts bidirectional=True")  # fmt: skip
        self.causal = (not self.bidirectional) if causal is None else causal
        if self.depth_gate == "static" and self.causal:
            raise ValueError(
                "causal: depth_gate='static' computes alpha, beta from the sum of the whole "
                "sequence (section 2.1), so it sees the future and cannot be used causally or "
                "for autoregressive decoding; pass causal=False (or bidirectional=True) for a "
                "non-causal encoder, or use depth_gate='token' or 'scalar'"
            )
        self.units = nn.ModuleList(
            MetagrossUnit(
                self.layer_input_size(layer), hidden_size, depth=depth, base=base,
                depth_gate=depth_gate, residual=residual, recurrence=recurrence, bias=bias,
                gates=gates,
            )  # fmt: skip
            for layer in range(num_layers)
            for _ in range(self.num_directions)
        )
        self.num_nodes = tree_nodes(depth)
        self.num_internal = tree_nodes(depth - 1)
        self.state_names = ("tree",) if base == "linear" else ("tree", "base")

    def unit(self, layer: int, direction: int = 0) -> MetagrossUnit:
        """The tree of ``layer`` in ``direction`` (0 forward, 1 backward)."""
        return self.units[layer * self.num_directions + direction]

    def cell(self, layer: int, direction: int = 0) -> MetagrossCell:
        """A :class:`MetagrossCell` sharing the weights of ``layer`` in ``direction``."""
        return MetagrossCell(self.input_size, self.hidden_size, unit=self.unit(layer, direction))

    def state_size(self, index: int) -> int:
        if index == 0:
            return self.units[0].tree_state_size
        return self.units[0].base_state_size

    def forward(  # type: ignore[override]
        self,
        input: Tensor | PackedSequence,
        hx: Tensor | tuple[Tensor, ...] | None = None,
        lengths: Tensor | None = None,
        return_gates: bool = False,
    ) -> Any:
        """Run the stack; see the class docstring for ``return_gates``."""
        return_gates = check_flag("return_gates", return_gates)
        record: list[tuple[Tensor, Tensor]] | None = [] if return_gates else None
        out, h_n = super().forward(input, hx, lengths, gate_record=record)
        if record is None:
            return out, h_n
        alpha = torch.stack([a for a, _ in record], 0)
        beta = torch.stack([b for _, b in record], 0)
        unbatched = isinstance(input, Tensor) and input.dim() == 2
        if unbatched:
            alpha, beta = alpha.squeeze(1), beta.squeeze(1)
        elif not self.batch_first and not isinstance(input, PackedSequence):
            alpha, beta = alpha.transpose(1, 2).contiguous(), beta.transpose(1, 2).contiguous()
        return out, h_n, (alpha, beta)

    def _check_extra(self, x: Tensor, lengths: Tensor | None, kwargs: dict[str, Any]) -> None:
        extra = set(kwargs) - {"gate_record"}
        if extra:
            raise TypeError(f"forward() got unexpected keyword arguments {sorted(extra)}")

    def _run_layer(
        self,
        layer: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        record = kwargs.get("gate_record")
        start = 0 if record is None else len(record)
        out, fin = super()._run_layer(layer, x, lengths, state, **kwargs)
        if record is not None:  # the backward direction's gates back in input order, masked
            mask = None
            if lengths is not None:
                mask = length_mask(lengths.to(x.device), x.shape[1]).unsqueeze(-1).to(x)
            for j in range(start, len(record)):
                a, b = record[j]
                if (j - start) == 1:
                    a, b = reverse_padded(a, lengths), reverse_padded(b, lengths)
                if mask is not None:
                    a, b = a * mask, b * mask
                record[j] = (a, b)
        return out, fin

    def _run_direction(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        unit = self.unit(layer, direction)
        tree0 = None if state is None else state[0]
        base0 = None if state is None or len(state) < 2 else state[1]
        out, last, base_last, alpha, beta = unit(x, lengths, tree0, base0, self.weight_drop)
        record = kwargs.get("gate_record")
        if record is not None:
            record.append((alpha, beta))
        fin = [last] if base_last is None else [last, base_last]
        return out, fin

    def extra_repr(self) -> str:
        return super().extra_repr() + (
            f", depth={self.depth}, base={self.base!r}, depth_gate={self.depth_gate!r}, "
            f"residual={self.residual}, recurrence={self.recurrence!r}, causal={self.causal}, "
            f"gates={self.gates!r}"
        ) + (f", weight_drop={self.weight_drop}" if self.weight_drop else "")
