"""Sentence classification on :class:`~ctrlrnn.models.classifier.SentenceClassifier`.

* ``mr`` — MR-like binary sentiment (Rotten Tomatoes fresh/rotten snippets, see docs/data.md);
* ``sst5`` — SST-5-like five-class sentiment (RCRN paper table 2 / CAS-LSTM paper table 4 style).

The model follows RCRN paper 4.2 by default (max+mean+min pooling, one 200-d ReLU layer); the
CAS-LSTM paper 3.3 sentence encoder is ``task.pooling=max`` (with ``task.mlp_layers``,
``task.mlp_hidden`` and ``task.dropout`` of eq 14). Pre-trained GloVe vectors come with
``task.glove=cache`` (the prepared ``glove`` source, GloVe 6B 50d), a directory in its prepared
form or a file in GloVe's text format (any dimension), frozen unless
``task.freeze_embeddings=false``.

``task.source=DIR`` reads ``DIR/{train,valid,test}.tsv`` (``label<TAB>space-separated
tokens``, the prepared format) instead of the prepared data set. The papers' own files are
read with (:mod:`ctrlrnn.tasks.paper_files`): ``task.sst=DIR`` SST's trees (``sst5``, ``sst2``;
``task.phrases=true`` trains on every labelled phrase), ``task.imdb=DIR`` the ``aclImdb``
folder (``imdb``), ``task.trec=DIR`` TREC's label files (``trec``), ``task.mtl=DIR/NAME`` a
set of Liu et al. (2017) (``mr``: the 16 binary sets of the RCRN paper's table 1). Tasks
``sst2``, ``imdb`` and ``trec`` have no data here and need theirs. Metric: accuracy.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.batching import pad_sequences
from ctrlrnn.data.sources.common import SPLITS, read_labelled
from ctrlrnn.data.sources.rotten_tomatoes import load_mr
from ctrlrnn.data.sources.sst5_like import load_sst5_like
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.classifier import SentenceClassifier, parse_pooling
from ctrlrnn.tasks import paper_files
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import (
    check_splits,
    embedding_matrix,
    epoch_batches,
    eval_chunks,
    load_vectors,
    require_files,
    source_dir,
)

Example = tuple[list[str], int]


class SentenceClassificationTask(Task):
    """Labelled token sequences -> classes; subclasses name the data set."""

    metric: ClassVar[str] = "accuracy"
    higher_is_better: ClassVar[bool] = True
    num_classes: ClassVar[int]
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "source": (str, ""),
        "sst": (str, ""),
        "phrases": (bool, False),
        "imdb": (str, ""),
        "trec": (str, ""),
        "mtl": (str, ""),
        "glove": (str, ""),
        "freeze_embeddings": (bool, True),
        "embedding_size": (int, 100),
        "pooling": (str, "max+mean+min"),
        "mlp_hidden": (int, 200),
        "mlp_layers": (int, 1),
        "dropout": (float, 0.0),
        "min_count": (int, 1),
        "eval_batch_size": (int, 256),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 32, "lr": 1e-3, "epochs": 5}

    #: the options of the papers' files this task reads (module docstring)
    file_options: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def load_prepared(self) -> dict[str, list[Example]]:
        """The prepared data set's ``(tokens, label)`` examples per split."""

    def load(self) -> dict[str, list[Example]]:
        given = [k for k in ("source", "sst", "imdb", "trec", "mtl") if self.opts[k]]
        if len(given) > 1:
            raise ValueError(f"task.{given[1]}: give one of task.{given[0]} and "
                             f"task.{given[1]}, not both")
        wrong = [k for k in given if k != "source" and k not in self.file_options]
        if wrong:
            allowed = ", ".join(f"task.{k}" for k in ("source", *self.file_options))
            raise ValueError(f"task.{wrong[0]}: task {self.name} reads {allowed}")
        if self.opts["phrases"] and not self.opts["sst"]:
            raise ValueError("task.phrases: only SST's trees have labelled phrases (task.sst)")
        o = self.opts
        if o["sst"]:
            return paper_files.sst_splits(o["sst"], self.num_classes, o["phrases"])
        if o["imdb"]:
            return paper_files.imdb_splits(o["imdb"])
        if o["trec"]:
            return paper_files.trec_splits(o["trec"])
        if o["mtl"]:
            return paper_files.mtl_splits(o["mtl"])
        directory = source_dir(self.opts["source"])
        if directory is None:
            return self.load_prepared()
        require_files(directory, [f"{s}.tsv" for s in SPLITS])
        return {s: read_labelled(directory / f"{s}.tsv") for s in SPLITS}

    def setup(self) -> None:
        parse_pooling(self.opts["pooling"])
        self.splits = self.load()
        check_splits(self.splits, f"task {self.name}")
        for split, examples in self.splits.items():
            bad = next((y for _, y in examples if not 0 <= y < self.num_classes), None)
            if bad is not None:
                raise ValueError(f"{self.name}: label {bad} in {split} is outside "
                                 f"0..{self.num_classes - 1}")
            if any(not tokens for tokens, _ in examples):
                raise ValueError(f"{self.name}: an example of {split} has no tokens")
        self.vocab = Vocab.build((t for t, _ in self.splits["train"]),
                                 min_count=self.opts["min_count"])
        self.encoded = {s: [(self.vocab.encode(t), y) for t, y in ex]
                        for s, ex in self.splits.items()}
        self.vectors = load_vectors(self.opts["glove"])

    def data_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"{s} examples": len(v) for s, v in self.splits.items()}
        out["vocabulary"] = len(self.vocab)
        out["classes"] = self.num_classes
        if self.vectors is not None:
            out["pre-trained vector coverage"] = str(self.vectors.coverage(self.vocab))
        return out

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        matrix = embedding_matrix(self.vectors, self.vocab, self.seed)
        return SentenceClassifier(
            len(self.vocab), self.num_classes, encoder=encoder, encoder_args=model_args,
            embedding_size=self.opts["embedding_size"], embeddings=matrix,
            freeze_embeddings=self.opts["freeze_embeddings"], pooling=self.opts["pooling"],
            mlp_hidden=self.opts["mlp_hidden"], mlp_layers=self.opts["mlp_layers"],
            dropout=self.opts["dropout"], pad_id=self.vocab.pad_id,
        )

    def _batch(self, items: Sequence[tuple[list[int], int]]) -> Batch:
        padded = pad_sequences([ids for ids, _ in items], self.vocab.pad_id)
        return {"tokens": padded.tokens, "lengths": padded.lengths,
                "labels": torch.tensor([y for _, y in items], dtype=torch.long)}

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        data = self.encoded["train"]
        index = epoch_batches([len(x) for x, _ in data], batch_size, self.epoch_generator(epoch))
        return [self._batch([data[i] for i in b]) for b in index]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return F.cross_entropy(model(batch["tokens"], batch["lengths"]), batch["labels"])

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        data = self.encoded[split]
        nll = correct = n = 0.0
        for chunk in eval_chunks([len(x) for x, _ in data], self.opts["eval_batch_size"],
                                 max_batches):
            b = self.to_device(self._batch([data[i] for i in chunk]))
            logits = model(b["tokens"], b["lengths"])
            nll += float(F.cross_entropy(logits, b["labels"], reduction="sum"))
            correct += float((logits.argmax(-1) == b["labels"]).sum())
            n += len(chunk)
        return {"loss": nll / max(n, 1.0), "accuracy": correct / max(n, 1.0)}


