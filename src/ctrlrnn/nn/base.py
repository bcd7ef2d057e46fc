"""The shared base of ctrlrnn's recurrent layers: the :class:`torch.nn.LSTM` contract.

``Layer(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
bidirectional=False, ...)`` and ``forward(input, hx=None, lengths=None) -> (output, h_n)``:

* ``input``: ``(T, B, D)`` (``(B, T, D)`` with ``batch_first``), unbatched ``(T, D)``, or a
  :class:`~torch.nn.utils.rnn.PackedSequence` (then ``output`` is packed too);
* ``lengths``: optional ``(B,)`` true lengths of a padded batch; outputs past a sequence's length
  are zero, final states are taken at the true length, the backward direction reverses each
  sequence within its own length, so nothing depends on what (or how much) padding there is;
* ``hx``/``h_n``: a tensor ``(num_layers * num_directions, B, S)`` for units with one state, a
  tuple of such tensors for units with several (as ``(h, c)`` for LSTM-like units);
* ``output`` and every state tensor are contiguous in either layout, as :class:`torch.nn.LSTM`
  returns them (``output.view(-1, H)`` works);
* wrong shapes, dtypes, devices, lengths or states raise ``ValueError`` naming the argument.

Internally everything is batch-first ``(B, T, D)``. A subclass implements
:meth:`RecurrentBase._run_direction` (one direction of one layer, forward in time), may
implement :meth:`RecurrentBase._direction_call` (the same direction as one recurrence of the
fused-cell engine, so both directions run in one call) and may override :meth:`_run_layer`
(both directions of a layer) or :meth:`_run_stack` (all layers) when its layers or directions
interact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ctrlrnn.nn.arguments import check_flag, check_positive_int, check_rate
from ctrlrnn.nn.initialization import reset_submodules
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.autocast import accepts_dtype, autocast_dtype
from ctrlrnn.ops.cached_linear import cached_linear, cached_linear_each
from ctrlrnn.ops.compiled_op import eager_ok
from ctrlrnn.ops.padding import reverse_padded, zero_padding
from ctrlrnn.ops.validation import check_lengths

State = list[Tensor]  # one tensor per state variable of the unit


#: The longest call without a recorded graph that a layer runs step by step, one fused cell op
#: per step (:meth:`RecurrentBase._layer_by_steps`), at a batch of at most
#: ``cell_steps.MAX_BATCH`` rows.
STEP_PATH_MAX_LENGTH = 8

def short_call_steps(module: nn.Module, x: Tensor, lengths: Tensor | None,
                     draws_in_training: bool) -> list[Tensor] | None:  # fmt: skip
    """The steps ``x[:, t]`` (contiguous) of a call the fused step ops may serve one by one, or
    None: grad recorded (unless the module's steps record it and the call is short enough for
    them, :func:`graph_steps_fit`), tracing, lengths, random masks to draw
    (``draws_in_training`` and the module training), more than :data:`STEP_PATH_MAX_LENGTH`
    steps or ``cell_steps.MAX_BATCH`` rows, or an input :func:`ctrlrnn.ops.cell_steps.kernels`
    refuses. Grad and tracing are asked first: a shape compared under ``torch.export`` or
    ``torch.compile`` would become a guard of the traced graph, and a slice a recorded op."""
    graph = torch.is_grad_enabled()
    if (graph and not getattr(module, "graph_steps", None)) or not eager_ok(x):
        return None
    if lengths is not None or (graph and not graph_steps_fit(module, x)):
        return None
    if draws_in_training and module.training:
        return None
    T = x.shape[1]
    if T == 0 or T > STEP_PATH_MAX_LENGTH or x.shape[0] > cell_steps.MAX_BATCH:
        return None
    xs = [x[:, t].contiguous() for t in range(T)]
    return xs if cell_steps.kernels(xs[0], graph=graph) is not None else None


def graph_steps_fit(module: nn.Module, x: Tensor) -> bool:
    """Whether a call on ``x`` ``(B, T, D)`` that records a graph runs by steps
    (:func:`short_call_steps`): within the module's :attr:`RecurrentBase.graph_steps`, at most
    so many steps and so much weight-gradient work (rows x steps x weights)."""
    longest, most = module.graph_steps
    if x.shape[1] > longest:
        return False
    weights = sum(p.numel() for p in module.parameters())
    return x.shape[0] * x.shape[1] * weights <= most


def _along(tensors: list[Tensor], dim: int, taken: Tensor | None = None) -> Tensor:
    """``torch.stack(tensors, dim)``; one tensor other than ``taken`` (one another result
    views) is a view with a new axis, not a copy: a decoding step's state is one step of one
    direction."""
    if len(tensors) == 1 and tensors[0] is not taken:
        return tensors[0].unsqueeze(dim)
    return torch.stack(tensors, dim)


@dataclass(frozen=True)
class DirectionCall:
    """One direction of a layer as one recurrence of the fused-cell engine: ``run`` is the
    cell's ``<cell>_sequences`` (:mod:`ctrlrnn.ops.fused_cells`), ``arguments`` this
    direction's keyword arguments to it, ``finish`` turns its result into the direction's
    ``(output, final states)``."""

    run: Callable[[list[dict[str, Any]], Tensor | None], list[tuple[Tensor, ...]]]
    arguments: dict[str, Any]
    finish: Callable[[tuple[Tensor, ...]], tuple[Tensor, State]]
    #: Where set, ``(x, weight, bias)``: this direction's ``x_proj`` (the input projections of
    #: all steps, ``F.linear(x, weight, bias)``), left to :func:`run_directions`, which makes
    #: those of all the directions of a layer in one op.
    projection: tuple[Tensor, Tensor, Tensor | None] | None = None


def run_directions(calls: list[DirectionCall], lengths: Tensor | None
                   ) -> list[tuple[Tensor, State]]:  # fmt: skip
    """The directions' calls (of one cell) as one call of the fused-cell engine, each finished.
    Their deferred input projections (:attr:`DirectionCall.projection`) come first: in one op
    where every call defers one of the same shapes (:func:`cached_linear_each`: one stacked
    block, which the engine takes as its stack without a copy), else one :func:`cached_linear`
    each."""
    arguments = [dict(c.arguments) for c in calls]
    pending = [c.projection for c in calls]
    first = pending[0]
    alike = first is not None and all(
        p is not None and p[0].shape == first[0].shape and p[1].shape == first[1].shape
        and (p[2] is None) == (first[2] is None) for p in pending)  # fmt: skip
    if len(calls) > 1 and alike:
        projections = cached_linear_each([p[0] for p in pending],  # type: ignore[index]
                                         [p[1] for p in pending],  # type: ignore[index]
                                         [p[2] for p in pending])  # type: ignore[index]
        for a, proj in zip(arguments, projections, strict=True):
            a["x_proj"] = proj
    else:
        for a, p in zip(arguments, pending, strict=True):
            if p is not None:
                a["x_proj"] = cached_linear(*p)
    results = calls[0].run(arguments, lengths)
    return [c.finish(r) for c, r in zip(calls, results, strict=True)]


def _pad(input: PackedSequence) -> tuple[Tensor, Tensor]:
    """``pad_packed_sequence(input, batch_first=True)``, also on the ``meta`` device.

    torch puts the lengths of an unsorted packed batch back in the batch's order by reading
    ``unsorted_indices``, which on the meta device holds no values. There the padded batch is
    put back in its order (``index_select``, shapes only) and the lengths stay in the packed
    (sorted) order: the same lengths, so every shape they give is the batch order's."""
    if input.data.device.type == "meta" and input.unsorted_indices is not None:
        padded, lengths = pad_packed_sequence(PackedSequence(input.data, input.batch_sizes),
                                              batch_first=True)  # fmt: skip
        return padded.index_select(0, input.unsorted_indices), lengths
    return pad_packed_sequence(input, batch_first=True)


