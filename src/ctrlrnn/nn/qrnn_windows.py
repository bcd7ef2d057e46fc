"""The QRNN's convolution windows, zoneout and argument checks (QRNN paper eq 1, 6), shared by
:class:`~ctrlrnn.nn.qrnn.QRNNCell`, :class:`~ctrlrnn.nn.qrnn.QRNN` and the torchqrnn layer of
:mod:`ctrlrnn.compat`.

The gates of step ``t`` read a window of ``window`` inputs: ``x_{t-k+1} .. x_t`` with the
masked (causal) convolution of section 2 (:func:`causal_windows`), or ``x_{t-a} .. x_{t+b}``
centred on ``t`` (:func:`centred_windows`, section 3.3's encoder). Zoneout (eq 6) keeps a unit's
previous cell where a mask says so (:func:`zoneout_keep`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ctrlrnn.nn.arguments import check_choice, check_positive_int, check_rate
from ctrlrnn.ops.compiled_op import eager_ok
from ctrlrnn.ops.conv_windows import shifted_windows
from ctrlrnn.ops.padding import zero_padding
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE


def check_pooling(pooling: str) -> str:
    """One of the pooling modes, ``"f"``, ``"fo"`` or ``"ifo"``."""
    return check_choice("pooling", pooling, tuple(GATES_PER_MODE))


def check_zoneout(zoneout: float) -> float:
    """A zoneout probability in ``[0, 1)``."""
    return check_rate("zoneout", zoneout, upper_open=True)


def causal_windows(x: Tensor, window: int, history: Tensor | None = None) -> Tensor:
    """Concatenate ``[x_{t-k+1}, ..., x_t]`` along features: the masked convolution of eq 1.

    ``x`` is batch-first ``(B, T, D)``; the result is ``(B, T, window * D)``. Before the start
    the window reads ``history`` (the previous ``window - 1`` inputs, ``(B, window - 1, D)``)
    when given, zeros otherwise (the masked convolution's left padding).
    """
    if window == 1:
        return x
    if x.shape[1] == 1 and eager_ok(x):  # one step (decoding): one copy, no pad or slices
        return _one_step_window(x, window, history)
    if history is None:  # tap j of step t reads x_{t+j-k+1}, zeros before the start
        return shifted_windows(x, [j - (window - 1) for j in range(window)], x.shape[1])
    # the history precedes x: tap j of step t reads step t + j of [history, x]
    return shifted_windows(torch.cat([history, x], dim=1), list(range(window)), x.shape[1])


def _one_step_window(x: Tensor, window: int, history: Tensor | None) -> Tensor:
    """:func:`causal_windows` of a one-step ``x`` ``(B, 1, D)``: the ``window - 1`` earlier
    inputs (``history``, else zeros) and ``x``, oldest first, as one ``(B, 1, window * D)``
    row (eager only: under tracing a length compared with 1 would specialise the graph)."""
    B, _, D = x.shape
    if history is None:
        return torch.cat([x.new_zeros(B, 1, (window - 1) * D), x], dim=-1)
    return torch.cat([history, x], dim=1).reshape(B, 1, window * D)


def centred_taps(window: int) -> tuple[int, int]:
    """``(a, b)``: the taps before and after ``t`` of the unmasked convolution of width
    ``window`` (eq 1 without the mask, QRNN paper section 3.3): ``a = floor((k-1)/2)``,
    ``b = ceil((k-1)/2)``; an even width puts its extra tap after ``t``."""
    before = (window - 1) // 2
    return before, window - 1 - before


def centred_windows(x: Tensor, window: int, lengths: Tensor | None = None) -> Tensor:
    """Concatenate ``[x_{t-a}, ..., x_{t+b}]`` along features: the unmasked convolution of
    eq 1 centred on ``t`` (``a``, ``b`` from :func:`centred_taps`).

    ``x`` is batch-first ``(B, T, D)``; the result is ``(B, T, window * D)``, oldest tap first
    as in :func:`causal_windows`. Taps before the start read zeros, and so do taps at or past a
    sequence's own length ``lengths[b]`` (when given), whatever the padding holds: the result
    at every valid step is that of the sequence alone.
    """
    if window == 1:
        return x
    x = zero_padding(x, lengths)
    before, _after = centred_taps(window)
    return shifted_windows(x, [j - before for j in range(window)], x.shape[1])


def check_windows(window: Any, num_layers: int) -> tuple[int, ...]:
    """One positive width per layer, from an ``int`` (every layer) or a sequence of
    ``num_layers`` positive ints."""
    if isinstance(window, (tuple, list)):
        if len(window) != num_layers or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in window
        ):
            raise ValueError(
                f"window: expected a positive integer or {num_layers} positive integers (one "
                f"per layer, num_layers={num_layers}), got {window!r}"
            )
        return tuple(window)
    return (check_positive_int("window", window),) * num_layers


ZONEOUT_EVAL = ("expectation", "identity")


def check_zoneout_eval(mode: str) -> str:
    """One of :data:`ZONEOUT_EVAL`."""
    return check_choice("zoneout_eval", mode, ZONEOUT_EVAL)


def zoneout_keep(
    shape: tuple[int, ...], zoneout: float, training: bool, like: Tensor,
    eval_mode: str = "expectation",
) -> tuple[Tensor | None, float]:
    """The zoneout multiplier of ``1 - f`` (eq 6).

    Training: a 0/1 keep mask drawn with probability ``1 - p`` and no rescaling. Evaluation:
    ``1 - p``, the mask's expectation (``eval_mode="expectation"``, what the public
    pytorch-qrnn layer does: it scales its gate ``F``, the paper's ``1 - f``, by ``1 - p``), or
    1, leaving ``f`` untouched as an off-the-shelf dropout layer without rescaling would in
    eval mode (``"identity"``).
    """
    if zoneout <= 0.0:
        return None, 1.0
    if training:
        return torch.bernoulli(like.new_full(shape, 1.0 - zoneout)), 1.0
    return None, (1.0 - zoneout) if eval_mode == "expectation" else 1.0


def last_inputs(x: Tensor, history: Tensor | None, lengths: Tensor | None, window: int) -> Tensor:
    """The ``window - 1`` inputs before each sequence's end (the next chunk's history)."""
    B, T, D = x.shape
    if window == 1:
        return x.new_zeros(B, 0, D)
    prev = history if history is not None else x.new_zeros(B, window - 1, D)
    full = torch.cat([prev, x], dim=1)  # x_t sits at index t + window - 1
    ends = (
        torch.full((B,), T, device=x.device) if lengths is None else lengths.to(x.device)
    )
    idx = ends.view(B, 1) + torch.arange(window - 1, device=x.device).view(1, -1)
    return full.gather(1, idx.unsqueeze(-1).expand(B, window - 1, D))