class MrTask(SentenceClassificationTask):
    name = "mr"
    description = ("MR-like binary sentence sentiment (RCRN paper 4.2 classifier; "
                   "CAS-LSTM paper 3.3); task.mtl: a set of the RCRN paper's table 1")
    num_classes = 2
    file_options = ("mtl",)

    def load_prepared(self) -> dict[str, list[Example]]:
        return load_mr()


class Sst5Task(SentenceClassificationTask):
    name = "sst5"
    description = "SST-5-like five-class sentence sentiment (RCRN paper 4.2; CAS-LSTM paper 3.3)"
    num_classes = 5
    file_options = ("sst",)

    def load_prepared(self) -> dict[str, list[Example]]:
        return load_sst5_like()


class _NeedsFiles(SentenceClassificationTask):
    """A task whose data cannot be had here: the user's files, or ``task.source``."""

    def load_prepared(self) -> dict[str, list[Example]]:
        options = " or ".join(f"task.{k}" for k in (*self.file_options, "source"))
        raise ValueError(f"task {self.name}: its data cannot be fetched here; give {options}")


class Sst2Task(_NeedsFiles):
    name = "sst2"
    description = "SST-2 binary sentence sentiment from SST's trees (task.sst; RCRN table 3)"
    num_classes = 2
    file_options = ("sst",)


class ImdbTask(_NeedsFiles):
    name = "imdb"
    description = ("IMDB review sentiment from the aclImdb folder (task.imdb; QRNN table 1, "
                   "RCRN table 4)")
    num_classes = 2
    file_options = ("imdb",)


class TrecTask(_NeedsFiles):
    name = "trec"
    description = "TREC question classification, 6 coarse classes (task.trec; RCRN table 5)"
    num_classes = 6
    file_options = ("trec",)
