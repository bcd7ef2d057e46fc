"""The papers' own files read into the tasks (issue 70), and the pieces item 5 of the issue
added: CARNN's latent-variable loss (eq 12-13), attentive pooling for the RCRN ranker, and the
densely connected LSTM baseline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.tasks import task_class
from ctrlrnn.train.config import check_options

_spec = importlib.util.spec_from_file_location(
    "paper_data", Path(__file__).resolve().parents[1] / "reproduce" / "paper_data.py")
paper_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paper_data)


def _task(name: str, options: dict, seed: int = 0):
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), seed)
    task.setup()
    return task


def test_sst_trees_give_sst5_sst2_and_every_phrase(tmp_path):
    root = paper_data.sst(tmp_path / "sst")
    five = _task("sst5", {"sst": str(root)})
    two = _task("sst2", {"sst": str(root)})
    phrases = _task("sst5", {"sst": str(root), "phrases": True})
    assert len(five.splits["train"]) == 40  # one example a tree
    assert len(phrases.splits["train"]) > 40 and len(phrases.splits["valid"]) == 40
    assert {y for _, y in two.splits["test"]} <= {0, 1}
    assert len(two.splits["test"]) == sum(1 for _, y in five.splits["test"] if y != 2)
    with pytest.raises(ValueError, match="task.phrases"):
        _task("sst5", {"phrases": True, "source": str(paper_data.labelled_tsv(tmp_path / "t",
                                                                               5))})


def test_imdb_trec_and_liu_et_al_hold_out_a_fixed_validation_split(tmp_path):
    imdb = _task("imdb", {"imdb": str(paper_data.imdb(tmp_path / "imdb"))})
    assert (len(imdb.splits["train"]), len(imdb.splits["valid"])) == (36, 4)  # every tenth
    assert "<br" not in " ".join(imdb.splits["train"][0][0])
    trec = _task("trec", {"trec": str(paper_data.trec(tmp_path / "trec"))})
    assert (len(trec.splits["train"]), len(trec.splits["valid"]),
            len(trec.splits["test"])) == (72, 8, 20)
    mtl = _task("mr", {"mtl": str(paper_data.mtl(tmp_path / "mtl") / "camera_photo")})
    assert (len(mtl.splits["train"]), len(mtl.splits["valid"])) == (52, 8)  # every eighth
    with pytest.raises(ValueError, match="task.trec: task mr reads"):
        _task("mr", {"trec": str(tmp_path / "trec")})
    with pytest.raises(ValueError, match="cannot be fetched here"):
        _task("imdb", {})


def test_multinli_reports_the_mismatched_set_and_scitail_two_classes(tmp_path):
    multi = _task("nli", {"path": str(paper_data.multinli(tmp_path / "m")),
                          "format": "multinli", "embedding_size": 8, "mlp_hidden": 8})
    assert multi.classes == 3 and len(multi.splits["train"]) == 40  # "-" labels skipped
    model = multi.build_model("lstm", encoder_options("lstm", {"hidden_size": 8}))
    with torch.no_grad():
        metrics = multi.evaluate(model.eval(), "test")
    assert {"accuracy", "accuracy_mismatched", "loss"} <= set(metrics)
    sci = _task("nli", {"path": str(paper_data.scitail(tmp_path / "s")), "format": "scitail"})
    assert sci.classes == 2
    quora = _task("nli", {"path": str(paper_data.quora(tmp_path / "q")), "format": "quora"})
    assert quora.classes == 2 and len(quora.splits["test"]) == 40


def test_mnist_idx_and_cifar_binary_batches(tmp_path):
    mnist = _task("mnist", {"idx": str(paper_data.mnist(tmp_path / "mnist"))})
    assert (len(mnist.data["train"]), len(mnist.data["valid"])) == (55, 5)  # last twelfth
    cifar = _task("cifar10", {"cifar": str(paper_data.cifar10(tmp_path / "cifar"))})
    batch = cifar.train_batches(0, 4)[0]
    assert batch["pixels"].shape == (4, 1024, 3)  # a step a pixel, its three colours
    # the record's channel planes become each pixel's three values
    from ctrlrnn.tasks.pixel_tasks import read_cifar_bin

    record = np.zeros(3073, np.uint8)
    record[0], record[1], record[1 + 1024], record[1 + 2048] = 7, 10, 20, 30
    path = tmp_path / "one.bin"
    path.write_bytes(record.tobytes())
    images, labels = read_cifar_bin(path)
    assert labels.tolist() == [7] and images[0, :3].tolist() == [10, 20, 30]


def test_iwslt_train_tags_and_xml_sets_and_plain_files(tmp_path):
    root = paper_data.WRITERS["iwslt-de-en"](tmp_path / "de-en")
    task = _task("translate-char", {"iwslt": str(root), "valid_set": "IWSLT16.TED.tst2013",
                                    "test_set": "IWSLT16.TED.tst2014", "beam": 1})
    assert len(task.splits["train"]) == 40 and len(task.splits["test"]) == 8
    src, tgt = task.splits["test"][0].source, task.splits["test"][0].target
    assert "".join(tgt).upper() == "".join(tgt)  # German source, English (upper) target
    assert src != tgt
    envi = _task("translate-word", {"iwslt": str(paper_data.iwslt_plain(tmp_path / "envi")),
                                    "pair": "en-vi", "valid_set": "tst2012",
                                    "test_set": "tst2013", "beam": 1})
    assert len(envi.splits["valid"]) == 8


def test_carnn_latent_loss_is_eq_13(tmp_path):
    """CARNN eq 12-13: with labels, the loss is alpha L_w + (1 - alpha) L_l (alpha 0.5 at
    latent_weight 0.5); test time reads the words alone."""
    root = paper_data.text_lines(tmp_path / "pdtb", labels=3)
    task = _task("carnn-lm", {"source": str(root), "latent_weight": 0.5})
    torch.manual_seed(0)
    model = task.build_model("carnn", {"hidden_size": 8, "variant": "s"}).eval()
    batch = task._batch(task.encoded["train"][:6])
    words = task._nll(model, batch) / batch["ntokens"]
    _, head = model.forward_latent(batch["tokens"], batch["prev"], batch["lengths"],
                                   batch["prev_lengths"])
    latent = F.cross_entropy(head, batch["latent"], ignore_index=-100)
    torch.testing.assert_close(task.loss(model, batch), 0.5 * words + 0.5 * latent)
    assert len(task.latent_labels) == 3
    plain = _task("carnn-lm", {"source": str(root)})
    with torch.no_grad():
        metrics = plain.evaluate(plain.build_model("carnn", {"hidden_size": 8}).eval(), "test")
    assert plain.latent_labels == [] and "perplexity" in metrics
    with pytest.raises(ValueError, match="latent"):
        _task("carnn-lm", {"source": str(paper_data.text_lines(tmp_path / "nolabels")),
                           "latent_weight": 0.5})


@pytest.mark.parametrize("scorer", ["ap", "iwan"])
def test_pair_scorers_ignore_padding(scorer):
    """Attentive pooling (dos Santos et al.) and the IWAN-style scorer score a pair the same
    with more padding."""
    from ctrlrnn.models.iwan import IwanScorer
    from ctrlrnn.models.ranker import Ranker

    torch.manual_seed(0)
    args = encoder_options("lstm", {"hidden_size": 6, "bidirectional": True})
    model = (Ranker(20, encoder="lstm", encoder_args=args, embedding_size=5, attention="ap")
             if scorer == "ap" else
             IwanScorer(20, encoder="lstm", encoder_args=args, embedding_size=5)).eval()
    q, a = torch.randint(1, 20, (2, 4)), torch.randint(1, 20, (2, 5))
    ql, al = torch.tensor([4, 2]), torch.tensor([5, 3])
    pad = torch.zeros(2, 3, dtype=torch.long)
    with torch.no_grad():
        base = model(q, ql, a, al)
        padded = model(torch.cat([q, pad], 1), ql, torch.cat([a, pad], 1), al)
    torch.testing.assert_close(base, padded)


def test_a_densely_connected_lstm_concatenates_each_layers_input(tmp_path):
    from ctrlrnn.models.encoders import SequenceEncoder

    enc = SequenceEncoder("lstm", 5, encoder_options(
        "lstm", {"hidden_size": 4, "num_layers": 3, "dense": True}))
    assert [layer.input_size for layer in enc.rnn.layers] == [5, 9, 13]
    x = torch.randn(2, 6, 5)
    out, final, _ = enc(x, torch.tensor([6, 3]))
    assert out.shape == (2, 6, 4) and bool((out[1, 3:] == 0).all())
    torch.testing.assert_close(final[1], out[1, 2])
