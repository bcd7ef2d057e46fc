"""Word- or character-level language model with tied embeddings (QRNN paper section 3.2).

``tokens (B, T)`` -> embedding -> dropout -> encoder -> dropout -> [projection] -> decoder.

* Tied weights (Press & Wolf, 2017; Inan et al., 2017): the decoder's weight matrix *is* the
  input embedding matrix. When the encoder's width differs from the embedding size, a linear
  projection maps the encoder output to the embedding size first.
* Regularisation of the QRNN paper 3.2 / table 2: "dropout of 0.5 on embeddings and between layers"
  (``embedding_dropout`` here, the encoder's own ``dropout`` option between its layers, and
  ``output_dropout`` on the top layer's output) and zoneout on the QRNN forget gates through
  the encoder option ``zoneout`` (eq 6, no rescaling).
* Truncated BPTT over a continuous stream: ``forward`` takes and returns the encoder state;
  the caller carries it from one window to the next after :func:`detach_state`.

Bidirectional encoders would see the future, so they are refused.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor, nn

from ctrlrnn.models.encoders import SequenceEncoder


def detach_state(state: Any) -> Any:
    """The state with every tensor detached (tuples/lists kept), so that truncated BPTT stops
    gradients at the window boundary while the values carry over."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach()
    if isinstance(state, (tuple, list)):
        return type(state)(detach_state(s) for s in state)
    raise TypeError(f"state: cannot detach a {type(state).__name__}")


def perplexity(nll_sum: float, count: float) -> float:
    """``exp`` of the mean negative log-likelihood (natural log) per token."""
    if count <= 0:
        raise ValueError(f"count: expected a positive token count, got {count}")
    return math.exp(min(nll_sum / count, 700.0))


class LanguageModel(nn.Module):
    """Next-token model; ``forward(tokens, state=None) -> (logits (B, T, V), state)``."""

    def __init__(
        self,
        vocab_size: int,
        *,
        encoder: str,
        encoder_args: dict[str, Any],
        embedding_size: int = 0,
        tie_weights: bool = True,
        embedding_dropout: float = 0.0,
        output_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if encoder_args.get("bidirectional"):
            raise ValueError("model.bidirectional: a language model cannot read the future")
        hidden = int(encoder_args.get("hidden_size", 128))
        E = embedding_size or hidden
        self.embed = nn.Embedding(vocab_size, E)
        self.embedding_dropout = nn.Dropout(embedding_dropout)
        self.encoder = SequenceEncoder(encoder, E, encoder_args, stateful=True)
        self.output_dropout = nn.Dropout(output_dropout)
        width = self.encoder.output_size
        self.tied = tie_weights
        if tie_weights:
            self.project: nn.Module = nn.Linear(width, E) if width != E else nn.Identity()
            self.decoder = nn.Linear(E, vocab_size)
            self.decoder.weight = self.embed.weight
        else:
            self.project = nn.Identity()
            self.decoder = nn.Linear(width, vocab_size)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens: Tensor, state: Any = None) -> tuple[Tensor, Any]:
        x = self.embedding_dropout(self.embed(tokens))
        out, _, h_n = self.encoder(x, None, state)
        return self.decoder(self.project(self.output_dropout(out))), h_n
