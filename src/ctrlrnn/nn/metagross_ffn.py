"""The parallel non-autoregressive METAGROSS (METAGROSS paper section 2.3): ``MetagrossFFN``.

A position-wise layer, a drop-in replacement for a Transformer's feed-forward block: it maps
``(..., d_model)`` to ``(..., d_model)`` with no dependence between positions::

    f^n_t = sig(alpha_t M^F_{n+1}(x_t) + (1 - alpha_t) F^F_n(x_t))      (2.3-1)
    o^n_t = sig(beta_t  M^O_{n+1}(x_t) + (1 - beta_t)  F^O_n(x_t))      (2.3-2)
    z^n_t = tanh(F^Z_n(x_t))                                           (2.3-3)
    h^n_t = f^n_t x_t + o^n_t z^n_t                                     (2.3-4)
    h^n_t = h^n_t + x_t          (optional residual)                   (2.3-5)

with, as in the recurrent unit, a binary tree of ``2^depth - 1`` units (separate children for
the forget and output gates), linear base maps ``F(x) = W x + b`` ("the base models are all
linear layers", section 3.4) and at the maximum depth ``f = sig(F^F(x))``, ``o = sig(F^O(x))``.
All projections of all units and the depth gates are one GEMM.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_choice, check_flag, check_positive_int, check_rate
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.torchscript import Traceable
from ctrlrnn.ops.autocast import accepts_dtype
from ctrlrnn.ops.cached_linear import cached_linear
from ctrlrnn.ops.metagross_level.layout import level_slice, tree_nodes

FFN_DEPTH_GATES = ("token", "scalar")


class MetagrossFFN(Traceable, nn.Module):
    """Recursive position-wise feed-forward layer (section 2.3); it returns a tensor of the
    input's shape ``(..., d_model)``.

    Args:
        d_model: input and output width.
        depth: maximum recursion depth ``L`` (tuned in ``{1, 2, 3}`` in the paper).
        depth_gate: ``"token"`` (``alpha_t = sig(W x_t + b)`` per position and internal unit)
            or ``"scalar"`` (trainable ``alpha``, ``beta`` per internal unit). The sequence-level
            ``"static"`` gate of section 2.1 is not position-wise and is not offered here.
        residual: add ``x_t`` to every unit's output (2.3-5). Inside a Transformer block that
            already adds its own residual around the feed-forward layer, pass ``False`` to
            avoid counting ``x`` twice.
        bias: biases of the base maps and depth gates.
        dropout: dropout on the output (as a Transformer feed-forward block has).

    Attributes:
        weight: the ``F, O, Z`` maps of the ``N = 2^L - 1`` units (``[F nodes | O nodes |
            Z nodes]``, heap order) followed, with ``depth_gate="token"``, by the ``alpha``,
            ``beta`` maps of the ``I = 2^(L-1) - 1`` internal units: of shape
            ``(3 * N * d_model + 2 * I, d_model)`` (``(3 * N * d_model, d_model)`` with
            ``"scalar"``).
        bias: their biases (``bias=True``), of shape ``(weight.shape[0],)``.
        depth_logit: the depth gates' logits (``depth_gate="scalar"``), of shape ``(2 * I,)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import MetagrossFFN
        >>> ffn = MetagrossFFN(d_model=8, depth=2)
        >>> ffn(torch.randn(3, 5, 8)).shape  # any leading shape, position by position
        torch.Size([3, 5, 8])
    """

    @factory_arguments
    def __init__(
        self,
        d_model: int,
        depth: int = 2,
        *,
        depth_gate: str = "token",
        residual: bool = True,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.depth = check_positive_int("depth", depth)
        self.depth_gate = check_choice("depth_gate", depth_gate, FFN_DEPTH_GATES)
        self.residual = check_flag("residual", residual)
        self.dropout = check_rate("dropout", dropout)
        bias = check_flag("bias", bias)
        N = self.num_nodes = tree_nodes(depth)
        I = self.num_internal = tree_nodes(depth - 1)
        rows = 3 * N * d_model + (2 * I if depth_gate == "token" else 0)
        self.weight = nn.Parameter(torch.empty(rows, d_model))
        self.bias = nn.Parameter(torch.empty(rows)) if bias else None
        self.depth_logit = (
            nn.Parameter(torch.empty(2 * I)) if depth_gate == "scalar" and I > 0 else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.d_model)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(
        self, x: Tensor, return_gates: bool = False
    ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        """The recursive feed-forward layer at every position; returns ``(..., d_model)``.

        Args:
            x: ``(..., d_model)``, any leading shape, each position on its own.
            return_gates: also return the depth gates ``alpha``, ``beta``.

        Returns:
            The output, ``(..., d_model)``; with ``return_gates=True`` the tuple ``(output,
                alpha, beta)``, the gates ``(..., I)`` over the ``I = 2^(depth-1) - 1``
                internal units.
        """
        return_gates = check_flag("return_gates", return_gates)
        if not isinstance(x, Tensor) or x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x: expected a (..., d_model={self.d_model}) tensor, got "
                f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}"
            )
        if (not accepts_dtype(x.dtype, self.weight.dtype, x.device)
                or x.device != self.weight.device):
            raise ValueError(
                f"x: expected dtype {self.weight.dtype} on {self.weight.device}, "
                f"got {x.dtype} on {x.device}"
            )
        lead = x.shape[:-1]
        d, N, I = self.d_model, self.num_nodes, self.num_internal
        x2 = x.reshape(-1, d)
        proj = cached_linear(x2, self.weight, self.bias)
        x2 = x2.to(proj.dtype)  # under autocast the GEMM's dtype (bfloat16) for everything
        P = proj[:, : 3 * N * d].view(-1, 3, N, d)
        if self.depth_gate == "token":
            g = torch.sigmoid(proj[:, 3 * N * d :])
        elif I > 0:
            assert self.depth_logit is not None
            g = torch.sigmoid(self.depth_logit).expand(x2.shape[0], 2 * I)
        else:
            g = x2.new_zeros(x2.shape[0], 0)
        alpha, beta = g[:, :I].to(proj.dtype), g[:, I:].to(proj.dtype)
        xe = x2.unsqueeze(1)
        child: Tensor | None = None
        for level in range(self.depth, 0, -1):
            sl = level_slice(level)
            pf, po, pz = P[:, 0, sl], P[:, 1, sl], P[:, 2, sl]
            if child is not None:
                pf = torch.lerp(pf, child[:, 0::2], alpha[:, sl].unsqueeze(-1))
                po = torch.lerp(po, child[:, 1::2], beta[:, sl].unsqueeze(-1))
            h = torch.sigmoid(pf) * xe + torch.sigmoid(po) * torch.tanh(pz)  # 2.3-4
            if self.residual:
                h = h + xe  # 2.3-5
            child = h
        assert child is not None
        out = child[:, 0].reshape(*lead, d)
        if self.dropout > 0 and self.training:
            out = F.dropout(out, self.dropout, training=True)
        if return_gates:
            return out, alpha.reshape(*lead, I), beta.reshape(*lead, I)
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.d_model}, depth={self.depth}, depth_gate={self.depth_gate!r}, "
            f"residual={self.residual}"
        )
