"""CARNN's contextual language model (CARNN paper section 4.2, eq 11-13).

    c^{t-1} <- nCARNN(e^{t-1}_1 .. e^{t-1}_{M^{t-1}})        (context-free nCARNN, final h)  (11)
    h^t_1 .. h^t_{M^t} = CARNN(e^t_1 .. e^t_{M^t}, c^{t-1})
    w^t_{m+1} ~ softmax(W^(l) h^t_m + b^(l))
    P(L^{t-1}) = softmax(W^(c) c^{t-1} + b^(c))              (latent label head)           (12)
    loss = alpha L_w + (1 - alpha) L_l                                                     (13)

The latent label (dialog act, discourse relation) only trains the previous-sentence encoder
in a multi-task way; at test time the model runs eq 11 alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.nn.arguments import check_positive_int
from ctrlrnn.nn.carnn import CARNN
from ctrlrnn.nn.initialization import factory_arguments
from ctrlrnn.nn.torchscript import Traceable


class ContextualCARNNLM(Traceable, nn.Module):
    """Language model over a sentence conditioned on the previous one (eq 11-13); it returns
    ``(logits, latent)``: next-word logits and the latent label's logits (or None).

    Args:
        vocab_size: the number of words of the embedding table and of the softmax layer.
        embedding_dim: the width of the word embeddings, shared by both sentences.
        hidden_size: width of the current sentence's CARNN (sCARNN needs it equal to
            ``embedding_dim``).
        variant: the current sentence's CARNN, ``"n"``, ``"i"`` or ``"s"``.
        context_size: width of the previous-sentence encoder, a context-free nCARNN
            (default ``hidden_size``).
        num_layers: the number of layers of the current sentence's CARNN.
        dropout: dropout between the current sentence's CARNN layers.
        io_dropout: dropout on the word embeddings both sentences are read from and on the
            CARNN's output before the softmax layer: where a baseline RNN language model has
            its dropout (0: none, the paper's eq 11 as printed).
        num_latent_labels: size of the latent label set of eq 12 (``None``: no latent head).
        alpha: the mixing weight of eq 13 (0.5 in the paper).

    Attributes:
        embedding.weight: the word embeddings, of shape ``(vocab_size, embedding_dim)``.
        context_encoder.cells[k].{weight_ih,bias_ih,weight_hh}: the previous sentence's
            context-free nCARNN (as :class:`CARNN`'s), ``context_size`` wide.
        carnn.cells[k].{weight_ih,bias_ih,weight_hh,weight_ch}: the current sentence's CARNN
            (as :class:`CARNN`'s; ``weight_hh`` with ``variant="n"``).
        output.{weight,bias}: the softmax layer over the vocabulary, of shapes
            ``(vocab_size, hidden_size)`` and ``(vocab_size,)``.
        latent_head.{weight,bias}: eq 12's classifier of the context
            (``num_latent_labels`` given), of shapes ``(num_latent_labels, context_size)`` and
            ``(num_latent_labels,)``.

    Examples:
        >>> import torch
        >>> from ctrlrnn import ContextualCARNNLM
        >>> lm = ContextualCARNNLM(vocab_size=20, embedding_dim=8, hidden_size=8, variant="s",
        ...                        num_latent_labels=3)
        >>> previous, tokens = torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (2, 5))
        >>> logits, latent = lm(tokens, previous)
        >>> logits.shape, latent.shape
        (torch.Size([2, 5, 20]), torch.Size([2, 3]))
    """

    @factory_arguments
    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        variant: str = "n",
        *,
        context_size: int | None = None,
        num_layers: int = 1,
        dropout: float = 0.0,
        num_latent_labels: int | None = None,
        alpha: float = 0.5,
        io_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= float(io_dropout) < 1.0:
            raise ValueError(f"io_dropout: expected a probability in [0, 1), got {io_dropout}")
        self.drop = nn.Dropout(float(io_dropout))
        check_positive_int("vocab_size", vocab_size)
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"alpha: expected a weight in [0, 1], got {alpha}")
        self.alpha = float(alpha)
        ctx = hidden_size if context_size is None else context_size
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.context_encoder = CARNN(embedding_dim, ctx, None, "n", batch_first=True)
        self.carnn = CARNN(
            embedding_dim, hidden_size, ctx, variant, num_layers=num_layers, dropout=dropout,
            batch_first=True,
        )  # fmt: skip
        self.output = nn.Linear(hidden_size, vocab_size)  # W^(l), b^(l)
        self.latent_head = (
            nn.Linear(ctx, num_latent_labels) if num_latent_labels is not None else None
        )  # W^(c), b^(c)

    def encode_context(self, prev_tokens: Tensor, prev_lengths: Tensor | None = None) -> Tensor:
        """``c^{t-1}`` ``(B, context_size)``: the final state of the context-free nCARNN."""
        _, h_n = self.context_encoder(self.drop(self.embedding(prev_tokens)),
                                      lengths=prev_lengths)
        return h_n[-1]

    def forward(
        self,
        tokens: Tensor,
        prev_tokens: Tensor,
        lengths: Tensor | None = None,
        prev_lengths: Tensor | None = None,
        *,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Next-word logits ``(B, T, vocab)`` (eq 11) and latent logits ``(B, K)`` or None (eq 12).

        Args:
            tokens: the current sentence, ``(B, T)`` word indices (inputs ``w_1 .. w_T``; the
                logits at ``m`` predict ``w_{m+1}``).
            prev_tokens: the previous sentence, ``(B, T')`` word indices, read by the
                context-free nCARNN (eq 11).
            lengths: ``(B,)`` true lengths of ``tokens``; None: every sentence is ``T`` long.
            prev_lengths: ``(B,)`` true lengths of ``prev_tokens``.
            positions: a bool mask ``(B, T)``: the logits only at its ``N`` true entries, so
                that the softmax layer, the largest product of the model, skips the padding.

        Returns:
            logits: the next-word logits, ``(B, T, vocab_size)``, or ``(N, vocab_size)`` with
                ``positions``.
            latent: the latent label's logits ``(B, num_latent_labels)`` (eq 12), or None
                without a latent head.
        """
        context = self.encode_context(prev_tokens, prev_lengths)
        h, _ = self.carnn(self.drop(self.embedding(tokens)), context, lengths=lengths)
        features = self.drop(h)  # over every position: the dropout draws do not depend on it
        logits = self.output(features if positions is None else features[positions])
        latent = self.latent_head(context) if self.latent_head is not None else None
        return logits, latent

    def loss(
        self,
        tokens: Tensor,
        targets: Tensor,
        prev_tokens: Tensor,
        lengths: Tensor | None = None,
        prev_lengths: Tensor | None = None,
        latent_labels: Tensor | None = None,
    ) -> Tensor:
        """Eq 13: ``alpha L_w + (1 - alpha) L_l`` (just ``L_w`` without ``latent_labels``).

        ``L_w`` is the mean log-loss over the valid target words (``targets`` ``(B, T)``,
        positions past ``lengths`` ignored); ``L_l`` the log-loss of the previous sentence's
        latent label ``latent_labels`` ``(B,)``.
        """
        valid = None
        if lengths is not None:
            valid = torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(
                tokens.device
            ).unsqueeze(1)
        logits, latent = self(tokens, prev_tokens, lengths, prev_lengths, positions=valid)
        if valid is None:
            loss_w = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        else:  # the logits of the valid positions only
            loss_w = F.cross_entropy(logits, targets[valid], ignore_index=-100)
        if latent_labels is None:
            return loss_w
        if latent is None:
            raise ValueError("latent_labels: given, but the model has no latent head "
                             "(num_latent_labels=None)")  # fmt: skip
        loss_l = F.cross_entropy(latent, latent_labels)
        return self.alpha * loss_w + (1 - self.alpha) * loss_l
