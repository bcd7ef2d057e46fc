"""Meta Gated Recursive Controller units (METAGROSS paper section 2): ``Metagross``, its cell
and its tree's parameters (``MetagrossUnit``; the tree's layout and passes over a sequence are
in :mod:`ctrlrnn.nn.metagross_tree`).

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

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.arguments import check_choice, check_flag, check_positive_int
from ctrlrnn.nn.base import DirectionCall, RecurrentBase, State
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.metagross_tree import (
    BASES,
    DEPTH_GATES,
    GATES,
    RECURRENCES,
    check_gates,
    printed_arguments,
)
from ctrlrnn.nn.metagross_unit import MetagrossCell, MetagrossUnit, tree_step
from ctrlrnn.nn.registry import BenchRow, register_unit
from ctrlrnn.nn.weight_drop import check_weight_drop, refuse_weight_drop
from ctrlrnn.ops.fused_cells import metagross_state_sequences
from ctrlrnn.ops.metagross_level.layout import base_index, level_slice, tree_nodes
from ctrlrnn.ops.padding import length_mask, reverse_padded

# Defined in metagross_unit, named here (their module until they moved) so that whole-module
# pickles keep one class path: ``torch.load(weights_only=True)`` allows a class by that path.
MetagrossUnit.__module__ = MetagrossCell.__module__ = __name__

__all__ = ["BASES", "DEPTH_GATES", "GATES", "RECURRENCES", "Metagross", "MetagrossCell",
           "MetagrossUnit", "base_index", "check_gates", "level_slice", "tree_nodes"]


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
    """METAGROSS layer stack (section 2) with the ``torch.nn.LSTM`` contract; it returns
    ``(output, h_n)``, ``h_n`` one tensor ``(2^depth - 1) * hidden_size`` wide (every tree
    unit's state), not ``(h_n, c_n)``.

    ``h_n`` holds every tree unit's carried state, root first (``h_n[..., :hidden_size]`` is the
    root's); with an RNN ``base`` it is a tuple ``(tree, base)``. Unpack as ``output, h_n =
    layer(x)``: written ``output, (h, c) = layer(x)``, a two-layer ``h_n`` splits by layer
    without an error (as ``nn.GRU``'s would), and an RNN base's pair into ``(tree, base)``.

    Args:
        input_size: the width of the input's features, as in :class:`torch.nn.LSTM`.
        hidden_size: the width ``H`` of each unit's state and of each direction's output.
        num_layers: the number of stacked layers, each reading the one below.
        bias: whether the base maps and depth gates have biases.
        batch_first: ``input`` and ``output`` as ``(B, T, ...)`` instead of ``(T, B, ...)``
            (the state stays ``(num_layers * num_directions, B, ...)``, as in ``nn.LSTM``).
        dropout: dropout on each layer's output but the last's, in training only.
        bidirectional: a second direction reads each sequence backwards; the output
            concatenates both, ``2 * hidden_size`` wide.
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

    Attributes:
        units[k].weight: the linear base maps ``W x_t + b`` (``base="linear"``) of the tree of
            layer ``k // num_directions`` in direction ``k % num_directions``: the ``F``, ``O``
            and ``Z`` maps of its ``N = 2^depth - 1`` units, level by level (each level
            ``[F | O | Z]`` of its units, heap order), of shape ``(3 * N * hidden_size,
            input_size_l)``; ``input_size_l`` = ``input_size`` for the first layer,
            ``num_directions * hidden_size`` above.
        units[k].bias: their biases, of shape ``(3 * N * hidden_size,)``.
        units[k].base_weight_ih: the base RNNs' input weights (``base="lstm"`` or ``"gru"``:
            one RNN per map, in the maps' order, ``torch.nn.LSTMCell``/``GRUCell`` layout), of
            shape ``(3 * N * G * hidden_size, input_size_l)``, ``G`` = 4 or 3.
        units[k].base_bias_ih: of shape ``(3 * N * G * hidden_size,)``.
        units[k].base_weight_hh: the base RNNs' recurrent weights, of shape
            ``(3 * N, G * hidden_size, hidden_size)``.
        units[k].base_bias_hh: the GRU bases' recurrent biases, of shape
            ``(3 * N, G * hidden_size)``.
        units[k].weight_hh: the maps ``U^g_k h_{t-1}`` of every gate (``gates="state"``), of
            shape ``(3 * N * hidden_size, hidden_size)``.
        units[k].depth_weight: the depth gates ``alpha``, ``beta`` of the
            ``I = 2^(depth-1) - 1`` internal units (``depth_gate="token"`` or ``"static"``), of
            shape ``(2 * I, input_size_l)``.
        units[k].depth_bias: their biases, of shape ``(2 * I,)``.
        units[k].depth_logit: the depth gates' logits (``depth_gate="scalar"``), of shape
            ``(2 * I,)``.
        units[k].residual_weight: the projection ``W_r`` of the residual (``residual=True``
            with ``input_size_l != hidden_size``), of shape ``(hidden_size, input_size_l)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import Metagross
        >>> layer = Metagross(input_size=4, hidden_size=8, depth=2, batch_first=True)
        >>> output, h_n, (alpha, beta) = layer(torch.randn(3, 5, 4), return_gates=True)
        >>> output.shape, h_n.shape  # h_n: the 2^2 - 1 = 3 units' states, root first
        (torch.Size([3, 5, 8]), torch.Size([1, 3, 24]))
        >>> alpha.shape  # (layers * directions, batch, time, internal units)
        torch.Size([1, 3, 5, 1])
    """

    graph_steps = (2, 1_000_000)  # (a linear base: :mod:`ctrlrnn.ops.cell_step_grads`)

    @factory_arguments
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
        """Run the stack; returns ``(output, h_n)``, ``h_n`` the tree's states ``(L*D, B,
        (2^depth - 1) * hidden_size)`` where ``nn.LSTM`` returns ``(h_n, c_n)``.

        ``L*D`` is ``num_layers * num_directions``. Unpack as ``output, h_n = layer(x)``.

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            hx: the initial state in the layout of ``h_n`` (below; the batch axis dropped for
                unbatched input); zeros when None. An ``h_n`` passed back continues the
                sequences exactly.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, and ``h_n`` is taken at
                each true length.
            return_gates: also return the depth gates ``(alpha, beta)`` (section 3.6.2).

        Returns:
            output (Tensor | PackedSequence): the last layer's root output at every step, ``(T,
                B, num_directions * hidden_size)`` (``(B, T, ...)`` with ``batch_first``,
                ``(T, ...)`` unbatched, packed for packed input), zeros past each length.
            h_n (Tensor | tuple[Tensor, Tensor]): every unit's carried state (``h`` or ``c``,
                by ``recurrence``) in heap order, root first: ``(L*D, B, (2^depth - 1) *
                hidden_size)``, so ``h_n[..., :hidden_size]`` is the root's. With
                ``gates="state"`` only the root's ``h``, ``(L*D, B, hidden_size)``. With
                ``base="lstm"``/``"gru"`` a tuple ``(tree, base)``, ``base`` the base RNNs'
                states ``(L*D, B, base_state_size)``.
            gates (tuple[Tensor, Tensor]): only with ``return_gates=True``, as a third
                element: ``(alpha, beta)``, each ``(L*D, B, T, I)`` (``(L*D, T, B, I)``
                time-major unless ``batch_first``; zeros past each length), over the ``I =
                2^(depth-1) - 1`` internal units in heap order.

        Examples:
            >>> import torch
            >>> from ctrlrnn import Metagross
            >>> layer = Metagross(input_size=4, hidden_size=8, num_layers=2, depth=2)
            >>> output, h_n = layer(torch.randn(5, 3, 4))  # one state, not (h_n, c_n)
            >>> output.shape, h_n.shape  # h_n: 2 layers, the 3 units' states each
            (torch.Size([5, 3, 8]), torch.Size([2, 3, 24]))
        """
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

    def _direction_call(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> DirectionCall | None:
        """As printed (``gates="state"``): the direction's tree as one recurrence of the
        fused cell, so both directions of a layer run in one call."""
        if self.gates != "state":
            return None
        unit = self.unit(layer, direction)
        tree0 = None if state is None else state[0]
        base0 = None if state is None or len(state) < 2 else state[1]
        linear = unit.base == "linear"  # its projection made with the other direction's
        arguments, base_last, alpha, beta = printed_arguments(
            unit, x, lengths, tree0, base0, self.weight_drop, project=not linear
        )
        record = kwargs.get("gate_record")

        def finish(out: tuple[Tensor, ...]) -> tuple[Tensor, State]:
            if record is not None:
                record.append((alpha, beta))
            return out[0], [out[1]] if base_last is None else [out[1], base_last]

        projection = (x.contiguous(), unit.weight, unit.bias) if linear else None
        return DirectionCall(metagross_state_sequences, arguments, finish, projection)

    def _steps_of_direction(
        self, layer: int, direction: int, xs: list[Tensor], state: State | None, **kwargs: Any
    ) -> tuple[list[Tensor], State] | None:
        """Eq 2-1..2-6 of the whole tree per step as one op (``metagross_cell_step``, or
        ``metagross_printed_step`` as printed, as :class:`MetagrossCell`): a linear base,
        token depth gates, no projected residual, and no gate record asked for."""
        if kwargs.get("gate_record") is not None:
            return None
        unit = self.unit(layer, direction)
        tree = (xs[0].new_zeros(xs[0].shape[0], unit.tree_state_size) if state is None
                else state[0])  # fmt: skip
        step = tree_step(unit, xs[0], tree)  # (the parameters read, the operands checked)
        if step is None:  # a tree the op does not serve
            return None
        hs: list[Tensor] = []
        for x_t in xs:
            got = step(x_t, tree)
            hs.append(got[0])
            tree = got[1]
        return hs, [tree]

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
