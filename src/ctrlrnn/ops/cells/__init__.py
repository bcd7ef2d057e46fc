"""The fused gated cells, one folder each: LSTM, GRU, CAS-LSTM (layers l > 1), nCARNN and the
METAGROSS unit as printed.

Haste's recipe: the caller computes everything that does not depend on the recurrent state for
all time steps at once (the input projections ``x_proj = x @ W_ih^T + b``, the nCARNN context
projection, the CAS-LSTM lower cell sequence); a cell runs only the recurrence, per step one GEMM
``h_{t-1} @ weight_hh^T`` plus one fused pointwise function, and backward through time written
the same way.

Layout:

* ``<cell>/reference.py``: the step from the paper and its reference over a sequence;
* ``<cell>/triton_kernels.py``: its Triton step kernels (imported on the first CUDA call);
* ``<cell>/__init__.py``: its :class:`~ctrlrnn.ops.cells.shell.Cell` (what differs from the
  others: inputs, states, what backward reads, shapes), its op, and its public function;
* ``<cell>/<cell>.cpp``: its CPU kernels, in the extension ``cells``;
* :mod:`.shell`: the ops, fakes, autograd and dispatch every cell shares;
  :mod:`.triton_host`: the host loop of the Triton kernels; :mod:`.reference`: the loop over
  time of the references; :mod:`.checks`: the argument checks.

The public functions are re-exported by :mod:`ctrlrnn.ops.fused_cells`.
"""
