"""Every trainable parameter of every task's model gets a gradient from one training batch, for
each model family the experiments use: an unused parameter inflates the parameter counts on the
results pages and misleads anyone comparing arms by size."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from task_helpers import (
    write_labelled_dir,
    write_pixel_dir,
    write_qa_files,
    write_roll_dir,
    write_text_dir,
)

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.tasks import TASKS, task_class
from ctrlrnn.tasks.carnn_tasks import dialog_splits
from ctrlrnn.train.config import check_options

TINY = {"hidden_size": 8}
BI = {"hidden_size": 8, "bidirectional": True}
#: METAGROSS paper table 1's shared decoder
TABLE1 = {"decoder_layers": 1, "attention": "bahdanau"}
SEQ = {"train_size": 16, "valid_size": 4, "test_size": 4, "embedding_size": 8}


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    lexicon = {"the": "el", "dog": "perro", "cat": "gato", "eats": "come"}
    out = []
    for _ in range(n):
        en = [rng.choice(sorted(lexicon)) for _ in range(rng.randint(2, 4))]
        out.append((" ".join(en), " ".join(lexicon[w] for w in en)))
    return out


def _sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(["red", "cat", "runs", "here"]) for _ in range(rng.randint(2, 5))]
            for _ in range(n)]


#: (task, encoder, task options, model options); ``data`` in the options names a writer below
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("copy", "qrnn", SEQ, {**TINY, "num_layers": 2}),
    ("addition", "lstm", {**SEQ, "decoder": "lstm"}, BI),
    ("sort", "lstm", {**SEQ, **TABLE1, "max_length": 5}, BI),
    ("sort", "lstm", {**SEQ, **TABLE1, "max_length": 5}, {**BI, "num_layers": 3}),
    ("sort", "metagross", {**SEQ, **TABLE1, "max_length": 5}, {**BI, "base": "lstm"}),
    ("tree-traversal", "metagross", {**SEQ, **TABLE1},
     {**BI, "base": "lstm", "gates": "state"}),
    ("translate-char", "lstm", {"data": "pairs"}, TINY),
    ("translate-word", "qrnn", {"data": "pairs", "arch": "rnn"}, TINY),
    ("translate-word", "lstm", {"data": "pairs", "arch": "transformer", "heads": 2,
                                "ffn": "metagross", "ffn_depth": 3}, TINY),
    ("translate-word", "caslstm", {"data": "pairs", "arch": "cas"},
     {**TINY, "num_layers": 2}),
    ("carnn-lm", "carnn", {"data": "sentences"}, {**TINY, "variant": "n"}),
    ("carnn-lm", "carnn", {"data": "sentences"}, {**TINY, "variant": "s"}),
    ("carnn-lm", "lstm", {"data": "sentences"}, TINY),
    ("carnn-dialog", "carnn", {"data": "dialogs"}, {**TINY, "variant": "i"}),
    ("mr", "lstm", {"data": "labelled", "embedding_size": 8}, TINY),
    ("sst5", "rcrn", {"data": "labelled", "embedding_size": 8}, BI),
    ("logic", "lstm", {"train_size": 16, "valid_size": 4, "test_per_count": 1,
                       "features": "eq15", "embedding_size": 8}, TINY),
    ("logic", "caslstm", {"train_size": 16, "valid_size": 4, "test_per_count": 1,
                          "features": "rcrn", "embedding_size": 8}, {**TINY, "num_layers": 2}),
    ("logic", "metagross", {"train_size": 16, "valid_size": 4, "test_per_count": 1,
                            "features": "eq16", "embedding_size": 8},
     {**TINY, "gates": "state"}),
    ("ranking", "qrnn", {"data": "qa", "format": "trecqa", "embedding_size": 8}, TINY),
    ("ptb-lm", "lstm", {"data": "text", "bptt": 6}, {**TINY, "num_layers": 2}),
    ("ptb-lm", "qrnn", {"data": "text", "bptt": 6}, {**TINY, "num_layers": 2, "zoneout": 0.1}),
    ("ptb-char", "gru", {"data": "text", "bptt": 12}, TINY),
    ("brown-lm", "caslstm", {"data": "text", "bptt": 6}, {**TINY, "num_layers": 2}),
    ("mnist-5k", "metagross", {"data": "pixels"}, TINY),
    ("fashion-mnist", "lstm", {"data": "pixels", "permuted": True}, TINY),
    ("chorales", "qrnn", {"data": "rolls"}, TINY),
    # the papers' own files (tests/reproduce/paper_data.py writes them)
    ("sst2", "lstm", {"data": "paper:sst", "embedding_size": 8}, {**TINY, "dense": True,
                                                                 "num_layers": 2}),
    ("imdb", "qrnn", {"data": "paper:imdb", "embedding_size": 8},
     {**TINY, "dense": True, "num_layers": 2}),
    ("trec", "rcrn", {"data": "paper:trec", "embedding_size": 8}, BI),
    ("nli", "caslstm", {"data": "paper:multinli", "embedding_size": 8, "mlp_hidden": 8},
     {**TINY, "num_layers": 2}),
    ("ranking", "rcrn", {"data": "qa", "format": "wikiqa", "embedding_size": 8,
                         "attention": "ap"}, BI),
    ("ranking", "carnn", {"data": "qa", "format": "trecqa", "embedding_size": 8,
                          "scorer": "iwan"}, {**BI, "variant": "i"}),
    ("carnn-lm", "carnn", {"data": "paper:pdtb", "latent_weight": 0.5},
     {**TINY, "variant": "n"}),
    ("mnist", "metagross", {"data": "paper:mnist"}, TINY),
    ("cifar10", "lstm", {"data": "paper:cifar10"}, TINY),
]

_OPTION = {"sst": "sst", "imdb": "imdb", "trec": "trec", "multinli": "path", "pdtb": "source",
           "mnist": "idx", "cifar10": "cifar"}


def _paper_file(name: str, root: Path) -> str:
    """Tiny files of data set ``name`` in its real format (tests/reproduce/paper_data.py)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "reproduce" / "paper_data.py"
    spec = importlib.util.spec_from_file_location("paper_data", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.WRITERS[name](root / name))


