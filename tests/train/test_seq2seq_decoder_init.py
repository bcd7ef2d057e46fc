"""The LSTM decoder's initial state (``decoder_init``): every layer from one map of the encoder's
top final state (``"top"``, as before the option), or layer l from its own map of encoder layer
l's final state (``"layers"``, eq 7's pairing); decoding and teacher forcing agree under both;
the task option reaches the model; what cannot be built is refused naming the argument."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.models.seq2seq import Seq2Seq
from ctrlrnn.tasks import task_class
from ctrlrnn.train.config import TrainConfig, check_options

D64 = torch.float64


def _model(decoder_init: str = "layers", *, layers: int = 2, bidirectional: bool = False,
           attention: str = "dot", decoder_hidden: int | None = 6, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(12, 10, encoder="lstm", decoder="lstm", embedding_size=8, attention=attention,
                   encoder_args={"hidden_size": 8, "num_layers": layers,
                                 "bidirectional": bidirectional},
                   decoder_hidden=decoder_hidden, decoder_init=decoder_init).double().eval()


def _source(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 12, (3, 6), generator=g), torch.tensor([6, 2, 4])


def _encoder_layer_states(m: Seq2Seq, src: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """``(B, L, D*H)``: every encoder layer's final state, from the encoder's ``nn.LSTM`` run on
    each sequence alone, unpadded: its ``h_n``, the forward direction's after the last valid
    step and the backward one's after step 0, the directions side by side."""
    rnn = m.encoder.rnn
    D = 2 if rnn.bidirectional else 1
    rows = []
    for b in range(src.shape[0]):
        x = m.src_embed(src[b : b + 1, : int(lens[b])])
        _, (h_n, _) = rnn(x)
        rows.append(torch.stack([torch.cat([h_n[layer * D + d, 0] for d in range(D)])
                                 for layer in range(rnn.num_layers)]))
    return torch.stack(rows)


# ------------------------------------------------------------------ the initial states


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("attention", ["dot", "bahdanau"])
def test_layer_l_starts_from_tanh_of_its_bridge_of_encoder_layer_l(bidirectional, layers,
                                                                   attention):
    m = _model(layers=layers, bidirectional=bidirectional, attention=attention)
    src, lens = _source()
    H = m.hidden
    with torch.no_grad():
        states = _encoder_layer_states(m, src, lens)
        enc = m.encode(src, lens)
        h0, c0 = m.init_state(enc)
        assert h0.shape == c0.shape == (layers, 3, H)
        for layer in range(layers):
            bridge = m.bridges[layer]
            want = torch.tanh(states[:, layer] @ bridge.weight.T + bridge.bias)  # (B, 2H)
            torch.testing.assert_close(h0[layer], want[:, :H])
            torch.testing.assert_close(c0[layer], want[:, H:])
        torch.testing.assert_close(enc["layers"], states)
    if layers > 1:
        assert not torch.allclose(h0[0], h0[-1])
    assert len(m.bridges) == layers and not hasattr(m, "bridge")
    assert m.bridges[0].in_features == m.encoder.output_size == 8 * (2 if bidirectional else 1)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
