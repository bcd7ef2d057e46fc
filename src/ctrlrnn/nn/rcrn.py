"""Recurrently Controlled Recurrent Networks (Tay, Tuan & Hui, 2018): ``RCRN``, ``RCRNCell``.

Three gated RNNs read the same input ``x``: two *controllers* (eq 1-6, bidirectional by eq 7-9)
give ``h^1`` and ``h^2``; the listener's *base* RNN (eq 10-14) gives ``h^3``. The listener then
runs the diagonal recurrence (eq 15) and the output gate (eq 16)::

    c4_t = sigmoid(h1_t) * c4_{t-1} + (1 - sigmoid(h1_t)) * h3_t        (15)
    h4_t = sigmoid(h2_t) * c4_t    (output_gate="sigmoid", the text)   (16)
    h4_t = h2_t * c4_t             (output_gate="identity", as printed)

The three RNNs are ordinary LSTMs/GRUs over the input (eq 1-14), so with
``controllers="native"`` they run on torch's own recurrent kernels, both directions in one call
(oneDNN on CPU, cuDNN on CUDA; packed sequences for ``lengths``): the construction the paper
calls its CUDA-optimised version. The default, ``controllers="auto"``, does so except where
the fused engine measured faster: on CUDA wherever its Triton kernels run (the GPU check's
two RCRN tables in docs/gpu.md, with and without the controllers on cuDNN), and on CPU by
:func:`fused_controllers_faster` (training on two or more threads, layers up to 128 wide at
any batch and up to 256 wide from batch 16; small batches of narrow layers otherwise;
docs/rcrn.md has the measurements). Where torch's kernels do not apply (ONNX export,
``torch.func`` transforms, ``torch.compile``, TorchScript tracing, autocast, a forced
reference backend, empty batches, dtypes torch's kernel lacks on that device) and with
``controllers="fused"`` they run on the fused-cell engine
(:func:`~ctrlrnn.ops.fused_cells.lstm_sequences` or
:func:`~ctrlrnn.ops.fused_cells.gru_sequences`: the input projections of all steps of the six
RNNs in one op, :func:`~ctrlrnn.ops.cached_linear.cached_linear_stacked`, then their compiled
recurrences in one call, concurrently). Eq 15-16 run for both directions in one op,
:func:`~ctrlrnn.ops.rcrn_listener.rcrn_listener` (gates, the diagonal scan and the output in one
pass, reading torch's bidirectional outputs in place). No Python loop over time.

Options: ``cell`` ("lstm" as eq 1-14, or "gru", the paper's "simplified variant" in
torch.nn.GRU's formulation), ``output_gate``, and ``listener``: with ``bidirectional=True``,
``"per_direction"`` scans the forward channels of eq 15 forward and the backward channels
backward; ``"concat_forward"`` scans all ``2H`` channels ``[fw; bw]`` forward, as the authors'
code does. See docs/rcrn.md.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn import rcrn_step
from ctrlrnn.nn.arguments import check_choice, check_positive_int
from ctrlrnn.nn.base import RecurrentBase, State
from ctrlrnn.nn.gated_rnn import CELLS, GatedRNN, project_all, run_sequences
from ctrlrnn.nn.initialization import factory_arguments, reset_submodules
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.nn.weight_drop import check_weight_drop, drop_weight
from ctrlrnn.ops import scan_export
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.backend import functorch_active, has_kernel, reference_forced
from ctrlrnn.ops.compiled_op import torchscript_tracing
from ctrlrnn.ops.padding import reverse_padded
from ctrlrnn.ops.rcrn_listener import OUTPUT_GATES, rcrn_listener
from ctrlrnn.ops.validation import step_input

__all__ = ["CELLS", "CONTROLLERS", "LISTENERS", "RCRN", "GatedRNN", "RCRNCell",
           "fused_controllers_faster", "project_all", "rcrn_state_names", "run_sequences"]


LISTENERS = ("per_direction", "concat_forward")
CONTROLLERS = ("auto", "native", "fused")
#: ``controllers="auto"`` on CPU (:func:`fused_controllers_faster`): the widest layer that trains
#: on the fused engine with two or more threads at any batch,
AUTO_FUSED_MAX_HIDDEN_TRAINING = 128
#: the widest that trains on it at batches of at least AUTO_FUSED_WIDE_MIN_BATCH,
AUTO_FUSED_MAX_HIDDEN_TRAINING_WIDE = 256
AUTO_FUSED_WIDE_MIN_BATCH = 16
#: the widest that runs on it otherwise (inference, or one thread): with two or more threads,
AUTO_FUSED_MAX_HIDDEN = 128
#: with one thread,
AUTO_FUSED_MAX_HIDDEN_ONE_THREAD = 64
#: and the largest batch it takes then.
AUTO_FUSED_MAX_BATCH = 8


def fused_controllers_faster(hidden: int, batch: int, training: bool, threads: int,
                             varied_lengths: bool = False) -> bool:
    """Whether ``controllers="auto"`` runs an RCRN layer's RNNs on the fused engine on CPU.

    The rule follows the measurements in docs/rcrn.md: trained on two or more threads, the
    fused engine is faster up to width 128 at every batch, and up to width 256 from batch 16
    (width 512 level or slower); in inference torch's kernels win from batch 16 up and the
    fused engine at small batches; with one thread the fused engine only wins at small batches
    of narrow layers, the regime the rule was first measured for. Trained on sequences of
    ``varied_lengths``, torch packs them, and its packed backward writes a zero tensor as large
    as the layer's input projection at every step: there the fused engine is faster up to
    width 256 at any batch and thread count.
    """
    if training and varied_lengths and hidden <= AUTO_FUSED_MAX_HIDDEN_TRAINING_WIDE:
        return True
    if threads >= 2 and training:
        if hidden <= AUTO_FUSED_MAX_HIDDEN_TRAINING:
            return True
        return hidden <= AUTO_FUSED_MAX_HIDDEN_TRAINING_WIDE and batch >= AUTO_FUSED_WIDE_MIN_BATCH
    widest = AUTO_FUSED_MAX_HIDDEN if threads >= 2 else AUTO_FUSED_MAX_HIDDEN_ONE_THREAD
    return hidden <= widest and batch <= AUTO_FUSED_MAX_BATCH


#: The dtypes torch's own LSTM/GRU kernels train in, per device type.
_NATIVE_DTYPES = {
    "cpu": (torch.float32, torch.float64),
    "cuda": (torch.float32, torch.float64, torch.float16, torch.bfloat16),
}


def rcrn_state_names(cell: str) -> tuple[str, ...]:
    """State variables of one RCRN direction: the three RNNs' states, then the listener's c4."""
    if cell == "lstm":
        return ("h1", "c1", "h2", "c2", "h3", "c3", "c4")
    return ("h1", "h2", "h3", "c4")


def _gate(h2: Tensor, output_gate: str) -> Tensor:
    """The output gate of eq 16: ``sigmoid(h2)`` (the text) or ``h2`` (eq 16 as printed)."""
    return torch.sigmoid(h2) if output_gate == "sigmoid" else h2


class RCRNCell(Traceable, nn.Module):
    """One RCRN direction (controllers, listener base, eq 15-16), usable step by step; it
    returns ``(h4, state)``, ``state`` a tuple of 7 tensors (4 with ``cell="gru"``).

    ``forward(input, state=None) -> (h4, state)`` with ``input`` ``(B, input_size)`` (or
    unbatched ``(input_size,)``) and ``state`` a tuple in the order of :attr:`state_names`
    (``(h1, c1, h2, c2, h3, c3, c4)`` for ``cell="lstm"``, ``(h1, h2, h3, c4)`` for ``"gru"``;
    zeros when None). Feeding a sequence through the cell gives the outputs of a one-layer
    unidirectional :class:`RCRN` holding the same cell.

    Submodules: ``controller1`` (gives ``h^1``, the listener's forget gate, eq 1-6),
    ``controller2`` (``h^2``, the output gate), ``listener`` (the base RNN of eq 10-14, ``h^3``).

    Attributes:
        {controller1,controller2,listener}.weight_ih: the input weights of the three RNNs
            (``torch.nn.LSTM``'s ``weight_ih_l0`` layout), of shape ``(G * hidden_size,
            input_size)``, ``G`` = 4 (``cell="lstm"``) or 3 (``"gru"``).
        {controller1,controller2,listener}.weight_hh: their recurrent weights, of shape
            ``(G * hidden_size, hidden_size)``.
        {controller1,controller2,listener}.bias_ih: of shape ``(G * hidden_size,)``.
        {controller1,controller2,listener}.bias_hh: of shape ``(G * hidden_size,)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import RCRNCell
        >>> cell = RCRNCell(input_size=4, hidden_size=8)
        >>> state = None
        >>> for x_t in torch.randn(5, 3, 4):  # five steps of a batch of 3
        ...     h4, state = cell(x_t, state)
        >>> h4.shape, len(state)
        (torch.Size([3, 8]), 7)
    """

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        cell: str = "lstm",
        output_gate: str = "sigmoid",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.cell = check_choice("cell", cell, CELLS)
        self.output_gate = check_choice("output_gate", output_gate, OUTPUT_GATES)
        self.state_names = rcrn_state_names(cell)
        self.controller1 = GatedRNN(input_size, hidden_size, cell, bias)
        self.controller2 = GatedRNN(input_size, hidden_size, cell, bias)
        self.listener = GatedRNN(input_size, hidden_size, cell, bias)

    def rnns(self) -> tuple[GatedRNN, GatedRNN, GatedRNN]:
        """``(controller1, controller2, listener)``: the RNNs giving ``h^1``, ``h^2``, ``h^3``."""
        m = self._modules  # (one lookup each, where the attributes take nn.Module's)
        return m["controller1"], m["controller2"], m["listener"]  # type: ignore[return-value]

    def reset_parameters(self) -> None:
        """Initialises the three RNNs' weights again, as the constructor did."""
        reset_submodules(self)

    def forward(
        self, input: Tensor, state: tuple[Tensor, ...] | None = None
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """One step of eq 1-16; returns ``(h4, state)``, the output and the new states.

        Args:
            input: ``x_t``, ``(B, input_size)`` or unbatched ``(input_size,)``.
            state: the states after step ``t - 1``, a tuple in the order of
                :attr:`state_names` (``(h1, c1, h2, c2, h3, c3, c4)``, or ``(h1, h2, h3, c4)``
                with ``cell="gru"``), each ``(B, hidden_size)`` (``(hidden_size,)``
                unbatched); zeros when None.

        Returns:
            h4: the output of eq 16, ``(B, hidden_size)`` (``(hidden_size,)`` unbatched).
            state: the new states, in the order of :attr:`state_names`; pass them back.
        """
        # (the first RNN's weight read in one lookup each: a parametrized one, absent there,
        # is left to the step's own check)
        like = self._modules["controller1"]._parameters.get("weight_ih")  # type: ignore[union-attr]
        x, unbatched = step_input(input, self.input_size, like)
        B, H, n = x.shape[0], self.hidden_size, len(self.state_names)
        if state is None:
            st = [x.new_zeros(B, H) for _ in range(n)]
        else:
            if not isinstance(state, (tuple, list)) or len(state) != n:
                raise ValueError(f"state: expected a tuple of {n} tensors {self.state_names}")
            st = [s.unsqueeze(0) if unbatched else s for s in state]
            size = (B, H)
            for k, s in enumerate(st):  # (names and messages only where one is wrong)
                if not isinstance(s, Tensor) or s.shape != size:
                    got = tuple(s.shape) if isinstance(s, Tensor) else type(s).__name__
                    raise ValueError(f"state: expected {self.state_names[k]} of shape {size}, "
                                     f"got {got}")
        fused = rcrn_step.fused(self, x, st)  # the whole step as one op
        if fused is not None:
            h4, new = fused[0], fused[1:]
        elif rcrn_step.applies(x):  # each RNN one of torch's cell ops
            h4, new = rcrn_step.step(self, x, st)
        else:
            h4, new = self._step(x, st)
        if unbatched:
            return h4[0], tuple(s[0] for s in new)
        return h4, tuple(new)

    def _step(self, x: Tensor, st: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """Eq 1-16 written out (where a tracer records the step): ``(h4, new states)``."""
        k = self.controller1.num_states
        new: list[Tensor] = []
        outs: list[Tensor] = []
        for j, rnn in enumerate(self.rnns()):
            s = rnn.step(x, st[j * k : (j + 1) * k])
            new.extend(s)
            outs.append(s[0])
        h1, h2, h3 = outs
        f = torch.sigmoid(h1)
        c4 = f * st[-1] + (1 - f) * h3  # eq 15
        new.append(c4)
        return _gate(h2, self.output_gate) * c4, new  # eq 16

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, cell={self.cell!r}, "
            f"output_gate={self.output_gate!r}"
        )


class RCRN(RecurrentBase):
    """Recurrently controlled recurrent network with the ``torch.nn.LSTM`` interface; it returns
    ``(output, h_n)`` with ``h_n`` a tuple of 7 state tensors (4 with ``cell="gru"``), not
    ``(h_n, c_n)``.

    ``h_n`` holds the states of the three RNNs and the listener, in the order of
    :attr:`state_names`: ``(h1, c1, h2, c2, h3, c3, c4)``. ``output, (h, c) = rcrn(x)``
    raises; unpack as ``output, h_n = rcrn(x)``, and pass ``h_n`` back as ``hx``.

    Args:
        input_size: the width of the input's features, as in :class:`torch.nn.LSTM`.
        hidden_size: the width ``H`` of each RNN and of each direction's output ``h^4``.
        num_layers: ``num_layers > 1`` stacks RCRNs, each reading the previous one's output
            ``h^4``. The paper's model is ``num_layers=1, bidirectional=True``.
        bias: whether the three RNNs have biases.
        batch_first: ``input`` and ``output`` as ``(B, T, ...)`` instead of ``(T, B, ...)``
            (the states stay ``(num_layers * num_directions, B, H)``, as in ``nn.LSTM``).
        dropout: dropout on each layer's output but the last's, in training only.
        bidirectional: a second direction reads each sequence backwards; the output
            concatenates both, ``2 * hidden_size`` wide.
        cell: ``"lstm"`` (eq 1-14) or ``"gru"`` (the GRU variant of section 3.3, all three RNNs
            in torch.nn.GRU's formulation).
        output_gate: ``"sigmoid"`` (default: ``h4 = sigmoid(h2) * c4``, as the text and the
            authors' code) or ``"identity"`` (``h4 = h2 * c4``, eq 16 as printed).
        listener: with ``bidirectional=True``, ``"per_direction"`` (default: eq 15 runs forward
            over the forward channels and backward over the backward ones) or
            ``"concat_forward"`` (eq 15 runs forward over all ``[fw; bw]`` channels, as the
            authors' code does). Unidirectional layers ignore it (both are the same).
        weight_drop: DropConnect probability ``p`` on the recurrent matrices ``weight_hh``
            (the ``U`` of eq 1-6 and 10-14) of all three RNNs (:mod:`ctrlrnn.nn.weight_drop`,
            as AWD-LSTM applies it): in training each forward call draws one fresh mask per
            matrix, shared by all time steps, the kept weights scaled by ``1 / (1 - p)``; in
            evaluation the weights as they are.
        controllers: ``"native"`` (the three RNNs of each layer run on torch's own LSTM/GRU
            kernels, both directions per call, wherever those apply; module docstring),
            ``"fused"`` (always ctrlrnn's fused-cell engine) or ``"auto"`` (default: native,
            but fused where it measured faster: on CUDA with the Triton kernels, on CPU by
            :func:`fused_controllers_faster`). All
            compute eq 1-16 exactly (the tests hold them to each other and to the step-by-step
            reference), and draw the same weight-drop masks.

    Parameters: ``rcrn.cell(layer, direction)`` is an :class:`RCRNCell` holding ``controller1``,
    ``controller2`` and ``listener`` (:class:`GatedRNN`, torch.nn.LSTM/GRU layout), so a
    bidirectional RCRN has exactly three times the parameters of a one-layer bidirectional
    ``torch.nn.LSTM`` of the same sizes, and as many as a three-layer one when
    ``input_size == 2 * hidden_size`` (section 3.3).

    Attributes:
        cells[k].{controller1,controller2,listener}.weight_ih: the input weights of the three
            RNNs of layer ``k // num_directions`` in direction ``k % num_directions``
            (``torch.nn.LSTM``'s ``weight_ih_l0`` layout), of shape ``(G * hidden_size,
            input_size_l)``: ``G`` = 4 (``cell="lstm"``) or 3 (``"gru"``), ``input_size_l`` =
            ``input_size`` for the first layer, ``num_directions * hidden_size`` above.
        cells[k].{controller1,controller2,listener}.weight_hh: their recurrent weights, of
            shape ``(G * hidden_size, hidden_size)``.
        cells[k].{controller1,controller2,listener}.bias_ih: of shape ``(G * hidden_size,)``.
        cells[k].{controller1,controller2,listener}.bias_hh: of shape ``(G * hidden_size,)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import RCRN
        >>> rcrn = RCRN(input_size=4, hidden_size=8, bidirectional=True, batch_first=True)
        >>> output, h_n = rcrn(torch.randn(3, 5, 4))
        >>> output.shape
        torch.Size([3, 5, 16])
        >>> rcrn.state_names, h_n[-1].shape
        (('h1', 'c1', 'h2', 'c2', 'h3', 'c3', 'c4'), torch.Size([2, 3, 8]))
    """

    graph_steps = (4, 8_000_000)  # (LSTM cells: :mod:`ctrlrnn.ops.cell_step_grads`)

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
        cell: str = "lstm",
        output_gate: str = "sigmoid",
        listener: str = "per_direction",
        weight_drop: float = 0.0,
        controllers: str = "auto",
    ) -> None:
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional
        )
        self.weight_drop = check_weight_drop(weight_drop)
        self.controllers = check_choice("controllers", controllers, CONTROLLERS)
        self.cell_type = check_choice("cell", cell, CELLS)
        self.output_gate = check_choice("output_gate", output_gate, OUTPUT_GATES)
        self.listener = check_choice("listener", listener, LISTENERS)
        self.state_names = rcrn_state_names(cell)
        self.cells = nn.ModuleList(
            RCRNCell(
                self.layer_input_size(layer),
                hidden_size,
                cell=cell,
                output_gate=output_gate,
                bias=bias,
            )
            for layer in range(num_layers)
            for _ in range(self.num_directions)
        )

    def forward(
        self,
        input: Tensor | PackedSequence,
        hx: tuple[Tensor, ...] | None = None,
        lengths: Tensor | None = None,
    ) -> tuple[Tensor | PackedSequence, tuple[Tensor, ...]]:
        """Run the stack; returns ``(output, h_n)``, ``h_n`` the tuple of all 7 recurrent
        states (4 with ``cell="gru"``) where ``nn.LSTM`` returns ``(h_n, c_n)``.

        Unpack as ``output, h_n = rcrn(x)``; ``output, (h, c) = rcrn(x)`` raises
        ``ValueError`` (too many values to unpack).

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            hx: the initial states, zeros when None: a tuple in the order of
                :attr:`state_names`, each ``(num_layers * num_directions, B, hidden_size)``
                (``(num_layers * num_directions, hidden_size)`` unbatched). An ``h_n`` passed
                back continues the sequences exactly. ``nn.LSTM``'s ``(h_0, c_0)`` pair raises
                ``ValueError``.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, and ``h_n`` is taken at
                each true length.

        Returns:
            output: the last layer's ``h^4`` (eq 16) at every step, ``(T, B, num_directions *
                hidden_size)`` (``(B, T, ...)`` with ``batch_first``, ``(T, ...)`` unbatched,
                packed for packed input), zeros past each length; both directions
                concatenated, as in ``nn.LSTM``.
            h_n: the tuple of final states, in the order of :attr:`state_names`:
                ``(h1, c1, h2, c2, h3, c3, c4)`` (``cell="lstm"``) or ``(h1, h2, h3, c4)``
                (``"gru"``), each ``(num_layers * num_directions, B, hidden_size)``,
                layer-major, the forward direction first. With ``listener="concat_forward"``
                the backward direction's ``c4`` holds the backward channels of the forward
                scan (its state after the last valid step).

        Examples:
            >>> import torch
            >>> from ctrlrnn import RCRN
            >>> rcrn = RCRN(input_size=4, hidden_size=8, num_layers=2)
            >>> x = torch.randn(5, 3, 4)  # (time, batch, features)
            >>> output, h_n = rcrn(x)  # h_n: 7 states, not (h_n, c_n)
            >>> output.shape, len(h_n), h_n[-1].shape  # h_n[-1]: the listeners' c4
            (torch.Size([5, 3, 8]), 7, torch.Size([2, 3, 8]))
            >>> output, h_n = rcrn(x, h_n)  # the next chunk, from those states
        """
        out, h_n = super().forward(input, hx, lengths)
        assert isinstance(h_n, tuple)
        return out, h_n

    def cell(self, layer: int, direction: int = 0) -> RCRNCell:
        """The :class:`RCRNCell` of ``layer`` in ``direction`` (0 forward, 1 backward)."""
        return self.cells[layer * self.num_directions + direction]

    def native_applies(self, x: Tensor, lengths: Tensor | None) -> bool:
        """Whether this call's controllers run on torch's own LSTM/GRU (module docstring)."""
        if self.controllers == "fused" or x.dtype not in _NATIVE_DTYPES.get(x.device.type, ()):
            return False
        if x.shape[0] == 0 or x.shape[1] == 0 or reference_forced() or functorch_active():
            return False
        if torch.compiler.is_compiling() or torchscript_tracing() or scan_export.active():
            return False  # (a trace would keep the branch on full lengths taken when traced)
        if autocast_dtype(x.device) is not None:
            return False
        if self.controllers == "auto" and x.device.type == "cuda":
            # the Triton fused cells run the six RNNs faster than cuDNN at every shape the GPU
            # check times (docs/gpu.md: the two RCRN tables, with and without cuDNN)
            return not has_kernel("cells", x.device)
        if self.controllers == "auto" and x.device.type == "cpu":
            training = torch.is_grad_enabled() and (
                x.requires_grad or any(p.requires_grad for p in self.parameters()))
            varied = lengths is not None and not bool((lengths == x.shape[1]).all())
            return not fused_controllers_faster(self.hidden_size, x.shape[0], training,
                                                torch.get_num_threads(), varied)
        return True

    def _controllers_native(
        self, layer: int, x: Tensor, lengths: Tensor | None, state: State | None
    ) -> tuple[list[Tensor], list[list[Tensor]]]:
        """The three RNNs of ``layer`` on torch's kernels, each one call for both directions.

        Returns ``[h1, h2, h3]``, each ``(B, T, D * H)`` in forward time with the directions'
        channels ``[forward | backward]`` (torch's bidirectional LSTM output as it comes, a
        transposed view: the listener reads it in place), and, per direction, the final states
        of the three RNNs.
        """
        D, H = self.num_directions, self.hidden_size
        B, T = x.shape[0], x.shape[1]
        lstm = self.cell_type == "lstm"
        k = 2 if lstm else 1
        cells = [self.cell(layer, d) for d in range(D)]
        # DropConnect masks drawn in the order of the fused path (direction, then RNN), so a
        # seeded run draws the same masks on either engine.
        hh = [[drop_weight(r.weight_hh, self.weight_drop, self.training) for r in c.rnns()]
              for c in cells]
        full = lengths is None or bool((lengths == T).all())
        if not full:
            assert lengths is not None
            lens = lengths.to("cpu", torch.int64)
            sorted_lens, order = torch.sort(lens, descending=True)
            order = order.to(x.device)
            unorder = torch.empty_like(order)
            unorder[order] = torch.arange(B, device=x.device)
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                x.index_select(0, order), sorted_lens, batch_first=True)
        hs: list[Tensor] = []
        fins: list[list[Tensor]] = [[] for _ in range(D)]
        for j in range(3):
            weights: list[Tensor] = []
            for d in range(D):
                rnn = cells[d].rnns()[j]
                weights += [rnn.weight_ih, hh[d][j]]
                if rnn.bias_ih is not None and rnn.bias_hh is not None:
                    weights += [rnn.bias_ih, rnn.bias_hh]
            has_bias = len(weights) == 4 * D
            if state is None:
                h0 = [x.new_zeros(D, B, H) for _ in range(k)]
            else:
                h0 = [s.contiguous() for s in state[j * k : (j + 1) * k]]
            if not full:
                h0 = [s.index_select(1, order) for s in h0]
            hx: Any = tuple(h0) if lstm else h0[0]
            run = torch._VF.lstm if lstm else torch._VF.gru
            if full:
                res = run(x, hx, weights, has_bias, 1, 0.0, self.training, D == 2, True)
                out = res[0]
            else:
                res = run(packed.data, packed.batch_sizes, hx, weights, has_bias, 1, 0.0,
                          self.training, D == 2)
                seq = torch.nn.utils.rnn.PackedSequence(res[0], packed.batch_sizes)
                out, _ = torch.nn.utils.rnn.pad_packed_sequence(
                    seq, batch_first=True, total_length=T)
                out = out.index_select(0, unorder)
            finals = list(res[1:1 + k])
            if not full:
                finals = [f.index_select(1, unorder) for f in finals]
            hs.append(out)
            for d in range(D):
                fins[d].extend(f[d] for f in finals)
        return hs, fins

    def _controllers_fused(
        self, layer: int, x: Tensor, lengths: Tensor | None, state: State | None
    ) -> tuple[list[Tensor], list[list[Tensor]]]:
        """The three RNNs of ``layer`` in both directions on the fused-cell engine, as one call
        (:func:`run_sequences`); the backward direction runs on each sequence reversed within
        its length. Returns what :meth:`_controllers_native` returns: ``[h1, h2, h3]`` in
        forward time, channels ``[forward | backward]``, and the final states per direction."""
        D = self.num_directions
        k = 2 if self.cell_type == "lstm" else 1
        calls = []  # the 3 * D RNNs, direction-major (the order of the weight-drop masks)
        xs = [x if d == 0 else reverse_padded(x, lengths) for d in range(D)]
        rnns = [rnn for d in range(D) for rnn in self.cell(layer, d).rnns()]
        # the 3 * D input projections (eq 1-6, 10-14: W x_t + b) in one batched GEMM
        x_proj = project_all(rnns, [xs[r // 3] for r in range(len(rnns))])
        for r, rnn in enumerate(rnns):
            d, j = divmod(r, 3)
            st = None if state is None else [s[d] for s in state[j * k : (j + 1) * k]]
            calls.append(rnn.call(xs[d], st, self.weight_drop, x_proj=x_proj[r]))
        results = [GatedRNN.results(out) for out in run_sequences(calls, lengths)]
        fins: list[list[Tensor]] = []  # per direction: final states of the three RNNs
        for d in range(D):
            fins.append([f for _, fin in results[3 * d : 3 * d + 3] for f in fin])
        hs = [h for h, _ in results[:3]]
        if D == 2:  # the backward direction's outputs to forward time, beside the forward's
            hs = [torch.cat([h, reverse_padded(hb, lengths)], dim=-1)
                  for h, (hb, _) in zip(hs, results[3:])]
        return hs, fins

    def _run_layer(
        self,
        layer: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        """Both directions of one RCRN layer (eq 7-9, 10-14 bidirectional, then eq 15-16).

        The backward direction's RNNs read each sequence reversed within its length. Its
        listener channels are scanned from the last valid step back (``per_direction``) or
        brought to forward time and scanned with the forward channels (``concat_forward``).
        """
        by_steps = self._layer_by_steps(layer, x, lengths, state)
        if by_steps is not None:
            return by_steps
        D, H = self.num_directions, self.hidden_size
        x = x.contiguous()  # one copy of a time-major input, not one per projection GEMM
        native = self.native_applies(x, lengths)
        run = self._controllers_native if native else self._controllers_fused
        hs, fins = run(layer, x, lengths, state)
        c40 = None if state is None else state[-1]  # (D, B, H)
        c0 = None if c40 is None else (c40[0] if D == 1 else torch.cat([c40[0], c40[1]], -1))
        # eq 15-16 for every channel of both directions in one op: the backward direction's
        # channels (from H) scanned from each sequence's last valid step back (per_direction),
        # or all channels forward (concat_forward, the authors' code)
        split = H if D == 2 and self.listener == "per_direction" else D * H
        out, c_last = rcrn_listener(*hs, c0, lengths=lengths, output_gate=self.output_gate,
                                    split=split)
        c4_last = [c_last[:, d * H : (d + 1) * H] for d in range(D)]
        for d in range(D):
            fins[d].append(c4_last[d])
        return out, [torch.stack([f[i] for f in fins], 0) for i in range(self.num_states)]

    def _steps_of_direction(
        self, layer: int, direction: int, xs: list[Tensor], state: State | None, **kwargs: Any
    ) -> tuple[list[Tensor], State] | None:
        """Eq 1-16 per step as one op (:func:`ctrlrnn.nn.rcrn_step.fused`): LSTM cells, one
        direction or two with the per-direction listener (whose backward channels are the
        backward steps)."""
        if self.cell_type != "lstm" or (self.num_directions == 2 and
                                        self.listener != "per_direction"):  # fmt: skip
            return None
        cell = self.cell(layer, direction)
        B, H = xs[0].shape[0], self.hidden_size
        st = [xs[0].new_zeros(B, H) for _ in range(self.num_states)] if state is None else state
        return rcrn_step.fused_steps(cell, xs, st)  # (None: an operand the op does not take)

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", cell={self.cell_type!r}, output_gate={self.output_gate!r}"
        if self.controllers != "auto":
            s += f", controllers={self.controllers!r}"
        if self.bidirectional:
            s += f", listener={self.listener!r}"
        if self.weight_drop:
            s += f", weight_drop={self.weight_drop}"
        return s
