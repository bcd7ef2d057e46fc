"""Readable reference implementations of the fused gated cells (each beside its kernels in
:mod:`ctrlrnn.ops.cells`): one step function written straight from its paper's equations plus
a plain Python loop over time (:func:`ctrlrnn.ops.cells.reference.run`) differentiated by torch
autograd. They define what the compiled kernels must compute and serve as the fallback on
devices without a compiled path; the conventions are in :mod:`ctrlrnn.ops.cells.reference`.
"""

from ctrlrnn.ops.cells.cas_lstm.reference import cas_lstm_sequence_ref, cas_lstm_step
from ctrlrnn.ops.cells.gru.reference import gru_sequence_ref, gru_step
from ctrlrnn.ops.cells.lstm.reference import lstm_sequence_ref, lstm_step
from ctrlrnn.ops.cells.metagross_state.reference import (
    metagross_state_sequence_ref,
    metagross_state_step,
)
from ctrlrnn.ops.cells.ncarnn.reference import ncarnn_sequence_ref, ncarnn_step

__all__ = [
    "cas_lstm_sequence_ref",
    "cas_lstm_step",
    "gru_sequence_ref",
    "gru_step",
    "lstm_sequence_ref",
    "lstm_step",
    "metagross_state_sequence_ref",
    "metagross_state_step",
    "ncarnn_sequence_ref",
    "ncarnn_step",
]