def test_top_is_one_bridge_of_the_top_state_as_before(bidirectional, layers):
    """``"top"``, by hand: ``tanh(W h~_T + b)`` split into ``(2, L, H)``; the default builds
    the same parameters, drawn in the same order (a seed gives the values it gave before the
    option), and the encoding carries no per-layer states."""
    m = _model("top", layers=layers, bidirectional=bidirectional)
    src, lens = _source()
    H, L = m.hidden, layers
    with torch.no_grad():
        enc = m.encode(src, lens)
        assert "layers" not in enc
        top = _encoder_layer_states(m, src, lens)[:, -1]
        torch.testing.assert_close(enc["final"], top)
        want = torch.tanh(top @ m.bridge.weight.T + m.bridge.bias)  # (B, 2 L H)
        h0, c0 = m.init_state(enc)
        for layer in range(L):
            torch.testing.assert_close(h0[layer], want[:, layer * H : (layer + 1) * H])
            torch.testing.assert_close(c0[layer], want[:, (L + layer) * H : (L + layer + 1) * H])
    torch.manual_seed(0)
    default = Seq2Seq(12, 10, encoder="lstm", decoder="lstm", embedding_size=8,
                      encoder_args={"hidden_size": 8, "num_layers": layers,
                                    "bidirectional": bidirectional},
                      decoder_hidden=6).double().eval()
    assert default.decoder_init == "top"
    assert default.state_dict().keys() == m.state_dict().keys()
    for name, value in default.state_dict().items():
        torch.testing.assert_close(m.state_dict()[name], value, rtol=0, atol=0)
    tgt = torch.randint(4, 10, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(m(src, lens, tgt), default(src, lens, tgt), rtol=0, atol=0)


# ------------------------------------------------------------------ decoding


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("attention", ["dot", "bahdanau"])
def test_incremental_equals_teacher_forcing_and_padding_is_ignored(bidirectional, layers,
                                                                   attention):
    """As tests/train/test_seq2seq_model.py checks the other decoders: the step-by-step
    log-probabilities equal the teacher-forced ones, and source padding changes nothing."""
    m = _model(layers=layers, bidirectional=bidirectional, attention=attention)
    src, lens = _source()
    tgt = torch.randint(4, 10, (3, 6))
    with torch.no_grad():
        ref = torch.log_softmax(m(src, lens, tgt), -1)
        enc = m.encode(src, lens)
        state, steps = m.init_state(enc), []
        for t in range(6):
            logp, state = m.step(tgt[:, t], state, enc)
            steps.append(logp)
        torch.testing.assert_close(torch.stack(steps, 1), ref)
        src2 = torch.cat([src, torch.randint(4, 12, (3, 3))], 1)
        torch.testing.assert_close(torch.log_softmax(m(src2, lens, tgt), -1), ref)
        # each row alone, unpadded: the same log-probabilities
        for b in range(3):
            alone = m(src[b : b + 1, : int(lens[b])], lens[b : b + 1], tgt[b : b + 1])
            torch.testing.assert_close(torch.log_softmax(alone, -1), ref[b : b + 1])


def _varied(attention: str, layers: int = 2, seed: int = 3) -> Seq2Seq:
    """A ``"layers"`` model whose untrained output layer gives varied tokens (as
    tests/tasks/test_fused_decoding.py does)."""
    m = _model(layers=layers, bidirectional=True, attention=attention, seed=seed)
    torch.nn.init.normal_(m.out.weight, std=1.0)
    return m


@pytest.mark.parametrize("attention", ["dot", "bahdanau"])
def test_greedy_and_beam_tokens_are_the_teacher_forced_argmax_steps(attention):
    """Greedy decoding (the incremental path) gives at every step the argmax of the full
    teacher-forced forward over its own tokens, up to its end token; beam 1 without length
    normalisation is greedy; a wider beam keeps the source lengths' rows apart."""
    m = _varied(attention)
    src, lens = _source(5)
    max_len = 9
    hyps = m.greedy(src, lens, max_len)
    assert any(len(row) > 1 for row in hyps)
    with torch.no_grad():
        for b, hyp in enumerate(hyps):
            tgt_in = torch.tensor([[m.bos_id, *hyp]])
            argmax = m(src[b : b + 1], lens[b : b + 1], tgt_in).argmax(-1)[0].tolist()
            ended = len(hyp) < max_len
            assert argmax == (hyp + [m.eos_id] if ended else hyp + argmax[-1:]), b
    assert m.beam_search(src, lens, beam=1, alpha=0.0, max_len=max_len) == hyps
    assert m.greedy_reference(src, lens, max_len) == hyps
    assert len(m.beam_search(src, lens, beam=3, alpha=0.6, max_len=max_len)) == 3


@pytest.mark.parametrize("attention", ["dot", "bahdanau"])
def test_exhaustive_beam_finds_the_best_sequence_by_teacher_forcing(attention):
    """A beam as wide as every 2-token prefix returns the output of length <= 2 whose
    teacher-forced log-probability (the full forward's) is highest."""
    torch.manual_seed(2)
    m = Seq2Seq(7, 6, encoder="lstm", decoder="lstm", embedding_size=4, attention=attention,
                encoder_args={"hidden_size": 8, "num_layers": 2, "bidirectional": True},
                decoder_init="layers", bos_id=2, eos_id=3).double().eval()
    src, lens = torch.randint(4, 7, (1, 3)), torch.tensor([3])
    best = m.beam_search(src, lens, beam=36, alpha=0.0, max_len=2)[0]

    def score(seq: list[int]) -> float:
        out = [*seq, 3][:2]
        with torch.no_grad():
            logp = torch.log_softmax(m(src, lens, torch.tensor([[2, *out[:-1]]])), -1)[0]
        return float(sum(logp[t, tok] for t, tok in enumerate(out)))

    candidates = [[]] + [[a] for a in range(6) if a != 3] + [
        [a, b] for a in range(6) for b in range(6) if 3 not in (a, b)]
    assert score(best) == pytest.approx(max(score(c) for c in candidates), abs=1e-9)


def test_every_parameter_gets_a_gradient():
    m = _model(layers=3, bidirectional=True).float().train()
    src, lens = _source()
    m(src, lens, torch.randint(4, 10, (3, 6))).square().mean().backward()
    assert not [n for n, p in m.named_parameters() if p.grad is None]


# ------------------------------------------------------------------ refusals


def test_what_cannot_be_built_is_refused_naming_decoder_init():
    lstm = {"encoder": "lstm", "decoder": "lstm"}
    with pytest.raises(ValueError, match=r"decoder_init: expected one of \('top', 'layers'\), "
                                         "got 'bottom'"):
        Seq2Seq(12, 10, **lstm, encoder_args={"hidden_size": 8}, decoder_init="bottom")
    with pytest.raises(ValueError, match="decoder_init: an option of the LSTM decoder"):
        Seq2Seq(12, 10, encoder="qrnn", decoder="qrnn", encoder_args={"hidden_size": 8},
                decoder_init="layers")
    with pytest.raises(ValueError, match=r"decoder_init: .*the encoder's depth \(2\), got "
                                         "decoder_layers=3"):
        Seq2Seq(12, 10, **lstm, decoder_layers=3, decoder_init="layers",
                encoder_args={"hidden_size": 8, "num_layers": 2})
    with pytest.raises(ValueError, match="decoder_init: 'layers' reads every encoder layer's "
                                         "final state, which encoder 'rcrn' with 2 layers"):
        Seq2Seq(12, 10, encoder="rcrn", decoder="lstm", decoder_init="layers",
                encoder_args={"hidden_size": 4, "num_layers": 2})
    # a one-layer encoder of any kind exposes its one state; "top" takes any depth
    Seq2Seq(12, 10, encoder="rcrn", decoder="lstm", decoder_init="layers",
            encoder_args={"hidden_size": 4})
    Seq2Seq(12, 10, **lstm, decoder_layers=3, encoder_args={"hidden_size": 8, "num_layers": 2})


# ------------------------------------------------------------------ the task option

PAIRS = {"train": [("the dog eats", "el perro come"), ("a cat sees", "un gato ve")] * 8,
         "valid": [("the cat", "el gato")] * 2, "test": [("a dog", "un perro")] * 2}


def _task(name: str = "translate-char", **options):
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), seed=0, pairs=PAIRS)
    task.setup()
    return task


