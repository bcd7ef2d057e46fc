"""The decoders of :mod:`ctrlrnn.models.search` with the QRNN decoder's step that reuses what
does not change between steps (:mod:`ctrlrnn.models.qrnn_decoding`) give the tokens of a
straightforward loop over the readable ``Seq2Seq.step`` (the reference decoders below, the
decoders as they were written before the fused step): greedy and beam search, batch 1 and
more, one to three layers, several lengths, sequences ending early and not at all."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.models import qrnn_decoding, search
from ctrlrnn.models.seq2seq import Seq2Seq


@torch.no_grad()
def reference_greedy(model, src, lengths, max_len):
    """Greedy decoding, one readable ``model.step`` per token, every token kept in a list."""
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    token = torch.full((src.shape[0],), model.bos_id, dtype=torch.long)
    rows = [[] for _ in range(src.shape[0])]
    for _ in range(max_len):
        logp, state = model.step(token, state, enc)
        token = logp.argmax(-1)
        for row, t in zip(rows, token.tolist()):
            row.append(t)
        if all(model.eos_id in row for row in rows):
            break
    return [row[: row.index(model.eos_id)] if model.eos_id in row else row for row in rows]


@torch.no_grad()
def reference_beam(model, src, lengths, beam, alpha, max_len, extra_target=5):
    """Beam search ranked by eq 9 (search.py's docstring), every hypothesis a growing tensor."""
    B = src.shape[0]
    enc = model.encode(src, lengths)
    rep = torch.arange(B).repeat_interleave(beam)
    enc = {k: v.index_select(0, rep) for k, v in enc.items()}
    state = model.init_state(enc)
    t_trg = (enc["lengths"] + extra_target).float().view(B, beam)
    score = torch.full((B, beam), float("-inf"))
    score[:, 0] = 0.0
    length = torch.zeros(B, beam)
    finished = torch.zeros(B, beam, dtype=torch.bool)
    tokens = torch.full((B, beam, 0), model.pad_id, dtype=torch.long)
    last = torch.full((B * beam,), model.bos_id, dtype=torch.long)
    for _ in range(max_len):
        logp, state = model.step(last, state, enc)
        V = logp.shape[-1]
        logp = logp.view(B, beam, V)
        frozen = torch.full_like(logp, float("-inf"))
        frozen[..., model.eos_id] = 0.0
        logp = torch.where(finished.unsqueeze(-1), frozen, logp)
        total = score.unsqueeze(-1) + logp
        new_len = torch.where(finished, length, length + 1).unsqueeze(-1).expand_as(total)
        norm = torch.minimum(new_len, t_trg.unsqueeze(-1)).clamp(min=1) ** alpha
        top = (total / norm).view(B, -1).topk(beam, dim=-1).indices
        src_beam, tok = top // V, top % V
        score = total.view(B, -1).gather(1, top)
        length = new_len.reshape(B, -1).gather(1, top)
        finished = finished.gather(1, src_beam) | (tok == model.eos_id)
        state = model._select(state, (src_beam + torch.arange(B).unsqueeze(1) * beam).view(-1))
        tokens = torch.cat([tokens.gather(1, src_beam.unsqueeze(-1).expand_as(tokens)),
                            tok.unsqueeze(-1)], dim=-1)
        last = tok.view(-1)
        if bool(finished.all()):
            break
    best = (score / (torch.minimum(length, t_trg).clamp(min=1) ** alpha)).argmax(-1)
    out = []
    for b in range(B):
        seq = tokens[b, best[b]].tolist()
        out.append(seq[: seq.index(model.eos_id)] if model.eos_id in seq else seq)
    return out


def _varied(model: Seq2Seq) -> Seq2Seq:
    """``model`` in eval mode with weights drawn wide enough for varied tokens (an untrained
    model's are too small)."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.6)
    return model.eval()


def _model(layers: int, *, bidirectional: bool = False, window=2, seed: int = 1) -> Seq2Seq:
    torch.manual_seed(seed)
    return _varied(Seq2Seq(30, 25, encoder="qrnn",
                           encoder_args={"hidden_size": 16, "num_layers": layers,
                                         "bidirectional": bidirectional},
                           embedding_size=8, window=window))


def _end_early(model: Seq2Seq, src: torch.Tensor, lengths: torch.Tensor) -> Seq2Seq:
    """``model`` with its end-of-sequence id set to a token its greedy decoding of the first
    source emits first at step 2 or later: the decoders then end it there (an untrained model
    emits end-of-sequence at the first step or never)."""
    model.eos_id = 10**6  # no token: nothing ends
    row = reference_greedy(model, src[:1], lengths[:1], 30)[0]
    model.eos_id = next(t for k, t in enumerate(row) if k >= 1 and t not in row[:k])
    return model


def _source(batch: int, length: int, seed: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 30, (batch, length), generator=g)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[0] = length
    return src, lengths


CASES = [  # (layers, bidirectional encoder: the query projection, decoder windows)
    (1, False, 2), (2, False, 2), (2, True, (3, 2)), (3, False, (3, 1, 2)),
]


@pytest.mark.parametrize(("layers", "bidirectional", "window"), CASES)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("max_len", [1, 4, 15])
def test_greedy_equals_the_reference_loop(layers, bidirectional, window, batch, max_len):
    model = _model(layers, bidirectional=bidirectional, window=window)
    src, lengths = _source(batch, 6)
    want = reference_greedy(model, src, lengths, max_len)
    assert model.greedy(src, lengths, max_len) == want
    assert any(len(row) == max_len for row in want)  # some row ran to the end


@pytest.mark.parametrize(("layers", "bidirectional", "window"), CASES)
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_ending_early_equals_the_reference_loop(layers, bidirectional, window, batch):
    src, lengths = _source(batch, 6, seed=4)
    model = _end_early(_model(layers, bidirectional=bidirectional, window=window), src, lengths)
    want = reference_greedy(model, src, lengths, 30)
    assert model.greedy(src, lengths, 30) == want
    assert 1 <= len(want[0]) < 30  # the first row ended early


@pytest.mark.parametrize(("layers", "bidirectional", "window"), CASES)
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize(("beam", "alpha", "early"), [(1, 0.0, False), (3, 0.6, False),
                                                      (4, 0.6, True), (3, 0.0, True)])
def test_beam_search_equals_the_reference_loop(layers, bidirectional, window, batch, beam,
                                               alpha, early):
    model = _model(layers, bidirectional=bidirectional, window=window)
    src, lengths = _source(batch, 5)
    if early:
        _end_early(model, src, lengths)
    for max_len in (1, 6, 30):
        want = reference_beam(model, src, lengths, beam, alpha, max_len)
        got = model.beam_search(src, lengths, beam=beam, alpha=alpha, max_len=max_len)
        assert got == want, max_len
    if early:  # some hypothesis ended before the limit
        assert any(len(row) < 30 for row in want)
    else:
        assert any(len(row) > 1 for row in want)


@pytest.mark.parametrize(("layers", "bidirectional", "window"), CASES)
def test_the_fused_step_gives_the_readable_steps_log_probabilities_bit_for_bit(
        layers, bidirectional, window):
    model = _model(layers, bidirectional=bidirectional, window=window)
    src, lengths = _source(3, 6)
    tokens = torch.randint(4, 25, (3, 8), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        enc = model.encode(src, lengths)
        ctx = model.decoding_context(enc)
        assert isinstance(ctx, qrnn_decoding.QRNNDecoding)
        fast = slow = model.init_state(enc)
        for t in range(tokens.shape[1]):
            want, slow = model.step(tokens[:, t], slow, enc)
            got, fast = model.decode_step(tokens[:, t], fast, ctx)
            assert torch.equal(got, want)
            assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))


def test_the_readable_step_runs_where_a_graph_may_be_recorded():
    model = _model(2)
    src, lengths = _source(1, 4)
    enc = model.encode(src, lengths)
    assert model.decoding_context(enc) is enc  # grad mode on: the readable step
    with torch.no_grad():
        assert isinstance(model.decoding_context(enc), qrnn_decoding.QRNNDecoding)
    lstm = Seq2Seq(30, 25, encoder="lstm", decoder="lstm", encoder_args={"hidden_size": 16},
                   embedding_size=8).eval()
    with torch.no_grad():
        enc = lstm.encode(src, lengths)
        assert lstm.decoding_context(enc) is enc


@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_reading_the_end_every_few_steps_gives_the_same_tokens(monkeypatch, batch):
    """On an accelerator greedy decoding asks "has every row ended" every CHECK_EVERY steps:
    the extra steps are cut off."""
    src, lengths = _source(batch, 6, seed=4)
    model = _end_early(_model(2), src, lengths)
    want = reference_greedy(model, src, lengths, 30)
    monkeypatch.setattr(search, "_check_every", lambda device: search.CHECK_EVERY)
    assert model.greedy(src, lengths, 30) == want
    assert 1 <= len(want[0]) < 30


def _other_models():
    from ctrlrnn.models.attn_lstm_seq2seq import AttnLSTMSeq2Seq
    from ctrlrnn.models.transformer import TransformerSeq2Seq

    return {
        "lstm-bahdanau": lambda: Seq2Seq(30, 25, encoder="lstm", decoder="lstm",
                                         attention="bahdanau", encoder_args={"hidden_size": 16},
                                         embedding_size=8),
        "cas": lambda: AttnLSTMSeq2Seq(30, 25, encoder="caslstm",
                                       encoder_args={"hidden_size": 16}, embedding_size=8),
        "transformer": lambda: TransformerSeq2Seq(30, 25, d_model=16, heads=2, layers=2,
                                                  dropout=0.0),
    }


@pytest.mark.parametrize("kind", ["lstm-bahdanau", "cas", "transformer"])
def test_the_other_decoders_keep_their_tokens(kind):
    """The decoders' bookkeeping (token buffer, back-pointers) for models without a fused
    step: their readable step through the decoders, as through the reference loops."""
    torch.manual_seed(3)
    model = _other_models()[kind]().eval()
    torch.nn.init.normal_(model.out.weight, std=1.0)  # varied tokens from an untrained model
    src, lengths = _source(2, 5)
    want = reference_greedy(model, src, lengths, 9)
    assert model.greedy(src, lengths, 9) == want
    assert any(len(row) > 1 for row in want)
    got = model.beam_search(src, lengths, beam=3, alpha=0.6, max_len=9)
    assert got == reference_beam(model, src, lengths, 3, 0.6, 9)


@pytest.mark.parametrize("batch", [1, 3])
def test_the_libraries_readable_greedy_equals_the_reference_loop(batch):
    """``greedy_reference``, which ``ctrlrnn bench --overhead`` times against ``greedy``."""
    src, lengths = _source(batch, 6, seed=4)
    model = _end_early(_model(2), src, lengths)
    for max_len in (0, 3, 30):
        want = reference_greedy(model, src, lengths, max_len)
        assert model.greedy_reference(src, lengths, max_len) == want
        assert model.greedy(src, lengths, max_len) == want


# ---------------------------------------------------- hypotheses sharing their source's outputs
def _lstm_model(bidirectional: bool, seed: int = 1) -> Seq2Seq:
    """An LSTM encoder-decoder with dot attention (the character-level translation's LSTM arm);
    a bidirectional encoder makes the query projection run."""
    torch.manual_seed(seed)
    return _varied(Seq2Seq(30, 25, encoder="lstm", decoder="lstm",
                           encoder_args={"hidden_size": 16, "num_layers": 2,
                                         "bidirectional": bidirectional},
                           embedding_size=8))


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("beam", "alpha"), [(1, 0.0), (3, 0.6), (4, 1.0)])
def test_lstm_beam_search_with_shared_outputs_equals_the_reference_loop(bidirectional, batch,
                                                                        beam, alpha):
    """The reference loop gives every hypothesis a copy of its source's encoder outputs; the
    decoders give the LSTM's dot attention one per source, shared by its hypotheses."""
    src, lengths = _source(batch, 5)
    model = _lstm_model(bidirectional)
    # an untrained LSTM decoder repeats one token: the end is a token its greedy decoding
    # never emits, so hypotheses run on (or end where the beam finds it)
    model.eos_id = 10**6
    emitted = {t for row in reference_greedy(model, src, lengths, 20) for t in row}
    model.eos_id = min(set(range(4, 25)) - emitted)
    for max_len in (1, 6, 20):
        want = reference_beam(model, src, lengths, beam, alpha, max_len)
        assert model.beam_search(src, lengths, beam=beam, alpha=alpha, max_len=max_len) == want
    assert any(len(row) > 1 for row in want)


@pytest.mark.parametrize("kind", ["qrnn", "lstm"])
def test_shared_outputs_give_each_hypothesis_its_own_sources_attention(kind):
    """In float64, the step over a context with one row per source gives each hypothesis the
    log-probabilities and state of the readable step over a copy per hypothesis, for hypotheses
    in different states (each row its own token and state)."""
    model = (_model(2, bidirectional=True, window=(3, 2)) if kind == "qrnn"
             else _lstm_model(True)).double()
    beam = 3
    src, lengths = _source(3, 6, seed=7)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        rows = {k: v.repeat_interleave(beam, dim=0)
                for k, v in model.encode(src, lengths).items()}
        shared = model.decoding_context(rows, beam)
        assert shared["memory"].shape[0] == 3 if kind == "lstm" else shared.memory.shape[0] == 3
        state = model.init_state(rows)
        state = [s + 0.1 * torch.randn(s.shape, generator=g, dtype=s.dtype) for s in state]
        fast, slow = state, state
        for _ in range(4):
            token = torch.randint(4, 25, (3 * beam,), generator=g)
            want, slow = model.step(token, slow, rows)
            got, fast = model.decode_step(token, fast, shared)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            for a, b in zip(fast, slow, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_shared_attention_refuses_rows_that_are_not_whole_groups():
    from ctrlrnn.models.seq2seq import shared_attention

    memory = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"query: 3 rows are not a whole number of rows per "
                                         r"source \(2\)"):
        shared_attention(torch.randn(3, 1, 4), memory, None)


@pytest.mark.parametrize("kind", ["qrnn", "lstm"])
def test_an_empty_batch_trains_and_decodes_to_nothing(kind):
    model = _model(2) if kind == "qrnn" else _lstm_model(False)
    src, lengths = torch.randint(4, 30, (0, 5)), torch.full((0,), 5)
    assert model(src, lengths, torch.randint(4, 25, (0, 4))).shape == (0, 4, 25)
    with torch.no_grad():
        assert model.greedy(src, lengths, 6) == []
    with torch.no_grad():
        assert model.beam_search(src, lengths, beam=3) == []
        assert model.beam_search(src, lengths, beam=3, max_len=6) == []


@pytest.mark.parametrize("kind", ["qrnn", "lstm", "lstm-bahdanau", "cas", "transformer"])
def test_a_beam_search_of_no_tokens_gives_empty_rows(kind):
    """``max_len=0`` decodes no step (as greedy does), rather than the default length."""
    model = (_model(2) if kind == "qrnn" else _lstm_model(False) if kind == "lstm"
             else _other_models()[kind]().eval())
    src, lengths = _source(3, 5)
    assert model.beam_search(src, lengths, beam=2, max_len=0) == [[], [], []]
    assert model.greedy(src, lengths, 0) == [[], [], []]


@pytest.mark.parametrize(("args", "message"), [
    ({"beam": 0}, r"beam: expected a whole number of hypotheses >= 1, got 0"),
    ({"beam": 2.0}, r"beam: .* got 2\.0"),
    ({"beam": True}, r"beam: .* got True"),
    ({"alpha": -0.5}, r"alpha: expected a length-normalisation exponent >= 0, got -0\.5"),
    ({"alpha": float("nan")}, r"alpha: .* got nan"),
    ({"max_len": -1}, r"max_len: expected a whole number of tokens >= 0, got -1"),
    ({"max_len": 3.5}, r"max_len: .* got 3\.5"),
])
def test_a_beam_search_that_cannot_run_names_its_argument(args, message):
    model = _model(1)
    src, lengths = _source(2, 4)
    with pytest.raises(ValueError, match=message):
        model.beam_search(src, lengths, **{"beam": 2, **args})
    if "max_len" in args:
        with pytest.raises(ValueError, match=message):
            model.greedy(src, lengths, args["max_len"])
