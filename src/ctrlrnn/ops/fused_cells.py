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

import importlib

from ctrlrnn.ops import registry

#: Every cell's public functions (its module's ``__all__`` but the references), for every cell
#: of the list of ops (:mod:`ctrlrnn.ops.registry`).
__all__: list[str] = []
for _op in registry.ops_of("cells"):
    _module = importlib.import_module(_op.module)
    for _name in _module.__all__:
        if not _name.endswith(("_ref", "_step")):
            globals()[_name] = getattr(_module, _name)
            __all__.append(_name)
__all__.sort()
