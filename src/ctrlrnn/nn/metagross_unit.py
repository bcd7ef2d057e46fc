"""METAGROSS's unit (section 2: the recursive tree of gates over one base, a level at a time) and
:class:`MetagrossCell`, one step of it, usable for step-by-step decoding; :class:`Metagross`
(:mod:`ctrlrnn.nn.metagross`) is the layer built on them."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ctrlrnn.nn import metagross_tree as tree
from ctrlrnn.nn.arguments import check_choice, check_flag, check_positive_int
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.metagross_tree import (
    BASES,
    DEPTH_GATES,
    RECURRENCES,
    check_gates,
)
from ctrlrnn.nn.parameter_lookup import parameters
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.ops import cell_step_grads, cell_steps
from ctrlrnn.ops.metagross_level.layout import tree_nodes
from ctrlrnn.ops.validation import step_input


class MetagrossUnit(nn.Module):
    """One METAGROSS tree (one layer, one direction): all nodes' parameters and the forward.

    Parameters (``N = 2^depth - 1`` nodes, ``I = 2^(depth-1) - 1`` internal nodes, ``H`` hidden),
    all ``3N`` base functions in the level-major order of
    :func:`~ctrlrnn.ops.metagross_level.layout.base_index`:

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

    # ------------------------------------------------------------------ the pass
    def base_preactivations(
        self,
        x: Tensor,
        lengths: Tensor | None,
        base_state: Tensor | None,
        weight_drop: float = 0.0,
    ) -> tuple[list[Tensor], Tensor | None, Tensor | None]:
        """``F^*_k(x_t)`` of all base functions, one block ``(B, T, 3*k*H)`` per level, the
        token depth-gate logits and the base RNNs' final states
        (:func:`ctrlrnn.nn.metagross_tree.base_preactivations`)."""
        return tree.base_preactivations(self, x, lengths, base_state, weight_drop)

    def depth_gates(
        self, x: Tensor, lengths: Tensor | None, logits: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``alpha``, ``beta`` ``(B, T, I)`` in ``[0, 1]`` (section 2.1) for the internal nodes
        (:func:`ctrlrnn.nn.metagross_tree.depth_gates`)."""
        return tree.depth_gates(self, x, lengths, logits)

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
                per ``recurrence``); zeros when None. With ``gates="state"``: the root's
                ``(B, H)``.
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
            return tree.forward_as_printed(self, x, lengths, state, base_state, weight_drop)
        return tree.forward_input_gates(self, x, lengths, state, base_state, weight_drop)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, depth={self.depth}, base={self.base!r}, "
            f"depth_gate={self.depth_gate!r}, residual={self.residual}, "
            f"recurrence={self.recurrence!r}, gates={self.gates!r}"
        )


class MetagrossCell(Traceable, nn.Module):
    """One METAGROSS tree (one layer direction) for step-by-step use (decoding); it returns
    ``(h, state)``, ``state`` every unit's state ``(B, (2^depth - 1) * hidden_size)``.

    ``forward(input, state=None) -> (h, state')`` with ``input`` ``(B, input_size)`` (or
    ``(input_size,)``); ``state`` is the tree's carried states ``(B, (2^L - 1) * H)`` (heap
    order, root first; the root's ``(B, H)`` alone with ``gates="state"``), or ``(tree, base)``
    with an RNN base, zeros when None, exactly the per-layer-direction slice of
    :class:`Metagross`'s ``hx``. Feeding a sequence step by step
    gives the outputs of the layer with the same weights (``Metagross.cell(layer, direction)``
    shares them). ``depth_gate="static"`` reads the whole sequence and is refused here.

    Attributes:
        unit.weight: the linear base maps ``W x_t + b`` (``base="linear"``): the ``F``, ``O``
            and ``Z`` maps of the ``N = 2^depth - 1`` units, level by level (each level
            ``[F | O | Z]`` of its units, heap order), of shape
            ``(3 * N * hidden_size, input_size)``.
        unit.bias: their biases, of shape ``(3 * N * hidden_size,)``.
        unit.base_weight_ih: the base RNNs' input weights (``base="lstm"`` or ``"gru"``: one
            RNN per map, in the maps' order, ``torch.nn.LSTMCell``/``GRUCell`` layout), of
            shape ``(3 * N * G * hidden_size, input_size)``, ``G`` = 4 or 3.
        unit.base_bias_ih: of shape ``(3 * N * G * hidden_size,)``.
        unit.base_weight_hh: the base RNNs' recurrent weights, of shape
            ``(3 * N, G * hidden_size, hidden_size)``.
        unit.base_bias_hh: the GRU bases' recurrent biases, of shape
            ``(3 * N, G * hidden_size)``.
        unit.weight_hh: the maps ``U^g_k h_{t-1}`` of every gate (``gates="state"``), of shape
            ``(3 * N * hidden_size, hidden_size)``.
        unit.depth_weight: the depth gates ``alpha``, ``beta`` of the ``I = 2^(depth-1) - 1``
            internal units (``depth_gate="token"``), of shape ``(2 * I, input_size)``.
        unit.depth_bias: their biases, of shape ``(2 * I,)``.
        unit.depth_logit: the depth gates' logits (``depth_gate="scalar"``), of shape
            ``(2 * I,)``.
        unit.residual_weight: the projection ``W_r`` of the residual (``residual=True`` with
            ``input_size != hidden_size``), of shape ``(hidden_size, input_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import MetagrossCell
        >>> cell = MetagrossCell(input_size=4, hidden_size=8, depth=2)
        >>> state = None
        >>> for x_t in torch.randn(5, 3, 4):  # five steps of a batch of 3
        ...     h, state = cell(x_t, state)
        >>> h.shape, state.shape  # the 3 units' states, root first
        (torch.Size([3, 8]), torch.Size([3, 24]))
    """

    @factory_arguments
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

    def reset_parameters(self) -> None:
        """Initialises the tree's weights again (:meth:`MetagrossUnit.reset_parameters`, shared
        with the layer they came from, if any)."""
        self.unit.reset_parameters()

    def forward(
        self, input: Tensor, state: Tensor | tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor]]:
        """One step; returns ``(h, state)``: the root's output and the tree's new state.

        Args:
            input: ``x_t``, ``(B, input_size)`` or unbatched ``(input_size,)``.
            state: the tree's state after step ``t - 1``, zeros when None: every unit's
                carried state in heap order, root first, ``(B, (2^depth - 1) * hidden_size)``
                (the root's ``(B, hidden_size)`` alone with ``gates="state"``); with an RNN
                base a tuple ``(tree, base)``, ``base`` ``(B, base_state_size)``. Unbatched:
                without the batch axis. The per-layer-direction slice of :class:`Metagross`'s
                ``hx``.

        Returns:
            h: the root unit's output ``h_t``, ``(B, hidden_size)`` (``(hidden_size,)``
                unbatched).
            state: the new state, in the layout of ``state``; pass it back.
        """
        u = self.unit
        x, unbatched = step_input(input, u.input_size, None)
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
        fused = fused_tree_step(u, x, tree)
        if fused is not None:  # the whole tree's step as one op
            h, last = fused
            if last is h:  # as printed the state is h: the two results must not share memory
                last = h.clone()
            return (h[0], last[0]) if unbatched else (h, last)
        out, last, base_last, _, _ = u(x.unsqueeze(1), None, tree, base_state)
        h = out[:, 0]
        new: Tensor | tuple[Tensor, Tensor] = last if base_last is None else (last, base_last)
        if unbatched:
            h = h[0]
            new = new[0] if isinstance(new, Tensor) else (new[0][0], new[1][0])
        return h, new


def fused_tree_step(unit: MetagrossUnit, x: Tensor, tree: Tensor | None) -> list[Tensor] | None:
    """Eq 2-1..2-6 for the whole tree as one op (:func:`ctrlrnn.ops.cell_steps.kernels` says
    where; :func:`~ctrlrnn.ops.cell_steps.reference.metagross_cell_step_ref` and, as printed,
    :func:`~ctrlrnn.ops.cell_steps.reference.metagross_printed_step_ref` are its readable
    twins): ``[h, new tree state]``, or None where the tree's written-out pass must run: a
    base other than linear, depth gates other than the token gates, a projected residual.
    Where a graph is recorded the step is one autograd node
    (:func:`ctrlrnn.ops.cell_step_grads.metagross_step_train`)."""
    step = tree_step(unit, x, tree)
    return None if step is None or tree is None else step(x, tree)


def tree_step(unit: MetagrossUnit, x: Tensor, tree: Tensor | None
              ) -> Callable[[Tensor, Tensor], list[Tensor]] | None:  # fmt: skip
    """The step of :func:`fused_tree_step` for inputs like ``x`` and states like ``tree``, its
    parameters read and its operands checked once: a layer's steps call it for each of its
    inputs, every later step's state the op's own output. None where the op does not apply."""
    if tree is None or unit.base != "linear":
        return None
    weight, bias, depth_weight, depth_bias, residual_weight, weight_hh = parameters(
        unit, "weight", "bias", "depth_weight", "depth_bias", "residual_weight", "weight_hh")
    if residual_weight is not None:
        return None
    if unit.num_internal > 0 and (unit.depth_gate != "token" or depth_weight is None):
        return None
    operands = (x, tree, weight, bias, depth_weight, depth_bias, weight_hh)
    ext = cell_steps.kernels(*operands, graph=True)
    if ext is None:
        return None
    depth, residual, printed = unit.depth, unit.residual, unit.gates == "state"
    h_form = unit.recurrence == "h"
    if cell_step_grads.records_graph(*operands):

        def train(x: Tensor, tree: Tensor) -> list[Tensor]:
            got = cell_step_grads.metagross_step_train(
                ext, x, tree, weight, bias, weight_hh, depth_weight, depth_bias, depth, h_form,
                residual)  # fmt: skip
            return got * 2 if printed else got  # (as printed the state is h)

        return train
    if printed:  # section 2 as printed: the root's h is the whole state

        def printed_step(x: Tensor, tree: Tensor) -> list[Tensor]:
            h = ext.metagross_printed_step(x, tree, weight, bias, weight_hh, depth_weight,
                                           depth_bias, depth, residual)  # fmt: skip
            return [h, h]

        return printed_step
    return lambda x, tree: ext.metagross_cell_step(  # type: ignore[no-any-return]
        x, tree, weight, bias, depth_weight, depth_bias, depth, h_form, residual)
