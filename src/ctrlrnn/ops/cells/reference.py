"""The loop over time of every cell's reference: a plain Python loop, differentiated by autograd.

Each cell's ``reference.py`` writes its step straight from its paper's equations; :func:`run`
loops it over time with the variable-length rule. They define what the compiled kernels (the
CPU extension ``cells``, the Triton kernels) must compute, and serve as the fallback on devices
without a compiled path.

Conventions shared by every cell:

* Everything that does not depend on the recurrent state is precomputed by the caller for all
  steps at once: ``x_proj`` (B, T, G*H) holds the input projections including their biases.
* ``weight_hh`` (G_h*H, H) is the recurrent matrix U, so the recurrent term is
  ``h_{t-1} @ weight_hh.T``.
* ``lengths`` (B,) int64, optional: for ``t >= lengths[b]`` row ``b`` keeps its state and
  emits zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ctrlrnn.ops.scan_export import Step


def run(
    step: Step,
    states: Sequence[Tensor],
    xs: Sequence[Tensor | None],
    consts: Sequence[Tensor | None],
    lengths: Tensor | None,
) -> tuple[list[Tensor], list[Tensor]]:
    """Loop ``states = step(xs[:, t], states, consts)`` over time with the variable-length rule
    (the arguments of :func:`ctrlrnn.ops.scan_export.scan`, which runs the same loop as one
    scan for export).

    Returns the per-state output sequences (each (B, T, H), zero where ``t >= lengths[b]``) and
    the final states (the state at each row's last valid step).
    """
    states = list(states)
    steps = next(x for x in xs if x is not None).shape[1]
    outs: list[list[Tensor]] = [[] for _ in states]
    for t in range(steps):
        new = list(step([x[:, t] if x is not None else None for x in xs], states, consts))
        if lengths is None:
            states = new
            for k, s in enumerate(new):
                outs[k].append(s)
        else:
            valid = (t < lengths).to(states[0].device).unsqueeze(-1)
            states = [torch.where(valid, n, s) for n, s in zip(new, states, strict=True)]
            for k, n in enumerate(new):
                outs[k].append(torch.where(valid, n, torch.zeros_like(n)))
    if steps == 0:
        seqs = [s.new_zeros(s.shape[0], 0, s.shape[-1]) for s in states]
    else:
        seqs = [torch.stack(o, dim=1) for o in outs]
    return seqs, states
