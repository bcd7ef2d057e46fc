"""Greedy and beam-search decoding for any model that decodes one token at a time.

A model provides ``encode(src, src_lengths) -> dict`` (tensors with the batch first, including
``"lengths"``), ``init_state(enc) -> list[Tensor]``, ``step(token, state, enc) -> (log-probs
(B, V), state)``, ``_select(state, index)`` (reorder states along the batch) and the ids
``pad_id``, ``bos_id``, ``eos_id``.

Beam search ranks hypotheses by eq 9 of the QRNN paper's appendix as we read it (the printed
formula is garbled): the summed log-probability divided by ``min(T, T_trg) ** alpha`` with
``T_trg`` the source length plus 5. This gives ordinary beam search at ``alpha = 0`` (eq 10) and
length normalisation up to the target length at ``alpha = 1`` (eq 11), and can be applied at
every step, so no re-ranking of finished hypotheses is needed.
"""

from __future__ import annotations

import torch
from torch import Tensor


class IncrementalDecoding:
    """Mixin: :meth:`greedy` and :meth:`beam_search` over ``encode``/``init_state``/``step``."""

    pad_id: int
    bos_id: int
    eos_id: int
    # provided by the model: encode, init_state, step, _select (see the module docstring)

    @torch.no_grad()
    def greedy(self, src: Tensor, src_lengths: Tensor, max_len: int) -> list[list[int]]:
        enc = self.encode(src, src_lengths)
        state = self.init_state(enc)
        B = src.shape[0]
        token = torch.full((B,), self.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        steps: list[Tensor] = []
        for _ in range(max_len):
            logp, state = self.step(token, state, enc)
            token = logp.argmax(-1)
            steps.append(token)
            done |= token == self.eos_id
            if bool(done.all()):
                break
        # each row's tokens before its first end-of-sequence (one transfer for the batch)
        rows: list[list[int]] = (torch.stack(steps, 1).tolist() if steps
                                 else [[] for _ in range(B)])
        return [row[: row.index(self.eos_id)] if self.eos_id in row else row for row in rows]

    @torch.no_grad()
    def beam_search(
        self,
        src: Tensor,
        src_lengths: Tensor,
        *,
        beam: int = 8,
        alpha: float = 0.6,
        max_len: int | None = None,
        extra_target: int = 5,
    ) -> list[list[int]]:
        """Beam search with the length-normalised ranking of eq 9 (module docstring)."""
        B = src.shape[0]
        enc = self.encode(src, src_lengths)
        rep = torch.arange(B, device=src.device).repeat_interleave(beam)
        enc = {k: v.index_select(0, rep) for k, v in enc.items()}
        state = self.init_state(enc)
        t_trg = (enc["lengths"].to(src.device) + extra_target).float().view(B, beam)
        limit = max_len or int(src_lengths.max()) + extra_target + 10
        score = torch.full((B, beam), float("-inf"), device=src.device)
        score[:, 0] = 0.0
        length = torch.zeros(B, beam, device=src.device)
        finished = torch.zeros(B, beam, dtype=torch.bool, device=src.device)
        tokens = torch.full((B, beam, 0), self.pad_id, dtype=torch.long, device=src.device)
        last = torch.full((B * beam,), self.bos_id, dtype=torch.long, device=src.device)
        for _ in range(limit):
            logp, state = self.step(last, state, enc)
            V = logp.shape[-1]
            logp = logp.view(B, beam, V)
            # finished hypotheses continue only with a free end-of-sequence token
            frozen = torch.full_like(logp, float("-inf"))
            frozen[..., self.eos_id] = 0.0
            logp = torch.where(finished.unsqueeze(-1), frozen, logp)
            total = score.unsqueeze(-1) + logp
            new_len = torch.where(finished, length, length + 1).unsqueeze(-1).expand_as(total)
            norm = torch.minimum(new_len, t_trg.unsqueeze(-1)).clamp(min=1) ** alpha
            rank = (total / norm).view(B, -1)
            top = rank.topk(beam, dim=-1).indices
            src_beam, tok = top // V, top % V
            score = total.view(B, -1).gather(1, top)
            length = new_len.reshape(B, -1).gather(1, top)
            was_finished = finished.gather(1, src_beam)
            finished = was_finished | (tok == self.eos_id)
            flat = (src_beam + torch.arange(B, device=src.device).unsqueeze(1) * beam).view(-1)
            state = self._select(state, flat)
            tokens = torch.cat([tokens.gather(1, src_beam.unsqueeze(-1).expand_as(tokens)),
                                tok.unsqueeze(-1)], dim=-1)
            last = tok.view(-1)
            if bool(finished.all()):
                break
        norm = torch.minimum(length, t_trg).clamp(min=1) ** alpha
        best = (score / norm).argmax(-1)
        result: list[list[int]] = []
        for b in range(B):
            seq = tokens[b, best[b]].tolist()
            cut = seq.index(self.eos_id) if self.eos_id in seq else len(seq)
            result.append(seq[:cut])
        return result
