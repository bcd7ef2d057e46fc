"""Salesforce's ``torchqrnn`` API on ctrlrnn's kernels: ``QRNN``, ``QRNNLayer``, ``ForgetMult``.

Code written for the QRNN authors' package (``pip install torchqrnn``, the
``salesforce/pytorch-qrnn`` repository; the AWD-LSTM language model uses it) runs with its import
changed, ``from torchqrnn import QRNNLayer`` to ``from ctrlrnn.compat.torchqrnn import
QRNNLayer`` (or ``from ctrlrnn.compat import torchqrnn``): the same constructor arguments,
attributes (``linear``, ``prevX``, ``window``, ``zoneout``, ``save_prev_x``, ``output_gate``,
``use_cuda``, ``layers``), state-dict keys (``linear.weight``, ``linear.bias``;
``layers.{l}.linear.weight`` for the stack), ``reset()``, shapes and numbers.

What one layer computes, in torchqrnn's names (QRNN paper eq 1-4, 6)::

    Y = linear([x_t, x_{t-1}, ..., x_{t-k+1}])      newest input first, k = window
    Z = tanh(Y_Z),  F = sigmoid(Y_F),  O = sigmoid(Y_O)          (rows of linear: Z, F, O)
    F = F * mask (training, mask ~ Bernoulli(1 - zoneout)),  F * (1 - zoneout) (evaluation)
    C_t = F_t * Z_t + (1 - F_t) * C_{t-1}           (torchqrnn's ForgetMult)
    H_t = O_t * C_t   (output_gate=True, fo-pooling)   or   H_t = C_t   (f-pooling)

torchqrnn's ``F`` is the paper's ``1 - f``: the paper (and ctrlrnn's pooling kernel,
:func:`ctrlrnn.qrnn_pooling`) writes ``c_t = f_t c_{t-1} + (1 - f_t) z_t`` (eq 3-4). Since
``sigmoid(-a) = 1 - sigmoid(a)``, the layer hands the kernel the F block of ``linear``'s output
negated, ``f = sigmoid(-Y_F) = 1 - F``, and the kernel computes torchqrnn's recurrence. Zoneout
multiplies torchqrnn's ``F = 1 - f`` by the mask, which is ctrlrnn's eq 6 (``1 - f`` times a 0/1
keep mask, no rescaling in training; times ``1 - p`` in evaluation,
``zoneout_eval="expectation"``).

The numbers are torchqrnn's up to floating-point rounding (``sigmoid(-a)`` and
``1 - sigmoid(a)`` round differently).

``linear`` is a real :class:`torch.nn.Linear` called as a module at every forward, so
AWD-LSTM's ``layer.linear = WeightDrop(layer.linear, ["weight"], dropout=p)`` (which moves the
weight to ``weight_raw`` and sets ``linear.weight`` to a dropped copy before each call) works;
nothing reads or caches the weight outside that call. ctrlrnn's own layer has this as an
option, ``ctrlrnn.QRNN(..., weight_drop=p)``.

Differences from torchqrnn: ``use_cuda`` is accepted and ignored (the kernels follow the
tensors' device: compiled C++ on CPU, Triton on CUDA); ``window`` may be any positive width
(torchqrnn asserts 1 or 2), laid out newest input first as torchqrnn's width 2 is; the saved
``prevX`` then holds the last ``window - 1`` inputs ``(window - 1, B, input_size)``; ``QRNN``
has a no-op ``flatten_parameters()``, as ctrlrnn's layers do, for code written for
``nn.LSTM``. Bad arguments raise ``ValueError`` naming the argument where torchqrnn asserts,
including a ``prevX`` of another batch size (call ``reset()`` between streams of different
batch sizes).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_flag, check_positive_int, check_rate
from ctrlrnn.nn.qrnn_windows import zoneout_keep
from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling

__all__ = ["ForgetMult", "QRNN", "QRNNLayer"]


def _hidden_state(hidden: Any, batch: int, width: int, like: Tensor, name: str) -> Tensor | None:
    """torchqrnn's initial state: ``(B, H)`` or ``(1, B, H)``, returned as ``(B, H)``."""
    if hidden is None:
        return None
    if not isinstance(hidden, Tensor):
        raise ValueError(f"{name}: expected a Tensor, got {type(hidden).__name__}")
    if tuple(hidden.shape) not in ((batch, width), (1, batch, width)):
        raise ValueError(
            f"{name}: expected shape {(batch, width)} or {(1, batch, width)}, "
            f"got {tuple(hidden.shape)}"
        )
    if hidden.dtype != like.dtype or hidden.device != like.device:
        raise ValueError(
            f"{name}: expected dtype {like.dtype} on {like.device}, "
            f"got {hidden.dtype} on {hidden.device}"
        )
    return hidden.reshape(batch, width)


