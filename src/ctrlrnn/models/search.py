"""Greedy and beam-search decoding for any model that decodes one token at a time.

A model provides ``encode(src, src_lengths) -> dict`` (tensors with the batch first, including
``"lengths"``), ``init_state(enc) -> list[Tensor]``, ``step(token, state, enc) -> (log-probs
(B, V), state)``, ``_select(state, index)`` (reorder states along the batch) and the ids
``pad_id``, ``bos_id``, ``eos_id``. ``step`` is the readable step, written from the model's
equations. A model may also provide a faster step that gives the same log-probabilities
(:meth:`IncrementalDecoding.decoding_context` and :meth:`IncrementalDecoding.decode_step`:
what does not change between steps computed once per decode), which the decoders below use.

Beam search ranks hypotheses by eq 9 of the QRNN paper's appendix as we read it (the printed
formula is garbled): the summed log-probability divided by ``min(T, T_trg) ** alpha`` with
``T_trg`` the source length plus 5. This gives ordinary beam search at ``alpha = 0`` (eq 10) and
length normalisation up to the target length at ``alpha = 1`` (eq 11), and can be applied at
every step, so no re-ranking of finished hypotheses is needed.

The loops hold no per-step Python lists: the tokens go into a buffer allocated once (beam
search: the tokens and back-pointers of each step, the hypotheses read back once at the end),
and greedy decoding's test "has every sequence ended" reads one value per step on the CPU,
where reading it costs no wait, and one every :data:`CHECK_EVERY` steps on an accelerator,
where it waits for the device (the steps past every end are cut off as before, so the tokens
are the same). Beam search reads it every step: a step past every end could reorder beams of
equal rank.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: On an accelerator, how many steps run between two reads of "has every sequence ended".
CHECK_EVERY = 8


def _check_every(device: torch.device) -> int:
    return 1 if device.type == "cpu" else CHECK_EVERY


def one_per_source(enc: dict[str, Tensor], group: int) -> dict[str, Tensor]:
    """The encoder outputs ``memory`` and source ``mask`` of ``enc``, whose rows are each
    source's ``group`` hypotheses in a row (identical copies), with one row per source."""
    return {"memory": enc["memory"][::group].contiguous(), "mask": enc["mask"][::group]}


def _check_search(beam: int, alpha: float, max_len: int | None) -> None:
    """A clear error for a beam search that cannot run as asked, naming the argument."""
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ValueError(f"beam: expected a whole number of hypotheses >= 1, got {beam!r}")
    if not alpha >= 0:  # NaN too
        raise ValueError(f"alpha: expected a length-normalisation exponent >= 0, got {alpha!r}")
    if max_len is not None:
        _check_max_len(max_len)


def _check_max_len(max_len: int) -> None:
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len: expected a whole number of tokens >= 0, got {max_len!r}")


def _before_eos(rows: list[list[int]], eos: int) -> list[list[int]]:
    """Each row's tokens before its first end-of-sequence token."""
    return [row[: row.index(eos)] if eos in row else row for row in rows]