def _pack_padded(out: Tensor, lengths: Tensor) -> PackedSequence:
    return pack_padded_sequence(out, lengths, batch_first=True, enforce_sorted=False)


_OUTSIDE_COMPILE: dict[str, Any] = {}


def _outside_compile(fn: Any) -> Any:
    """``fn`` wrapped by ``torch.compiler.disable``, made on first use: the wrapper imports
    torch._dynamo (and with it Triton), which ``import ctrlrnn`` must not."""
    wrapped = _OUTSIDE_COMPILE.get(fn.__name__)
    if wrapped is None:
        wrapped = _OUTSIDE_COMPILE[fn.__name__] = torch.compiler.disable(fn)
    return wrapped


def _unpack(input: PackedSequence) -> tuple[Tensor, Tensor]:
    """``pad_packed_sequence`` run outside any ``torch.compile`` graph. torch 2.13's dynamo skips
    it (a graph break); torch 2.11's tries to trace it and fails on fake tensors ("data is not
    allocated yet"). Disabling it here gives every version the same graph break."""
    return _outside_compile(_pad)(input)


def _pack(out: Tensor, lengths: Tensor) -> PackedSequence:
    """``pack_padded_sequence`` outside any ``torch.compile`` graph, as in :func:`_unpack`."""
    return _outside_compile(_pack_padded)(out, lengths)


