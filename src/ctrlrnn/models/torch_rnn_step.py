"""One step of a one-way ``torch.nn.LSTM`` through ``torch.lstm_cell``.

A decoder whose attention reads the previous state (Bahdanau's) runs its LSTM one step at a
time, in training too, and every LSTM decoder does so when it decodes. Called on a sequence of
one step, ``nn.LSTM`` goes through its whole sequence machinery (on the CPU a oneDNN layer
forward and backward per step); :func:`lstm_step` computes the same step with
``torch.lstm_cell`` from the module's own parameters, so checkpoints are those of the module and
the results equal its own up to rounding. Under ``torch.autocast`` the step is the module's own,
which runs in the autocast dtype where ``torch.lstm_cell`` would run in float32 on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.ops.autocast import autocast_dtype

__all__ = ["lstm_step"]


def lstm_step(rnn: nn.LSTM, x: Tensor,
              state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """``rnn(x.unsqueeze(1), state)`` for one step: the top layer's new ``h`` ``(B, H)`` and
    the new ``(h, c)``, each ``(L, B, H)``. ``rnn`` is one-way, without ``proj_size``; as in
    the module, each layer's input but the first passes through dropout while training."""
    if rnn.bidirectional or rnn.proj_size:
        raise ValueError("rnn: lstm_step runs one-way LSTMs without proj_size, got "
                         f"bidirectional={rnn.bidirectional}, proj_size={rnn.proj_size}")
    if autocast_dtype(x.device) is not None:
        out, new = rnn(x.unsqueeze(1), state)
        return out[:, 0], new
    h0, c0 = state
    hs: list[Tensor] = []
    cs: list[Tensor] = []
    inp = x
    for layer in range(rnn.num_layers):
        if layer and rnn.training and rnn.dropout:
            inp = F.dropout(inp, rnn.dropout, training=True)
        weights = [getattr(rnn, f"{name}_l{layer}") for name in ("weight_ih", "weight_hh")]
        biases = ([getattr(rnn, f"{name}_l{layer}") for name in ("bias_ih", "bias_hh")]
                  if rnn.bias else [None, None])
        h, c = torch.lstm_cell(inp, (h0[layer], c0[layer]), *weights, *biases)
        hs.append(h)
        cs.append(c)
        inp = h
    return inp, (torch.stack(hs), torch.stack(cs))
