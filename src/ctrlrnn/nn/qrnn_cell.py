"""One QRNN layer's step (QRNN paper eq 1-5: the convolutional gates over a window, then f/fo/ifo
pooling), usable step by step: :class:`QRNNCell`; :class:`QRNN` (:mod:`ctrlrnn.nn.qrnn`) is
the layer."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_flag, check_positive_int
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.parameter_lookup import parameters
from ctrlrnn.nn.qrnn_windows import (
    causal_windows,
    centred_windows,
    check_pooling,
    check_zoneout,
    check_zoneout_eval,
    zoneout_keep,
)
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.ops import cell_step_grads, cell_steps
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.compiled_op import eager_ok
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE, POOLING_MODES, pooling_step, qrnn_pooling
from ctrlrnn.ops.validation import step_input


def short_pooling(gates: Tensor, c: Tensor | None) -> bool:
    """Whether a step's pooling (eq 3-5 at ``T = 1``) may call the kernel without the wrapper
    (:func:`~ctrlrnn.ops.qrnn_pooling.pooling_step`): no autograd graph can be recorded,
    nothing traces, no autocast is on, and the state has the gates' dtype (the wrapper's
    check, whose error the kernel would not give)."""
    if c is None:
        c = gates
    if torch.is_grad_enabled() and (gates.requires_grad or c.requires_grad):
        return False
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return False
    return (c.dtype == gates.dtype and eager_ok(gates, c)
            and autocast_dtype(gates.device) is None)  # fmt: skip


class QRNNCell(Traceable, nn.Module):
    """One QRNN layer direction, usable step by step for decoding; it returns ``(h, (c,
    history))``: the state holds the memory cell and the window's last inputs.

    ``forward(input, state=None, encoder_state=None) -> (h, (c, history))`` with ``input``
    ``(B, input_size)``; ``history`` keeps the last ``window - 1`` inputs ``(B, window - 1,
    input_size)`` so that the convolution of eq 1 sees the same window as in
    :class:`QRNN`. Feeding a sequence through the cell gives the outputs of a one-layer
    unidirectional :class:`QRNN` with the same weights.

    ``causal=False`` makes the cell a layer of a non-causal (encoder) :class:`QRNN`: its
    convolution is centred on ``t`` (:func:`centred_windows`) and reads inputs not yet seen, so
    it computes gates over whole sequences only (:meth:`gate_preactivations`); stepping it
    (:meth:`forward`, :meth:`step_preactivations`) raises ``ValueError``.

    The state dict records ``window`` and ``causal`` (``_extra_state``); loading one saved with
    other values raises ``ValueError``. (A state dict saved before the record existed loads
    without the check.)

    Attributes:
        weight: the convolution weights ``[W_z; W_f (; W_o (; W_i))]`` of eq 1-2, of shape
            ``(G * hidden_size, window * input_size)`` (``G`` = 2, 3 or 4 for f-, fo- or
            ifo-pooling; the taps oldest first).
        bias: the gates' biases, of shape ``(G * hidden_size,)``.
        encoder_weight: the ``V`` of eq 7 (``encoder_state_size`` given), of shape
            ``(G * hidden_size, encoder_state_size)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import QRNNCell
        >>> cell = QRNNCell(input_size=4, hidden_size=8)
        >>> state = None
        >>> for x_t in torch.randn(5, 3, 4):  # five steps of a batch of 3
        ...     h, state = cell(x_t, state)
        >>> h.shape, state[0].shape, state[1].shape  # output, memory cell, window history
        (torch.Size([3, 8]), torch.Size([3, 8]), torch.Size([3, 1, 4]))
    """

    @factory_arguments
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        window: int = 2,
        pooling: str = "fo",
        bias: bool = True,
        zoneout: float = 0.0,
        zoneout_eval: str = "expectation",
        encoder_state_size: int | None = None,
        causal: bool = True,
    ) -> None:
        super().__init__()
        self.zoneout_eval = check_zoneout_eval(zoneout_eval)
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.window = check_positive_int("window", window)
        self.pooling = check_pooling(pooling)
        self.zoneout = check_zoneout(zoneout)
        self.causal = check_flag("causal", causal)
        self.num_gates = GATES_PER_MODE[pooling]
        gh = self.num_gates * hidden_size
        # Gate blocks [Z | F | O | I]; the window is laid out oldest input first.
        self.weight = nn.Parameter(torch.empty(gh, window * input_size))
        self.bias = nn.Parameter(torch.empty(gh)) if bias else None
        if encoder_state_size is not None:
            check_positive_int("encoder_state_size", encoder_state_size)
            self.encoder_weight: nn.Parameter | None = nn.Parameter(
                torch.empty(gh, encoder_state_size)
            )
        else:
            self.encoder_weight = None
        self.encoder_state_size = encoder_state_size
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def gate_preactivations(
        self,
        x: Tensor,
        encoder_state: Tensor | None = None,
        history: Tensor | None = None,
        lengths: Tensor | None = None,
        *,
        weight: Tensor | None = None,
        with_bias: bool = True,
    ) -> Tensor:
        """All pre-activations ``(B, T, G*H)`` of eq 1-2 (and eq 7's ``V h~_T``) for ``x``.

        Causal: ``history``, the ``window - 1`` inputs before ``x`` (zeros when omitted).
        Non-causal: the centred windows, taps past each sequence's ``lengths`` reading zeros
        (``history`` is refused: chunks of a stream need the causal convolution).
        ``weight``: the convolution weight to use in place of :attr:`weight` (its DropConnect
        sample, :mod:`ctrlrnn.nn.weight_drop`), of the same shape. ``with_bias=False`` leaves
        :attr:`bias` out, for the pooling to add (:func:`ctrlrnn.ops.qrnn_pooling.fuses_bias`).
        """
        if self.causal:
            windows = causal_windows(x, self.window, history)
        else:
            if history is not None:
                raise ValueError(
                    "history: given to a non-causal QRNN layer (causal=False); carrying inputs "
                    "between chunks needs the causal convolution"
                )
            windows = centred_windows(x, self.window, lengths)
        # eq 1-2 as one GEMM over the windows, into a cached block (its largest tensor)
        w = self.weight if weight is None else weight
        gates = cached_linear(windows, w, self.bias if with_bias else None)
        if self.encoder_weight is not None or encoder_state is not None:
            gates = gates + self._encoder_term(encoder_state)
        return gates

    def _require_causal(self) -> None:
        if not self.causal:
            raise ValueError(
                "causal: this QRNN layer was built with causal=False (its convolution reads "
                "inputs after t), so it cannot run step by step; build it with causal=True"
            )

    def forward(
        self,
        input: Tensor,
        state: tuple[Tensor, Tensor] | None = None,
        encoder_state: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One step of eq 1-5; returns ``(h, (c, history))``, the output and the new state.

        A causal cell only (``causal=False`` raises ``ValueError``).

        Args:
            input: ``x_t``, ``(B, input_size)`` or unbatched ``(input_size,)``.
            state: ``(c, history)`` after step ``t - 1``, zeros when None: the memory cell
                ``(B, hidden_size)`` and the last ``window - 1`` inputs ``(B, window - 1,
                input_size)``, oldest first (unbatched: without the batch axis).
            encoder_state: eq 7's ``h~_T``, ``(B, encoder_state_size)``; required with
                ``encoder_state_size`` set, refused without.

        Returns:
            h: the output ``h_t`` (``c_t`` with f-pooling), ``(B, hidden_size)``
                (``(hidden_size,)`` unbatched).
            state: ``(c_t, history)``, to pass back as ``state``.
        """
        self._require_causal()
        x, unbatched = step_input(input, self.input_size, self.weight)
        B, H, k = x.shape[0], self.hidden_size, self.window
        if state is None:
            c = x.new_zeros(B, H)
            history = x.new_zeros(B, k - 1, self.input_size)
        else:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError("state: expected a tuple (c, history)")
            c, history = state
            if unbatched:
                c, history = c.unsqueeze(0), history.unsqueeze(0)
            if tuple(c.shape) != (B, H):
                raise ValueError(f"state: expected c of shape {(B, H)}, got {tuple(c.shape)}")
            if tuple(history.shape) != (B, k - 1, self.input_size):
                raise ValueError(
                    f"state: expected history of shape {(B, k - 1, self.input_size)}, "
                    f"got {tuple(history.shape)}"
                )
        if encoder_state is not None and unbatched:
            encoder_state = encoder_state.unsqueeze(0)
        fused = self._fused_step(x, c, history, encoder_state)
        if fused is not None:
            h, c_new, new_history = fused
            if unbatched:
                return h[0], (c_new[0], new_history[0])
            return h, (c_new, new_history)
        gates, new_history = self.step_preactivations(x, history, encoder_state)
        keep, scale = zoneout_keep(
            (B, 1, H), self.zoneout, self.training, x, self.zoneout_eval
        )
        if keep is None and scale == 1.0 and short_pooling(gates, c):
            # decoding: the pooling kernel itself, its wrapper's checks made above
            h, _c_seq, c_new = pooling_step(x.device)(
                gates, c.contiguous(), POOLING_MODES[self.pooling], None
            )
        else:
            h, _c_seq, c_new = qrnn_pooling(
                gates, c, pooling=self.pooling, keep=keep, keep_scale=scale
            )
        h = h[:, 0]
        if unbatched:
            return h[0], (c_new[0], new_history[0])
        return h, (c_new, new_history)

    def _fused_step(self, x: Tensor, c: Tensor, history: Tensor,
                    encoder_state: Tensor | None) -> list[Tensor] | None:
        """Eq 1-5 as one op (:func:`ctrlrnn.ops.cell_steps.kernels` says where it applies;
        :func:`~ctrlrnn.ops.cell_steps.reference.qrnn_cell_step_ref` is its readable twin), one
        autograd node where a graph is recorded (:mod:`ctrlrnn.ops.cell_step_grads`), or None
        where the written-out step must run: zoneout and eq 7's term run there."""
        weight, bias, encoder_weight = parameters(self, "weight", "bias", "encoder_weight")
        if self.zoneout or encoder_weight is not None or encoder_state is not None:
            return None
        ext = cell_steps.kernels(x, c, history, weight, bias, graph=True)
        if ext is None:
            return None
        mode = POOLING_MODES[self.pooling]
        if cell_step_grads.records_graph(x, c, history, weight, bias):
            return cell_step_grads.qrnn_step_train(ext, x, c, history, weight, bias, mode)
        return ext.qrnn_cell_step(x, c, history, weight, bias,  # type: ignore[no-any-return]
                                  mode)

    def step_preactivations(
        self, x: Tensor, history: Tensor, encoder_state: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Gate pre-activations ``(B, 1, G*H)`` of one step (eq 1-2, 7) and the new history.

        ``x`` is ``(B, input_size)``, ``history`` the previous ``window - 1`` inputs.
        """
        self._require_causal()
        seq = torch.cat([history, x.unsqueeze(1)], dim=1)  # (B, k, D), oldest first
        B, k = x.shape[0], self.window
        gates = F.linear(seq.reshape(B, 1, k * self.input_size), self.weight, self.bias)
        if self.encoder_weight is not None or encoder_state is not None:
            gates = gates + self._encoder_term(encoder_state)
        return gates, seq[:, 1:]

    def _encoder_term(self, encoder_state: Tensor | None) -> Tensor:
        if self.encoder_weight is None:
            raise ValueError(
                "encoder_state: given, but this QRNN was built without encoder_state_size"
            )
        if encoder_state is None:
            raise ValueError("encoder_state: required, this QRNN was built with encoder_state_size")
        return F.linear(encoder_state, self.encoder_weight).unsqueeze(1)

    # ------------------------------------------------------------------ state dict
    def get_extra_state(self) -> Tensor:
        """``[window, causal]``: the options the weights mean nothing without (the weight's
        shape alone does not say whether the convolution is masked)."""
        return torch.tensor([self.window, int(self.causal)], dtype=torch.int64)

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, Tensor) or state.numel() != 2:
            raise ValueError(f"state_dict: expected a QRNN layer's [window, causal], got {state!r}")
        window, causal = (int(v) for v in state.reshape(-1).tolist())
        if window != self.window:
            raise ValueError(
                f"window: the state dict was saved from a layer of window {window}, "
                f"this layer has window {self.window}"
            )
        if bool(causal) != self.causal:
            raise ValueError(
                f"causal: the state dict was saved from a layer with causal={bool(causal)}, "
                f"this layer has causal={self.causal}"
            )

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        key = prefix + "_extra_state"
        if key not in state_dict:  # saved before the options were recorded: nothing to check
            state_dict = {**state_dict, key: self.get_extra_state()}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        s = (
            f"{self.input_size}, {self.hidden_size}, window={self.window}, "
            f"pooling={self.pooling!r}, zoneout={self.zoneout}"
        )
        return s if self.causal else s + ", causal=False"
