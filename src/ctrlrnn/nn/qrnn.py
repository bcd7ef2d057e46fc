"""Quasi-Recurrent Neural Network (Bradbury et al., 2017): ``QRNN`` and ``QRNNCell`` (their
convolution windows and zoneout: :mod:`ctrlrnn.nn.qrnn_windows`).

Each layer computes its gates for all time steps at once with a convolution of width
``window`` over the input (eq 1-2), then runs a cheap elementwise recurrence, the *pooling*
(eq 3-5), with optional zoneout on the forget gate (eq 6):

    Z = tanh(W_z * X),  F = sigmoid(W_f * X),  O = sigmoid(W_o * X),  I = sigmoid(W_i * X)
    f-pooling   c_t = f_t c_{t-1} + (1 - f_t) z_t,   h_t = c_t
    fo-pooling  c_t = f_t c_{t-1} + (1 - f_t) z_t,   h_t = o_t c_t
    ifo-pooling c_t = f_t c_{t-1} + i_t z_t,         h_t = o_t c_t

The convolution is one GEMM over the concatenated window; the pooling is the fused kernel of
:mod:`ctrlrnn.ops.qrnn_pooling`. The convolution is masked (causal, section 2: ``z_t`` reads
``x_{t-k+1} .. x_t``) by default; ``causal=False`` centres it on ``t`` for encoders, as the
paper's translation encoder does (section 3.3: "the encoder convolutions were not masked"):
``z_t`` reads ``x_{t-a} .. x_{t+b}`` with ``a = floor((k-1)/2)`` and ``b = ceil((k-1)/2)``, so
an even width puts its extra tap after ``t`` (the ``padding="same"`` of
:class:`torch.nn.Conv1d`). Taps before a sequence's start or past its own length read zeros.
Options:

* ``window``: one width for every layer, or one per layer (``window=(6, 2, 2)``).
* ``dense`` (section 2.1): each layer's input is concatenated to its output before the next
  layer; the last layer's output alone is the result.
* ``encoder_state_size`` (eq 7): the layer accepts ``encoder_state`` (the encoder's last hidden
  state per layer) whose projection ``V h~_T`` is added to every gate pre-activation at every step,
  so that the QRNN can serve as the decoder of the paper's encoder-decoder.
* the state carried between calls (``hx``/``h_n``) is the memory cell ``c``, shape
  ``(num_layers * num_directions, B, hidden_size)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.arguments import check_flag
from ctrlrnn.nn.base import RecurrentBase, State
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.parameter_lookup import parameters
from ctrlrnn.nn.qrnn_cell import QRNNCell, short_pooling
from ctrlrnn.nn.qrnn_windows import (
    ZONEOUT_EVAL,
    causal_windows,
    centred_taps,
    centred_windows,
    check_pooling,
    check_windows,
    check_zoneout,
    check_zoneout_eval,
    last_inputs,
    zoneout_keep,
)
from ctrlrnn.nn.registry import BenchRow, register_unit
from ctrlrnn.nn.weight_drop import check_weight_drop, drop_weight
from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.padding import last_valid
from ctrlrnn.ops.qrnn_pooling import (
    GATES_PER_MODE,
    POOLING_MODES,
    fuses_bias,
    pooling_step,
    qrnn_pooling,
)

# Defined in qrnn_cell, named here (its module until it moved) so that whole-module pickles
# keep one class path: ``torch.load(weights_only=True)`` allows a class by that path.
QRNNCell.__module__ = __name__

__all__ = ["QRNN", "QRNNCell", "ZONEOUT_EVAL", "causal_windows", "centred_taps",
           "centred_windows", "check_windows", "zoneout_keep"]


def _bench_row(pooling: str) -> BenchRow:
    """The bench row of one pooling: a window-2 QRNN at width C. Its one GEMM is the
    convolution, ``(B*T, 2C) @ (2C, G*C)`` for G gates; the fused pooling reads the G gates and
    writes h and c (f-pooling: h is c, one write), and its backward reads the G gates, c and the
    output gradient and writes the G gates' gradients."""
    gates = GATES_PER_MODE[pooling]
    forward = gates + (1 if pooling == "f" else 2)
    return BenchRow(
        f"qrnn_{pooling}",
        f"ctrlrnn.QRNN, window 2, {pooling}-pooling, input = hidden = width",
        gemms=lambda C: [(2 * C, gates * C)],
        values=lambda C: [(C, forward, 2 * gates + 2)],
        options={"window": 2, "pooling": pooling},
        backend="scan",
    )


