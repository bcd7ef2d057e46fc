"""The forget-gate bias at initialisation, the same rule for every arm (``task.forget_bias``).

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


def _metagross(rnn: Metagross, value: float) -> None:
    for unit in rnn.units:
        bias = getattr(unit, "bias", None)
        if unit.base != "linear" or bias is None:
            raise ValueError("task.forget_bias: defined for METAGROSS with the linear base "
                             f"and biases only, got base={unit.base!r}, "
                             f"bias={bias is not None}")
        hidden = unit.hidden_size
        for node in range(unit.num_nodes):
            row = base_index(0, node) * hidden
            bias[row : row + hidden] -= value


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
                _metagross(module, value)
                found = True
    if not found:
        raise ValueError("task.forget_bias: the encoder has no forget gate this option maps "
                         "(nn.LSTM and METAGROSS with the linear base have)")
