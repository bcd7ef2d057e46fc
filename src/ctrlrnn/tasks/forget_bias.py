"""The initial biases of the gates that decide how much of its carried state a unit keeps
(``task.forget_bias``, ``task.output_bias``).

Gers et al. (2000) and Jozefowicz et al. (2015) start an LSTM's forget-gate bias at 1, so that
at the start of training a cell keeps about 0.73 of its state each step rather than 0.5.
Over the 784 steps of a pixel-by-pixel image this decides whether a gradient reaches the first
rows at all. :func:`offset_forget_bias` adds ``value`` to the initial bias of the gate that
decides how much of a unit's carried state it keeps:

* ``torch.nn.LSTM``: the forget gate's slice of every layer's and direction's ``bias_ih``
  (torch's gate order i, f, g, o), so the sum of its two biases starts ``value`` higher;
* :class:`~ctrlrnn.nn.metagross.Metagross` with the linear base: every node's ``F`` map.
  A METAGROSS unit keeps ``1 - f`` of its state (``c = (1 - f) h + f z``), so its ``F``
  bias starts ``value`` lower. A leaf then keeps ``sigmoid(value)`` of its state, as the
  LSTM's forget gate does.

Any other encoder with a nonzero ``value`` raises ``ValueError``: no other unit's gate is
mapped here.

:func:`offset_output_bias` (``task.output_bias``) starts every node's ``O`` map of a METAGROSS
with the linear base ``value`` higher. A METAGROSS unit's output gate multiplies the state it
carries (``h_t = o_t c_t`` and ``c_t = (1 - f_t) h_{t-1} + f_t z_t``, METAGROSS eq 2-1), so
at initialisation, with ``o`` near 0.5, it halves that state every step, whatever its forget
gate does. An LSTM's output gate reads its cell without gating what the cell carries, so the
option maps no LSTM gate.

``couple=True`` (``task.couple_gates``) also starts ``nn.LSTM``'s input gates ``value`` lower,
so that at initialisation the cell writes ``sigmoid(-value)`` of its candidate as it keeps
``sigmoid(value)`` of its state: the convex mix a METAGROSS unit has by construction, and the
fixed-value form of the chrono initialisation (Tallec & Ollivier, 2018, forget bias
``log U(1, T - 1)``, input bias its negative). Without it, an LSTM whose forget gates start
3 higher still writes half its candidate every step; its cell then sums about 20 steps of
input, and over the 784 steps of a pixel-by-pixel image its gradient explodes (the probe on
the METAGROSS page). METAGROSS needs nothing more: its write gate is its keep gate's
complement.
"""

from __future__ import annotations

import torch
from torch import nn

from ctrlrnn.nn.metagross import Metagross
from ctrlrnn.ops.metagross_level.layout import base_index


def _lstm(rnn: nn.LSTM, value: float, couple: bool) -> None:
    hidden = rnn.hidden_size
    if not rnn.bias:
        raise ValueError("task.forget_bias: this nn.LSTM has no biases (bias=False)")
    for name, param in rnn.named_parameters():
        if name.startswith("bias_ih"):
            param[hidden : 2 * hidden] += value
            if couple:
                param[:hidden] -= value


def _metagross(rnn: Metagross, value: float, gate: int = 0, option: str = "forget_bias"
               ) -> None:
    """Adds ``value`` to base map ``gate`` (0 F, 1 O) of every node of ``rnn``'s units; the F
    maps' sign is the caller's (they start lower to keep more)."""
    for unit in rnn.units:
        bias = getattr(unit, "bias", None)
        if unit.base != "linear" or bias is None:
            raise ValueError(f"task.{option}: defined for METAGROSS with the linear base "
                             f"and biases only, got base={unit.base!r}, "
                             f"bias={bias is not None}")
        hidden = unit.hidden_size
        for node in range(unit.num_nodes):
            row = base_index(gate, node) * hidden
            bias[row : row + hidden] += value


def offset_forget_bias(encoder: nn.Module, value: float, couple: bool = False) -> None:
    """Adds ``value`` to the initial forget-gate bias of ``encoder``'s recurrent units
    (``couple``: and subtracts it from ``nn.LSTM``'s input gates, see the module's text).

    ``encoder`` is a :class:`~ctrlrnn.models.encoders.SequenceEncoder` or holds one; ``value``
    0 leaves the weights as they are. Raises ``ValueError`` where no unit of ``encoder`` has
    a mapped forget gate, and for a METAGROSS whose gates this rule does not map.
    """
    if value == 0:
        return
    found = False
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, nn.LSTM):
                _lstm(module, value, couple)
                found = True
            elif isinstance(module, Metagross):
                _metagross(module, -value)
                found = True
    if not found:
        raise ValueError("task.forget_bias: the encoder has no forget gate this option maps "
                         "(nn.LSTM and METAGROSS with the linear base have)")


def offset_output_bias(encoder: nn.Module, value: float) -> None:
    """Adds ``value`` to the initial bias of every ``O`` map of ``encoder``'s METAGROSS units
    (linear base), so that they start carrying ``sigmoid(value)`` of their state through the
    output gate rather than half (see the module's text).

    ``value`` 0 leaves the weights as they are. Raises ``ValueError`` where ``encoder`` holds
    no METAGROSS, and for a METAGROSS whose gates this rule does not map.
    """
    if value == 0:
        return
    units = [m for m in encoder.modules() if isinstance(m, Metagross)]
    if not units:
        raise ValueError("task.output_bias: the encoder has no METAGROSS unit, whose output "
                         "gate alone this option maps")
    with torch.no_grad():
        for module in units:
            _metagross(module, value, gate=1, option="output_bias")
