"""The QRNN decoder's decoding step with what does not change between steps computed once
(QRNN paper eq 1-8 at one step, :mod:`ctrlrnn.models.seq2seq`).

:meth:`Seq2Seq.step <ctrlrnn.models.seq2seq.Seq2Seq.step>` is the readable step: each layer a
:class:`~ctrlrnn.nn.qrnn.QRNNCell` call (its checks, eq 7's term ``V^l h~^l_T`` made again,
:func:`~ctrlrnn.ops.qrnn_pooling.qrnn_pooling`'s checks and route), then eq 8's attention.
:func:`decoding_context` makes once per decode what every step of it reads: each layer's
eq 7 term (the encoder's final states do not change while decoding), the pooling's kernel
(:func:`~ctrlrnn.ops.qrnn_pooling.pooling_step`) and the attention's mask;
:func:`decode_step` is then, per layer, the window ``[x_{t-k+1} .. x_t]`` (one concatenation),
its GEMM (eq 1-2) plus the eq 7 term, and the pooling kernel (eq 3-5), and on top eq 8's
attention and the output layer, each op on the operands the readable step gives it, in its
order: the log-probabilities are bit for bit the readable step's (tests/tasks). In beam
search the hypotheses of one source share its encoder outputs: their attention is one product
per source, not one per hypothesis, which reads the outputs once a step instead of once per
hypothesis (the same values up to rounding, so the same tokens unless two candidates score
within rounding of each other).

Where the shortcut's conditions do not hold (a graph may be recorded, autocast is on, a
tracer runs, a decoder cell has zoneout), :func:`decoding_context` returns None and the
decoders run the readable step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models.search import one_per_source
from ctrlrnn.nn.qrnn_cell import QRNNCell
from ctrlrnn.ops.autocast import autocast_dtype
from ctrlrnn.ops.compiled_op import eager_ok
from ctrlrnn.ops.qrnn_pooling import POOLING_MODES, pooling_step


@dataclass
class Layer:
    """One decoder layer's step as :func:`decode_step` runs it."""

    #: the convolution's weight and bias (eq 1-2) and the window's width ``k * input_size``
    weight: Tensor
    bias: Tensor | None
    width: int
    #: eq 7's term ``V^l h~^l_T`` ``(B, 1, G*H)``, made as the readable step makes it
    term: Tensor
    #: the pooling mode (``POOLING_MODES``)
    mode: int


@dataclass
class QRNNDecoding:
    """What every step of one decode reads (module docstring); the parameters are the
    model's own tensors, looked up once."""

    #: the decoder's layers, the lower ones then the top one
    layers: list[Layer]
    #: the pooling kernel (:func:`~ctrlrnn.ops.qrnn_pooling.pooling_step`)
    pool: Callable[[Tensor, Tensor | None, int, Tensor | None], Sequence[Tensor]]
    #: ``F.embedding``'s arguments after the token: the target embedding's weight and options
    embedding: tuple[Any, ...]
    #: the encoder outputs ``(B, S, E)``, one row per source (its hypotheses share it), and
    #: as the attention scores read them, ``(B, E, S)``
    memory: Tensor
    keys: Tensor
    #: the source positions past each length, ``(B, 1, S)`` (the masked softmax's fill)
    padding: Tensor
    #: the query projection's weight (None: the identity), eq 8's ``W_k``, ``W_c`` and its
    #: bias, the output layer's weight and bias
    query: Tensor | None
    w_k: Tensor
    w_c: tuple[Tensor, Tensor | None]
    out: tuple[Tensor, Tensor | None]
    #: the decoder's width H
    hidden: int


def decoding_context(model: Any, enc: dict[str, Tensor], group: int = 1
                     ) -> QRNNDecoding | None:
    """The context of :func:`decode_step` for one decode of ``enc`` (a row per hypothesis, a
    source's ``group`` hypotheses in a row) by ``model``'s QRNN decoder, or None where the
    readable step must run (module docstring). The encoder outputs are kept once per source,
    which its hypotheses' attention shares."""
    ref = enc["layers"]
    cells: list[QRNNCell] = [] if model.lower is None else list(model.lower.cells)
    cells.append(model.top)
    if (torch.is_grad_enabled() or not eager_ok(ref, *enc.values())
            or autocast_dtype(ref.device) is not None
            or any(cell.zoneout for cell in cells)):  # fmt: skip
        return None
    # eq 7: decoder layer l reads encoder layer l's final state
    layers = [Layer(cell.weight, cell.bias, cell.window * cell.input_size,
                    cell._encoder_term(ref[:, l]), POOLING_MODES[cell.pooling])
              for l, cell in enumerate(cells)]  # fmt: skip
    emb = model.tgt_embed
    query = model.query.weight if isinstance(model.query, nn.Linear) else None
    shared = one_per_source(enc, group)
    return QRNNDecoding(
        layers=layers,
        pool=pooling_step(ref.device),
        embedding=(emb.weight, emb.padding_idx, emb.max_norm, emb.norm_type,
                   emb.scale_grad_by_freq, emb.sparse),  # fmt: skip
        memory=shared["memory"],
        keys=shared["memory"].transpose(1, 2),
        padding=~shared["mask"].unsqueeze(1),
        query=query,
        w_k=model.w_k.weight,
        w_c=(model.w_c.weight, model.w_c.bias),
        out=(model.out.weight, model.out.bias),
        hidden=model.hidden,
    )


def decode_step(
    token: Tensor, state: list[Tensor], ctx: QRNNDecoding
) -> tuple[Tensor, list[Tensor]]:
    """:meth:`Seq2Seq.step <ctrlrnn.models.seq2seq.Seq2Seq.step>` of the QRNN decoder from
    ``ctx`` (:func:`decoding_context`): the same log-probabilities ``(B, V)`` and state."""
    y = F.embedding(token, *ctx.embedding)
    B = y.shape[0]
    new: list[Tensor] = []
    gates = c_seq = y
    for l, layer in enumerate(ctx.layers):
        # eq 1-2 over the window x_{t-k+1} .. x_t, oldest first, plus eq 7's term
        window = torch.cat([state[2 * l + 1], y.unsqueeze(1)], dim=1)
        gates = F.linear(window.reshape(B, 1, layer.width), layer.weight, layer.bias) + layer.term
        h, c_seq, c_new = ctx.pool(gates, state[2 * l].contiguous(), layer.mode, None)  # eq 3-5
        new += [c_new, window[:, 1:]]
        y = h[:, 0]
    H = ctx.hidden
    o = torch.sigmoid(gates[..., 2 * H : 3 * H])
    # eq 8: alpha_st = softmax_s(c_t . h~_s), k_t = sum_s alpha_st h~_s
    query = c_seq if ctx.query is None else F.linear(c_seq, ctx.query)
    # a source's hypotheses (consecutive rows) read its outputs in one product
    sources = ctx.memory.shape[0]
    group = B // sources if sources else 1  # an empty batch: no rows either side
    scores = torch.bmm(query.reshape(sources, group, query.shape[-1]), ctx.keys)
    scores = scores.masked_fill(ctx.padding, float("-inf"))
    k = torch.bmm(torch.softmax(scores, dim=-1), ctx.memory)
    k = k.reshape(B, 1, k.shape[-1])
    h = (o * (F.linear(k, ctx.w_k) + F.linear(c_seq, *ctx.w_c)))[:, 0]
    return F.log_softmax(F.linear(h, *ctx.out), -1), new
