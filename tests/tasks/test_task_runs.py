"""The sentence classification, logic, ranking, language-model, pixel and chorale tasks train end
to end at tiny size through the real Trainer, for at least two encoders each: the loss falls,
the metrics are finite and the run writes its files."""

from __future__ import annotations

import math

import pytest
import torch
from task_helpers import (
    EXTRA_ENCODER,
    assert_trained,
    train_task,
    write_labelled_dir,
    write_pixel_dir,
    write_qa_files,
    write_roll_dir,
    write_text_dir,
)

TINY = {"hidden_size": 12}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name,classes,encoder", [
    ("mr", 2, "lstm"), ("mr", 2, "qrnn"), ("sst5", 5, "gru"), ("sst5", 5, "rcrn"),
])
def test_sentence_classification(tmp_path, name, classes, encoder):
    data = write_labelled_dir(tmp_path / "data", classes, {"train": 96, "valid": 24, "test": 24})
    out = tmp_path / "run"
    run = train_task(name, encoder, out, {"source": str(data), "embedding_size": 12,
                                          "mlp_hidden": 16, "eval_batch_size": 16},
                     TINY, batch_size=16, epochs=4, lr=1e-2)
    assert_trained(run, out)
    assert {"loss", "accuracy"} <= set(run["result"]["test"])


def test_classification_cas_lstm_style_max_pool_bidirectional(tmp_path):
    data = write_labelled_dir(tmp_path / "data", 2, {"train": 64, "valid": 16, "test": 16})
    out = tmp_path / "run"
    run = train_task("mr", "qrnn", out, {"source": str(data), "embedding_size": 12,
                                         "pooling": "max", "mlp_layers": 2, "dropout": 0.1},
                     {"hidden_size": 8, "num_layers": 2, "bidirectional": True},
                     batch_size=16, epochs=4, lr=1e-2)
    assert_trained(run, out)


@pytest.mark.parametrize("encoder,features", [("lstm", "eq15"), (EXTRA_ENCODER, "rcrn"),
                                              ("qrnn", "eq16"), ("metagross", "eq15")])
def test_logic(tmp_path, encoder, features):
    out = tmp_path / "run"
    run = train_task("logic", encoder, out,
                     {"train_size": 128, "valid_size": 32, "test_per_count": 6,
                      "features": features, "embedding_size": 12, "highway_size": 16,
                      "mlp_hidden": 16},
                     TINY, batch_size=32, epochs=3, lr=1e-2)
    assert_trained(run, out)
    test = run["result"]["test"]
    for ops in range(7, 13):
        assert 0.0 <= test[f"accuracy_ops{ops}"] <= 1.0
    assert test["accuracy"] == pytest.approx(sum(test[f"accuracy_ops{k}"] for k in range(7, 13))
                                             / 6)
    assert "accuracy_ops7" not in run["result"]["valid"]


@pytest.mark.parametrize("fmt,encoder", [("trecqa", "qrnn"), ("wikiqa", "gru")])
def test_ranking(tmp_path, fmt, encoder):
    data = write_qa_files(tmp_path / "qa", fmt, {"train": 40, "valid": 10, "test": 10})
    out = tmp_path / "run"
    run = train_task("ranking", encoder, out,
                     {"path": str(data), "format": fmt, "embedding_size": 12, "negatives": 3},
                     TINY, batch_size=8, epochs=3, optimizer="adam", lr=1e-2)
    assert_trained(run, out)
    for split in ("valid", "test"):
        metrics = run["result"][split]
        assert 0.0 < metrics["map"] <= 1.0 and 0.0 < metrics["mrr"] <= 1.0
        assert metrics["questions"] == 10


@pytest.mark.parametrize("name,encoder", [
    ("ptb-lm", "lstm"), ("ptb-lm", "qrnn"), ("ptb-char", "gru"), ("ptb-char", "qrnn"),
    ("brown-lm", "lstm"), ("brown-lm", EXTRA_ENCODER),
])
def test_language_models(tmp_path, name, encoder):
    data = write_text_dir(tmp_path / "text", {"train": 120, "valid": 20, "test": 20})
    out = tmp_path / "run"
    bptt = 20 if name == "ptb-char" else 8
    run = train_task(name, encoder, out, {"source": str(data), "bptt": bptt,
                                          "eval_batch_size": 4},
                     {"hidden_size": 16, "num_layers": 2}, batch_size=4, max_steps=24,
                     eval_every=12, eval_batches=2, lr=1e-2, clip_norm=1.0)
    assert_trained(run, out)
    test = run["result"]["test"]
    assert test["perplexity"] == pytest.approx(math.exp(test["loss"]))
    if name == "ptb-char":
        assert test["bpc"] == pytest.approx(test["loss"] / math.log(2))


@pytest.mark.parametrize("name,encoder,permuted", [
    ("mnist-5k", "qrnn", False), ("mnist-5k", "lstm", True),
    ("fashion-mnist", "gru", True), ("fashion-mnist", "metagross", False),
])
def test_pixel_classification(tmp_path, name, encoder, permuted):
    data = write_pixel_dir(tmp_path / "px", {"train": 120, "valid": 20, "test": 20})
    out = tmp_path / "run"
    run = train_task(name, encoder, out, {"source": str(data), "permuted": permuted},
                     {"hidden_size": 16}, batch_size=20, epochs=4, lr=1e-2)
    assert_trained(run, out)
    assert run["task"].data_summary()["steps"] == 16
    assert 0.0 <= run["result"]["test"]["accuracy"] <= 1.0


@pytest.mark.parametrize("encoder", ["qrnn", "lstm", "rcrn"])
def test_chorales(tmp_path, encoder):
    data = write_roll_dir(tmp_path / "rolls", {"train": 16, "valid": 4, "test": 4})
    out = tmp_path / "run"
    run = train_task("chorales", encoder, out, {"source": str(data)}, TINY,
                     batch_size=4, epochs=3, lr=1e-2)
    assert_trained(run, out)
    # 88 keys at p = 1/2 would cost 88 ln 2 per frame; the tiny model does far better
    assert run["result"]["test"]["nll"] < 88 * math.log(2)


def test_pixel_train_size_keeps_a_fixed_sample(tmp_path):
    """``task.train_size`` trains on the same random sample of the train split in every run;
    a size beyond the split, or below zero, is refused naming the option."""
    from ctrlrnn.tasks.pixel_tasks import FashionMnistTask

    data = write_pixel_dir(tmp_path / "px", {"train": 50, "valid": 10, "test": 10})

    def task(**options):
        opts = {key: default for key, (_, default) in FashionMnistTask.options.items()}
        made = FashionMnistTask({**opts, "source": str(data), **options}, seed=0)
        made.setup()
        return made

    full, cut, again = task(), task(train_size=20), task(train_size=20)
    assert len(full.data["train"]) == 50 and len(cut.data["train"]) == 20
    assert torch.equal(cut.data["train"].images, again.data["train"].images)
    rows = {tuple(r.tolist()) for r in full.data["train"].images}
    assert all(tuple(r.tolist()) in rows for r in cut.data["train"].images)
    assert len(cut.data["valid"]) == 10  # the evaluation splits are whole
    permuted = task(train_size=20, permuted=True)
    assert permuted.data["train"].permutation is not None
    for bad in (51, -1):
        with pytest.raises(ValueError, match="task.train_size"):
            task(train_size=bad)
