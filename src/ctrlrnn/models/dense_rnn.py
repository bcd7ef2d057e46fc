"""Densely connected stacks of ``torch.nn.LSTM`` / ``nn.GRU`` layers: the baseline of the QRNN
paper's table 1 ("Densely-connected 4-layer LSTM"), with the QRNN's own ``dense`` option's
connections (section 2.1): each layer's input is concatenated to its output before the next
layer, and the last layer's output alone is the result.

:class:`~ctrlrnn.models.encoders.SequenceEncoder` builds one for ``--model lstm model.dense=
true`` (or ``gru``). ``forward(x, hx=None, lengths=None) -> (output, h_n)`` on batch-first
input, padding ignored, as the registered units; ``dropout`` acts on each layer's output
before the next layer reads it (where ``nn.LSTM``'s own would).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.torch_rnn_lengths import run_full, run_with_lengths


class DenseRNN(nn.Module):
    def __init__(self, kind: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 batch_first: bool = True, dropout: float = 0.0,
                 bidirectional: bool = False) -> None:
        super().__init__()
        if kind not in ("lstm", "gru"):
            raise ValueError(f"kind: expected lstm or gru, got {kind!r}")
        if not batch_first:
            raise ValueError("batch_first: the encoders' interface is batch-first")
        cls = nn.LSTM if kind == "lstm" else nn.GRU
        width = hidden_size * (2 if bidirectional else 1)
        self.layers = nn.ModuleList(
            cls(input_size + layer * width, hidden_size, batch_first=True,
                bidirectional=bidirectional)
            for layer in range(num_layers))
        self.drop = nn.Dropout(dropout)
        self.kind = kind

    def forward(self, x: Tensor, hx: Any = None, lengths: Tensor | None = None
                ) -> tuple[Tensor, Any]:
        if hx is not None:
            raise ValueError("hx: a densely connected stack starts from zero states")
        states: list[Any] = []
        layer_input, out = x, x
        for k, layer in enumerate(self.layers):
            if k:
                layer_input = torch.cat([layer_input, self.drop(out)], dim=-1)
            if lengths is None:
                out, h_n = run_full(layer, layer_input)
            else:
                out, h_n = run_with_lengths(layer, layer_input, lengths)
            states.append(h_n)
        if self.kind == "lstm":
            return out, (torch.cat([s[0] for s in states]), torch.cat([s[1] for s in states]))
        return out, torch.cat(states)
