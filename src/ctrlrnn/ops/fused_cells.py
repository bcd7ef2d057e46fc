"""Fused gated cells: LSTM, GRU, CAS-LSTM (layers l > 1), nCARNN and METAGROSS as printed.

Public functions (all batch-first, all returning full sequences and final states; each lives
with its cell in :mod:`ctrlrnn.ops.cells`):

* :func:`lstm_sequence` - CAS-LSTM paper eq 1-6 (RCRN eq 1-6, 10-14); equals torch.nn.LSTM.
* :func:`gru_sequence` - the torch.nn.GRU formulation; equals torch.nn.GRU.
* :func:`cas_lstm_sequence` - CAS-LSTM eq 7-13 with lambda, and the peephole variant eq 17-18.
* :func:`ncarnn_sequence` - CARNN eq 3.
* :func:`metagross_state_sequence` - the METAGROSS unit as printed (section 2, gates reading
  ``h_{t-1}``): one tree of ``2^L - 1`` units per step.

Each also has a plural, ``<cell>_sequences(calls, lengths)``: independent recurrences of the
cell over one batch (the two directions of a bidirectional layer, RCRN's three RNNs) in one
call, which on CPU runs them concurrently where one recurrence cannot fill the threads.

Variable lengths: ``lengths`` (B,) integer; for ``t >= lengths[b]`` row ``b`` keeps its state and
its outputs are zero, so the final states are those at each row's last valid step and nothing
(values or gradients) depends on the padding.

Dispatch (:func:`ctrlrnn.ops.backend.path`): each cell is one pair of ``torch.library`` custom
ops, ``ctrlrnn::<cell>_cell_fwd`` / ``_cell_bwd`` (so they trace under ``torch.compile``), with
its CPU kernel (the compiled extension ``cells``) and its CUDA kernel (Triton,
:mod:`ctrlrnn.ops.cells.triton_host`) registered on it. The readable references run when no
kernel can be had (the extension cannot be built, CUDA without Triton, warned once), under
``CTRLRNN_BACKEND=reference`` and inside ``torch.func`` transforms; an ONNX export runs them as
one scan (:mod:`ctrlrnn.ops.scan_export`). float16/bfloat16 inputs are computed in float32 and
the outputs cast back.
"""

from ctrlrnn.ops.cells.cas_lstm import cas_lstm_sequence, cas_lstm_sequences
from ctrlrnn.ops.cells.gru import gru_sequence, gru_sequences
from ctrlrnn.ops.cells.lstm import lstm_sequence, lstm_sequences
from ctrlrnn.ops.cells.metagross_state import (
    metagross_state_sequence,
    metagross_state_sequences,
    metagross_tree_size,
)
from ctrlrnn.ops.cells.ncarnn import ncarnn_sequence, ncarnn_sequences

__all__ = [
    "cas_lstm_sequence",
    "cas_lstm_sequences",
    "gru_sequence",
    "gru_sequences",
    "lstm_sequence",
    "lstm_sequences",
    "metagross_state_sequence",
    "metagross_state_sequences",
    "metagross_tree_size",
    "ncarnn_sequence",
    "ncarnn_sequences",
]
