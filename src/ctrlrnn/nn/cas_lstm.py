"""Cell-aware Stacked LSTMs (Choi, Kim & Lee, 2019): ``CASLSTM``.

Layer 1 is a plain LSTM (eq 1-6). Every layer ``l > 1`` reads the lower layer's hidden *and*
cell states and adds a vertical forget gate ``g`` (eq 7-13)::

    i, f, g, o = sigmoid(W_* h^{l-1}_t + U_* h^l_{t-1} + b_*)                  (7, 8, 9, 11)
    c~ = tanh(W_c h^{l-1}_t + U_c h^l_{t-1} + b_c)                              (10)
    c^l_t = i c~ + (1 - lambda) f c^l_{t-1} + lambda g c^{l-1}_t                (12)
    h^l_t = o tanh(c^l_t)                                                       (13)

Variant (iii) (``peephole=True``, eq 17-18) computes ``g`` from peepholes instead of ``U_g``:
``g = sigmoid(W_g h^{l-1}_t + p_g1 c^l_{t-1} + p_g2 c^{l-1}_t + b_g)`` and, as eq 18 prints it,
``c^l_t = i c~ + f c^l_{t-1} + g c^{l-1}_t``.

Each layer is one GEMM over all steps for its input projections followed by the fused-cell
engine (:func:`~ctrlrnn.ops.fused_cells.lstm_sequence` for layer 1,
:func:`~ctrlrnn.ops.fused_cells.cas_lstm_sequence` above); the layers interact through the cell
sequence ``c^{l-1}``, so :meth:`CASLSTM._run_stack` is overridden. Bi-CAS-LSTM (section 3.3) is a
second, independent stack on the reversed sequence, concatenated at the top only.
:class:`CASLSTMCell` runs one layer direction step by step (``CASLSTM.cell(layer, direction)``).
See docs/cas_lstm.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.arguments import check_flag, check_positive_int
from ctrlrnn.nn.base import RecurrentBase, State
from ctrlrnn.nn.cas_lambda import (
    LambdaArg,
    fill_lambda_vector,
    lambda_setting,
    layer_lambda,
    register_lambda_vector,
)
from ctrlrnn.nn.cas_steps import lambda_operands, stack_by_steps
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.registry import BenchRow, register_unit
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.nn.weight_drop import check_weight_drop, drop_weight
from ctrlrnn.ops import cell_step_grads, cell_steps, cells_ref
from ctrlrnn.ops.cached_linear import cached_linear, cached_linear_each
from ctrlrnn.ops.fused_cells import (
    cas_lstm_sequence,
    cas_lstm_sequences,
    lstm_sequence,
    lstm_sequences,
)
from ctrlrnn.ops.padding import reverse_padded
from ctrlrnn.ops.validation import step_input


def _check_hidden_size(hidden_size: Any, num_layers: int) -> int:
    """One width for all layers: layers ``l > 1`` need ``d_l = d_{l-1}`` (section 3.2)."""
    if isinstance(hidden_size, int) and not isinstance(hidden_size, bool):
        return check_positive_int("hidden_size", hidden_size)
    if isinstance(hidden_size, Sequence) and not isinstance(hidden_size, str):
        sizes = [check_positive_int("hidden_size", h) for h in hidden_size]
        if len(sizes) != num_layers:
            raise ValueError(
                f"hidden_size: expected an int or {num_layers} per-layer widths "
                f"(num_layers={num_layers}), got {list(hidden_size)}"
            )
        if len(set(sizes)) != 1:
            raise ValueError(
                f"hidden_size: CAS-LSTM layers l > 1 read the lower layer's cell state, so they "
                f"need d_l = d_(l-1) (CAS-LSTM paper eq 7-13): all layers must have one width, got "
                f"{sizes}"
            )
        return sizes[0]
    raise ValueError(f"hidden_size: expected a positive integer, got {hidden_size!r}")


class CASLayer(nn.Module):
    """The weights of one CAS-LSTM layer in one direction, with the paper's single bias.

    Layer 1 (``vertical=False``): ``weight_ih`` ``(4H, d_0)``, ``weight_hh`` ``(4H, H)``,
    ``bias`` ``(4H,)``, gate blocks ``(i, f, c~, o)``: ``(d_0 + H + 1) 4H`` parameters.
    Layers ``l > 1``: five blocks ``(i, f, c~, o, g)``, ``(H + H + 1) 5H`` parameters (the
    paper's footnote 1); with ``peephole`` ``weight_hh`` has no ``U_g`` block ``(4H, H)`` and
    ``peephole`` ``(2, H)`` holds ``(p_g1, p_g2)`` of eq 17. ``lambda_logit`` ``(H,)`` exists
    for a trainable lambda, ``lambda = sigmoid(lambda_logit)``, in (0, 1).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        vertical: bool,
        bias: bool,
        peephole: bool,
        trainable_lambda: bool,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.vertical = vertical
        g = 5 if vertical else 4
        g_h = 4 if (not vertical or peephole) else 5
        self.weight_ih = nn.Parameter(torch.empty(g * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(g_h * hidden_size, hidden_size))
        self.bias: nn.Parameter | None = (
            nn.Parameter(torch.empty(g * hidden_size)) if bias else None
        )
        self.peephole: nn.Parameter | None = (
            nn.Parameter(torch.empty(2, hidden_size)) if vertical and peephole else None
        )
        self.lambda_logit: nn.Parameter | None = (
            nn.Parameter(torch.zeros(hidden_size)) if vertical and trainable_lambda else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for name, p in self.named_parameters():
            if name == "lambda_logit":
                nn.init.zeros_(p)  # lambda = 0.5, the paper's constant
            else:
                nn.init.uniform_(p, -bound, bound)


class CASLSTMCell(Traceable, nn.Module):
    """One CAS-LSTM layer direction, step by step: eq 1-6 for the first layer, eq 7-13 (with
    variant (iii)'s eq 17-18) above it. It returns ``(h, (h, c))``, as ``nn.LSTMCell``'s
    ``(h, c)`` with the output first.

    ``forward(input, lower_c=None, state=None)``: ``input`` is the layer's input at step
    ``t``, ``h^{l-1}_t`` (``x_t`` for the first layer); ``lower_c`` is the lower layer's cell
    ``c^{l-1}_t``, which a ``vertical`` cell needs and the first layer's refuses. Stepping a
    stack's cells layer by layer, each layer's cell state the next one's ``lower_c``, gives the
    outputs of :class:`CASLSTM` with the same weights (``CASLSTM.cell(layer, direction)``
    shares them); the layer's ``weight_drop`` does not apply here (as in evaluation).

    Args:
        input_size: the width of ``input``: the lower layer's width above the first layer.
        hidden_size: the width ``H`` of ``h`` and ``c``.
        vertical: a layer above the first (eq 7-13): five gate blocks and the vertical forget
            gate ``g`` reading ``lower_c``; False: the first layer, a plain LSTM (eq 1-6).
        bias: whether the gates have biases.
        lambda_: the weight of eq 12, as :class:`CASLSTM`'s (a vertical cell's).
        peephole: variant (iii), eq 17-18, as :class:`CASLSTM`'s (a vertical cell's).
        layer: the :class:`CASLayer` whose weights to use (its sizes, ``vertical`` and
            peepholes are then the cell's); new weights when None.

    Attributes:
        weights.weight_ih: the input weights ``W``, gate rows ``(i, f, c~, o)`` and, in a
            ``vertical`` cell, ``g`` (eq 9), of shape ``(G * hidden_size, input_size)``: ``G`` =
            5 (``vertical``) or 4.
        weights.weight_hh: the recurrent weights ``U``, of shape
            ``(G * hidden_size, hidden_size)`` (``(4 * hidden_size, hidden_size)`` with
            ``peephole=True``).
        weights.bias: one bias per gate, of shape ``(G * hidden_size,)``.
        weights.lambda_logit: ``theta`` of ``lambda = sigmoid(theta)``
            (``lambda_="trainable"``), of shape ``(hidden_size,)``.
        weights.peephole: ``[p_g1; p_g2]`` of eq 17 (``peephole=True``), of shape
            ``(2, hidden_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import CASLSTMCell
        >>> first = CASLSTMCell(4, 8, vertical=False)  # layer 1 reads x_t
        >>> second = CASLSTMCell(8, 8)  # layer 2 reads h^1_t and c^1_t
        >>> s1 = s2 = None
        >>> for x_t in torch.randn(5, 3, 4):  # five steps of a batch of 3
        ...     h1, s1 = first(x_t, state=s1)
        ...     h2, s2 = second(h1, lower_c=s1[1], state=s2)
        >>> h2.shape, s2[1].shape
        (torch.Size([3, 8]), torch.Size([3, 8]))
    """

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        vertical: bool = True,
        bias: bool = True,
        lambda_: LambdaArg = "auto",
        peephole: bool = False,
        layer: CASLayer | None = None,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        peephole = check_flag("peephole", peephole)
        if layer is not None:
            peephole = layer.peephole is not None
        self.lambda_: float | str | None
        self.lambda_, vector = lambda_setting(lambda_, peephole, hidden_size)
        register_lambda_vector(self, vector)
        if layer is None:
            layer = CASLayer(input_size, hidden_size, vertical=check_flag("vertical", vertical),
                             bias=check_flag("bias", bias), peephole=peephole,
                             trainable_lambda=self.lambda_ == "trainable")  # fmt: skip
        elif tuple(layer.weight_ih.shape[1:]) != (input_size,) or \
                layer.hidden_size != hidden_size:
            raise ValueError(f"layer: expected the weights of a layer of input_size={input_size} "
                             f"and hidden_size={hidden_size}")
        self.weights = layer

    @property
    def vertical(self) -> bool:
        """Whether the cell is a layer above the first (reads ``lower_c``)."""
        return self.weights.vertical

    def reset_parameters(self) -> None:
        """Initialises the weights again (:meth:`CASLayer.reset_parameters`, shared with the
        layer they came from, if any) and restores a constant ``lambda_`` vector."""
        self.weights.reset_parameters()
        fill_lambda_vector(self)

    def lambda_value(self) -> float | Tensor | None:
        """The lambda of eq 12 the cell uses: float, ``(H,)`` tensor or None."""
        return layer_lambda(self.weights, self.lambda_, self.lambda_vector)

    def forward(
        self, input: Tensor, lower_c: Tensor | None = None,
        state: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One step; returns ``(h, (h, c))``: the output and the new state, as ``nn.LSTMCell``
        returns ``(h, c)``.

        Args:
            input: the layer's input at step ``t``, ``(B, input_size)`` or unbatched
                ``(input_size,)``: ``x_t`` for the first layer, ``h^{l-1}_t`` above it.
            lower_c: the lower layer's cell ``c^{l-1}_t`` at the same step, ``(B,
                hidden_size)`` (``(hidden_size,)`` unbatched); required by a ``vertical`` cell,
                refused by the first layer's.
            state: ``(h, c)`` of step ``t - 1``, each ``(B, hidden_size)``
                (``(hidden_size,)`` unbatched); zeros when None.

        Returns:
            h: the output ``h_t``, ``(B, hidden_size)`` (``(hidden_size,)`` unbatched).
            state: ``(h_t, c_t)``, to pass back as ``state`` (``c_t`` is the next layer's
                ``lower_c``).
        """
        w = self.weights
        x, unbatched = step_input(input, self.input_size, w.weight_ih)
        B, H = x.shape[0], self.hidden_size
        if state is None:
            h, c = x.new_zeros(B, H), x.new_zeros(B, H)
        else:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError("state: expected a tuple (h, c)")
            h, c = (s.unsqueeze(0) if unbatched else s for s in state)
            for name, s in (("h", h), ("c", c)):
                if tuple(s.shape) != (B, H):
                    raise ValueError(f"state: expected {name} of shape {(B, H)}, "
                                     f"got {tuple(s.shape)}")
        if not w.vertical:
            if lower_c is not None:
                raise ValueError("lower_c: the first layer's cell (vertical=False) reads no "
                                 "lower cell")
            low, lam = None, None
        else:
            if not isinstance(lower_c, Tensor):
                raise ValueError("lower_c: a layer above the first reads the lower layer's cell "
                                 f"c^(l-1)_t, a ({B}, {H}) tensor")
            low = lower_c.unsqueeze(0) if unbatched else lower_c
            if tuple(low.shape) != (B, H):
                raise ValueError(f"lower_c: expected shape {(B, H)}, got {tuple(low.shape)}")
            lam = self.lambda_value()
        vec, value, mode = lambda_operands(lam)
        operands = (x, h, c, low, w.weight_ih, w.weight_hh, w.bias, vec, w.peephole)
        ext = cell_steps.kernels(*operands, graph=True)
        if ext is not None and cell_step_grads.records_graph(*operands):
            # the whole step as one autograd node (ops/cell_step_grads)
            h, c = cell_step_grads.caslstm_step_train(ext, x, h, c, low, w.weight_ih,
                                                      w.weight_hh, w.bias, vec, value, mode,
                                                      w.peephole)  # fmt: skip
        elif ext is not None:  # the whole step as one op (caslstm_cell_step_ref its twin)
            h, c = ext.caslstm_cell_step(x, h, c, low, w.weight_ih, w.weight_hh, w.bias, vec,
                                         value, mode, w.peephole)
        else:
            h, c = self._written_out_step(x, h, c, low, lam)
        if unbatched:
            return h[0], (h[0], c[0])
        return h, (h, c)

    def _written_out_step(self, x: Tensor, h: Tensor, c: Tensor, low: Tensor | None,
                          lam: float | Tensor | None) -> tuple[Tensor, Tensor]:
        """One step with tensor ops: eq 1-6 without ``low``, else eq 7-13 (and 17)."""
        w = self.weights
        x_proj = F.linear(x, w.weight_ih, w.bias)
        if low is None:
            return cells_ref.lstm_step(x_proj, w.weight_hh, h, c)  # type: ignore[no-any-return]
        H = self.hidden_size
        if lam is None:
            scale_g = x.new_ones(H)
            scale_f = scale_g
        else:
            scale_g = (lam.to(x.dtype) if isinstance(lam, Tensor)
                       else x.new_tensor(float(lam))).expand(H)
            scale_f = 1 - scale_g
        return cells_ref.cas_lstm_step(x_proj, w.weight_hh, low, h, c, scale_f,  # type: ignore[no-any-return]
                                       scale_g, w.peephole)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, vertical={self.vertical}"
        if self.vertical:
            s += f", lambda_={self.lambda_!r}"
            if self.weights.peephole is not None:
                s += ", peephole=True"
        return s


@register_unit(
    "caslstm",
    description="Cell-aware stacked LSTM (CAS-LSTM paper)",
    options={"lambda_": (float | str | None, "auto"), "peephole": (bool, False)},
    cell=CASLSTMCell,
    bench=[BenchRow(
        "caslstm",
        "ctrlrnn.CASLSTM, 2 layers (layer 2: 5 gate blocks and the vertical gate)",
        # layer 1 an LSTM, layer 2 five gate blocks, each over [x_t, h_{t-1}]
        gemms=lambda C: [(2 * C, 4 * C), (2 * C, 5 * C)],
        # layer 1 an LSTM cell; layer 2 also reads the lower cell (forward) and writes its
        # gradient (backward)
        values=lambda C: [(C, 7, 10), (C, 9, 13)],
        options={"num_layers": 2},
        grid="target",
        compare_to=("lstm2",),
    )],
)
class CASLSTM(RecurrentBase):
    """Cell-aware stacked LSTM with the ``torch.nn.LSTM`` interface; it returns
    ``(output, (h_n, c_n))`` exactly as ``nn.LSTM`` does.

    ``h_n`` and ``c_n`` are ``(num_layers * num_directions, B, hidden_size)``, layer-major;
    ``hx`` takes the same ``(h_0, c_0)`` pair.

    Args:
        input_size: the width of the input's features, as in :class:`torch.nn.LSTM`.
        hidden_size: the width ``d`` of every layer, or a list of ``num_layers`` widths, which
            must all be equal: layers ``l > 1`` need ``d_l = d_{l-1}`` (section 3.2); any other
            list raises ``ValueError``.
        num_layers: the number of stacked layers; layers ``l > 1`` also read the cell state of
            the layer below (eq 7-13).
        bias: whether the gates have biases.
        batch_first: ``input`` and ``output`` as ``(B, T, ...)`` instead of ``(T, B, ...)``
            (the states stay ``(num_layers * num_directions, B, H)``, as in ``nn.LSTM``).
        dropout: dropout on the hidden states passed up between layers, in training only (not
            on the cell states of the vertical connection).
        bidirectional: Bi-CAS-LSTM (section 3.3): a second stack reads the reversed sequence;
            the two top layers' outputs are concatenated. Layers of each stack read only their
            own stack's lower layer (unlike a bidirectional ``nn.LSTM``).
        lambda_: the weight of eq 12. A number (any value; the paper uses 0.25, 0.5, 0.75), a
            sequence or tensor of ``hidden_size`` numbers (a constant vector), ``"trainable"``
            (a per-layer, per-direction vector ``sigmoid(theta)`` in (0, 1), ``theta = 0`` at
            start), ``None`` (the plain sum ``f c_{t-1} + g c^{l-1}_t``, variant (ii)), or
            ``"auto"`` (default): 0.5, the paper's choice, and ``None`` with ``peephole=True``
            so that variant (iii) is eq 18 as printed.
        peephole: variant (iii), eq 17-18: the vertical gate reads peepholes ``p_g1 c_{t-1}``
            and ``p_g2 c^{l-1}_t`` instead of ``U_g h_{t-1}``.
        weight_drop: DropConnect probability ``p`` on every layer's recurrent matrix
            ``weight_hh`` (the ``U`` of eq 1-4 and 7-11; not the peepholes) as AWD-LSTM applies
            it (:mod:`ctrlrnn.nn.weight_drop`): in training each forward call draws one fresh
            mask per matrix, shared by all time steps, the kept weights scaled by
            ``1 / (1 - p)``; in evaluation the weights as they are.

    ``caslstm.layer(l, d)`` is the :class:`CASLayer` of layer ``l`` (0-based) in direction
    ``d``.

    Attributes:
        layers[k].weight_ih: the input weights ``W`` of layer ``k // num_directions`` in
            direction ``k % num_directions``, gate rows ``(i, f, c~, o)`` and, in layers
            ``l > 1``, ``g`` (eq 9), of shape ``(4 * hidden_size, input_size)`` for the first
            layer, ``(5 * hidden_size, hidden_size)`` above.
        layers[k].weight_hh: the recurrent weights ``U``, of shape
            ``(4 * hidden_size, hidden_size)`` for the first layer and with ``peephole=True``,
            ``(5 * hidden_size, hidden_size)`` otherwise.
        layers[k].bias: one bias per gate, of shape ``(4 * hidden_size,)`` for the first
            layer, ``(5 * hidden_size,)`` above.
        layers[k].lambda_logit: ``theta`` of ``lambda = sigmoid(theta)``
            (``lambda_="trainable"``, layers ``l > 1``), of shape ``(hidden_size,)``.
        layers[k].peephole: ``[p_g1; p_g2]`` of eq 17 (``peephole=True``, layers ``l > 1``),
            of shape ``(2, hidden_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import CASLSTM
        >>> lstm = CASLSTM(input_size=4, hidden_size=8, num_layers=2, batch_first=True)
        >>> output, (h_n, c_n) = lstm(torch.randn(3, 5, 4))
        >>> output.shape, h_n.shape, c_n.shape
        (torch.Size([3, 5, 8]), torch.Size([2, 3, 8]), torch.Size([2, 3, 8]))
    """

    state_names = ("h", "c")

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int | Sequence[int],
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        lambda_: LambdaArg = "auto",
        peephole: bool = False,
        weight_drop: float = 0.0,
    ) -> None:
        layers = check_positive_int("num_layers", num_layers)
        width = _check_hidden_size(hidden_size, layers)
        super().__init__(input_size, width, layers, bias, batch_first, dropout, bidirectional)
        self.peephole = check_flag("peephole", peephole)
        self.weight_drop = check_weight_drop(weight_drop)
        self.lambda_: float | str | None
        self.lambda_, vector = lambda_setting(lambda_, self.peephole, width)
        register_lambda_vector(self, vector)
        self.layers = nn.ModuleList(
            CASLayer(
                self.layer_input_size(layer),
                width,
                vertical=layer > 0,
                bias=bias,
                peephole=self.peephole,
                trainable_lambda=self.lambda_ == "trainable",
            )
            for layer in range(layers)
            for _ in range(self.num_directions)
        )

    def forward(
        self,
        input: Tensor | PackedSequence,
        hx: tuple[Tensor, Tensor] | None = None,
        lengths: Tensor | None = None,
    ) -> tuple[Tensor | PackedSequence, tuple[Tensor, Tensor]]:
        """Run the stack; returns ``(output, (h_n, c_n))``, as ``nn.LSTM`` does.

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            hx: ``(h_0, c_0)``, each ``(num_layers * num_directions, B, hidden_size)``
                (``(num_layers * num_directions, hidden_size)`` unbatched); zeros when None.
                A returned ``(h_n, c_n)`` passed back continues the sequences.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, and ``h_n``, ``c_n`` are
                taken at each true length.

        Returns:
            output: the top layer's ``h_t`` at every step, ``(T, B, num_directions *
                hidden_size)`` (``(B, T, ...)`` with ``batch_first``, ``(T, ...)`` unbatched,
                packed for packed input), zeros past each length (bidirectional: the two
                stacks' top layers concatenated).
            state: ``(h_n, c_n)``, each ``(num_layers * num_directions, B, hidden_size)``,
                layer-major, the forward direction first, as ``nn.LSTM``'s.

        Examples:
            >>> import torch
            >>> from ctrlrnn import CASLSTM
            >>> lstm = CASLSTM(input_size=4, hidden_size=8, num_layers=2)
            >>> output, (h_n, c_n) = lstm(torch.randn(5, 3, 4))  # as nn.LSTM
            >>> output.shape, h_n.shape, c_n.shape
            (torch.Size([5, 3, 8]), torch.Size([2, 3, 8]), torch.Size([2, 3, 8]))
        """
        out, state = super().forward(input, hx, lengths)
        assert isinstance(state, tuple)
        return out, (state[0], state[1])

    def layer_input_size(self, layer: int) -> int:
        """Layer 1 reads the input; each upper layer reads its own stack's lower layer only."""
        return self.input_size if layer == 0 else self.hidden_size

    def layer(self, layer: int, direction: int = 0) -> CASLayer:
        """The :class:`CASLayer` of ``layer`` (0-based) in ``direction`` (0 fw, 1 bw)."""
        return self.layers[layer * self.num_directions + direction]

    def reset_parameters(self) -> None:
        """As :meth:`RecurrentBase.reset_parameters`, and restores a constant ``lambda_``
        vector."""
        super().reset_parameters()
        fill_lambda_vector(self)

    def lambda_value(self, layer: int, direction: int = 0) -> float | Tensor | None:
        """The lambda of eq 12 used by ``layer`` (> 0): float, ``(H,)`` tensor or None."""
        return layer_lambda(self.layer(layer, direction), self.lambda_, self.lambda_vector)

    def cell(self, layer: int, direction: int = 0) -> CASLSTMCell:
        """A :class:`CASLSTMCell` sharing the weights and the lambda of ``layer`` (0-based) in
        ``direction``."""
        lambda_: LambdaArg = self.lambda_
        if self.lambda_ == "vector":
            lambda_ = self.lambda_vector
        return CASLSTMCell(self.layer_input_size(layer), self.hidden_size, lambda_=lambda_,
                           layer=self.layer(layer, direction))

    def _run_stack(
        self, x: Tensor, lengths: Tensor | None, states: State | None, **kwargs: Any
    ) -> tuple[Tensor, State]:
        """Each direction's stack, layer by layer: eq 1-6 for layer 1, eq 7-13 (17-18) above.

        Direction 1 runs on each sequence reversed within its own length (Bi-CAS-LSTM); the top
        layers' outputs are concatenated. The two directions' stacks never interact, so each
        layer runs in both as one call of the fused-cell engine (``*_sequences``: concurrently
        on CPU where one direction cannot fill the threads).
        """
        by_steps = stack_by_steps(self, x, lengths, states)
        if by_steps is not None:
            return by_steps
        L, D = self.num_layers, self.num_directions
        finals_h: list[Tensor | None] = [None] * (L * D)
        finals_c: list[Tensor | None] = [None] * (L * D)
        x = x.contiguous()  # a time-major input arrives as a transposed view
        h_in = [x if d == 0 else reverse_padded(x, lengths) for d in range(D)]
        lower_c: list[Tensor] = []
        for layer in range(L):
            calls = []  # the directions' stacks are independent: one call runs the layer in both
            ws = [self.layer(layer, d) for d in range(D)]
            # all steps of both directions in one op, stacked as the cells take them
            projs = cached_linear_each(h_in, [w.weight_ih for w in ws], [w.bias for w in ws])
            for d in range(D):
                idx = layer * D + d
                w = ws[d]
                call: dict[str, Any] = {
                    "x_proj": projs[d],
                    "weight_hh": drop_weight(w.weight_hh, self.weight_drop, self.training),
                    "h0": None if states is None else states[0][idx],
                    "c0": None if states is None else states[1][idx],
                }
                if layer > 0:  # (item by item: torch 2.4's dynamo cannot trace dict.update)
                    call["lower_c"] = lower_c[d]
                    call["lambda_"] = self.lambda_value(layer, d)
                    call["peephole"] = w.peephole
                calls.append(call)
            results = (lstm_sequences if layer == 0 else cas_lstm_sequences)(calls, lengths)
            lower_c, h_in = [], []
            for d, (h_seq, c_seq, h_last, c_last) in enumerate(results):
                finals_h[layer * D + d], finals_c[layer * D + d] = h_last, c_last
                lower_c.append(c_seq)
                if layer + 1 < L and self.dropout > 0 and self.training:
                    h_seq = F.dropout(h_seq, self.dropout, training=True)
                h_in.append(h_seq)
        outs = [h if d == 0 else reverse_padded(h, lengths) for d, h in enumerate(h_in)]
        out = outs[0] if D == 1 else torch.cat(outs, dim=-1)
        return out, [torch.stack(finals_h, 0), torch.stack(finals_c, 0)]  # type: ignore[arg-type]

    @torch.no_grad()
    def vertical_gates(self, input: Tensor, lengths: Tensor | None = None) -> list[Tensor]:
        """The vertical forget gate ``g`` (eq 9; eq 17 with peepholes) of every layer above the
        first, for the CAS-LSTM paper figure 4: one ``(D, B, T, H)`` tensor per layer ``l > 1``
        (batch-first, forward direction first), zero past each length.

        Recomputed from each layer's own inputs and outputs, so the layer runs as usual.
        """
        x, lens, _packed, _unbatched = self._prepare_input(input, lengths)
        gates: list[list[Tensor]] = [[] for _ in range(self.num_layers - 1)]
        for d in range(self.num_directions):
            h_in = x if d == 0 else reverse_padded(x, lens)
            lower_c: Tensor | None = None
            for layer in range(self.num_layers):
                w = self.layer(layer, d)
                x_proj = cached_linear(h_in, w.weight_ih, w.bias)
                if layer == 0:
                    h_seq, c_seq, _, _ = lstm_sequence(x_proj, w.weight_hh, None, None, lens)
                else:
                    assert lower_c is not None
                    h_seq, c_seq, _, _ = cas_lstm_sequence(
                        x_proj, w.weight_hh, lower_c, None, None, lens,
                        lambda_=self.lambda_value(layer, d), peephole=w.peephole)
                    H = self.hidden_size
                    h_prev = F.pad(h_seq, (0, 0, 1, 0))[:, :-1]
                    c_prev = F.pad(c_seq, (0, 0, 1, 0))[:, :-1]
                    pre = x_proj[..., 4 * H :]
                    if w.peephole is None:
                        pre = pre + F.linear(h_prev, w.weight_hh[4 * H :])
                    else:
                        pre = pre + w.peephole[0] * c_prev + w.peephole[1] * lower_c
                    g = torch.sigmoid(pre)
                    if lens is not None:
                        mask = (torch.arange(x.shape[1]).unsqueeze(0)
                                < lens.unsqueeze(1)).to(g.device)
                        g = g * mask.unsqueeze(-1).to(g.dtype)
                    gates[layer - 1].append(g if d == 0 else reverse_padded(g, lens))
                lower_c, h_in = c_seq, h_seq
        return [torch.stack(per_dir, 0) for per_dir in gates]

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", lambda_={self.lambda_!r}"
        if self.peephole:
            s += ", peephole=True"
        if self.weight_drop:
            s += f", weight_drop={self.weight_drop}"
        return s
