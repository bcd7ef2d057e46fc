"""CARNN task models: the end-to-end dialog model (CARNN paper 4.1) and the contextual LM (4.2).

**Dialog** (section 4.1, Figure 2). Every utterance is a bag of word embeddings with positions,
encoded by the Position Encoder (Sukhbaatar et al., 2015); the dialog history
``e_1 .. e_{M-1}`` runs through a CARNN whose context is the current user utterance
``c = e_M``; residual and attention give the history summary (eq 8)::

    h_1 .. h_{M-1} = CARNN(e_1 .. e_{M-1}, c),   h~_m = h_m + e_m
    alpha = softmax(h~_m^T c),                    h_his = sum_m alpha_m h~_m             (8)

and the response is *selected* from the fixed set of candidate responses, each encoded by the
same Position Encoder over the same word embeddings (eq 9), by
``P(y) = softmax_l(h_his^T e^y_l)`` (eq 10). The residual and the dot products need one width:
``hidden_size == embedding_dim``. A baseline replaces the CARNN with any context-free encoder
(``nn.LSTM``, QRNN, ...) of that width; eq 8 is kept (the context is still the attention query).

**Contextual language model** (section 4.2, eq 11-13): the previous sentence, encoded by a
context-free nCARNN, is the context of the current sentence's CARNN
(:class:`~ctrlrnn.nn.carnn_lm.ContextualCARNNLM`). :class:`SentenceLM` is the baseline without
context: any encoder by name over the current sentence alone (an LSTM: the RNNLM of the paper's
table 2). Both take ``(tokens, prev_tokens, lengths, prev_lengths)`` and return next-word
logits. With ``num_latent_labels``, :class:`ContextualLM` also classifies the previous
sentence's latent label from its context (eq 12; :meth:`ContextualLM.forward_latent`), whose
log-loss the task mixes into the words' (eq 13).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.nn.carnn import CARNN
from ctrlrnn.nn.carnn_lm import ContextualCARNNLM
from ctrlrnn.nn.carnn_summary import history_summary
from ctrlrnn.nn.position_encoder import PositionEncoder


class CARNNDialog(nn.Module):
    """Response selection from a dialog history (CARNN paper 4.1, eq 8-10).

    Args:
        vocab_size, embedding_dim: the word embeddings (shared by utterances and candidates).
        candidates, candidate_lengths: the candidate responses as padded word ids ``(L, J)``
            and their lengths ``(L,)``; kept as (non-saved) buffers.
        encoder: ``"carnn"`` (the paper) or any context-free encoder name of
            :data:`~ctrlrnn.models.encoders.ENCODERS` (baseline).
        encoder_args: for ``"carnn"``: ``variant`` (``"n"``, ``"i"``, ``"s"``), ``num_layers``,
            ``dropout``; otherwise the encoder's ``model.*`` options. The width is always
            ``embedding_dim`` (eq 8 adds ``h_m + e_m``).
        pad_id: the padding word id (its embedding is zero).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        candidates: Tensor,
        candidate_lengths: Tensor,
        *,
        encoder: str = "carnn",
        encoder_args: dict[str, Any] | None = None,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        args = dict(encoder_args or {})
        if candidates.dim() != 2 or candidate_lengths.shape != candidates.shape[:1]:
            raise ValueError("candidates: expected (L, J) word ids and (L,) lengths")
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        # N(0, 0.1) as in end-to-end memory networks (Sukhbaatar et al., 2015, section 4.2):
        # the Position Encoder sums word vectors and eq 10 takes dot products of such sums,
        # so unit-variance embeddings would start with huge, saturated scores
        nn.init.normal_(self.embedding.weight, std=0.1)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.position = PositionEncoder()
        self.encoder_kind = encoder
        self.rnn: nn.Module
        if encoder == "carnn":
            self.rnn = CARNN(
                embedding_dim, embedding_dim, embedding_dim, str(args.get("variant", "n")),
                num_layers=int(args.get("num_layers", 1)),
                dropout=float(args.get("dropout", 0.0)), batch_first=True,
            )
        else:
            args["hidden_size"] = embedding_dim
            args["bidirectional"] = False
            self.rnn = SequenceEncoder(encoder, embedding_dim, args)
        self.register_buffer("candidates", candidates.long(), persistent=False)
        self.register_buffer("candidate_lengths", candidate_lengths.long(), persistent=False)

    def encode_utterances(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Position-encoded utterances: ``(..., J)`` ids and ``(...)`` lengths -> ``(..., d)``."""
        return self.position(self.embedding(tokens), lengths.clamp(min=1))

    def forward(
        self,
        history: Tensor,
        utterance_lengths: Tensor,
        history_lengths: Tensor,
        context: Tensor,
        context_lengths: Tensor,
    ) -> Tensor:
        """Scores ``(B, L)`` of every candidate response (the logits of eq 10).

        ``history`` ``(B, M, J)``: the words of the earlier utterances (utterance ``m`` of
        dialog ``b`` has ``utterance_lengths[b, m]`` words, dialog ``b`` has
        ``history_lengths[b]`` utterances); ``context`` ``(B, J')``: the current user
        utterance, ``context_lengths`` words.
        """
        e = self.encode_utterances(history, utterance_lengths)  # (B, M, d)
        c = self.encode_utterances(context, context_lengths)  # (B, d): c = e_M
        if self.encoder_kind == "carnn":
            h, _ = self.rnn(e, c, lengths=history_lengths)
        else:
            h, _, _ = self.rnn(e, history_lengths)
        h_his, _ = history_summary(h, e, c, history_lengths)  # eq 8
        cand = self.encode_utterances(self.candidates, self.candidate_lengths)  # eq 9
        return h_his @ cand.t()  # eq 10


class ContextualLM(nn.Module):
    """The contextual LM of the CARNN paper 4.2 (eq 11) in the task interface.

    Wraps :class:`~ctrlrnn.nn.carnn_lm.ContextualCARNNLM`: ``forward(tokens, prev_tokens,
    lengths, prev_lengths) -> logits (B, T, V)``. ``dropout`` (the tuned ``model.dropout``)
    acts on the word embeddings and on the CARNN's output, as :class:`SentenceLM`'s does, and
    between CARNN layers.
    """

    def __init__(
        self, vocab_size: int, embedding_dim: int, hidden_size: int, variant: str = "n", *,
        num_layers: int = 1, dropout: float = 0.0, num_latent_labels: int | None = None,
        alpha: float = 0.5,
    ) -> None:
        super().__init__()
        # the one tuned dropout acts where the baseline SentenceLM has it (embeddings, output)
        # and between CARNN layers when there are several
        self.lm = ContextualCARNNLM(vocab_size, embedding_dim, hidden_size, variant,
                                    num_layers=num_layers, dropout=dropout, io_dropout=dropout,
                                    num_latent_labels=num_latent_labels, alpha=alpha)

    def forward(
        self, tokens: Tensor, prev_tokens: Tensor, lengths: Tensor, prev_lengths: Tensor,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)``, or ``(N, V)`` at the ``N`` true entries of the bool mask
        ``positions`` ``(B, T)`` only (the softmax layer is not run elsewhere)."""
        logits, _ = self.lm(tokens, prev_tokens, lengths, prev_lengths, positions=positions)
        return logits

    def forward_latent(
        self, tokens: Tensor, prev_tokens: Tensor, lengths: Tensor, prev_lengths: Tensor,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """:meth:`forward`'s logits and eq 12's latent-label logits of the previous sentence's
        context ``(B, K)`` (None without a latent head)."""
        return self.lm(tokens, prev_tokens, lengths, prev_lengths, positions=positions)


class SentenceLM(nn.Module):
    """Baseline sentence LM without context: embeddings, any encoder by name, softmax.

    ``forward(tokens, prev_tokens, lengths, prev_lengths)`` ignores the previous sentence (the
    RNNLM row of the CARNN paper table 2 with ``encoder="lstm"``).
    """

    def __init__(
        self, vocab_size: int, embedding_dim: int, encoder: str, encoder_args: dict[str, Any],
        *, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        args = dict(encoder_args)
        if args.get("bidirectional"):
            raise ValueError("model.bidirectional: a language model reads left to right only")
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.encoder = SequenceEncoder(encoder, embedding_dim, args, causal_only=True)
        self.drop = nn.Dropout(dropout)
        self.output = nn.Linear(self.encoder.output_size, vocab_size)

    def forward(
        self, tokens: Tensor, prev_tokens: Tensor, lengths: Tensor, prev_lengths: Tensor,
        positions: Tensor | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)``, or ``(N, V)`` at the true entries of ``positions`` only."""
        out, _, _ = self.encoder(self.drop(self.embedding(tokens)), lengths)
        features = self.drop(out)  # over every position: the dropout draws do not depend on it
        return self.output(features if positions is None else features[positions])