def _newest_first_windows(x: Tensor, history: Tensor, window: int) -> Tensor:
    """``[x_t, x_{t-1}, ..., x_{t-k+1}]`` concatenated along features for every ``t``.

    ``x`` is batch-first ``(B, T, D)`` and ``history`` the ``window - 1`` inputs before it
    ``(B, window - 1, D)``; the result is ``(B, T, window * D)``, torchqrnn's layout of the
    convolution of eq 1 (its width 2 is ``torch.cat([X, X_{t-1}], 2)``).
    """
    steps = x.shape[1]
    padded = torch.cat([history, x], dim=1)  # x_t sits at index t + window - 1
    taps = [padded[:, window - 1 - j : window - 1 - j + steps] for j in range(window)]
    return torch.cat(taps, dim=-1)


class QRNNLayer(nn.Module):
    """One QRNN layer with torchqrnn's interface (module docstring for the equations).

    Args:
        input_size: features of the input ``X``.
        hidden_size: features of the state and output; ``None`` means ``input_size``.
        save_prev_x: keep the last ``window - 1`` inputs (``prevX``, detached) so that the next
            call's first convolution windows read them instead of zeros (a stream cut into
            chunks, as in language modelling); :meth:`reset` forgets them.
        zoneout: probability ``p`` of eq 6 on torchqrnn's ``F`` (module docstring).
        window: width ``k`` of the masked convolution (eq 1), newest input first.
        output_gate: ``True``: fo-pooling (eq 4), ``H = O * C``; ``False``: f-pooling (eq 3).
        use_cuda: accepted for torchqrnn's signature and ignored.

    ``forward(X, hidden=None) -> (H, C_last)``: ``X`` ``(T, B, input_size)``, ``hidden`` the
    initial ``C`` ``(B, hidden_size)`` or ``(1, B, hidden_size)`` (zeros when None); ``H``
    ``(T, B, hidden_size)`` (contiguous), ``C_last`` ``(1, B, hidden_size)``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int | None = None,
        save_prev_x: bool = False,
        zoneout: float = 0,
        window: int = 1,
        output_gate: bool = True,
        use_cuda: bool = True,
    ) -> None:
        super().__init__()
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = (
            self.input_size
            if hidden_size is None
            else check_positive_int("hidden_size", hidden_size)
        )
        self.save_prev_x = check_flag("save_prev_x", save_prev_x)
        self.zoneout = check_rate("zoneout", zoneout, upper_open=True)
        self.window = check_positive_int("window", window)
        self.output_gate = check_flag("output_gate", output_gate)
        self.use_cuda = check_flag("use_cuda", use_cuda)
        #: the last ``window - 1`` inputs ``(window - 1, B, input_size)`` under ``save_prev_x``
        self.prevX: Tensor | None = None
        gates = 3 if self.output_gate else 2
        # rows Z, F, O; columns [x_t | x_{t-1} | ...]: torchqrnn's layout, so its state dicts load
        self.linear = nn.Linear(self.window * self.input_size, gates * self.hidden_size)

    def reset(self) -> None:
        """Forget the inputs saved by ``save_prev_x`` (call at the start of a new stream)."""
        self.prevX = None

    def _history(self, X: Tensor) -> Tensor:
        """The ``window - 1`` inputs before ``X``, batch-first: ``prevX`` or zeros."""
        T, B, D = X.shape
        k = self.window - 1
        if self.prevX is None:
            return X.new_zeros(B, k, D)
        if tuple(self.prevX.shape) != (k, B, D):
            raise ValueError(
                f"X: batch of {B} sequences, but the inputs saved by save_prev_x (prevX) have "
                f"shape {tuple(self.prevX.shape)}; call reset() before a stream of another "
                f"batch size"
            )
        return self.prevX.to(X.dtype).transpose(0, 1)

    def forward(self, X: Tensor, hidden: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if not isinstance(X, Tensor) or X.dim() != 3:
            got = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(f"X: expected a (seq_len, batch, input_size) tensor, got {got}")
        T, B, D = X.shape
        if D != self.input_size:
            raise ValueError(f"X: expected input_size={self.input_size} features, got {D}")
        if T == 0:
            raise ValueError("X: expected at least one time step, got 0")
        H = self.hidden_size
        x = X.transpose(0, 1)  # batch-first (B, T, D), the kernels' layout
        padded_history: Tensor | None = None
        if self.window == 1:
            source = x
        else:
            padded_history = self._history(X)
            source = _newest_first_windows(x, padded_history, self.window)
        Y = self.linear(source)  # eq 1-2 (read through the module: WeightDrop may wrap it)
        if Y.shape[-1] != (3 if self.output_gate else 2) * H:
            raise ValueError(
                f"linear: expected {(3 if self.output_gate else 2) * H} output features "
                f"(Z, F{', O' if self.output_gate else ''}), got {Y.shape[-1]}"
            )
        # torchqrnn's F is the paper's 1 - f: f = sigmoid(-Y_F) (module docstring)
        sign = Y.new_ones(Y.shape[-1])
        sign[H : 2 * H] = -1.0
        gates = Y * sign
        c0 = _hidden_state(hidden, B, H, gates, "hidden")
        keep, scale = zoneout_keep((B, T, H), self.zoneout, self.training, gates, "expectation")
        h, _c, c_last = qrnn_pooling(
            gates, c0, pooling="fo" if self.output_gate else "f", keep=keep, keep_scale=scale
        )
        if self.window > 1 and self.save_prev_x:
            assert padded_history is not None
            k = self.window - 1  # keep the last k inputs, some from before X when T < k
            recent = x[:, T - k :] if T >= k else torch.cat([padded_history, x], dim=1)[:, T:]
            self.prevX = recent.detach().transpose(0, 1).clone(
                memory_format=torch.contiguous_format
            )
        return h.transpose(0, 1).contiguous(), c_last.unsqueeze(0)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, window={self.window}, "
            f"save_prev_x={self.save_prev_x}, zoneout={self.zoneout}, "
            f"output_gate={self.output_gate}"
        )


class QRNN(nn.Module):
    """A stack of :class:`QRNNLayer` with torchqrnn's interface.

    Args:
        input_size, hidden_size, num_layers, dropout: as torchqrnn (``dropout`` between
            layers, in training only).
        bias, batch_first, bidirectional: only torchqrnn's values (``True``, ``False``,
            ``False``); others raise ``ValueError`` (``ctrlrnn.QRNN`` has all three).
        layers: a list of :class:`QRNNLayer` to stack instead of building ``num_layers``.
        **kwargs: ``save_prev_x``, ``zoneout``, ``window``, ``output_gate``, ``use_cuda`` for
            every layer.

    ``forward(input, hidden=None) -> (output, hidden)``: ``input`` ``(T, B, input_size)``,
    ``hidden`` ``(num_layers, B, hidden_size)`` (or any sequence of per-layer states);
    ``output`` ``(T, B, hidden_size)``, the returned ``hidden`` ``(num_layers, B,
    hidden_size)``: each layer's last ``C``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0,
        bidirectional: bool = False,
        layers: list[QRNNLayer] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if bidirectional is not False:
            raise ValueError("bidirectional: torchqrnn's QRNN is unidirectional; "
                             "ctrlrnn.QRNN(..., bidirectional=True) is bidirectional")
        if batch_first is not False:
            raise ValueError("batch_first: torchqrnn's QRNN is time-major; "
                             "ctrlrnn.QRNN(..., batch_first=True) takes (B, T, D)")
        if bias is not True:
            raise ValueError("bias: torchqrnn's QRNN always has biases; "
                             "ctrlrnn.QRNN(..., bias=False) has none")
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.dropout = check_rate("dropout", dropout)
        self.bias = True
        self.batch_first = False
        self.bidirectional = False
        if layers:
            if not all(isinstance(layer, QRNNLayer) for layer in layers):
                raise ValueError("layers: expected a list of QRNNLayer modules")
            stacked = list(layers)
        else:
            num_layers = check_positive_int("num_layers", num_layers)
            stacked = [
                QRNNLayer(self.input_size if i == 0 else self.hidden_size, self.hidden_size,
                          **kwargs)
                for i in range(num_layers)
            ]  # fmt: skip
        for i in range(1, len(stacked)):
            if stacked[i].input_size != stacked[i - 1].hidden_size:
                raise ValueError(
                    f"layers: layer {i} reads {stacked[i].input_size} features but layer "
                    f"{i - 1} gives {stacked[i - 1].hidden_size}"
                )
        self.layers = nn.ModuleList(stacked)
        self.num_layers = len(stacked)

    def reset(self) -> None:
        """:meth:`QRNNLayer.reset` on every layer (start of a new stream)."""
        for layer in self.layers:
            layer.reset()

    def flatten_parameters(self) -> None:
        """A no-op, for code written for :class:`torch.nn.LSTM` that calls it (torchqrnn's
        QRNN has no such method): the kernels read the weights where they are."""

    def forward(self, input: Tensor, hidden: Any = None) -> tuple[Tensor, Tensor]:
        if hidden is not None and len(hidden) != self.num_layers:
            raise ValueError(
                f"hidden: expected one state per layer ({self.num_layers}), got {len(hidden)}"
            )
        finals = []
        for i, layer in enumerate(self.layers):
            input, c_last = layer(input, None if hidden is None else hidden[i])
            finals.append(c_last)
            if self.dropout and i + 1 < self.num_layers:
                input = F.dropout(input, p=self.dropout, training=self.training)
        if len({c.shape[-1] for c in finals}) != 1:
            raise ValueError("layers: the layers' hidden sizes differ, so their states cannot "
                             "be stacked into one (num_layers, B, hidden_size) tensor")
        return input, torch.cat(finals, 0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        return s + (f", dropout={self.dropout}" if self.dropout else "")


class ForgetMult(nn.Module):
    """torchqrnn's ``ForgetMult``: ``h_t = f_t * x_t + (1 - f_t) * h_{t-1}`` over time.

    ``forward(f, x, hidden_init=None, use_cuda=True)`` with ``f``, ``x`` ``(T, B, H)`` and
    ``hidden_init`` ``(B, H)`` (zeros when None); returns ``(T, B, H)``. Runs ctrlrnn's linear
    scan ``h_t = a_t h_{t-1} + b_t`` with ``a = 1 - f``, ``b = f x``; ``use_cuda`` is ignored.
    """

    def forward(
        self, f: Tensor, x: Tensor, hidden_init: Tensor | None = None, use_cuda: bool = True
    ) -> Tensor:
        if not isinstance(f, Tensor) or f.dim() != 3:
            raise ValueError("f: expected a (seq_len, batch, hidden) tensor")
        if not isinstance(x, Tensor) or x.shape != f.shape:
            raise ValueError(f"x: expected the shape of f {tuple(f.shape)}")
        T, B, H = f.shape
        h0 = _hidden_state(hidden_init, B, H, f, "hidden_init")
        a = (1 - f).transpose(0, 1)
        b = (f * x).transpose(0, 1)
        out = linear_scan(a.contiguous(), b.contiguous(), h0)
        assert isinstance(out, Tensor)
        return out.transpose(0, 1).contiguous()