class IncrementalDecoding:
    """Mixin: :meth:`greedy` and :meth:`beam_search` over ``encode``/``init_state``/``step``."""

    pad_id: int
    bos_id: int
    eos_id: int
    # provided by the model: encode, init_state, step, _select (see the module docstring)

    def decoding_context(self, enc: dict[str, Tensor], group: int = 1) -> Any:
        """What :meth:`decode_step` reads at every step of one decode of ``enc`` (computed once
        per decode); by default ``enc`` itself. ``enc`` has a row per decoded sequence; in beam
        search a source's ``group`` hypotheses are ``group`` consecutive copies of its row,
        which a model whose step reads only the encoder outputs may keep once, shared by the
        hypotheses (fewer bytes read at every step, the same values)."""
        return enc

    def decode_step(
        self, token: Tensor, state: list[Tensor], context: Any
    ) -> tuple[Tensor, list[Tensor]]:
        """The step the decoders run: by default the model's ``step``. A model may override
        it (with :meth:`decoding_context`) by a faster step with the same results."""
        return self.step(token, state, context)  # type: ignore[attr-defined]

    @torch.no_grad()
    def greedy(self, src: Tensor, src_lengths: Tensor, max_len: int) -> list[list[int]]:
        """The most likely next token at every step (eq 10 at beam 1), up to ``max_len`` tokens
        per sequence, each cut before its first end-of-sequence token."""
        _check_max_len(max_len)
        enc = self.encode(src, src_lengths)  # type: ignore[attr-defined]
        state = self.init_state(enc)  # type: ignore[attr-defined]
        context = self.decoding_context(enc)
        B, device, eos = src.shape[0], src.device, self.eos_id
        # step t's tokens are row t + 1; row 0 holds the begin-of-sequence tokens
        tokens = torch.empty(max_len + 1, B, dtype=torch.long, device=device)
        tokens[0] = self.bos_id
        ended = torch.zeros(B, dtype=torch.bool, device=device)
        every = _check_every(device)
        steps = 0
        while steps < max_len:
            logp, state = self.decode_step(tokens[steps], state, context)
            steps += 1
            row = tokens[steps]
            torch.argmax(logp, -1, out=row)
            if B == 1 and every == 1:  # one read: the one sequence's token
                if int(row[0]) == eos:
                    break
                continue
            ended |= row == eos
            if steps % every == 0 and bool(ended.all()):
                break
        return _before_eos(tokens[1 : steps + 1].t().tolist(), eos)

    @torch.no_grad()
    def greedy_reference(self, src: Tensor, src_lengths: Tensor,
                         max_len: int) -> list[list[int]]:
        """:meth:`greedy` written plainly (as it was before the decoders' buffers and the
        models' :meth:`decode_step`): the model's readable ``step`` on the encoder's outputs,
        the tokens of each step kept in a list, one test of the ends per step. The same tokens
        as :meth:`greedy` (tests/tasks); ``ctrlrnn bench --overhead`` times the two."""
        enc = self.encode(src, src_lengths)  # type: ignore[attr-defined]
        state = self.init_state(enc)  # type: ignore[attr-defined]
        B = src.shape[0]
        token = torch.full((B,), self.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        steps: list[Tensor] = []
        for _ in range(max_len):
            logp, state = self.step(token, state, enc)  # type: ignore[attr-defined]
            token = logp.argmax(-1)
            steps.append(token)
            done |= token == self.eos_id
            if bool(done.all()):
                break
        rows = torch.stack(steps, 1).tolist() if steps else [[] for _ in range(B)]
        return _before_eos(rows, self.eos_id)

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
        """Beam search with the length-normalised ranking of eq 9 (module docstring), ``beam``
        hypotheses a source, up to ``max_len`` tokens each (by default 10 past the longest
        source's length plus ``extra_target``)."""
        _check_search(beam, alpha, max_len)
        B, device = src.shape[0], src.device
        if B == 0:
            return []
        enc = self.encode(src, src_lengths)  # type: ignore[attr-defined]
        rep = torch.arange(B, device=device).repeat_interleave(beam)
        enc = {k: v.index_select(0, rep) for k, v in enc.items()}
        state = self.init_state(enc)  # type: ignore[attr-defined]
        context = self.decoding_context(enc, beam)
        t_trg = (enc["lengths"].to(device) + extra_target).float().view(B, beam)
        limit = int(src_lengths.max()) + extra_target + 10 if max_len is None else max_len
        score = torch.full((B, beam), float("-inf"), device=device)
        score[:, 0] = 0.0
        length = torch.zeros(B, beam, device=device)
        finished = torch.zeros(B, beam, dtype=torch.bool, device=device)
        # step t's tokens and the beams they extend (back-pointers), read back once at the end
        tokens = torch.empty(limit, B, beam, dtype=torch.long, device=device)
        parents = torch.empty(limit, B, beam, dtype=torch.long, device=device)
        last = torch.full((B * beam,), self.bos_id, dtype=torch.long, device=device)
        offsets = (torch.arange(B, device=device) * beam).unsqueeze(1)
        frozen: Tensor | None = None
        steps = 0
        while steps < limit:
            logp, state = self.decode_step(last, state, context)
            V = logp.shape[-1]
            logp = logp.view(B, beam, V)
            if frozen is None:
                # finished hypotheses continue only with a free end-of-sequence token
                frozen = torch.full_like(logp, float("-inf"))
                frozen[..., self.eos_id] = 0.0
            logp = torch.where(finished.unsqueeze(-1), frozen, logp)
            total = score.unsqueeze(-1) + logp
            # a hypothesis's length, and so its norm, is the same whichever token extends it:
            # computed per beam and broadcast over the vocabulary
            new_len = torch.where(finished, length, length + 1)
            norm = torch.minimum(new_len, t_trg).clamp(min=1) ** alpha
            rank = (total / norm.unsqueeze(-1)).view(B, -1)
            top = rank.topk(beam, dim=-1).indices
            src_beam, tok = top // V, top % V
            score = total.view(B, -1).gather(1, top)
            length = new_len.gather(1, src_beam)
            finished = finished.gather(1, src_beam) | (tok == self.eos_id)
            tokens[steps] = tok
            parents[steps] = src_beam
            steps += 1
            state = self._select(state, (src_beam + offsets).view(-1))  # type: ignore[attr-defined]
            last = tok.view(-1)
            if bool(finished.all()):
                break
        norm = torch.minimum(length, t_trg).clamp(min=1) ** alpha
        best = (score / norm).argmax(-1)
        return _before_eos(_backtrack(tokens[:steps].tolist(), parents[:steps].tolist(),
                                      best.tolist()), self.eos_id)


def _backtrack(tokens: list[list[list[int]]], parents: list[list[list[int]]],
               best: list[int]) -> list[list[int]]:
    """Each batch row's hypothesis ending in beam ``best[b]`` after the last step, from every
    step's tokens and back-pointers ``[step][row][beam]``."""
    out: list[list[int]] = []
    for b, j in enumerate(best):
        seq: list[int] = []
        for t in range(len(tokens) - 1, -1, -1):
            seq.append(tokens[t][b][j])
            j = parents[t][b][j]
        out.append(seq[::-1])
    return out