def _task(name: str, options: dict[str, Any], root: Path):
    options = dict(options)
    data = options.pop("data", None)
    extra: dict[str, Any] = {}
    if data == "pairs":
        extra["pairs"] = {"train": _pairs(12, 0), "valid": _pairs(3, 1), "test": _pairs(3, 2)}
    elif data == "sentences":
        extra["sentences"] = {"train": _sentences(16, 0), "valid": _sentences(4, 1),
                              "test": _sentences(4, 2)}
    elif data == "dialogs":
        extra["dialogs"] = dialog_splits({"train": 4, "valid": 2, "test": 2}, seed=0)
    elif data == "labelled":
        classes = 2 if name == "mr" else 5
        options["source"] = str(write_labelled_dir(root, classes, {"train": 16, "valid": 4,
                                                                  "test": 4}))
    elif data == "qa":
        options["path"] = str(write_qa_files(root, options["format"],
                                             {"train": 6, "valid": 2, "test": 2}))
    elif data == "text":
        options["source"] = str(write_text_dir(root, {"train": 30, "valid": 6, "test": 6}))
    elif data == "pixels":
        options["source"] = str(write_pixel_dir(root, {"train": 8, "valid": 4, "test": 4}))
    elif data == "rolls":
        options["source"] = str(write_roll_dir(root, {"train": 4, "valid": 2, "test": 2}))
    elif data and data.startswith("paper:"):
        files = data.split(":", 1)[1]
        options[_OPTION[files]] = _paper_file(files, root)
        if files == "multinli":
            options["format"] = "multinli"
    cls = task_class(name)
    task = cls(check_options("task", name, options, cls.options), 0, **extra)
    task.setup()
    return task


def test_every_task_is_covered():
    assert {case[0] for case in CASES} == set(TASKS)


@pytest.mark.parametrize(("name", "encoder", "options", "model_args"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_every_parameter_gets_a_gradient(tmp_path, name, encoder, options, model_args):
    torch.manual_seed(0)
    task = _task(name, options, tmp_path / "data")
    model = task.build_model(encoder, encoder_options(encoder, model_args)).train()
    batch = task.train_batches(0, 4)[0]
    task.loss(model, batch).backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable
    assert [n for n, p in trainable if p.grad is None] == []
