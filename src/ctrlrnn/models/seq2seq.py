"""Attentional encoder-decoder (QRNN paper section 2.1, eq 7-8) with length-normalised beam search.

The encoder is any :class:`~ctrlrnn.models.encoders.SequenceEncoder`. Two decoders:

* ``"qrnn"`` — the paper's QRNN decoder. Decoder layer ``l`` adds ``V^l h~^l_T``, the final
  state of the encoder's *own* layer ``l``, to its gate pre-activations at every step (eq 7):
  the output of encoder layer ``l``'s pooling where its pass ends (for a bidirectional encoder
  the two directions' final states concatenated, the forward one at the last valid step and
  the backward one at step 0, as ``final`` is for the top layer;
  :meth:`~ctrlrnn.models.encoders.SequenceEncoder.forward_layers`). The decoder therefore has
  as many layers as the encoder: eq 7 pairs the layers one to one, and any other pairing
  (repeating the top state, or ``min(l, L_enc)``) would be a model the paper does not define,
  so unequal depths are refused (``decoder_layers``). The encoder must expose its layers' final
  states: the QRNN, ``nn.LSTM``, ``nn.GRU`` and any one-layer encoder do. The last decoder
  layer attends with its *un-gated* cell ``c_t`` over the encoder outputs and applies the
  output gate after mixing (eq 8): ``alpha_st = softmax_s(c_t . h~_s)``,
  ``k_t = sum_s alpha_st h~_s``, ``h_t = o_t * (W_k k_t + W_c c_t)``. No input feeding, so
  training runs in parallel over time. The decoder's convolutions are causal (masked, eq 1),
  whatever the encoder's: it runs step by step when decoding.
* ``"lstm"`` — the usual baseline: an ``nn.LSTM`` decoder started from the encoder's final
  state (``decoder_init="top"``: ``(h_0, c_0)`` of every layer from one map, ``tanh(W h~_T +
  b)``, of the top encoder layer's; ``"layers"``: layer ``l``'s from its own map of encoder
  layer ``l``'s final state, as eq 7 pairs the QRNN decoder's layers, so the depths must be
  equal), with ``attention``:

  - ``"dot"`` (default): global dot attention without input feeding (Luong et al.; the variant
    eq 8 is said to be closest to): ``h_t' = tanh(W [k_t; h_t])``, the whole target in one call;
  - ``"bahdanau"``: additive attention read before the step (Bahdanau et al., 2015, the
    "standard encoder-decoder architecture with attention" of METAGROSS paper table 1):
    ``e_ts = v^T tanh(W_a s_{t-1} + U_a h~_s)``, ``a_t = softmax_s(e_t)``, ``k_t = sum_s a_ts
    h~_s``, then ``s_t = LSTM([y_{t-1}; k_t], s_{t-1})`` and ``h_t' = tanh(W [k_t; s_t])``:
    the context enters the recurrence, so teacher forcing runs step by step.

``decoder_layers`` sets the decoder's depth independently of the encoder's (the LSTM decoder),
so arms that differ in their encoder can share one decoder.

When the encoder and decoder widths differ, ``c_t`` (or ``h_t``) is projected to the encoder
width before the dot product (``query``; the additive attention has no such projection).
A state dict saved before that projection was left out of the additive mode still loads: its
``query.weight`` is dropped (:meth:`Seq2Seq._load_from_state_dict`).

Decoding (greedy and the length-normalised beam search of the appendix) comes from
:class:`ctrlrnn.models.search.IncrementalDecoding`; the QRNN decoder's steps there reuse what
does not change between steps (:mod:`ctrlrnn.models.qrnn_decoding`), with the log-probabilities
of :meth:`Seq2Seq.step`. In beam search, with dot attention (both decoders), the hypotheses of a
source share one copy of its encoder outputs, which their attention reads in one product
(:func:`shared_attention`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.models import qrnn_decoding
from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.models.search import IncrementalDecoding, one_per_source
from ctrlrnn.models.torch_rnn_lengths import run_full
from ctrlrnn.models.torch_rnn_step import lstm_step
from ctrlrnn.nn.qrnn import QRNN, QRNNCell
from ctrlrnn.nn.qrnn_windows import check_windows
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling

DECODERS = ("qrnn", "lstm")
ATTENTIONS = ("dot", "bahdanau")
DECODER_INITS = ("top", "layers")


def _check_options(decoder: str, attention: str, decoder_layers: int | None,
                   decoder_init: str = "top") -> None:
    """An error naming the argument for a decoder, attention, depth or initial state the model
    cannot build."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder: expected one of {DECODERS}, got {decoder!r}")
    if decoder_init not in DECODER_INITS:
        raise ValueError(f"decoder_init: expected one of {DECODER_INITS}, got {decoder_init!r}")
    if decoder_init != "top" and decoder != "lstm":
        raise ValueError("decoder_init: an option of the LSTM decoder; the QRNN decoder reads "
                         "every encoder layer's final state by eq 7")
    if attention not in ATTENTIONS:
        raise ValueError(f"attention: expected one of {ATTENTIONS}, got {attention!r}")
    if attention != "dot" and decoder != "lstm":
        raise ValueError(
            f"attention: {attention!r} is an option of the LSTM decoder; the QRNN decoder "
            "attends as its eq 8 says"
        )
    if decoder_layers is not None and (
        isinstance(decoder_layers, bool) or not isinstance(decoder_layers, int)
        or decoder_layers < 1
    ):
        raise ValueError(f"decoder_layers: expected a positive integer, got {decoder_layers!r}")


