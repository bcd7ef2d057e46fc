"""Unit tests of the task models (shapes, pooling, tying, state carrying) and their metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from task_helpers import write_labelled_dir, write_pixel_dir, write_qa_files, write_text_dir

from ctrlrnn.data.pixels import PixelSequences
from ctrlrnn.models.classifier import SentenceClassifier, masked_pool, parse_pooling
from ctrlrnn.models.language_model import LanguageModel, detach_state, perplexity
from ctrlrnn.models.music import MusicModel, frame_nll
from ctrlrnn.models.pair_classifier import PairClassifier, pair_features
from ctrlrnn.models.pixel_classifier import PixelClassifier
from ctrlrnn.models.ranker import (
    Ranker,
    average_precision,
    map_mrr,
    pairwise_hinge_loss,
    reciprocal_rank,
)
from ctrlrnn.tasks import task_class
from ctrlrnn.train.config import check_options

pytestmark = pytest.mark.usefixtures("one_thread")


def make_task(name: str, seed: int = 0, **options):
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), seed)
    task.setup()
    return task


# ---------------------------------------------------------------------------- pooling / classifier
def test_masked_pool_ignores_padding():
    out = torch.randn(2, 4, 3)
    lengths = torch.tensor([4, 2])
    pooled = masked_pool(out, lengths, ("max", "mean", "min"))
    assert pooled.shape == (2, 9)
    for b, n in enumerate(lengths.tolist()):
        x = out[b, :n]
        expected = torch.cat([x.amax(0), x.mean(0), x.amin(0)])
        torch.testing.assert_close(pooled[b], expected)
    final = torch.randn(2, 3)
    torch.testing.assert_close(masked_pool(out, lengths, ("last",), final), final)
    with pytest.raises(ValueError, match="pooling"):
        parse_pooling("max+median")
    with pytest.raises(ValueError, match="pooling"):
        parse_pooling("max+max")


@pytest.mark.parametrize("encoder", ["lstm", "qrnn"])
def test_classifier_shapes_and_padding_invariance(encoder):
    torch.manual_seed(0)
    model = SentenceClassifier(20, 5, encoder=encoder, embedding_size=6,
                               encoder_args={"hidden_size": 4, "bidirectional": True},
                               mlp_hidden=7).eval()
    tokens = torch.randint(1, 20, (3, 5))
    lengths = torch.tensor([5, 3, 1])
    logits = model(tokens, lengths)
    assert logits.shape == (3, 5)
    padded = torch.cat([tokens, torch.zeros(3, 4, dtype=torch.long)], 1)
    torch.testing.assert_close(model(padded, lengths), logits, rtol=1e-5, atol=1e-5)
    # 3 poolings of a bidirectional 4-unit encoder feed the MLP
    assert model.sentence.output_size == 3 * 8


def test_pretrained_vectors_are_looked_up_and_frozen(tmp_path):
    data = write_labelled_dir(tmp_path / "d", 2, {"train": 20, "valid": 4, "test": 4})
    glove = tmp_path / "glove"
    glove.mkdir()
    words = ["cue0", "cue1", "w3"]
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    (glove / "words.txt").write_text("".join(w + "\n" for w in words))
    np.save(glove / "vectors.npy", vectors)
    task = make_task("mr", source=str(data), glove=str(glove))
    model = task.build_model("lstm", {"hidden_size": 4})
    embed = model.sentence.embed
    assert embed.embedding_dim == 4 and not embed.weight.requires_grad
    for word, row in zip(words, vectors):
        np.testing.assert_array_equal(embed.weight[task.vocab[word]].numpy(), row)
    assert task.data_summary()["pre-trained vector coverage"].startswith("3/")
    trainable = make_task("mr", source=str(data), glove=str(glove), freeze_embeddings=False)
    assert trainable.build_model("lstm", {"hidden_size": 4}).sentence.embed.weight.requires_grad


def test_bad_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="task.source"):
        make_task("mr", source=str(tmp_path / "missing"))
    (tmp_path / "train.tsv").write_text("0\ta b\n")
    with pytest.raises(ValueError, match="valid.tsv"):
        make_task("sst5", source=str(tmp_path))


# ---------------------------------------------------------------------------- pair classifier
def test_pair_features():
    s1, s2 = torch.randn(2, 3), torch.randn(2, 3)
    assert pair_features(s1, s2, "rcrn").shape == (2, 12)
    torch.testing.assert_close(pair_features(s1, s2, "eq15")[:, 6:9], (s1 - s2).abs())
    torch.testing.assert_close(pair_features(s1, s2, "eq16"), pair_features(s2, s1, "eq16"))
    with pytest.raises(ValueError, match="features"):
        pair_features(s1, s2, "cosine")


@pytest.mark.parametrize("features", ["rcrn", "eq15", "eq16"])
def test_pair_classifier_shapes(features):
    torch.manual_seed(0)
    model = PairClassifier(15, 7, encoder="gru", encoder_args={"hidden_size": 5},
                           features=features, embedding_size=6, highway_size=8,
                           mlp_hidden=9).eval()
    s1, l1 = torch.randint(1, 15, (4, 6)), torch.tensor([6, 2, 4, 1])
    s2, l2 = torch.randint(1, 15, (4, 3)), torch.tensor([3, 3, 1, 2])
    logits = model(s1, l1, s2, l2)
    assert logits.shape == (4, 7)
    # the stacked encoding equals encoding each side on its own
    v1, _ = model.encode_pair(s1, l1, s2, l2)
    torch.testing.assert_close(v1, model.sentence(s1, l1), rtol=1e-5, atol=1e-5)
    assert (model.sentence.highway is not None) == (features == "rcrn")


# ---------------------------------------------------------------------------- ranker and metrics
def test_map_mrr_hand_computed():
    # q1: ranked labels 0 1 0 1 -> AP = (1/2 + 2/4) / 2 = 1/2, RR = 1/2
    # q2: scores .1 .5 .3, labels 1 0 1 -> ranked 0 1 1 -> AP = (1/2 + 2/3) / 2 = 7/12, RR = 1/2
    # q3: no correct answer -> left out
    groups = [([0.9, 0.8, 0.7, 0.6], [0, 1, 0, 1]), ([0.1, 0.5, 0.3], [1, 0, 1]),
              ([0.3, 0.2], [0, 0])]
    assert average_precision(*groups[0]) == pytest.approx(0.5)
    assert average_precision(*groups[1]) == pytest.approx(7 / 12)
    assert reciprocal_rank(*groups[1]) == pytest.approx(0.5)
    assert reciprocal_rank([0.2, 0.9], [1, 0]) == pytest.approx(0.5)
    metrics = map_mrr(groups)
    assert metrics["map"] == pytest.approx((0.5 + 7 / 12) / 2)
    assert metrics["mrr"] == pytest.approx(0.5)
    assert metrics["questions"] == 2
    # ties keep the given order
    assert average_precision([0.5, 0.5], [0, 1]) == pytest.approx(0.5)


def test_pairwise_hinge_loss():
    pos = torch.tensor([0.9, 0.2], dtype=torch.float64)
    neg = torch.tensor([[0.1, 0.85], [0.0, -0.5]], dtype=torch.float64)
    # hardest: max(0, .1 - .9 + .85) = .05 ; max(0, .1 - .2 + 0) = 0
    assert float(pairwise_hinge_loss(pos, neg, 0.1)) == pytest.approx(0.025)
    # mean: (0 + .05 + 0 + 0) / 4
    assert float(pairwise_hinge_loss(pos, neg, 0.1, "mean")) == pytest.approx(0.0125)
    with pytest.raises(ValueError, match="negatives"):
        pairwise_hinge_loss(pos, neg[:1])


def test_ranker_scores_are_cosines():
    torch.manual_seed(0)
    model = Ranker(12, encoder="qrnn", encoder_args={"hidden_size": 6}, embedding_size=5)
    q, a = torch.randint(1, 12, (3, 4)), torch.randint(1, 12, (3, 6))
    ql, al = torch.tensor([4, 2, 3]), torch.tensor([6, 6, 1])
    scores = model(q, ql, a, al)
    expected = F.cosine_similarity(model.encode(q, ql), model.encode(a, al), dim=-1)
    torch.testing.assert_close(scores, expected)
    assert scores.shape == (3,) and bool((scores.abs() <= 1 + 1e-6).all())


def test_ranking_negatives_are_wrong_answers_of_the_same_question(tmp_path):
    data = write_qa_files(tmp_path / "qa", "trecqa", {"train": 12, "valid": 3, "test": 3})
    task = make_task("ranking", path=str(data), format="trecqa", negatives=4)
    batch = task.train_batches(0, 4)[0]
    assert batch["negatives"].shape[:2] == (4, 4)
    vocab = task.vocab
    for b in range(4):
        question = vocab.decode(batch["question"][b, : batch["question_lengths"][b]])
        topic = next(w for w in question if w.startswith("t"))
        positive = vocab.decode(batch["positive"][b, : batch["positive_lengths"][b]])
        assert topic in positive
        for k in range(4):
            n = int(batch["negative_lengths"][b, k])
            assert topic not in vocab.decode(batch["negatives"][b, k, :n])
    again = task.train_batches(0, 4)[0]
    assert torch.equal(again["negatives"], batch["negatives"])  # fixed by (seed, epoch)
    with pytest.raises(ValueError, match="task.path"):
        make_task("ranking")


# ---------------------------------------------------------------------------- language model
@pytest.mark.parametrize("hidden,emb", [(8, 8), (8, 5)])
def test_lm_tied_embeddings(hidden, emb):
    model = LanguageModel(30, encoder="lstm", encoder_args={"hidden_size": hidden},
                          embedding_size=emb)
    assert model.decoder.weight is model.embed.weight
    assert isinstance(model.project, torch.nn.Linear) == (hidden != emb)
    logits, state = model(torch.randint(0, 30, (2, 7)))
    assert logits.shape == (2, 7, 30)
    untied = LanguageModel(30, encoder="lstm", encoder_args={"hidden_size": 8},
                           embedding_size=5, tie_weights=False)
    assert untied.decoder.weight is not untied.embed.weight
    with pytest.raises(ValueError, match="bidirectional"):
        LanguageModel(30, encoder="lstm", encoder_args={"hidden_size": 8, "bidirectional": True})


@pytest.mark.parametrize(
    "encoder,args",
    [("lstm", {}), ("gru", {}), ("qrnn", {"window": 1}), ("qrnn", {"window": 3})],
)
def test_lm_state_carrying_equals_one_pass(encoder, args):
    torch.manual_seed(0)
    model = LanguageModel(25, encoder=encoder,
                          encoder_args={"hidden_size": 6, "num_layers": 2, **args}).eval()
    tokens = torch.randint(0, 25, (3, 12))
    full, _ = model(tokens)
    state, parts = None, []
    for k in range(0, 12, 5):
        logits, state = model(tokens[:, k : k + 5], state)
        state = detach_state(state)
        parts.append(logits)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
    def flat(s):
        return [s] if isinstance(s, torch.Tensor) else [t for x in s for t in flat(x)]

    assert not any(t.requires_grad for t in flat(state))


def test_lm_evaluate_is_exp_of_mean_nll_over_the_stream(tmp_path):
    data = write_text_dir(tmp_path / "t", {"train": 30, "valid": 12, "test": 12})
    task = make_task("ptb-lm", source=str(data), bptt=4, eval_batch_size=2)
    torch.manual_seed(0)
    model = task.build_model("lstm", {"hidden_size": 6}).eval()
    with torch.no_grad():
        metrics = task.evaluate(model, "valid")
        rows = task.streams["valid"][: (task.streams["valid"].numel() // 2) * 2].view(2, -1)
        logits, _ = model(rows[:, :-1])
        nll = F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
    assert metrics["loss"] == pytest.approx(float(nll), rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(float(nll)), rel=1e-5)
    assert perplexity(6.0, 3) == pytest.approx(math.exp(2.0))


def test_lm_task_carries_state_within_an_epoch_only(tmp_path):
    data = write_text_dir(tmp_path / "t", {"train": 40, "valid": 5, "test": 5})
    task = make_task("ptb-lm", source=str(data), bptt=5, random_offset=False,
                     embedding_dropout=0.0, output_dropout=0.0)
    torch.manual_seed(0)
    model = task.build_model("gru", {"hidden_size": 6}).eval()
    b0, b1 = task.train_batches(0, 3)[:2]
    with torch.no_grad():
        _, state = model(b0["input"])
        carried = F.cross_entropy(model(b1["input"], state)[0].flatten(0, 1),
                                  b1["target"].flatten())
        fresh = F.cross_entropy(model(b1["input"])[0].flatten(0, 1), b1["target"].flatten())
        task.loss(model, b0)
        assert float(task.loss(model, b1)) == pytest.approx(float(carried), rel=1e-5)
        # a window that does not follow the last one starts from a zero state
        assert float(task.loss(model, b1)) == pytest.approx(float(fresh), rel=1e-5)
    # consecutive windows continue the stream row by row
    assert torch.equal(b0["target"][:, -1], b1["input"][:, 0])
    # the epoch's offset moves the window boundaries, fixed by (seed, epoch)
    moving = make_task("ptb-lm", source=str(data), bptt=5)
    starts = {int(moving.train_batches(e, 3)[0]["input"][0, 0]) for e in range(6)}
    assert len(starts) > 1
    assert torch.equal(moving.train_batches(2, 3)[0]["input"],
                       moving.train_batches(2, 3)[0]["input"])


def test_lm_shards_average_to_the_global_loss(tmp_path):
    data = write_text_dir(tmp_path / "t", {"train": 40, "valid": 5, "test": 5})
    task = make_task("ptb-lm", source=str(data), bptt=5, embedding_dropout=0.0,
                     output_dropout=0.0)
    model = task.build_model("lstm", {"hidden_size": 6}).eval()
    batch = task.train_batches(0, 4)[0]
    with torch.no_grad():
        whole = float(task.loss(model, batch))
        halves = [float(task.loss(model, task.shard(batch, r, 2))) for r in range(2)]
    assert sum(halves) / 2 == pytest.approx(whole, rel=1e-5)


def test_char_lm_reads_characters(tmp_path):
    data = write_text_dir(tmp_path / "t", {"train": 10, "valid": 3, "test": 3})
    task = make_task("ptb-char", source=str(data))
    assert "_" in task.vocab and "e" in task.vocab and "." in task.vocab
    assert not any(len(t) > 1 for t in task.vocab.itos if t not in task.vocab.specials)


# ---------------------------------------------------------------------------- pixels and music
def test_pixel_classifier_and_permuted_batches(tmp_path):
    model = PixelClassifier(10, encoder="qrnn", encoder_args={"hidden_size": 5},
                            pooling="last+max")
    assert model(torch.rand(3, 16, 1)).shape == (3, 10)
    with pytest.raises(ValueError, match="pixels"):
        model(torch.rand(3, 16))
    data = write_pixel_dir(tmp_path / "px", {"train": 8, "valid": 4, "test": 4})
    task = make_task("mnist-5k", source=str(data), permuted=True, permutation_seed=3)
    reference = PixelSequences(np.load(data / "train_images.npy"),
                               np.load(data / "train_labels.npy"), permute=True, seed=3)
    batch = task._batch("train", torch.tensor([5, 2]))
    torch.testing.assert_close(batch["pixels"], torch.stack([reference[5][0], reference[2][0]]))
    plain = make_task("mnist-5k", source=str(data))._batch("train", torch.tensor([5]))
    assert not torch.equal(plain["pixels"], batch["pixels"][:1])


def test_music_model_and_frame_nll():
    model = MusicModel(encoder="gru", encoder_args={"hidden_size": 7})
    frames = torch.randint(0, 2, (2, 5, 88)).float()
    assert model(frames, torch.tensor([5, 3])).shape == (2, 5, 88)
    with pytest.raises(ValueError, match="bidirectional"):
        MusicModel(encoder="gru", encoder_args={"hidden_size": 7, "bidirectional": True})
    # at p = 1/2 every key costs ln 2: 88 ln 2 per frame, padded frames not counted
    total, n = frame_nll(torch.zeros(2, 5, 88), frames, torch.tensor([5, 3]))
    assert n == 8 and float(total) / n == pytest.approx(88 * math.log(2))
    logits = torch.randn(1, 4, 88)
    total, n = frame_nll(logits, frames[:1, :4])
    expected = F.binary_cross_entropy_with_logits(logits, frames[:1, :4], reduction="sum") / 4
    assert float(total) / n == pytest.approx(float(expected), rel=1e-5)


def test_models_predicting_what_follows_refuse_an_unmasked_encoder():
    """A QRNN with causal=False reads x_{t+1} at t: refused, naming model.causal, wherever the
    output at t predicts what follows (language models, next-frame prediction)."""
    from ctrlrnn.models.carnn_models import SentenceLM

    qrnn = {"hidden_size": 6, "window": 2, "causal": False}
    with pytest.raises(ValueError, match="model.causal"):
        LanguageModel(30, encoder="qrnn", encoder_args=qrnn)
    with pytest.raises(ValueError, match="model.causal"):
        MusicModel(encoder="qrnn", encoder_args=qrnn)
    with pytest.raises(ValueError, match="model.causal"):
        SentenceLM(30, 6, "qrnn", qrnn)
    # the masked convolution is what they use, one width per layer too
    model = LanguageModel(30, encoder="qrnn", encoder_args={**qrnn, "causal": True,
                                                            "num_layers": 2, "window": [3, 2]})
    assert model.encoder.rnn.windows == (3, 2)
    MusicModel(encoder="qrnn", encoder_args={**qrnn, "causal": True})
    # a classifier reads the whole sequence: the unmasked convolution is allowed
    SentenceClassifier(30, 2, encoder="qrnn", encoder_args=qrnn, embedding_size=6)


def test_chorales_pickle_source(tmp_path):
    import pickle

    songs = {s: [[[60, 64], [62], [], [60, 67]], [[48], [50]]] for s in ("train", "valid",
                                                                           "test")}
    path = tmp_path / "JSB.pickle"
    path.write_bytes(pickle.dumps(songs))
    task = make_task("chorales", pickle=str(path))
    batch = task.train_batches(0, 2)[0]
    assert batch["nframes"] == 3 + 1
    first = task.rolls["train"][0]
    assert first.shape == (4, 88) and float(first[0, 60 - 21]) == 1.0
    with pytest.raises(ValueError, match="task.pickle"):
        make_task("chorales", pickle=str(path), source=str(tmp_path))


@pytest.mark.parametrize("attention", ["dot", "bahdanau"])
def test_seq2seq_loss_runs_the_output_layer_at_target_tokens_only(attention):
    """The seq2seq tasks' loss computes the logits at the non-pad targets only: the value and
    gradients of the loss over the whole padded batch (pad targets ignored)."""
    import torch.nn.functional as F

    task = make_task("tree-traversal", max_depth=3, train_size=40, valid_size=8, test_size=8,
                     attention=attention, decoder_layers=1)
    torch.manual_seed(0)
    model = task.build_model("lstm", {"hidden_size": 8, "bidirectional": True, "dropout": 0.2})
    model.train()
    batch = task._batch(task.encoded["train"][:6])
    assert bool((batch["tgt_out"] == task.vocab.pad_id).any())
    torch.manual_seed(1)
    got = task.loss(model, batch)
    params = list(model.parameters())
    got_grads = torch.autograd.grad(got, params, allow_unused=True)
    torch.manual_seed(1)
    logits = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
    want = F.cross_entropy(logits.flatten(0, 1), batch["tgt_out"].flatten(),
                           ignore_index=task.vocab.pad_id, reduction="sum") / batch["ntokens"]
    torch.testing.assert_close(got, want)
    want_grads = torch.autograd.grad(want, params, allow_unused=True)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)
