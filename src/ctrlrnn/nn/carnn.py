"""Context-dependent Additive Recurrent Neural Net (Tran et al., 2018): ``CARNN``, its cell.

One context vector ``c`` per sequence controls the two gates of every step (section 3):

    nCARNN (eq 3)  g^u_m = sig(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u)
                   g^f_m = sig(W^c_f c + W^h_f h_{m-1} + W^e_f e_m + b_f)
                   ebar_m = W_e e_m + b_e
                   h_m = g^u_m (g^f_m ebar_m) + (1 - g^u_m) h_{m-1}
    iCARNN (eq 5)  the same without the W^h h_{m-1} terms
    sCARNN (eq 6)  iCARNN with ebar_m = e_m (so hidden_size == input_size)

``W^c c`` is computed once per sequence and broadcast over time. nCARNN's gates read
``h_{m-1}``, so it runs on the fused gated cell (:func:`ctrlrnn.ops.fused_cells.ncarnn_sequence`);
iCARNN and sCARNN compute their gates for all steps with one GEMM and run the diagonal linear
scan ``h_m = a_m h_{m-1} + b_m`` with ``a_m = 1 - g^u_m``, ``b_m = g^u_m g^f_m ebar_m``.

``context_size=None`` drops the ``W^c c`` terms: the context-free nCARNN that encodes the
previous sentence in the contextual language model (section 4.2, eq 11).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.arguments import check_choice, check_positive_int
from ctrlrnn.nn.base import DirectionCall, RecurrentBase, State, run_directions
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.parameter_lookup import parameters
from ctrlrnn.nn.registry import BenchRow, register_unit
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.nn.weight_drop import check_weight_drop, drop_weight, refuse_weight_drop
from ctrlrnn.ops import cell_step_grads, cell_steps
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.fused_cells import ncarnn_sequences
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.validation import step_input

VARIANTS = ("n", "i", "s")


def _check_variant(variant: str) -> str:
    return check_choice("variant", variant, tuple(VARIANTS))


def _check_context_size(context_size: int | None) -> int | None:
    if context_size is None:
        return None
    return check_positive_int("context_size", context_size)


def _check_scarnn_sizes(variant: str, input_size: int, hidden_size: int) -> None:
    if variant == "s" and input_size != hidden_size:
        raise ValueError(
            f"hidden_size: sCARNN (eq 6) adds the input e_m itself to the state, so it needs "
            f"hidden_size == input_size, got hidden_size={hidden_size}, input_size={input_size}"
        )


class CARNNCell(Traceable, nn.Module):
    """One CARNN layer direction, usable step by step (decoding); it returns the new state
    ``h'`` alone, as ``nn.GRUCell`` does.

    ``forward(input, context=None, h=None) -> h'`` with ``input`` ``(B, input_size)``,
    ``context`` ``(B, context_size)`` and ``h`` ``(B, hidden_size)`` (zeros when omitted).

    Attributes:
        weight_ih: ``[W^e_u; W^e_f; W_e]`` (gate blocks in the order ``u, f, ebar``), of shape
            ``(G * hidden_size, input_size)``: ``G`` = 3, or 2 for sCARNN (no ``W_e``).
        bias_ih: ``[b_u; b_f; b_e]``, of shape ``(G * hidden_size,)``.
        weight_hh: ``[W^h_u; W^h_f]`` (nCARNN only), of shape ``(2 * hidden_size, hidden_size)``.
        weight_ch: ``[W^c_u; W^c_f]`` (absent with ``context_size=None``), of shape
            ``(2 * hidden_size, context_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import CARNNCell
        >>> cell = CARNNCell(input_size=4, hidden_size=8, context_size=3)
        >>> context, h = torch.randn(2, 3), None
        >>> for x_t in torch.randn(5, 2, 4):  # five steps of a batch of 2
        ...     h = cell(x_t, context, h)
        >>> h.shape
        torch.Size([2, 8])
    """

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        context_size: int | None,
        variant: str = "n",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.context_size = _check_context_size(context_size)
        self.variant = _check_variant(variant)
        _check_scarnn_sizes(variant, input_size, hidden_size)
        H = hidden_size
        self.num_input_gates = 2 if variant == "s" else 3
        self.weight_ih = nn.Parameter(torch.empty(self.num_input_gates * H, input_size))
        self.bias_ih = nn.Parameter(torch.empty(self.num_input_gates * H)) if bias else None
        self.weight_hh = nn.Parameter(torch.empty(2 * H, H)) if variant == "n" else None
        self.weight_ch = (
            nn.Parameter(torch.empty(2 * H, context_size)) if context_size is not None else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def input_projection(self, x: Tensor) -> Tensor:
        """``(W^e_u e + b_u, W^e_f e + b_f, W_e e + b_e)`` for all steps (one GEMM)."""
        return cached_linear(x, self.weight_ih, self.bias_ih)

    def context_projection(self, context: Tensor | None) -> Tensor | None:
        """``(W^c_u c, W^c_f c)`` ``(B, 2H)``: once per sequence, broadcast over time."""
        if self.weight_ch is None:
            return None
        assert context is not None
        return F.linear(context, self.weight_ch)

    def forward(
        self, input: Tensor, context: Tensor | None = None, h: Tensor | None = None
    ) -> Tensor:
        """One step of eq 3 (nCARNN), 5 or 6; returns the new state ``h_m``, which is also the
        output, as ``nn.GRUCell`` returns its ``h'``.

        Args:
            input: ``e_m``, ``(B, input_size)`` or unbatched ``(input_size,)``.
            context: ``c``, ``(B, context_size)`` (``(context_size,)`` unbatched); required
                unless the cell was built with ``context_size=None``, which refuses it.
            h: ``h_{m-1}``, ``(B, hidden_size)`` (``(hidden_size,)`` unbatched); zeros when
                None.

        Returns:
            h_m: the new state, ``(B, hidden_size)`` (``(hidden_size,)`` unbatched); pass it
                back as ``h``.
        """
        x, unbatched = step_input(input, self.input_size, self.weight_ih)
        B, H = x.shape[0], self.hidden_size
        if context is not None and unbatched and context.dim() == 1:
            context = context.unsqueeze(0)
        _check_context(self.context_size, context, B, x)
        if h is None:
            h = x.new_zeros(B, H)
        else:
            if unbatched and h.dim() == 1:
                h = h.unsqueeze(0)
            if tuple(h.shape) != (B, H):
                raise ValueError(f"h: expected shape {(B, H)}, got {tuple(h.shape)}")
        w_ih, b_ih, w_ch, w_hh = parameters(self, "weight_ih", "bias_ih", "weight_ch",
                                            "weight_hh")
        operands = (x, h, w_ih, b_ih, context, w_ch, w_hh)
        ext = cell_steps.kernels(*operands, graph=True)
        if ext is not None:  # the whole step as one op (carnn_cell_step_ref its twin) ...
            if cell_step_grads.records_graph(*operands):
                h_new = cell_step_grads.carnn_step_train(ext, *operands)  # ... or node
            else:
                h_new = ext.carnn_cell_step(*operands)
            return h_new[0] if unbatched else h_new
        proj = self.input_projection(x)
        pre = proj[:, : 2 * H]
        ctx = self.context_projection(context)
        if ctx is not None:
            pre = pre + ctx
        if self.weight_hh is not None:
            pre = pre + h @ self.weight_hh.t()
        g_u, g_f = torch.sigmoid(pre).chunk(2, dim=-1)
        e_bar = x if self.variant == "s" else proj[:, 2 * H :]
        h_new = g_u * (g_f * e_bar) + (1 - g_u) * h
        return h_new[0] if unbatched else h_new

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, context_size={self.context_size}, "
            f"variant={self.variant!r}"
        )


def _check_context(context_size: int | None, context: Any, batch: int, x: Tensor) -> None:
    """``context`` must be ``(B, context_size)`` of the input's dtype and device."""
    if context_size is None:
        if context is not None:
            raise ValueError("context: given, but this CARNN was built with context_size=None")
        return
    if context is None:
        raise ValueError(
            f"context: required, a (B, {context_size}) tensor (one context vector per sequence)"
        )
    if not isinstance(context, Tensor):
        raise ValueError(f"context: expected a Tensor, got {type(context).__name__}")
    if context.dim() == 3:
        raise ValueError(
            f"context: got a 3-D tensor {tuple(context.shape)}, the shape of an initial state; "
            f"CARNN's second argument is the context, one vector per sequence "
            f"({batch}, {context_size}) (eq 3-6): call carnn(x, context, hx=h0) "
            f"or carnn(x, context=c, hx=h0)"
        )
    if tuple(context.shape) != (batch, context_size):
        raise ValueError(
            f"context: expected shape {(batch, context_size)} (batch, context_size), "
            f"got {tuple(context.shape)}"
        )
    if context.dtype != x.dtype or context.device != x.device:
        raise ValueError(
            f"context: expected dtype {x.dtype} on {x.device} (the input's), "
            f"got {context.dtype} on {context.device}"
        )


def _bench_row(variant: str) -> BenchRow:
    """The bench row of one variant at width C, with a context of width C: the input gates are
    one GEMM (nCARNN also projects h_{t-1} for its two recurrent gates); per unit the scan reads
    the gates and writes h, its backward reads them back with the output gradient."""
    gates = {"n": 3, "i": 3, "s": 2}[variant]
    return BenchRow(
        f"carnn_{variant}",
        f"ctrlrnn.CARNN, {variant}CARNN, context of the same width",
        gemms=lambda C: [(C, gates * C), *([(C, 2 * C)] if variant == "n" else [])],
        values=lambda C: [(C, gates + 1, 2 * gates + 2)],
        options={"variant": variant},
        grid="target",
        context=True,
    )


@register_unit(
    "carnn",
    description="Context-dependent additive RNN (CARNN paper); the task model supplies the "
                "context",
    options={"variant": (str, "n"), "context_size": (int | None, None)},
    cell=CARNNCell,
    bench=[_bench_row(variant) for variant in ("n", "i", "s")],
)
class CARNN(RecurrentBase):
    """CARNN layer stack (nCARNN eq 3, iCARNN eq 5, sCARNN eq 6) with the ``nn.LSTM`` contract;
    ``carnn(x, context)`` returns ``(output, h_n)``, one state tensor, not ``(h_n, c_n)``.

    The second positional argument is the context ``(B, context_size)``, one vector per
    sequence: pass an initial state by keyword, ``carnn(x, context, hx=h_0)``. ``h_n`` is
    ``(num_layers * num_directions, B, hidden_size)``. Unpack as ``output, h_n = carnn(x,
    context)``: written ``output, (h, c) = ...``, a two-layer ``h_n`` splits by layer without
    an error, as ``nn.GRU``'s would.

    Args:
        input_size: the width of ``e_m``.
        hidden_size: the width of ``h_m``.
        context_size: width of the context ``c``; ``None`` for the context-free nCARNN of
            section 4.2 (then ``forward`` takes no context).
        variant: ``"n"`` (eq 3, gates read ``h_{m-1}``; fused cell), ``"i"`` (eq 5) or ``"s"``
            (eq 6, needs ``hidden_size == input_size``); ``"i"`` and ``"s"`` run on the scan.
        num_layers: the number of stacked layers, each reading the one below. Every layer and
            direction reads the same context.
        bias: whether the gates and ``ebar`` have biases (``b_u``, ``b_f``, ``b_e``).
        batch_first: ``input`` and ``output`` as ``(B, T, ...)`` instead of ``(T, B, ...)``
            (the state stays ``(num_layers * num_directions, B, H)``, as in ``nn.LSTM``).
        dropout: dropout on each layer's output but the last's, in training only.
        bidirectional: a second direction reads each sequence backwards; the output
            concatenates both. A bidirectional sCARNN stack of more than one layer is refused
            (its upper layers would read ``2 * hidden_size`` features but must have
            ``hidden_size == input_size``).
        weight_drop: DropConnect probability ``p`` on nCARNN's recurrent matrices
            ``W^h_u; W^h_f`` (``weight_hh``, eq 3) as AWD-LSTM applies it
            (:mod:`ctrlrnn.nn.weight_drop`): in training each forward call draws one fresh mask
            per matrix, shared by all time steps, the kept weights scaled by ``1 / (1 - p)``; in
            evaluation the weights as they are. iCARNN and sCARNN have no recurrent matrix
            (eq 5-6), so ``weight_drop > 0`` raises ``ValueError`` there.

    Attributes:
        cells[k].weight_ih: ``[W^e_u; W^e_f; W_e]`` of layer ``k // num_directions`` in
            direction ``k % num_directions``, of shape ``(G * hidden_size, input_size_l)``:
            ``G`` = 3, or 2 for sCARNN (no ``W_e``); ``input_size_l`` = ``input_size`` for the
            first layer, ``num_directions * hidden_size`` above.
        cells[k].bias_ih: ``[b_u; b_f; b_e]``, of shape ``(G * hidden_size,)``.
        cells[k].weight_hh: ``[W^h_u; W^h_f]`` (nCARNN), of shape
            ``(2 * hidden_size, hidden_size)``.
        cells[k].weight_ch: ``[W^c_u; W^c_f]`` (a ``context_size`` given), of shape
            ``(2 * hidden_size, context_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import CARNN
        >>> carnn = CARNN(input_size=4, hidden_size=8, context_size=3, batch_first=True)
        >>> x, context = torch.randn(2, 5, 4), torch.randn(2, 3)  # one context per sequence
        >>> output, h_n = carnn(x, context)
        >>> output.shape, h_n.shape
        (torch.Size([2, 5, 8]), torch.Size([1, 2, 8]))
    """

    state_names = ("h",)

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        context_size: int | None,
        variant: str = "n",
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        weight_drop: float = 0.0,
    ) -> None:
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional
        )
        self.variant = _check_variant(variant)
        self.weight_drop = check_weight_drop(weight_drop)
        if variant != "n":
            refuse_weight_drop(
                self.weight_drop, f"CARNN(variant={variant!r})",
                "its gates read only the input and the context, eq 5-6",
            )  # fmt: skip
        self.context_size = _check_context_size(context_size)
        _check_scarnn_sizes(variant, input_size, hidden_size)
        if variant == "s" and bidirectional and num_layers > 1:
            raise ValueError(
                "bidirectional: a multi-layer bidirectional sCARNN is impossible: layers above "
                f"the first read 2 * hidden_size = {2 * hidden_size} features, but sCARNN (eq 6) "
                "needs hidden_size == its input size"
            )
        self.cells = nn.ModuleList(
            CARNNCell(self.layer_input_size(layer), hidden_size, context_size, variant, bias)
            for layer in range(num_layers)
            for _ in range(self.num_directions)
        )

    def cell(self, layer: int, direction: int = 0) -> CARNNCell:
        """The cell holding the weights of ``layer`` in ``direction`` (0 forward, 1 backward)."""
        return self.cells[layer * self.num_directions + direction]

    def forward(  # type: ignore[override]
        self,
        input: Tensor | PackedSequence,
        context: Tensor | None = None,
        hx: Tensor | None = None,
        lengths: Tensor | None = None,
    ) -> tuple[Tensor | PackedSequence, Tensor]:
        """Run the stack; returns ``(output, h_n)``, ``h_n`` one tensor where ``nn.LSTM``
        returns ``(h_n, c_n)``.

        The second positional argument is the context, not ``hx``: ``carnn(x, context,
        hx=h_0)``. A 3-D tensor given as the context raises ``ValueError`` saying so.

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            context: the context ``c`` of eq 3-6, one vector per sequence, ``(B,
                context_size)`` (``(context_size,)`` unbatched); required unless the layer was
                built with ``context_size=None``, which refuses it.
            hx: the initial state ``h_0``, ``(num_layers * num_directions, B, hidden_size)``
                (``(num_layers * num_directions, hidden_size)`` unbatched); zeros when None. An
                ``h_n`` passed back continues the sequences.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, and ``h_n`` is taken at
                each true length.

        Returns:
            output: the last layer's ``h_m`` at every step, ``(T, B, num_directions *
                hidden_size)`` (``(B, T, ...)`` with ``batch_first``, ``(T, ...)`` unbatched,
                packed for packed input), zeros past each length.
            h_n: the final ``h``, ``(num_layers * num_directions, B, hidden_size)``,
                layer-major, the forward direction first (``(num_layers * num_directions,
                hidden_size)`` unbatched).

        Examples:
            >>> import torch
            >>> from ctrlrnn import CARNN
            >>> carnn = CARNN(input_size=4, hidden_size=8, context_size=3, num_layers=2)
            >>> x, context = torch.randn(5, 2, 4), torch.randn(2, 3)  # (time, batch, features)
            >>> output, h_n = carnn(x, context)  # one state, not (h_n, c_n)
            >>> output.shape, h_n.shape
            (torch.Size([5, 2, 8]), torch.Size([2, 2, 8]))
            >>> output, h_n = carnn(x, context, hx=h_n)  # the state by keyword
        """
        if (
            isinstance(input, Tensor)
            and input.dim() == 2
            and isinstance(context, Tensor)
            and context.dim() == 1
        ):
            context = context.unsqueeze(0)  # unbatched input, unbatched context
        out, h_n = super().forward(input, hx, lengths, context=context)
        assert isinstance(h_n, Tensor)
        return out, h_n

    def _check_extra(self, x: Tensor, lengths: Tensor | None, kwargs: dict[str, Any]) -> None:
        extra = set(kwargs) - {"context"}
        if extra:
            raise TypeError(f"forward() got unexpected keyword arguments {sorted(extra)}")
        _check_context(self.context_size, kwargs.get("context"), x.shape[0], x)

    def _direction_call(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> DirectionCall | None:
        """nCARNN: the direction as one recurrence of the fused cell (both directions of a
        layer then run in one call)."""
        if self.variant != "n":
            return None
        cell = self.cell(layer, direction)
        ctx = cell.context_projection(kwargs.get("context"))  # (B, 2H): once per sequence
        if ctx is None:
            ctx = x.new_zeros(x.shape[0], 2 * self.hidden_size)
        weight_hh = drop_weight(cell.weight_hh, self.weight_drop, self.training)
        h0 = None if state is None else state[0]
        return DirectionCall(
            ncarnn_sequences,
            {"x_proj": None, "weight_hh": weight_hh, "context_proj": ctx, "h0": h0},
            lambda out: (out[0], [out[1]]),
            # (B, T, 3H) for all steps, made with the other direction's in one op
            projection=(x, cell.weight_ih, cell.bias_ih),
        )

    def _steps_of_direction(
        self, layer: int, direction: int, xs: list[Tensor], state: State | None, **kwargs: Any
    ) -> tuple[list[Tensor], State] | None:
        """Eq 3, 5 or 6 per step as one op (``carnn_cell_step``, as :class:`CARNNCell`)."""
        w_ih, b_ih, w_ch, w_hh = parameters(self.cell(layer, direction), "weight_ih", "bias_ih",
                                            "weight_ch", "weight_hh")
        context = kwargs.get("context")
        h = xs[0].new_zeros(xs[0].shape[0], self.hidden_size) if state is None else state[0]
        ext = cell_steps.kernels(xs[0], h, w_ih, b_ih, context, w_ch, w_hh)
        if ext is None:
            return None
        hs: list[Tensor] = []
        for x_t in xs:
            h = ext.carnn_cell_step(x_t, h, w_ih, b_ih, context, w_ch, w_hh)
            hs.append(h)
        return hs, [h]

    def _run_direction(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        call = self._direction_call(layer, direction, x, lengths, state, **kwargs)
        if call is not None:
            return run_directions([call], lengths)[0]
        cell = self.cell(layer, direction)
        H = self.hidden_size
        h0 = None if state is None else state[0]
        proj = cell.input_projection(x)  # (B, T, G*H): one GEMM for all steps
        ctx = cell.context_projection(kwargs.get("context"))  # (B, 2H): once per sequence
        pre = proj[..., : 2 * H]
        if ctx is not None:
            pre = pre + ctx.unsqueeze(1)
        g = torch.sigmoid(pre)
        g_u, g_f = g[..., :H], g[..., H:]
        e_bar = x if self.variant == "s" else proj[..., 2 * H :]
        a = 1 - g_u  # eq 5/6: h_m = (1 - g^u) h_{m-1} + g^u g^f ebar_m
        b = g_u * g_f * e_bar
        h_seq, h_last = linear_scan(a, b, h0, lengths=lengths, return_last=True)
        return h_seq, [h_last]

    def extra_repr(self) -> str:
        s = super().extra_repr() + (
            f", context_size={self.context_size}, variant={self.variant!r}"
        )
        return s + (f", weight_drop={self.weight_drop}" if self.weight_drop else "")