def test_the_task_option_reaches_the_model(tmp_path):
    from ctrlrnn.train.cli import validated_config
    from ctrlrnn.train.trainer import Trainer

    cfg, _ = validated_config("translate-char", "lstm", {"task.decoder_init": "layers",
                                                          "model.num_layers": "2"})
    assert cfg.task_args["decoder_init"] == "layers"
    args = encoder_options("lstm", {"hidden_size": 8, "num_layers": 2, "bidirectional": True})
    assert _task().build_model("lstm", args).decoder_init == "top"
    task = _task(decoder_init="layers", beam=2, eval_batch_size=2)
    model = task.build_model("lstm", args)
    assert model.decoder_init == "layers" and len(model.bridges) == 2
    word = _task("translate-word", decoder_init="layers").build_model("lstm", args)
    assert word.decoder_init == "layers"
    # a few steps through the trainer: training, checkpoints, greedy and beam evaluations
    torch.manual_seed(0)
    train = TrainConfig(task=task.name, model="lstm", out=str(tmp_path), epochs=2, max_steps=3,
                        batch_size=8, log_every=1, checkpoint_every=100, model_args=args,
                        task_args=task.opts)
    result = Trainer(train, task, model, tmp_path, show_progress=False).fit()
    assert result["step"] == 3 and 0.0 <= result["valid"]["bleu"] <= 100.0


def test_the_task_refuses_naming_task_decoder_init():
    args = encoder_options("lstm", {"hidden_size": 8, "num_layers": 2})
    with pytest.raises(ValueError, match=r"task.decoder_init: expected one of \('top', "
                                         r"'layers'\), got 'bottom'"):
        _task(decoder_init="bottom").build_model("lstm", args)
    with pytest.raises(ValueError, match="task.decoder_init: an option of the LSTM decoder"):
        _task(decoder_init="layers").build_model("qrnn", encoder_options("qrnn", {}))
    with pytest.raises(ValueError, match=r"task.decoder_init: an option of task.arch=rnn's "
                                         "LSTM decoder, got 'layers' with task.arch=transformer"):
        _task("translate-word", decoder_init="layers", arch="transformer",
              heads=2).build_model("lstm", args)