def shared_attention(query: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
    """Dot attention (eq 8) of queries ``(N, T, D)`` over ``memory`` ``(B, S, D)``, ``N`` a
    multiple of ``B``: the ``N // B`` consecutive query rows of each source read its memory in
    one product, ``(N / B * T, D) x (D, S)``, instead of each a copy of it; ``(N, T, D)``.
    (:func:`ctrlrnn.models.qrnn_decoding.decode_step` does the same on its precomputed keys.)"""
    B, (N, T, D) = memory.shape[0], query.shape
    group = N // B if B else 1  # an empty batch: no rows either side
    if group * B != N:
        raise ValueError(f"query: {N} rows are not a whole number of rows per source ({B})")
    scores = torch.bmm(query.reshape(B, group * T, D), memory.transpose(1, 2))
    k = torch.bmm(_masked_softmax(scores, mask), memory)
    return k.reshape(N, T, k.shape[-1])


def _masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _at(features: Tensor, positions: Tensor | None) -> Tensor:
    """``features`` ``(B, T, D)`` at the true entries of ``positions`` (all when None); the
    dropout before it ran over every position, so its draws do not depend on the mask."""
    return features if positions is None else features[positions]


class Seq2Seq(IncrementalDecoding, nn.Module):
    """Encoder-decoder with attention; see the module docstring."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        decoder: str = "qrnn",
        embedding_size: int = 64,
        decoder_hidden: int | None = None,
        decoder_layers: int | None = None,
        dropout: float = 0.0,
        pad_id: int = 0,
        bos_id: int = 2,
        eos_id: int = 3,
        window: int | tuple[int, ...] | list[int] = 2,
        attention: str = "dot",
        decoder_init: str = "top",
    ) -> None:
        """``window``: the QRNN decoder's filter width, one for every layer or one per layer
        (causal, eq 1); ``decoder_layers``: the decoder's depth (default: the encoder's; the
        QRNN decoder needs the encoder's, see the module docstring); ``attention``: the LSTM
        decoder's, ``"dot"`` or ``"bahdanau"`` (module docstring); ``decoder_init``: the LSTM
        decoder's initial state, ``"top"`` (every layer from the encoder's top final state) or
        ``"layers"`` (layer l from encoder layer l's final state, each through its own map)."""
        super().__init__()
        _check_options(decoder, attention, decoder_layers, decoder_init)
        self.attention = attention
        self.decoder_init = decoder_init
        self.src_embed = nn.Embedding(src_vocab, embedding_size, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, embedding_size, padding_idx=pad_id)
        self.encoder = SequenceEncoder(encoder, embedding_size, encoder_args)
        enc = self.encoder.output_size
        H = decoder_hidden or self.encoder.hidden_size
        L = decoder_layers or self.encoder.num_layers
        self.decoder_kind = decoder
        self.hidden = H
        self.layers = L
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.dropout = nn.Dropout(dropout)
        # the dot products (eq 8, Luong) compare a width-H query with width-enc outputs; the
        # additive score projects both sides itself (U_a, W_a), so it has no such projection.
        # Earlier versions built this one in every mode, unused in Bahdanau's: its draw is
        # still made there, and dropped, so that a seed gives every other parameter the
        # initial values of the runs in docs/results.
        query = nn.Linear(H, enc, bias=False) if H != enc else nn.Identity()
        if attention == "dot":
            self.query = query
        if decoder == "qrnn":
            self._build_qrnn_decoder(encoder, embedding_size, dropout, window)
        else:
            self._build_lstm_decoder(embedding_size, dropout)
        self.out = nn.Linear(H, tgt_vocab)

    def _build_qrnn_decoder(self, encoder: str, embedding_size: int, dropout: float,
                            window: int | tuple[int, ...] | list[int]) -> None:
        """The QRNN decoder (eq 7-8): ``L - 1`` lower layers, a top cell and eq 8's ``W_k``,
        ``W_c``."""
        H, L, enc = self.hidden, self.layers, self.encoder.output_size
        if L != self.encoder.num_layers:
            raise ValueError(
                f"decoder_layers: the QRNN decoder adds encoder layer l's final state to "
                f"decoder layer l (QRNN paper eq 7), so it needs the encoder's depth "
                f"({self.encoder.num_layers}), got {L}"
            )
        if not self.encoder.has_layer_states:
            raise ValueError(
                f"decoder: the QRNN decoder reads every encoder layer's final state (eq 7), "
                f"which encoder {encoder!r} with {L} layers does not expose; use "
                "decoder='lstm', one encoder layer, or the qrnn, lstm or gru encoder"
            )
        windows = check_windows(window, L)
        self.lower = (
            QRNN(embedding_size, H, num_layers=L - 1, batch_first=True,
                 window=windows[:-1], dropout=dropout, encoder_state_size=enc)
            if L > 1 else None
        )
        self.top = QRNNCell(
            embedding_size if L == 1 else H, H, window=windows[-1], pooling="fo",
            encoder_state_size=enc,
        )
        self.w_k = nn.Linear(enc, H, bias=False)  # eq 8: W_k
        self.w_c = nn.Linear(H, H)  # eq 8: W_c

    def _build_lstm_decoder(self, embedding_size: int, dropout: float) -> None:
        """The LSTM decoder: the bridge from the encoder's summary to its initial state, the
        LSTM, the output mix and, for Bahdanau's attention, its score's projections."""
        H, L, enc = self.hidden, self.layers, self.encoder.output_size
        attention = self.attention
        if self.decoder_init == "layers":
            self._check_layer_init()
            self.bridges = nn.ModuleList(nn.Linear(enc, 2 * H) for _ in range(L))
        else:
            self.bridge = nn.Linear(enc, 2 * L * H)
        feed = enc if attention == "bahdanau" else 0  # the context enters the LSTM
        self.rnn = nn.LSTM(embedding_size + feed, H, num_layers=L, batch_first=True,
                           dropout=dropout if L > 1 else 0.0)
        self.mix = nn.Linear(enc + H, H)
        if attention == "bahdanau":
            self.att_keys = nn.Linear(enc, H, bias=False)  # U_a
            self.att_query = nn.Linear(H, H)  # W_a (and the score's bias)
            self.att_v = nn.Linear(H, 1, bias=False)  # v

    def _check_layer_init(self) -> None:
        """``decoder_init="layers"`` pairs decoder layer l with encoder layer l: an error naming
        the argument where the depths differ or the encoder keeps its layers' states to
        itself."""
        encoder, depth = self.encoder.name, self.encoder.num_layers
        if self.layers != depth:
            raise ValueError(
                f"decoder_init: 'layers' starts decoder layer l from encoder layer l's final "
                f"state, so the decoder needs the encoder's depth ({depth}), got "
                f"decoder_layers={self.layers}; use decoder_init='top' for unequal depths")
        if not self.encoder.has_layer_states:
            raise ValueError(
                f"decoder_init: 'layers' reads every encoder layer's final state, which "
                f"encoder {encoder!r} with {depth} layers does not expose; use "
                "decoder_init='top', one encoder layer, or the qrnn, lstm or gru encoder")

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """Drop the unused ``query.weight`` that state dicts of the additive mode saved by
        earlier versions hold (the module docstring); everything else loads as usual."""
        legacy = prefix + "query.weight"
        if self.attention != "dot" and legacy in state_dict:
            del state_dict[legacy]
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    # ------------------------------------------------------------------ encoder
    def encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        """The encoder's outputs ``memory``, top ``final`` state, source ``mask`` and
        ``lengths``; for the QRNN decoder (and the LSTM decoder's ``decoder_init="layers"``)
        also ``layers`` ``(B, L, E)``, every encoder layer's final state (eq 7); for Bahdanau's
        attention ``keys``, ``U_a h~_s``. Every entry is batch-first (beam search reorders
        them)."""
        x = self.dropout(self.src_embed(src))
        mask = torch.arange(src.shape[1], device=src.device)[None] < src_lengths.to(src.device)[
            :, None
        ]
        if self.decoder_kind == "qrnn" or self.decoder_init == "layers":
            out, final, layers = self.encoder.forward_layers(x, src_lengths)
            enc = {"memory": out, "final": final, "layers": layers, "mask": mask,
                   "lengths": src_lengths}
        else:
            out, final, _ = self.encoder(x, src_lengths)
            enc = {"memory": out, "final": final, "mask": mask, "lengths": src_lengths}
        if self.attention == "bahdanau":
            enc["keys"] = self.att_keys(out)  # U_a h~_s, once per source
        return enc

    def _additive_context(self, s_prev: Tensor, enc: dict[str, Tensor]) -> Tensor:
        """``k_t`` ``(B, E)`` of the Bahdanau decoder from the previous top state ``s_{t-1}``
        ``(B, H)``: ``softmax_s(v^T tanh(W_a s_{t-1} + U_a h~_s))`` over the encoder outputs."""
        scores = self.att_v(torch.tanh(enc["keys"] + self.att_query(s_prev).unsqueeze(1)))
        weights = _masked_softmax(scores.transpose(1, 2), enc["mask"])  # (B, 1, S)
        return torch.bmm(weights, enc["memory"])[:, 0]

    def _additive_step(
        self, y: Tensor, state: tuple[Tensor, Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One Bahdanau decoder step from the embedded ``y_{t-1}`` ``(B, E)``: the readout
        ``tanh(W [k_t; s_t])`` ``(B, H)`` and the new LSTM state."""
        k = self._additive_context(state[0][-1], enc)
        s_t, new = lstm_step(self.rnn, torch.cat([y, k], -1), state)
        return torch.tanh(self.mix(torch.cat([k, s_t], dim=-1))), new

    def _attend(self, query: Tensor, enc: dict[str, Tensor]) -> Tensor:
        """``k_t`` of eq 8 for queries ``(N, T, H)`` over the encoder outputs ``(B, S, E)``:
        ``N = B`` (a query row per source) or ``N = B * g``, source ``b``'s ``g`` hypotheses
        in rows ``b * g .. b * g + g - 1`` (:meth:`decoding_context`), which read their
        source's outputs in one product."""
        return shared_attention(self.query(query), enc["memory"], enc["mask"])

    # ------------------------------------------------------------------ teacher forcing
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor,
                positions: Tensor | None = None) -> Tensor:
        """Logits ``(B, T_tgt, V)`` for the target prefix ``tgt_in`` (teacher forcing); with a
        bool mask ``positions`` ``(B, T_tgt)``, ``(N, V)`` at its ``N`` true entries only (the
        output layer skips the padding)."""
        enc = self.encode(src, src_lengths)
        y = self.dropout(self.tgt_embed(tgt_in))
        if self.decoder_kind == "qrnn":
            layers = enc["layers"]  # (B, L, E): h~^l_T of encoder layer l
            if self.lower is not None:
                # eq 7: decoder layer l reads encoder layer l's final state
                y, _ = self.lower(y, encoder_state=layers[:, :-1].transpose(0, 1))
                y = self.dropout(y)
            gates = self.top.gate_preactivations(y, layers[:, -1])  # eq 7, the top layers
            _h, c, _ = qrnn_pooling(gates, pooling="fo")
            o = torch.sigmoid(gates[..., 2 * self.hidden : 3 * self.hidden])
            k = self._attend(c, enc)
            h = o * (self.w_k(k) + self.w_c(c))  # eq 8
        elif self.attention == "bahdanau":
            state = self._lstm_init(enc)
            steps = []
            for t in range(y.shape[1]):  # the context of step t reads s_{t-1}: sequential
                h_t, state = self._additive_step(y[:, t], state, enc)
                steps.append(h_t)
            h = torch.stack(steps, 1) if steps else y.new_zeros(y.shape[0], 0, self.hidden)
        else:
            h0 = self._lstm_init(enc)
            hs, _ = run_full(self.rnn, y, h0)
            k = self._attend(hs, enc)
            h = torch.tanh(self.mix(torch.cat([k, hs], dim=-1)))
        return self.out(_at(self.dropout(h), positions))

    def _lstm_init(self, enc: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The LSTM decoder's ``(h_0, c_0)``, each ``(L, B, H)``: ``tanh`` of a linear map of
        the encoder's top final state, or of each encoder layer's (``decoder_init``)."""
        final = enc["final"]
        B = final.shape[0]
        if self.decoder_init == "layers":
            per_layer = [torch.tanh(bridge(enc["layers"][:, layer])).view(B, 2, 1, self.hidden)
                         for layer, bridge in enumerate(self.bridges)]
            hc = torch.cat(per_layer, dim=2)
        else:
            hc = torch.tanh(self.bridge(final)).view(B, 2, self.layers, self.hidden)
        return hc[:, 0].transpose(0, 1).contiguous(), hc[:, 1].transpose(0, 1).contiguous()

    # ------------------------------------------------------------------ incremental decoding
    def init_state(self, enc: dict[str, Tensor]) -> list[Tensor]:
        B = enc["final"].shape[0]
        if self.decoder_kind == "lstm":
            h0, c0 = self._lstm_init(enc)
            return [h0, c0]
        state: list[Tensor] = []
        emb = self.tgt_embed.embedding_dim
        ref = enc["final"]
        if self.lower is not None:
            for layer in range(self.layers - 1):
                cell = self.lower.cell(layer)
                state += [ref.new_zeros(B, self.hidden),
                          ref.new_zeros(B, cell.window - 1, cell.input_size)]
        top_in = emb if self.layers == 1 else self.hidden
        state += [ref.new_zeros(B, self.hidden), ref.new_zeros(B, self.top.window - 1, top_in)]
        return state

    def step(
        self, token: Tensor, state: list[Tensor], enc: dict[str, Tensor]
    ) -> tuple[Tensor, list[Tensor]]:
        """Log-probabilities ``(B, V)`` of the next token after ``token`` ``(B,)``."""
        y = self.tgt_embed(token)
        if self.attention == "bahdanau":
            out, (h, c) = self._additive_step(y, (state[0], state[1]), enc)
            return F.log_softmax(self.out(out), -1), [h, c]
        if self.decoder_kind == "lstm":
            s_t, (h, c) = lstm_step(self.rnn, y, (state[0], state[1]))
            hs = s_t.unsqueeze(1)
            k = self._attend(hs, enc)
            out = torch.tanh(self.mix(torch.cat([k, hs], dim=-1)))[:, 0]
            return F.log_softmax(self.out(out), -1), [h, c]
        new: list[Tensor] = []
        layers = enc["layers"]  # eq 7: decoder layer l reads encoder layer l's final state
        if self.lower is not None:
            for layer in range(self.layers - 1):
                y, (c, hist) = self.lower.cell(layer)(
                    y, (state[2 * layer], state[2 * layer + 1]), encoder_state=layers[:, layer]
                )
                new += [c, hist]
        c_prev, hist = state[-2], state[-1]
        gates, hist = self.top.step_preactivations(y, hist, layers[:, -1])
        _h, c_seq, c_new = qrnn_pooling(gates, c_prev, pooling="fo")
        o = torch.sigmoid(gates[..., 2 * self.hidden : 3 * self.hidden])
        k = self._attend(c_seq, enc)
        h = (o * (self.w_k(k) + self.w_c(c_seq)))[:, 0]
        new += [c_new, hist]
        return F.log_softmax(self.out(h), -1), new

    def decoding_context(self, enc: dict[str, Tensor], group: int = 1) -> Any:
        """For the QRNN decoder, what its steps reuse through one decode
        (:func:`ctrlrnn.models.qrnn_decoding.decoding_context`); for the LSTM decoder with dot
        attention, whose step reads only the encoder outputs and mask, those of each source
        once, shared by its ``group`` hypotheses (:meth:`_attend`); else ``enc``."""
        if self.decoder_kind == "qrnn":
            ctx = qrnn_decoding.decoding_context(self, enc, group)
            if ctx is not None:
                return ctx
        elif self.attention == "dot" and group > 1:
            return one_per_source(enc, group)
        return enc

    def decode_step(
        self, token: Tensor, state: list[Tensor], context: Any
    ) -> tuple[Tensor, list[Tensor]]:
        """:meth:`step`, for the QRNN decoder with what does not change between steps made
        once (:func:`ctrlrnn.models.qrnn_decoding.decode_step`: the same log-probabilities)."""
        if isinstance(context, qrnn_decoding.QRNNDecoding):
            return qrnn_decoding.decode_step(token, state, context)
        return self.step(token, state, context)

    def _select(self, state: list[Tensor], index: Tensor) -> list[Tensor]:
        """Reorder decoder states along the batch (LSTM states are ``(L, B, H)``)."""
        dim = 1 if self.decoder_kind == "lstm" else 0
        return [s.index_select(dim, index) for s in state]
