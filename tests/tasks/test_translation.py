"""Translation tasks (translate-char, translate-word), the Transformer with METAGROSS feed-forward
blocks, the CAS-LSTM attentional seq2seq, beam search and BLEU — at tiny sizes, no real data."""

from __future__ import annotations

import json
import logging
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from task_helpers import check_device_routing

from ctrlrnn.models.attn_lstm_seq2seq import AttnLSTMSeq2Seq
from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.models.transformer import TransformerSeq2Seq
from ctrlrnn.nn.metagross_ffn import MetagrossFFN
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.translation_tasks import corpus_bleu
from ctrlrnn.train.config import TrainConfig, check_options
from ctrlrnn.train.trainer import Trainer

sacrebleu = pytest.importorskip("sacrebleu")

LEXICON = {"the": "el", "dog": "perro", "cat": "gato", "eats": "come", "sees": "ve",
           "big": "grande", "small": "chico", "bread": "pan"}


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Toy 'translations': a word-for-word lexicon, so a model can learn them quickly."""
    rng = random.Random(seed)
    words = sorted(LEXICON)
    out = []
    for _ in range(n):
        en = [rng.choice(words) for _ in range(rng.randint(2, 4))]
        out.append((" ".join(en), " ".join(LEXICON[w] for w in en)))
    return out


PAIRS = {"train": _pairs(32, 0), "valid": _pairs(6, 1), "test": _pairs(6, 2)}


def _task(name: str, **options: Any):
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), seed=0, pairs=PAIRS)
    task.setup()
    return task


def _train(task, encoder: str, model_args: dict[str, Any], out: Path, steps: int = 8,
           lr: float = 1e-2) -> tuple[dict[str, Any], list[float]]:
    torch.manual_seed(0)
    args = encoder_options(encoder, model_args)
    cfg = TrainConfig(task=task.name, model=encoder, out=str(out), epochs=10, max_steps=steps,
                      batch_size=8, lr=lr, log_every=1, checkpoint_every=100, eval_batches=1,
                      model_args=args, task_args=task.opts)
    model = task.build_model(encoder, args)
    routed = check_device_routing(task, model)
    result = Trainer(cfg, task, model, out, show_progress=False).fit()
    assert routed["forwards"] > 0
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r.get("split") == "train"]
    return result, losses


def _check_run(result: dict[str, Any], losses: list[float], out: Path) -> None:
    assert len(losses) == result["step"] > 0
    assert sum(losses[-2:]) / 2 < losses[0], losses  # the loss falls
    for split in ("valid", "test"):
        metrics = result[split]
        assert all(math.isfinite(v) for v in metrics.values()), metrics
        assert 0.0 <= metrics["bleu"] <= 100.0
        assert metrics["epoch_seconds"] > 0.0
    for name in ("checkpoint.safetensors", "best.safetensors", "log.jsonl", "log.csv"):
        assert (out / name).is_file(), name


def test_bleu_of_identical_text_is_100_and_lower_otherwise():
    text = ["el perro come pan", "el gato ve el perro grande"]
    assert corpus_bleu(text, text) == pytest.approx(100.0)
    assert corpus_bleu(["el gato come pan", "el perro ve"], text) < 100.0
    with pytest.raises(ValueError, match="hypotheses"):
        corpus_bleu(text[:1], text)


def test_bleu_of_tokenised_words_is_sacrebleus_score_without_its_warning(caplog):
    # sacreBLEU warns once 100 hypotheses end in " ." (as tokenised validation sets do)
    refs = ["el perro come pan .", "ve el gato al perro grande ."] * 60
    hyps = ["el gato come pan .", "ve el perro al gato ."] * 60
    with caplog.at_level(logging.WARNING):
        score = corpus_bleu(hyps, refs)
    assert not [r for r in caplog.records if "tokenized period" in r.getMessage()]
    assert score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert 0.0 < score < 100.0


def test_missing_sacrebleu_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    with pytest.raises(ImportError, match=r"ctrlrnn\[bleu\]"):
        corpus_bleu(["a"], ["a"])


@pytest.mark.parametrize("encoder", ["qrnn", "lstm"])
def test_translate_char_trains_end_to_end(tmp_path, encoder):
    task = _task("translate-char", beam=2, eval_batch_size=6)
    assert task.src_vocab is task.vocab  # one unified character vocabulary (QRNN paper 3.3)
    # the source is fed reversed
    assert task.encoded["train"][0][0] == task.vocab.encode(task.splits["train"][0].source[::-1])
    model = task.build_model(encoder, encoder_options(encoder, {"hidden_size": 16}))
    assert model.decoder_kind == ("qrnn" if encoder == "qrnn" else "lstm")
    result, losses = _train(task, encoder, {"hidden_size": 16}, tmp_path)
    _check_run(result, losses, tmp_path)


@pytest.mark.parametrize(
    ("arch", "encoder", "extra"),
    [("rnn", "qrnn", {}), ("transformer", "lstm", {"ffn": "metagross", "ffn_depth": 2}),
     ("transformer", "lstm", {"norm": "post"}), ("cas", "caslstm", {})],
)
def test_translate_word_trains_end_to_end(tmp_path, arch, encoder, extra):
    task = _task("translate-word", arch=arch, beam=2, eval_batch_size=6, heads=2, **extra)
    # separate English / Spanish vocabularies
    assert "perro" in task.vocab and "perro" not in task.src_vocab and "dog" in task.src_vocab
    model_args = {"hidden_size": 16, "num_layers": 2 if arch == "cas" else 1}
    result, losses = _train(task, encoder, model_args, tmp_path)
    _check_run(result, losses, tmp_path)


@pytest.mark.parametrize(
    ("arch", "encoder", "extra"),
    [("rnn", "qrnn", {}), ("rnn", "lstm", {}),
     ("transformer", "lstm", {"ffn": "metagross", "ffn_depth": 2}), ("cas", "caslstm", {}),
     ("cas", "lstm", {"input_feeding": False})],
)
def test_loss_runs_the_output_layer_at_target_words_only(arch, encoder, extra):
    """The seq2seq loss computes the logits at the non-pad targets only: the same sum of
    log-losses, the same gradients and dropout draws as over the whole padded batch."""
    import torch.nn.functional as F

    try:
        task = _task("translate-word", arch=arch, heads=2, **extra)
    except ValueError:
        pytest.skip(f"translate-word has no option among {sorted(extra)}")
    args = encoder_options(encoder, {"hidden_size": 8, "dropout": 0.3,
                                     "num_layers": 2 if arch == "cas" else 1})
    torch.manual_seed(0)
    model = task.build_model(encoder, args)
    model.train()
    batch = task._batch(task.encoded["train"][:5])
    assert bool((batch["tgt_out"] == task.vocab.pad_id).any())  # there is padding
    torch.manual_seed(4)
    got = task.loss(model, batch)
    got_grads = torch.autograd.grad(got, list(model.parameters()), allow_unused=True)
    torch.manual_seed(4)
    logits = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
    want = F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(),
                           ignore_index=task.vocab.pad_id, reduction="sum") / batch["ntokens"]
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


def test_word_task_builds_each_architecture():
    task = _task("translate-word", arch="transformer", heads=2, ffn="metagross")
    model = task.build_model("lstm", encoder_options("lstm", {"hidden_size": 8}))
    assert isinstance(model, TransformerSeq2Seq)
    ffns = [m for m in model.modules() if isinstance(m, MetagrossFFN)]
    assert len(ffns) == 2 and not ffns[0].residual  # one per layer of each stack
    # --model metagross picks the METAGROSS feed-forward with its own depth by default
    auto = _task("translate-word", arch="transformer", heads=2)
    meta = auto.build_model("metagross", encoder_options("metagross", {"hidden_size": 8,
                                                                       "depth": 3}))
    assert {m.depth for m in meta.modules() if isinstance(m, MetagrossFFN)} == {3}
    cas = _task("translate-word", arch="cas").build_model(
        "caslstm", encoder_options("caslstm", {"hidden_size": 8, "num_layers": 2}))
    assert isinstance(cas, AttnLSTMSeq2Seq) and cas.decoder_kind == "caslstm"
    with pytest.raises(ValueError, match="task.arch"):
        _task("translate-word", arch="cnn").build_model("lstm", encoder_options("lstm", {}))


def test_source_directory_and_direction(tmp_path):
    for split, rows in PAIRS.items():
        lines = [f"Gen.1.{i}\t{en}\t{es}\n" for i, (en, es) in enumerate(rows)]
        (tmp_path / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    cls = task_class("translate-word")
    opts = check_options("task", "translate-word",
                         {"source": str(tmp_path), "direction": "es-en", "train_size": 10},
                         cls.options)
    task = cls(opts, seed=0)
    task.setup()
    assert len(task.splits["train"]) == 10 and len(task.splits["valid"]) == 6
    first = task.splits["train"][0]
    assert " ".join(first.source) == PAIRS["train"][0][1]  # Spanish -> English
    assert " ".join(first.target) == PAIRS["train"][0][0]
    (tmp_path / "test.tsv").unlink()
    with pytest.raises(ValueError, match="test.tsv"):
        cls(opts, seed=0).setup()


def _src_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 30, (4, 9), generator=g)
    lengths = torch.tensor([9, 6, 3, 1])
    for b, n in enumerate(lengths.tolist()):
        src[b, n:] = 0
    return src, lengths


def _decoders() -> list[torch.nn.Module]:
    torch.manual_seed(3)
    models: list[torch.nn.Module] = [
        TransformerSeq2Seq(30, 25, d_model=16, heads=2, layers=2, ffn="metagross", dropout=0.0,
                           tie_embeddings=False),
        TransformerSeq2Seq(30, 25, d_model=16, heads=4, layers=1, norm="post", dropout=0.0),
        AttnLSTMSeq2Seq(30, 25, encoder="caslstm",
                        encoder_args={"hidden_size": 16, "num_layers": 2}, embedding_size=8),
        AttnLSTMSeq2Seq(30, 25, encoder="lstm", encoder_args={"hidden_size": 16},
                        embedding_size=8, input_feeding=False),
    ]
    for m in models:  # larger output weights so the untrained decoders produce varied tokens
        torch.nn.init.normal_(m.out.weight, std=1.0)
        m.eval()
    return models


@pytest.mark.parametrize("index", range(4))
def test_beam_one_alpha_zero_is_greedy_and_steps_match_teacher_forcing(index):
    model = _decoders()[index]
    src, lengths = _src_batch()
    greedy = model.greedy(src, lengths, 12)
    assert len({tuple(g) for g in greedy}) > 1 or any(len(g) > 1 for g in greedy)
    assert model.beam_search(src, lengths, beam=1, alpha=0.0, max_len=12) == greedy
    wide = model.beam_search(src, lengths, beam=4, alpha=0.6, max_len=12)
    assert len(wide) == 4 and all(0 <= t < 25 for seq in wide for t in seq)
    # incremental decoding (caches / input feeding) equals the teacher-forced forward pass
    tgt = torch.randint(4, 25, (4, 6), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = model.bos_id
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    steps = []
    for t in range(tgt.shape[1]):
        logp, state = model.step(tgt[:, t], state, enc)
        steps.append(logp)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, tgt), -1)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-4, atol=1e-5)


def test_transformer_with_metagross_ffn_forward_backward():
    torch.manual_seed(0)
    model = TransformerSeq2Seq(30, 25, d_model=16, heads=2, layers=2, ffn="metagross",
                               ffn_depth=2, dropout=0.1)
    src, lengths = _src_batch()
    tgt = torch.randint(4, 25, (4, 5))
    logits = model(src, lengths, tgt)
    assert logits.shape == (4, 5, 25) and torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    ffns = [m for m in model.modules() if isinstance(m, MetagrossFFN)]
    assert len(ffns) == 4
    for ffn in ffns:
        assert ffn.weight.grad is not None and ffn.weight.grad.abs().sum() > 0
    # padding does not change the encoding of a sentence
    model.eval()
    padded = torch.cat([src, torch.zeros(4, 3, dtype=torch.long)], dim=1)
    a = model.encode(src, lengths)["memory"]
    b = model.encode(padded, lengths)["memory"][:, : src.shape[1]]
    mask = torch.arange(src.shape[1])[None] < lengths[:, None]
    torch.testing.assert_close(a[mask], b[mask], rtol=1e-5, atol=1e-5)