class RecurrentBase(Traceable, nn.Module):
    """Base class with the ``torch.nn.LSTM`` interface (see the module docstring); ``forward``
    returns ``(output, h_n)``, ``h_n`` the unit's own state (:attr:`state_names`): one tensor
    or a tuple of them, not always ``nn.LSTM``'s ``(h_n, c_n)``.

    Examples:
        >>> from ctrlrnn import QRNN, RecurrentBase
        >>> layer = QRNN(input_size=4, hidden_size=8, bidirectional=True)
        >>> isinstance(layer, RecurrentBase), layer.output_size, layer.state_names
        (True, 16, ('c',))
    """

    #: names of the state variables carried between steps, e.g. ``("h", "c")``
    state_names: tuple[str, ...] = ("h",)
    #: Where the unit's fused steps (:meth:`_steps_of_direction`) record an autograd graph, the
    #: longest call that records one they serve: ``(steps, rows x steps x weights)``
    #: (:func:`graph_steps_fit`); None where they record none. Each step is an autograd node of
    #: its own whose backward writes every weight's gradient whole, where the whole-sequence
    #: path writes it once: the limits are where the steps were measured faster
    #: (docs/overhead.md).
    graph_steps: tuple[int, int] | None = None

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.dropout = check_rate("dropout", dropout)
        self.bias = check_flag("bias", bias)
        self.batch_first = check_flag("batch_first", batch_first)
        self.bidirectional = check_flag("bidirectional", bidirectional)

    # ------------------------------------------------------------------ sizes
    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_states(self) -> int:
        return len(self.state_names)

    def state_size(self, index: int) -> int:
        """Width of state variable ``index`` (the hidden size unless a unit says otherwise)."""
        return self.hidden_size

    def direction_output_size(self) -> int:
        """Width of one direction's output."""
        return self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        """Input width of ``layer`` (the previous layer's output, both directions)."""
        if layer == 0:
            return self.input_size
        return self.direction_output_size() * self.num_directions

    @property
    def output_size(self) -> int:
        return self.direction_output_size() * self.num_directions

    def flatten_parameters(self) -> None:
        """A no-op, for code written for :class:`torch.nn.LSTM` (which calls it after moving the
        module, e.g. under ``DataParallel``): ctrlrnn's kernels read the weights where they are,
        so there is nothing to flatten."""

    def reset_parameters(self) -> None:
        """Initialises every weight again as the constructor did, as
        :meth:`torch.nn.LSTM.reset_parameters` does: each submodule's own ``reset_parameters``,
        in the order the constructor built them, so that under the same seed a module built on
        the ``meta`` device, then given memory by ``to_empty()``, gets the weights a module built
        directly would have."""
        reset_submodules(self)

    def _param_ref(self) -> Tensor | None:
        """The first parameter (its dtype and device are the module's), or None. A plain loop:
        torch 2.5's dynamo cannot trace ``next(iter(...), default)``."""
        for param in self.parameters():
            return param
        return None

    # ------------------------------------------------------------------ input handling
    def _prepare_input(
        self, input: Tensor | PackedSequence, lengths: Tensor | None, ref: Any = False
    ) -> tuple[Tensor, Tensor | None, bool, bool]:
        """Return batch-first ``x``, validated CPU ``lengths``, ``packed`` and ``unbatched``
        (``ref``: the first parameter when the caller has it, as in :meth:`_prepare_hx`)."""
        packed = isinstance(input, PackedSequence)
        unbatched = False
        if packed:
            if lengths is not None:
                raise ValueError("lengths: must not be given with a PackedSequence input")
            x, lengths = _unpack(input)
        else:
            if not isinstance(input, Tensor):
                raise ValueError(
                    f"input: expected a Tensor or PackedSequence, got {type(input).__name__}"
                )
            if input.dim() == 2:
                unbatched = True
                x = input.unsqueeze(0)
            elif input.dim() == 3:
                x = input if self.batch_first else input.transpose(0, 1)
            else:
                layout = "(B, T, D)" if self.batch_first else "(T, B, D)"
                raise ValueError(
                    f"input: expected a 3-D {layout} tensor (batch_first={self.batch_first}) "
                    f"or a 2-D unbatched (T, D) tensor, got shape {tuple(input.shape)}"
                )
        if x.shape[-1] != self.input_size:
            raise ValueError(
                f"input: expected feature size input_size={self.input_size}, got {x.shape[-1]}"
            )
        if x.shape[1] == 0:
            raise ValueError("input: expected at least one time step, got 0")
        ref = self._param_ref() if ref is False else ref
        if not x.is_floating_point():
            raise ValueError(f"input: expected a floating dtype, got {x.dtype}")
        if ref is not None:
            if not accepts_dtype(x.dtype, ref.dtype, x.device):
                raise ValueError(
                    f"input: expected dtype {ref.dtype} (the parameters'), got {x.dtype}; "
                    f"convert the input or the module with .to()"
                )
            if x.device != ref.device:
                raise ValueError(
                    f"input: expected device {ref.device} (the parameters'), got {x.device}"
                )
        if lengths is not None:
            if unbatched:
                raise ValueError("lengths: not supported with unbatched (2-D) input")
            lengths = check_lengths(lengths, x.shape[0], x.shape[1])
            x = zero_padding(x, lengths)  # the padding's content reaches no gradient
        return x, lengths, packed, unbatched

    def _prepare_hx(self, hx: Tensor | tuple[Tensor, ...] | None, x: Tensor, unbatched: bool,
                    ref: Any = False):
        """The states of ``hx`` checked, each ``(L*D, B, S)``; ``ref``: the first parameter
        when the caller has it (:meth:`_param_ref`), so the module is walked once per call."""
        if hx is None:
            return None
        if not isinstance(hx, (Tensor, tuple, list)):
            raise ValueError(f"hx: expected a Tensor or a tuple of Tensors "
                             f"({', '.join(self.state_names)}), got {type(hx).__name__}")
        states = [hx] if isinstance(hx, Tensor) else list(hx)
        if len(states) != self.num_states:
            want = "a Tensor" if self.num_states == 1 else f"a tuple of {self.num_states} Tensors"
            lstm = ""
            if len(states) == 2:  # most likely an nn.LSTM (h0, c0) pair
                lead: tuple[int, ...] = (self.num_layers * self.num_directions,)
                if not unbatched:
                    lead += (x.shape[0],)
                shapes = ", ".join(f"{name} {(*lead, self.state_size(k))}"
                                   for k, name in enumerate(self.state_names))
                lstm = (f"; nn.LSTM's (h0, c0) pair is not this layer's state: pass {shapes}, "
                        f"or None for zeros (the page 'From torch.nn.LSTM to ctrlrnn' of "
                        f"ctrlrnn's documentation lists every layer's state)")
            raise ValueError(f"hx: {type(self).__name__} carries {self.num_states} state(s), "
                             f"expected {want} ({', '.join(self.state_names)}), got "
                             f"{len(states)}{lstm}")
        out = []
        ld = self.num_layers * self.num_directions
        allowed: set[torch.dtype] | None = None  # made when a state's dtype is not x's
        dtype, device = x.dtype, x.device
        for k, s in enumerate(states):
            if not isinstance(s, Tensor):
                raise ValueError(f"{self._state_name(k)}: expected a Tensor, got "
                                 f"{type(s).__name__}")
            if unbatched:
                s = s.unsqueeze(1)
            want = (ld, x.shape[0], self.state_size(k))
            if s.shape != want:
                raise ValueError(f"{self._state_name(k)}: expected shape {want}, got "
                                 f"{tuple(s.shape)}")
            if s.dtype is not dtype and allowed is None:
                allowed = self._allowed_state_dtypes(x, ref)
            if (s.dtype is not dtype and s.dtype not in allowed) or s.device != device:
                raise ValueError(
                    f"{self._state_name(k)}: expected dtype {dtype} on {device} (the "
                    f"input's), got {s.dtype} on {s.device}"
                )
            out.append(s)
        return out

    def _state_name(self, k: int) -> str:
        """How an error names state ``k`` of ``hx``."""
        return "hx" if self.num_states == 1 else f"hx[{k}] ({self.state_names[k]})"

    def _allowed_state_dtypes(self, x: Tensor, ref: Any = False) -> set[torch.dtype]:
        """The dtypes a state may have: the input's, and under autocast also the parameters'
        and the autocast dtype (``ref`` as in :meth:`_prepare_hx`)."""
        allowed = {x.dtype}
        cast = autocast_dtype(x.device)
        ref = self._param_ref() if ref is False else ref
        if cast is not None and ref is not None:
            allowed |= {cast, ref.dtype}
        return allowed

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input: Tensor | PackedSequence,
        hx: Tensor | tuple[Tensor, ...] | None = None,
        lengths: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor | PackedSequence, Tensor | tuple[Tensor, ...]]:
        """Run every layer over ``input``; returns ``(output, h_n)``, ``h_n`` the layer's own
        state (:attr:`state_names`), which need not be ``nn.LSTM``'s ``(h_n, c_n)``.

        Each layer documents its own ``forward`` and what its state holds. A state of one
        tensor, ``(num_layers * num_directions, B, S)``, unpacks along its first axis: written
        as ``output, (h, c) = layer(x)``, a two-layer state splits by layer without an error.

        Args:
            input: ``(T, B, input_size)``; ``(B, T, input_size)`` with ``batch_first=True``;
                unbatched ``(T, input_size)``; or a ``PackedSequence`` (then ``output`` is
                packed too).
            hx: the initial state, zeros when None: one tensor where :attr:`state_names` has one
                name, else a tuple in that order; each ``(num_layers * num_directions, B, S)``
                (``(num_layers * num_directions, S)`` unbatched), ``S`` = :meth:`state_size`.
                A returned ``h_n`` passed back continues the sequences.
            lengths: ``(B,)`` integer true lengths of a padded batch (not with a
                ``PackedSequence``). Outputs past a length are zero, and ``h_n`` is taken at
                each true length.
            **kwargs: the unit's own per-call inputs (a subclass's ``forward`` names them);
                any other keyword raises ``TypeError``.

        Returns:
            output: the last layer's output at every step, ``(T, B, num_directions *
                hidden_size)`` (``(B, T, ...)`` with ``batch_first``, ``(T, ...)`` unbatched,
                packed for packed input), zeros past each length.
            h_n: the final state, in the layout of ``hx``: a tensor, or a tuple of tensors.
        """
        ref = self._param_ref()  # the module walked once per call
        x, lens, packed, unbatched = self._prepare_input(input, lengths, ref)
        states = self._prepare_hx(hx, x, unbatched, ref)
        self._check_extra(x, lens, kwargs)
        out, finals = self._run_stack(x, lens, states, **kwargs)
        h_n: Tensor | tuple[Tensor, ...]
        if unbatched:
            out = out.squeeze(0)
            finals = [f.squeeze(1) for f in finals]
        h_n = finals[0] if self.num_states == 1 else tuple(finals)
        if packed:
            assert lens is not None
            return _pack(out, lens), h_n
        if not self.batch_first and not unbatched:
            # time-major (T, B, H) laid out densely, as nn.LSTM returns it, so that
            # output.view(-1, H) works; contiguous() copies only when the transpose is not
            # already dense (B > 1 and T > 1)
            out = out.transpose(0, 1).contiguous()
        return out, h_n

    def _check_extra(self, x: Tensor, lengths: Tensor | None, kwargs: dict[str, Any]) -> None:
        """Validate unit-specific per-call inputs (subclasses); unknown keywords are refused."""
        if kwargs:
            raise TypeError(f"forward() got unexpected keyword arguments {sorted(kwargs)}")

    def _run_stack(
        self, x: Tensor, lengths: Tensor | None, states: State | None, **kwargs: Any
    ) -> tuple[Tensor, State]:
        """All layers: returns the last layer's output and the final states ``(L*D, B, S)``."""
        D = self.num_directions
        finals: list[State] = []
        layer_in = x
        out = x
        for layer in range(self.num_layers):
            st = states
            if states is not None and self.num_layers > 1:
                st = [s[layer * D : (layer + 1) * D] for s in states]
            out, fin = self._run_layer(layer, layer_in, lengths, st, **kwargs)
            finals.append(fin)
            if layer + 1 < self.num_layers:
                nxt = out
                if self.dropout > 0 and self.training:
                    nxt = F.dropout(nxt, self.dropout, training=True)
                layer_in = self._next_layer_input(layer_in, nxt)
        if len(finals) == 1:  # (a concatenation of one would copy every state)
            return out, finals[0]
        merged = [torch.cat([f[k] for f in finals], 0) for k in range(self.num_states)]
        return out, merged

    def _next_layer_input(self, layer_input: Tensor, layer_output: Tensor) -> Tensor:
        """What the next layer reads (the output; dense units also concatenate the input)."""
        return layer_output

    def _layer_by_steps(
        self, layer: int, x: Tensor, lengths: Tensor | None, state: State | None, **kwargs: Any
    ) -> tuple[Tensor, State] | None:
        """A short call where no graph is recorded (a decoding or streaming step at a small
        batch): each direction by its cell's fused step op, one op per time step
        (:meth:`_steps_of_direction`), or None where the layer's whole-sequence path runs.

        The whole-sequence path's recurrences, projections and stacking cost a fixed time per
        call that a few one-op steps undercut; it still runs past
        :data:`STEP_PATH_MAX_LENGTH` steps, with lengths, with weight-drop masks to draw, and
        wherever :func:`ctrlrnn.ops.cell_steps.kernels` refuses the step (grad, a batch over
        its limit, dtype, device, tracing).
        """
        if type(self)._steps_of_direction is RecurrentBase._steps_of_direction:
            return None  # a unit without fused steps
        xs = short_call_steps(self, x, lengths, bool(getattr(self, "weight_drop", 0)))
        if xs is None:
            return None
        outs: list[Tensor] = []
        finals: list[State] = []
        for d in range(self.num_directions):
            sd = None if state is None else [s[d] for s in state]
            order = xs if d == 0 else xs[::-1]  # the backward direction reads time reversed
            got = self._steps_of_direction(layer, d, order, sd, **kwargs)
            if got is None:  # (no step has changed anything: the whole path starts afresh)
                return None
            hs, fin = got
            outs.append(_along(hs if d == 0 else hs[::-1], 1))
            finals.append(fin)
        out = outs[0] if len(outs) == 1 else torch.cat(outs, -1)
        # a state that is the step's output (CARNN's h) is copied where the output is a view
        # of it: the two must not share memory, as the whole-sequence path's do not
        viewed = hs[0] if len(hs) == 1 and len(outs) == 1 else None
        return out, [_along([f[k] for f in finals], 0, viewed) for k in range(self.num_states)]

    def _steps_of_direction(
        self, layer: int, direction: int, xs: list[Tensor], state: State | None, **kwargs: Any
    ) -> tuple[list[Tensor], State] | None:
        """The outputs of ``direction`` over the steps ``xs`` (each ``(B, input)``, contiguous,
        in the direction's processing order) and its final states, each step one fused op of
        its cell; None where the unit has no such op for this layer (the default)."""
        return None

    def _run_layer(
        self,
        layer: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        """Both directions of one layer; the backward one runs on each reversed sequence.

        Where every direction is one recurrence of the fused-cell engine
        (:meth:`_direction_call`), the directions run as one call of it (on CPU concurrently
        where one direction cannot fill the threads); else one :meth:`_run_direction` each.
        """
        by_steps = self._layer_by_steps(layer, x, lengths, state, **kwargs)
        if by_steps is not None:
            return by_steps
        outs, fins = [], []
        xs = [x if d == 0 else reverse_padded(x, lengths) for d in range(self.num_directions)]
        sds = [None if state is None else [s[d] for s in state] for d in range(len(xs))]
        calls = [self._direction_call(layer, d, xd, lengths, sd, **kwargs)
                 for d, (xd, sd) in enumerate(zip(xs, sds, strict=True))] if len(xs) > 1 else []
        if calls and all(c is not None for c in calls):
            done = run_directions([c for c in calls if c is not None], lengths)
        else:
            done = [self._run_direction(layer, d, xd, lengths, sd, **kwargs)
                    for d, (xd, sd) in enumerate(zip(xs, sds, strict=True))]  # fmt: skip
        for d, (o, f) in enumerate(done):
            outs.append(o if d == 0 else reverse_padded(o, lengths))
            fins.append(f)
        if len(outs) == 1:  # (the stack's copy is left to _run_stack's concatenation)
            return outs[0], [f.unsqueeze(0) for f in fins[0]]
        out = torch.cat(outs, dim=-1)
        return out, [torch.stack([f[k] for f in fins], 0) for k in range(self.num_states)]

    def _direction_call(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> DirectionCall | None:
        """What :meth:`_run_direction` would run, as one recurrence of the fused-cell engine,
        so that :meth:`_run_layer` runs the directions in one call; None (the default) where
        the direction is not one such recurrence. Must draw random numbers (weight-drop masks)
        exactly as :meth:`_run_direction` does."""
        return None

    def _run_direction(
        self,
        layer: int,
        direction: int,
        x: Tensor,
        lengths: Tensor | None,
        state: State | None,
        **kwargs: Any,
    ) -> tuple[Tensor, State]:
        """One direction of one layer, forward in time over batch-first ``x``.

        Must return the output ``(B, T, H)`` with zeros past each length, and the final states
        (each ``(B, S)``) taken at each sequence's true length.
        """
        raise NotImplementedError

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s
