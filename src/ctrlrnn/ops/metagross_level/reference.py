"""The readable reference of one METAGROSS tree level (METAGROSS paper eq 2-1..2-6, the gates
from x_t of section 2.2): the level's gates (:mod:`.gates`) composed with the linear scan,
differentiated by autograd. The fused kernels (``metagross_level.cpp``, ``triton_kernels.py``)
must equal it."""

from __future__ import annotations

from torch import Tensor

from ctrlrnn.ops.linear_scan import linear_scan
from ctrlrnn.ops.metagross_level.gates import level_gates
from ctrlrnn.ops.padding import length_mask

__all__ = ["metagross_level_reference"]


def metagross_level_reference(
    P: Tensor, child: Tensor | None, alpha: Tensor | None, beta: Tensor | None,
    res: Tensor | None, s0: Tensor | None, lengths: Tensor | None, h_form: bool,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The composition :func:`level_gates` + :func:`linear_scan` (differentiable), on
    ``P + bias`` (the base maps ``W x_t + b``, section 2.2) when a ``bias`` is given.

    Returns ``(out, s, s_last)``: the level's output and its carried states ``(B, T, k*H)``
    (the same tensor for the ``"h"`` form) and the final states ``(B, k*H)``.
    """
    B, T, _, k, H = P.shape
    if bias is not None:
        P = P + bias.view(3, k, H)
    a, b, o = level_gates(P, child, alpha, beta, res if h_form else None, h_form)
    s, last = linear_scan(
        a.reshape(B, T, k * H), b.reshape(B, T, k * H), s0, lengths=lengths, return_last=True
    )
    if h_form:  # eq 2-4..2-6: the scan's state is the unit's output
        return s, s, last
    out = o.reshape(B, T, k * H) * s  # h_t = o c_t
    if res is not None:
        out = (out.view(B, T, k, H) + res).view(B, T, k * H)
        if lengths is not None:  # o * 0 + x past the length: zero it like the h form
            out = out * length_mask(lengths.to(out.device), T).unsqueeze(-1).to(out)
    return out, s, last