@register_unit(
    "qrnn",
    description="Quasi-recurrent network (QRNN paper)",
    options={"window": (int | tuple[int, ...], 2), "causal": (bool, True),
             "pooling": (str, "fo"), "zoneout": (float, 0.0), "dense": (bool, False)},
    cell=QRNNCell,
    bench=[_bench_row(pooling) for pooling in ("f", "fo", "ifo")],
)
class QRNN(RecurrentBase):
    """Quasi-recurrent layer stack with the ``torch.nn.LSTM`` interface; it returns
    ``(output, c_n)``, one state tensor (the memory cells), not ``(output, (h_n, c_n))``.

    ``c_n`` and ``hx`` are ``(num_layers * num_directions, B, hidden_size)``: QRNN feeds no
    ``h`` back (eq 3-5). Unpack as ``output, c_n = qrnn(x)``. Written ``output, (h, c) =
    qrnn(x)``, a two-layer (or one-layer bidirectional) ``c_n`` splits by layer without an
    error, as ``nn.GRU``'s ``h_n`` would: ``h`` is then layer 0's cells, ``c`` layer 1's.

    Args:
        input_size: the width of the input's features, as in :class:`torch.nn.LSTM`.
        hidden_size: the width ``H`` of each direction's output and memory cell.
        num_layers: the number of stacked layers, each reading the one below.
        bias: whether the gates (eq 1-2) have biases.
        batch_first: ``input`` and ``output`` as ``(B, T, ...)`` instead of ``(T, B, ...)``
            (the state stays ``(num_layers * num_directions, B, H)``, as in ``nn.LSTM``).
        dropout: dropout on each layer's output but the last's, in training only.
        bidirectional: a second direction reads each sequence backwards; the output
            concatenates both, ``2 * hidden_size`` wide.
        window: width ``k`` of the convolution (eq 1), any positive integer, for every layer;
            or a tuple/list of ``num_layers`` widths, one per layer (``(6, 2, 2)``: the QRNN
            paper's translation encoder, section 3.3).
        causal: ``True`` (default): the masked convolution of eq 1, ``z_t`` reads
            ``x_{t-k+1} .. x_t``. ``False``: the unmasked convolution of the paper's
            translation encoder (section 3.3), centred on ``t``: ``z_t`` reads
            ``x_{t-a} .. x_{t+b}``, ``a = floor((k-1)/2)``, ``b = ceil((k-1)/2)`` (an even width
            puts its extra tap after ``t``); taps past a sequence's own length read zeros. A
            bidirectional layer's backward direction is the same computation on each reversed
            sequence, so in the original time order its window is ``x_{t-b} .. x_{t+a}``: each
            direction's extra tap lies ahead in its own reading order. Refused where the layer
            must not read ahead: :meth:`forward_stateful`, stepping a cell.
        pooling: ``"f"`` (eq 3), ``"fo"`` (eq 4) or ``"ifo"`` (eq 5).
        zoneout: probability ``p`` of eq 6 (no rescaling in training).
        zoneout_eval: ``"expectation"`` (default: ``1 - f`` scaled by ``1 - p`` in eval, the
            training mask's mean, as the public pytorch-qrnn layer does) or ``"identity"``
            (``f`` unchanged in eval).
        dense: DenseNet-style connections of section 2.1.
        encoder_state_size: width of ``encoder_state`` for eq 7 (``None``: no such term).
        weight_drop: DropConnect probability ``p`` on the convolution weights ``W_z, W_f,
            W_o (, W_i)`` of eq 1-2 (:mod:`ctrlrnn.nn.weight_drop`, as the AWD-LSTM QRNN
            applies it): in training every forward call draws one fresh mask per layer and
            direction, shared by all time steps, the kept weights scaled by ``1 / (1 - p)``;
            in evaluation the weights as they are. The biases are not dropped.

    :meth:`forward` takes ``encoder_state`` (eq 7) by keyword.
    :meth:`forward_with_layer_states` also returns every layer's last hidden state (the
    ``h~^l_T`` that eq 7 feeds to decoder layer ``l``).

    Attributes:
        cells[k].weight: the convolution weights ``[W_z; W_f (; W_o (; W_i))]`` of eq 1-2 of
            layer ``k // num_directions`` in direction ``k % num_directions`` (1: backward), of
            shape ``(G * hidden_size, window_l * input_size_l)``: ``G`` = 2, 3 or 4 for f-, fo-
            or ifo-pooling, ``window_l`` the layer's width, ``input_size_l`` the width it reads
            (``input_size`` for the first layer, ``num_directions * hidden_size`` above, plus
            the lower layers' inputs with ``dense=True``); the taps oldest first.
        cells[k].bias: the gates' biases, of shape ``(G * hidden_size,)``.
        cells[k].encoder_weight: the ``V`` of eq 7 (``encoder_state_size`` given), of shape
            ``(G * hidden_size, encoder_state_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import QRNN
        >>> qrnn = QRNN(input_size=4, hidden_size=8, num_layers=2, batch_first=True)
        >>> x = torch.randn(3, 5, 4)  # (batch, time, features)
        >>> output, c_n = qrnn(x, lengths=torch.tensor([5, 3, 2]))
        >>> output.shape, c_n.shape
        (torch.Size([3, 5, 8]), torch.Size([2, 3, 8]))
        >>> qrnn.cells[1].weight.shape  # fo-pooling, window 2, over layer 0's 8 outputs
        torch.Size([24, 16])
    """

    state_names = ("c",)

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
        window: int | tuple[int, ...] | list[int] = 2,
        pooling: str = "fo",
        zoneout: float = 0.0,
        zoneout_eval: str = "expectation",
        dense: bool = False,
        encoder_state_size: int | None = None,
        causal: bool = True,
        weight_drop: float = 0.0,
    ) -> None:
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional
        )
        self.weight_drop = check_weight_drop(weight_drop)
        #: one width per layer
        self.windows = check_windows(window, self.num_layers)
        #: the width as given: an int (every layer), or a tuple of one per layer
        self.window: int | tuple[int, ...] = (
            self.windows if isinstance(window, (tuple, list)) else self.windows[0]
        )
        self.causal = check_flag("causal", causal)
        self.pooling = check_pooling(pooling)
        self.zoneout = check_zoneout(zoneout)
        self.zoneout_eval = check_zoneout_eval(zoneout_eval)
        self.dense = check_flag("dense", dense)
        self.encoder_state_size = encoder_state_size
        self.cells = nn.ModuleList(
            QRNNCell(
                self.layer_input_size(layer),
                hidden_size,
                window=self.windows[layer],
                pooling=pooling,
                bias=bias,
                zoneout=zoneout,
                zoneout_eval=zoneout_eval,
                encoder_state_size=encoder_state_size,
                causal=self.causal,
            )
            for layer in range(num_layers)
            for _ in range(self.num_directions)
        )

    def layer_input_size(self, layer: int) -> int:
        if self.dense:
            return self.input_size + layer * self.hidden_size * self.num_directions
        return super().layer_input_size(layer)

    def _next_layer_input(self, layer_input: Tensor, layer_output: Tensor) -> Tensor:
        if self.dense:
            return torch.cat([layer_input, layer_output], dim=-1)
        return layer_output

    def cell(self, layer: int, direction: int = 0) -> QRNNCell:
        """The cell holding the weights of ``layer`` in ``direction`` (0 forward, 1 backward)."""
        return self.cells[layer * self.num_directions + direction]

    def forward(
        self,
        input: Tensor | PackedSequence,
        hx: Tensor | None = None,
        lengths: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor | PackedSequence, Tensor]:
        """Run the stack; returns ``(output, c_n)``: ``c_n`` is one tensor, the memory cells,
        where ``nn.LSTM`` returns ``(output, (h_n, c_n))``.

        Unpack as ``output, c_n = qrnn(x)``. ``output, (h, c) = qrnn(x)`` raises for one
        unidirectional layer but splits a two-layer ``c_n`` by layer without an error (``h``
        layer 0's cells, ``c`` layer 1's), as ``nn.GRU``'s ``h_n`` would.

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            hx: the initial memory cells ``c_0``, ``(num_layers * num_directions, B,
                hidden_size)`` (``(num_layers * num_directions, hidden_size)`` unbatched),
                zeros when None. A ``c_n`` passed back continues the sequences. ``nn.LSTM``'s
                ``(h_0, c_0)`` pair raises ``ValueError``: QRNN has no ``h_0``.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, ``c_n`` is taken at each
                true length, and a non-causal window reads zeros past it.
            **kwargs: ``encoder_state`` only (eq 7, with ``encoder_state_size`` set, required
                then): ``(num_layers, B, encoder_state_size)``, one encoder state per layer, or
                ``(B, encoder_state_size)`` shared by all layers. Any other keyword raises
                ``TypeError``.

        Returns:
            output: the last layer's ``h_t`` (eq 4-5; ``c_t`` with f-pooling) at every step,
                ``(T, B, num_directions * hidden_size)`` (``(B, T, ...)`` with
                ``batch_first``, ``(T, ...)`` unbatched, packed for packed input), zeros past
                each length; both directions concatenated, as in ``nn.LSTM``.
            c_n: the memory cell ``c`` after each sequence's last step, per layer and
                direction: ``(num_layers * num_directions, B, hidden_size)``, layer-major, the
                forward direction first (``(num_layers * num_directions, hidden_size)``
                unbatched). The backward direction's is its cell at step 0.

        Examples:
            >>> import torch
            >>> from ctrlrnn import QRNN
            >>> qrnn = QRNN(input_size=4, hidden_size=8, num_layers=2)
            >>> x = torch.randn(5, 3, 4)  # (time, batch, features)
            >>> output, c_n = qrnn(x)  # not output, (h_n, c_n)
            >>> output.shape, c_n.shape  # c_n: both layers' cells
            (torch.Size([5, 3, 8]), torch.Size([2, 3, 8]))
            >>> output, c_n = qrnn(x, c_n)  # the next chunk, from those cells
        """
        return super().forward(input, hx, lengths, **kwargs)

    def forward_with_layer_states(
        self,
        input: Tensor | PackedSequence,
        hx: Tensor | None = None,
        lengths: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor | PackedSequence, Tensor, Tensor]:
        """:meth:`forward`, and the last hidden state of every layer: ``(output, c_n,
        layer_states)``.

        ``layer_states`` is ``(num_layers, B, num_directions * hidden_size)`` (``(num_layers,
        num_directions * hidden_size)`` for unbatched input): layer ``l``'s ``h~^l_T`` of eq 7,
        the output of its pooling (``h``, not the cell ``c`` that ``c_n`` holds) where each
        direction's pass ends: the forward direction at each sequence's last valid step, the
        backward one at step 0; the directions concatenated as in the output. The last layer's
        entry is the output at those steps.
        """
        sink: list[Tensor] = []
        out, c_n = self.forward(input, hx, lengths, _layer_states=sink, **kwargs)
        D = self.num_directions
        states = torch.stack(
            [torch.cat(sink[layer * D : (layer + 1) * D], dim=-1)
             for layer in range(self.num_layers)]
        )
        if isinstance(input, Tensor) and input.dim() == 2:
            states = states.squeeze(1)
        assert isinstance(c_n, Tensor)
        return out, c_n, states

    def forward_stateful(
        self,
        input: Tensor,
        state: tuple[Tensor, list[Tensor]] | None = None,
        lengths: Tensor | None = None,
        encoder_state: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, list[Tensor]]]:
        """Run a chunk of a longer stream, carrying everything the next chunk needs.

        The state is ``(c, history)``: the memory cells ``(num_layers, B, hidden_size)`` and,
        for each layer, its last ``window - 1`` inputs ``(B, window - 1, layer_input_size)``, so
        that the convolution of the next chunk's first steps reads the real previous inputs
        instead of zero padding. Running a sequence in chunks this way equals one call on the
        whole sequence (truncated BPTT for language models). Unidirectional and causal only.
        """
        if self.bidirectional:
            raise ValueError("state: forward_stateful needs a unidirectional QRNN")
        if not self.causal:
            raise ValueError(
                "causal: forward_stateful needs a causal QRNN (causal=False centres the "
                "convolution on t, so a chunk's last steps would read the next chunk)"
            )
        c0: Tensor | None = None
        history: list[Tensor] | None = None
        if state is not None:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError("state: expected a tuple (c, history)")
            c0, history = state[0], list(state[1])
            if len(history) != self.num_layers:
                raise ValueError(
                    f"state: expected {self.num_layers} history tensors, got {len(history)}"
                )
        sink: list[Tensor] = []
        extra: dict[str, Any] = {"_history": history, "_new_history": sink}
        if encoder_state is not None:
            extra["encoder_state"] = encoder_state
        out, c_n = self.forward(input, c0, lengths, **extra)
        return out, (c_n, sink)

    def _check_extra(self, x: Tensor, lengths: Tensor | None, kwargs: dict[str, Any]) -> None:
        history = kwargs.get("_history")
        if history is not None:
            if not self.causal:
                raise ValueError("causal: a history of earlier inputs needs a causal QRNN")
            for layer, h in enumerate(history):
                want = (x.shape[0], self.windows[layer] - 1, self.layer_input_size(layer))
                if not isinstance(h, Tensor) or tuple(h.shape) != want:
                    got = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
                    raise ValueError(f"state: history[{layer}] expected shape {want}, got {got}")
        extra = set(kwargs) - {"encoder_state", "_history", "_new_history", "_layer_states"}
        if extra:
            raise TypeError(f"forward() got unexpected keyword arguments {sorted(extra)}")
        enc = kwargs.get("encoder_state")
        if self.encoder_state_size is None:
            if enc is not None:
                raise ValueError(
                    "encoder_state: given, but this QRNN was built without encoder_state_size"
                )
            return
        if enc is None:
            raise ValueError("encoder_state: required, this QRNN was built with encoder_state_size")
        if not isinstance(enc, Tensor):
            raise ValueError(f"encoder_state: expected a Tensor, got {type(enc).__name__}")
        B, E = x.shape[0], self.encoder_state_size
        # rank first: B may be symbolic (export), and comparing it with num_layers adds a guard
        per_layer = enc.dim() == 3 and tuple(enc.shape) == (self.num_layers, B, E)
        if not per_layer and not (enc.dim() == 2 and tuple(enc.shape) == (B, E)):
            raise ValueError(
                f"encoder_state: expected shape {(self.num_layers, B, E)} or {(B, E)}, "
                f"got {tuple(enc.shape)}"
            )
        if enc.dtype != x.dtype or enc.device != x.device:
            raise ValueError(
                f"encoder_state: expected dtype {x.dtype} on {x.device}, "
                f"got {enc.dtype} on {enc.device}"
            )

    def _steps_of_direction(
        self, layer: int, direction: int, xs: list[Tensor], state: State | None, **kwargs: Any
    ) -> tuple[list[Tensor], State] | None:
        """Eq 1-5 per step as one op (``qrnn_cell_step``, as :class:`QRNNCell`): causal windows
        whose earlier inputs are the ``_history`` a decoder carries (zeros without it), no
        zoneout, no eq 7 term; the history and the pass's last output are handed to the
        decoders' sinks as :meth:`_run_direction` hands them."""
        if not self.causal or self.zoneout or kwargs.get("encoder_state") is not None:
            return None
        history, sink = kwargs.get("_history"), kwargs.get("_new_history")
        if self.num_directions == 2 and (history is not None or sink is not None):
            return None
        weight, bias, encoder_weight = parameters(self.cell(layer, direction), "weight", "bias",
                                                  "encoder_weight")
        if encoder_weight is not None:
            return None
        B, D = xs[0].shape
        hist = (xs[0].new_zeros(B, self.windows[layer] - 1, D) if history is None
                else history[layer].contiguous())  # fmt: skip
        c = xs[0].new_zeros(B, self.hidden_size) if state is None else state[0]
        ext = cell_steps.kernels(xs[0], c, hist, weight, bias)
        if ext is None:
            return None
        mode = POOLING_MODES[self.pooling]
        hs: list[Tensor] = []
        for x_t in xs:
            h, c, hist = ext.qrnn_cell_step(x_t, c, hist, weight, bias, mode)
            hs.append(h)
        if sink is not None:
            sink.append(hist)
        finals = kwargs.get("_layer_states")
        if finals is not None:  # h~_T of eq 7: where this direction's pass ends
            finals.append(hs[-1])
        return hs, [c]

    def _run_direction(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        cell = self.cell(layer, direction)
        enc = kwargs.get("encoder_state")
        if enc is not None and enc.dim() == 3:
            enc = enc[layer]
        history = kwargs.get("_history")
        hist = None if history is None else history[layer]
        # the backward direction's x is already reversed within each length (RecurrentBase),
        # so the centred windows of a non-causal layer are centred in its own reading order
        weight = drop_weight(cell.weight, self.weight_drop, self.training)  # one mask per call
        # on CPU the pooling kernel adds the bias of eq 1-2 as it reads the gates
        fuse = cell.bias is not None and fuses_bias(x.device)
        gates = cell.gate_preactivations(
            x, enc, hist, None if self.causal else lengths, weight=weight, with_bias=not fuse
        )
        sink = kwargs.get("_new_history")
        if sink is not None:
            sink.append(last_inputs(x, hist, lengths, self.windows[layer]))
        B, T = x.shape[0], x.shape[1]
        keep, scale = zoneout_keep(
            (B, T, self.hidden_size), self.zoneout, self.training, x, self.zoneout_eval
        )
        c0 = None if state is None else state[0]
        bias = cell.bias if fuse else None
        if keep is None and scale == 1.0 and lengths is None and short_pooling(gates, c0):
            # no graph (decoding): the kernel without its wrapper's checks, made above
            h, _c, c_last = pooling_step(x.device)(
                gates.contiguous(), None if c0 is None else c0.contiguous(),
                POOLING_MODES[self.pooling], bias,
            )  # fmt: skip
        else:
            h, _c, c_last = qrnn_pooling(
                gates, c0, pooling=self.pooling, keep=keep, keep_scale=scale, lengths=lengths,
                bias=bias,
            )
        finals = kwargs.get("_layer_states")
        if finals is not None:  # h~_T of eq 7: where this direction's pass ends
            finals.append(last_valid(h, lengths))
        return h, [c_last]

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", window={self.window}, pooling={self.pooling!r}"
        if not self.causal:
            s += ", causal=False"
        if self.zoneout:
            s += f", zoneout={self.zoneout}"
        if self.dense:
            s += ", dense=True"
        if self.weight_drop:
            s += f", weight_drop={self.weight_drop}"
        if self.encoder_state_size is not None:
            s += f", encoder_state_size={self.encoder_state_size}"
        return s
