"""Sentence-pair classification on :class:`~ctrlrnn.models.pair_classifier.PairClassifier`.

``logic`` — the logical-inference pairs of Bowman et al. (2014) as used in the METAGROSS paper 3.1
(table 2): two bracketed formulas over six variables, one of seven relations. Train and valid
pairs have 1..``task.max_train_operators`` (6) operators; ``evaluate(model, "test")`` reports
the accuracy for each operator count 7..12 (``accuracy_ops7`` ... ``accuracy_ops12``) and over
all of them (``accuracy``). ``task.features`` picks the model (``eq15`` default, ``eq16``,
``rcrn``; see :mod:`ctrlrnn.models.pair_classifier`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.batching import pad_sequences
from ctrlrnn.data.synthetic.logic import RELATIONS, LogicPair, logic_splits
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.classifier import parse_pooling
from ctrlrnn.models.pair_classifier import FEATURES, PairClassifier
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import epoch_batches, eval_chunks

TEST_OPERATORS = (7, 12)

Encoded = tuple[list[int], list[int], int, int]  # left ids, right ids, relation, operators


def pair_model_options(*, embedding_size: int, highway_size: int, mlp_hidden: int,
                       vectors: dict[str, tuple[Any, Any]] | None = None
                       ) -> dict[str, tuple[Any, Any]]:
    """The task options of the pair model (:class:`PairClassifier`), with these defaults;
    ``vectors``: the options of pre-trained vectors, listed after the pooling."""
    return {
        "features": (str, "eq15"),
        "pooling": (str, ""),
        **(vectors or {}),
        "embedding_size": (int, embedding_size),
        "highway_size": (int, highway_size),
        "mlp_hidden": (int, mlp_hidden),
        "mlp_layers": (int, 1),
        "dropout": (float, 0.0),
    }


def check_pair_model_options(o: dict[str, Any]) -> None:
    """Refuse a ``task.features`` the pair model lacks or a ``task.pooling`` it cannot parse."""
    if o["features"] not in FEATURES:
        raise ValueError(f"task.features: expected one of {FEATURES}, got {o['features']!r}")
    if o["pooling"]:
        parse_pooling(o["pooling"])


class LogicTask(Task):
    name = "logic"
    description = ("logical inference pairs, train <= 6 operators, test accuracy per count "
                   "7-12 (METAGROSS paper 3.1)")
    metric: ClassVar[str] = "accuracy"
    higher_is_better: ClassVar[bool] = True
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "train_size": (int, 20_000),
        "valid_size": (int, 2_000),
        "test_per_count": (int, 500),
        "max_train_operators": (int, 6),
        **pair_model_options(embedding_size=64, highway_size=128, mlp_hidden=128),
        "eval_batch_size": (int, 256),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 64, "lr": 1e-3, "epochs": 10}

    def setup(self) -> None:
        o = self.opts
        check_pair_model_options(o)
        if not 1 <= o["max_train_operators"] < TEST_OPERATORS[0]:
            raise ValueError("task.max_train_operators: expected 1..6, got "
                             f"{o['max_train_operators']}")
        for key in ("train_size", "valid_size", "test_per_count"):
            if o[key] < 1:
                raise ValueError(f"task.{key}: expected a positive integer, got {o[key]}")
        self.splits: dict[str, list[LogicPair]] = logic_splits(
            {"train": o["train_size"], "valid": o["valid_size"]},
            test_per_count=o["test_per_count"], train_operators=(1, o["max_train_operators"]),
            test_operators=TEST_OPERATORS, seed=self.seed,
        )
        self.vocab = Vocab.build(p.left + p.right for ps in self.splits.values() for p in ps)
        self.relations = {r: i for i, r in enumerate(RELATIONS)}
        self.encoded: dict[str, list[Encoded]] = {
            s: [(self.vocab.encode(p.left), self.vocab.encode(p.right), self.relations[p.relation],
                 p.operators) for p in ps]
            for s, ps in self.splits.items()
        }

    def data_summary(self) -> dict[str, Any]:
        return {**{f"{s} pairs": len(v) for s, v in self.splits.items()},
                "vocabulary": len(self.vocab), "relations": len(RELATIONS),
                "train operators": f"1..{self.opts['max_train_operators']}",
                "test operators": f"{TEST_OPERATORS[0]}..{TEST_OPERATORS[1]}"}

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        o = self.opts
        return PairClassifier(
            len(self.vocab), len(RELATIONS), encoder=encoder, encoder_args=model_args,
            features=o["features"], embedding_size=o["embedding_size"], pooling=o["pooling"],
            highway_size=o["highway_size"], mlp_hidden=o["mlp_hidden"],
            mlp_layers=o["mlp_layers"], dropout=o["dropout"], pad_id=self.vocab.pad_id,
        )

    def _batch(self, items: Sequence[Encoded]) -> Batch:
        left = pad_sequences([x[0] for x in items], self.vocab.pad_id)
        right = pad_sequences([x[1] for x in items], self.vocab.pad_id)
        return {"left": left.tokens, "left_lengths": left.lengths, "right": right.tokens,
                "right_lengths": right.lengths,
                "labels": torch.tensor([x[2] for x in items], dtype=torch.long),
                "operators": torch.tensor([x[3] for x in items], dtype=torch.long)}

    @staticmethod
    def _logits(model: nn.Module, b: Batch) -> Tensor:
        return model(b["left"], b["left_lengths"], b["right"], b["right_lengths"])

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        data = self.encoded["train"]
        index = epoch_batches([len(x[0]) + len(x[1]) for x in data], batch_size,
                              self.epoch_generator(epoch))
        return [self._batch([data[i] for i in b]) for b in index]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return F.cross_entropy(self._logits(model, batch), batch["labels"])

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        data = self.encoded[split]
        nll = 0.0
        hits: dict[int, list[float]] = {}  # operators -> [correct, total]
        for chunk in eval_chunks([len(x[0]) + len(x[1]) for x in data],
                                 self.opts["eval_batch_size"], max_batches):
            b = self.to_device(self._batch([data[i] for i in chunk]))
            logits = self._logits(model, b)
            nll += float(F.cross_entropy(logits, b["labels"], reduction="sum"))
            right = (logits.argmax(-1) == b["labels"]).tolist()
            for ops, ok in zip(b["operators"].tolist(), right):
                entry = hits.setdefault(int(ops), [0.0, 0.0])
                entry[0] += float(ok)
                entry[1] += 1.0
        n = sum(t for _, t in hits.values())
        out = {"loss": nll / max(n, 1.0),
               "accuracy": sum(c for c, _ in hits.values()) / max(n, 1.0)}
        if split == "test":
            for ops in range(TEST_OPERATORS[0], TEST_OPERATORS[1] + 1):
                if ops in hits:
                    out[f"accuracy_ops{ops}"] = hits[ops][0] / hits[ops][1]
        return out


class NliTask(Task):
    """Sentence-pair classification on the papers' own files (:mod:`~ctrlrnn.tasks.
    paper_files`): ``task.format`` ``snli``, ``multinli`` (test also reports
    ``accuracy_mismatched``), ``scitail`` or ``quora``, from the folder ``task.path``; the
    model of ``task.features`` (``eq15``, ``eq16``, ``rcrn``) over pre-trained vectors
    (``task.glove``), frozen unless ``task.freeze_embeddings=false``. Metric: accuracy."""

    name = "nli"
    description = ("SNLI / MultiNLI / SciTail / Quora pairs from the user's files (task.path, "
                   "task.format; CAS-LSTM tables 1-3, RCRN tables 6-7)")
    metric: ClassVar[str] = "accuracy"
    higher_is_better: ClassVar[bool] = True
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "path": (str, ""),
        "format": (str, "snli"),
        "lower": (bool, False),
        "train_size": (int, 0),
        **pair_model_options(embedding_size=300, highway_size=300, mlp_hidden=1024,
                             vectors={"glove": (str, ""), "freeze_embeddings": (bool, True)}),
        "min_count": (int, 1),
        "eval_batch_size": (int, 256),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 64, "lr": 1e-3, "epochs": 10}

    def setup(self) -> None:
        from ctrlrnn.tasks.common import load_vectors
        from ctrlrnn.tasks.paper_files import PAIR_CLASSES, pair_splits

        o = self.opts
        check_pair_model_options(o)
        if not o["path"]:
            raise ValueError("task.path: the nli task needs the folder of the data set's files "
                             "(they cannot be fetched here)")
        splits = pair_splits(o["path"], o["format"], o["lower"])
        if o["train_size"] > 0:
            splits["train"] = splits["train"][: o["train_size"]]
        for split, rows in splits.items():
            if not rows:
                raise ValueError(f"task.path: the {split} file has no labelled pairs")
        self.classes = PAIR_CLASSES[o["format"]]
        self.splits = splits
        self.vocab = Vocab.build((t for a, b, _ in splits["train"] for t in (a, b)),
                                 min_count=o["min_count"])
        self.encoded = {s: [(self.vocab.encode(a), self.vocab.encode(b), y, 0)
                            for a, b, y in rows] for s, rows in splits.items()}
        self.vectors = load_vectors(o["glove"])

    def data_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"{s} pairs": len(v) for s, v in self.splits.items()}
        out["vocabulary"] = len(self.vocab)
        out["classes"] = self.classes
        return out

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        from ctrlrnn.tasks.common import embedding_matrix

        o = self.opts
        return PairClassifier(
            len(self.vocab), self.classes, encoder=encoder, encoder_args=model_args,
            features=o["features"], embedding_size=o["embedding_size"],
            embeddings=embedding_matrix(self.vectors, self.vocab, self.seed),
            freeze_embeddings=o["freeze_embeddings"], pooling=o["pooling"],
            highway_size=o["highway_size"], mlp_hidden=o["mlp_hidden"],
            mlp_layers=o["mlp_layers"], dropout=o["dropout"], pad_id=self.vocab.pad_id,
        )

    _batch = LogicTask._batch
    _logits = staticmethod(LogicTask._logits)
    train_batches = LogicTask.train_batches
    loss = LogicTask.loss

    def _accuracy(self, model: nn.Module, split: str, max_batches: int) -> tuple[float, float]:
        data = self.encoded[split]
        nll = correct = n = 0.0
        for chunk in eval_chunks([len(x[0]) + len(x[1]) for x in data],
                                 self.opts["eval_batch_size"], max_batches):
            b = self.to_device(self._batch([data[i] for i in chunk]))
            logits = self._logits(model, b)
            nll += float(F.cross_entropy(logits, b["labels"], reduction="sum"))
            correct += float((logits.argmax(-1) == b["labels"]).sum())
            n += len(chunk)
        return nll / max(n, 1.0), correct / max(n, 1.0)

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        loss, accuracy = self._accuracy(model, split, max_batches)
        out = {"loss": loss, "accuracy": accuracy}
        if split == "test" and "test_mismatched" in self.encoded:
            out["accuracy_mismatched"] = self._accuracy(model, "test_mismatched",
                                                        max_batches)[1]
        return out
