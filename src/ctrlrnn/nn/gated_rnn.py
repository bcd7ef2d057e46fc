"""The gated RNNs RCRN is made of (:class:`GatedRNN`: an LSTM or a GRU, weights laid out as
torch's), and running several of them over one batch in one call of the fused-cell engine:
their input projections in one op (:func:`project_all`), their recurrences together
(:func:`run_sequences`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_choice
from ctrlrnn.nn.weight_drop import drop_weight
from ctrlrnn.ops.cached_linear import cached_linear, cached_linear_stacked
from ctrlrnn.ops.cells_ref import gru_step, lstm_step
from ctrlrnn.ops.fused_cells import gru_sequences, lstm_sequences

#: the gated cells an RCRN is built of
CELLS = ("lstm", "gru")


class GatedRNN(nn.Module):
    """The weights of one LSTM (eq 1-6 / 10-14) or GRU, laid out as torch.nn.LSTM / nn.GRU.

    ``weight_ih`` ``(G*H, input_size)``, ``weight_hh`` ``(G*H, H)``, ``bias_ih``/``bias_hh``
    ``(G*H,)`` with ``G = 4`` gate blocks ``(i, f, c~, o)`` for the LSTM and ``G = 3``
    ``(r, z, n)`` for the GRU, so weights load from / into ``torch.nn.LSTM``/``GRU`` one to one.
    """

    def __init__(self, input_size: int, hidden_size: int, cell: str, bias: bool) -> None:
        super().__init__()
        self.cell = check_choice("cell", cell, CELLS)
        self.input_size = input_size
        self.hidden_size = hidden_size
        gh = (4 if cell == "lstm" else 3) * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(gh, input_size))
        self.weight_hh = nn.Parameter(torch.empty(gh, hidden_size))
        self.bias_ih: nn.Parameter | None = nn.Parameter(torch.empty(gh)) if bias else None
        self.bias_hh: nn.Parameter | None = nn.Parameter(torch.empty(gh)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def num_states(self) -> int:
        return 2 if self.cell == "lstm" else 1

    def _input_bias(self) -> Tensor | None:
        if self.bias_ih is None or self.bias_hh is None:
            return None
        if self.cell == "lstm":  # both LSTM biases add outside any product: fold them
            return self.bias_ih + self.bias_hh
        return self.bias_ih  # the GRU's b_hn stays inside the reset product

    def sequence(
        self,
        x: Tensor,
        state: list[Tensor] | None,
        lengths: Tensor | None,
        weight_drop: float = 0.0,
    ) -> tuple[Tensor, list[Tensor]]:
        """Run over batch-first ``x`` ``(B, T, D)``: returns ``h_seq`` and the final states.

        One GEMM projects all steps; the recurrence runs in the fused-cell engine.
        ``weight_drop``: DropConnect on ``weight_hh`` in training (one mask for the whole
        sequence, :mod:`ctrlrnn.nn.weight_drop`).
        """
        return self.results(run_sequences([self.call(x, state, weight_drop)], lengths)[0])

    def call(
        self, x: Tensor, state: list[Tensor] | None, weight_drop: float = 0.0,
        x_proj: Tensor | None = None,
    ) -> tuple[str, dict[str, Tensor | None]]:
        """What :meth:`sequence` runs on ``x``: ``(cell, keyword arguments)`` of
        ``<cell>_sequence`` (:func:`run_sequences` runs several in one call). ``x_proj``: the
        input projection of ``x`` where the caller has it (:func:`project_all`)."""
        if x_proj is None:
            x_proj = cached_linear(x, self.weight_ih, self._input_bias())  # all steps, one GEMM
        weight_hh = drop_weight(self.weight_hh, weight_drop, self.training)
        if self.cell == "lstm":
            h0, c0 = (None, None) if state is None else state
            return "lstm", {"x_proj": x_proj, "weight_hh": weight_hh, "h0": h0, "c0": c0}
        h0 = None if state is None else state[0]
        return "gru", {"x_proj": x_proj, "weight_hh": weight_hh, "bias_hh": self.bias_hh,
                       "h0": h0}  # fmt: skip

    @staticmethod
    def results(out: tuple[Tensor, ...]) -> tuple[Tensor, list[Tensor]]:
        """``(h_seq, final states)`` from what ``<cell>_sequence`` returned."""
        if len(out) == 4:  # lstm: h_seq, c_seq, h, c
            return out[0], [out[2], out[3]]
        return out[0], [out[1]]

    def step(self, x: Tensor, state: list[Tensor]) -> list[Tensor]:
        """One step (decoding): ``x`` ``(B, D)``, ``state`` ``[h, c]`` or ``[h]``."""
        x_proj = F.linear(x, self.weight_ih, self._input_bias())
        if self.cell == "lstm":
            h, c = lstm_step(x_proj, self.weight_hh, state[0], state[1])
            return [h, c]
        b_hh = self.bias_hh if self.bias_hh is not None else x.new_zeros(self.weight_hh.shape[0])
        return [gru_step(x_proj, self.weight_hh, b_hh, state[0])]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, cell={self.cell!r}"


def project_all(rnns: list[GatedRNN], xs: list[Tensor]) -> Tensor:
    """The input projections of RNNs of equal sizes, ``rnns[r]`` over ``xs[r]`` (each ``(B, T,
    I)``), in one op (:func:`~ctrlrnn.ops.cached_linear.cached_linear_stacked`): ``(R, B, T,
    G*H)``, whose slices :func:`run_sequences` hands to the fused-cell engine without stacking
    them again. Consecutive RNNs reading the same tensor (RCRN's three of a direction) read it
    once: each distinct input is passed once where every input has the same number of readers,
    else once per reader."""
    R = len(rnns)
    B, T, input_size = xs[0].shape
    runs: list[tuple[Tensor, int]] = []  # (input, how many consecutive RNNs read it)
    for x in xs:
        if runs and runs[-1][0] is x:
            runs[-1] = (x, runs[-1][1] + 1)
        else:
            runs.append((x, 1))
    if len({n for _, n in runs}) > 1:
        runs = [(x, 1) for x in xs]
    inputs = torch.stack([x.reshape(B * T, input_size) for x, _ in runs])  # (G, B*T, I)
    weight = torch.stack([r.weight_ih for r in rnns])  # (R, G*H, I)
    biases = [r._input_bias() for r in rnns]
    bias = torch.stack(biases) if all(b is not None for b in biases) else None  # type: ignore[arg-type]
    out = cached_linear_stacked(inputs, weight, bias)
    return out.view(R, B, T, out.shape[-1])


def run_sequences(
    calls: list[tuple[str, dict[str, Tensor | None]]], lengths: Tensor | None
) -> list[tuple[Tensor, ...]]:
    """Independent RNNs of one cell type (:meth:`GatedRNN.call`) over one batch, in one call of the
    fused-cell engine (:func:`~ctrlrnn.ops.fused_cells.lstm_sequences`: on CPU concurrently
    where one cannot fill the threads)."""
    kinds = {kind for kind, _ in calls}
    assert len(kinds) == 1, kinds
    run = lstm_sequences if kinds == {"lstm"} else gru_sequences
    return run([kw for _, kw in calls], lengths)  # type: ignore[arg-type]
