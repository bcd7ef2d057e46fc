"""Answer selection (RCRN paper 4.2 "Ranking Model", table 8) on :class:`~ctrlrnn.models.ranker.
Ranker`: WikiQA or TrecQA files supplied by the user.

``task.path=DIR`` holds ``WikiQA-{train,dev,test}.tsv`` (``task.format=wikiqa``, read with
:func:`ctrlrnn.data.loaders.answer_selection.read_wikiqa`) or ``{train,dev,test}.tsv`` in the
``question<TAB>answer<TAB>label`` form (``task.format=trecqa``, :func:`read_qa_tsv`). A path
containing ``{split}`` is a template instead (``{split}`` is ``train``, ``dev`` or ``test``).

Training: every correct (question, answer) pair of the training file is one example, with
``task.negatives`` (6) incorrect candidates of the same question drawn with replacement from a
generator seeded by (seed, epoch); questions without both a correct and an incorrect candidate
are not trained on. Loss: the pairwise hinge of :func:`~ctrlrnn.models.ranker.
pairwise_hinge_loss`, margin ``task.margin`` (0.1). Evaluation: MAP (the metric) and MRR over
the questions with at least one correct answer. Defaults follow the paper: Adadelta, lr 0.2.
``task.attention=ap`` is the AP- setting of table 8 (attentive pooling, dos Santos et al.
2016: :class:`~ctrlrnn.models.ranker.Ranker`). ``task.scorer=iwan`` scores each pair with the
IWAN-style model of the CARNN paper's table 3 (:class:`~ctrlrnn.models.iwan.IwanScorer`; with
``--model carnn`` its cross-context encoder), its scores in the same hinge loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ctrlrnn.data.batching import pad_sequences
from ctrlrnn.data.loaders.answer_selection import (
    QaPair,
    group_by_question,
    read_qa_tsv,
    read_wikiqa,
)
from ctrlrnn.data.tokenize import word_tokenize
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.classifier import parse_pooling
from ctrlrnn.models.ranker import HINGE_REDUCTIONS, Ranker, map_mrr, pairwise_hinge_loss
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import embedding_matrix, load_vectors

FORMATS = ("wikiqa", "trecqa")
FILE_SPLITS = {"train": "train", "valid": "dev", "test": "test"}


def split_files(path: str, fmt: str) -> dict[str, Path]:
    """The train/valid/test files named by ``task.path`` and ``task.format``."""
    if fmt not in FORMATS:
        raise ValueError(f"task.format: expected one of {FORMATS}, got {fmt!r}")
    if not path:
        raise ValueError("task.path: the ranking task needs the directory of the WikiQA or "
                         "TrecQA files (they cannot be fetched here)")
    if "{split}" in path:
        files = {s: Path(path.replace("{split}", f)).expanduser() for s, f in FILE_SPLITS.items()}
    else:
        root = Path(path).expanduser()
        name = "WikiQA-{}.tsv" if fmt == "wikiqa" else "{}.tsv"
        files = {s: root / name.format(f) for s, f in FILE_SPLITS.items()}
    for split, file in files.items():
        if not file.is_file():
            raise ValueError(f"task.path: no {split} file {file}")
    return files


class RankingTask(Task):
    name = "ranking"
    description = "answer selection on user-supplied WikiQA/TrecQA tsv (RCRN paper 4.2, MAP/MRR)"
    metric: ClassVar[str] = "map"
    higher_is_better: ClassVar[bool] = True
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "path": (str, ""),
        "format": (str, "wikiqa"),
        "lower": (bool, True),
        "negatives": (int, 6),
        "margin": (float, 0.1),
        "hinge": (str, "max"),
        "pooling": (str, "max"),
        "attention": (str, ""),
        "scorer": (str, "cosine"),
        "embedding_size": (int, 100),
        "glove": (str, ""),
        "freeze_embeddings": (bool, True),
        "dropout": (float, 0.0),
        "min_count": (int, 1),
        "eval_batch_size": (int, 256),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 32, "optimizer": "adadelta", "lr": 0.2,
                                          "epochs": 10}

    def _tokens(self, text: str) -> list[str]:
        return word_tokenize(text, lower=self.opts["lower"]) or ["<unk>"]

    def setup(self) -> None:
        o = self.opts
        if o["negatives"] < 1:
            raise ValueError(f"task.negatives: expected a positive integer, got {o['negatives']}")
        if o["hinge"] not in HINGE_REDUCTIONS:
            raise ValueError(f"task.hinge: expected one of {HINGE_REDUCTIONS}, got {o['hinge']!r}")
        parse_pooling(o["pooling"])
        reader = read_wikiqa if o["format"] == "wikiqa" else read_qa_tsv
        files = split_files(o["path"], o["format"])
        self.pairs: dict[str, list[QaPair]] = {s: reader(f) for s, f in files.items()}
        for split, pairs in self.pairs.items():
            if not pairs:
                raise ValueError(f"task.path: the {split} file {files[split]} has no rows")
        train = self.pairs["train"]
        self.vocab = Vocab.build(
            (self._tokens(t) for p in train for t in (p.question, p.answer)),
            min_count=o["min_count"],
        )
        # per split: question id -> (question ids, [(answer ids, label), ...])
        self.groups: dict[str, list[tuple[list[int], list[tuple[list[int], int]]]]] = {}
        for split, pairs in self.pairs.items():
            self.groups[split] = [
                (self.vocab.encode(self._tokens(cands[0].question)),
                 [(self.vocab.encode(self._tokens(c.answer)), c.label) for c in cands])
                for cands in group_by_question(pairs).values()
            ]
        self.examples: list[tuple[int, int]] = []  # (group index, positive candidate index)
        for g, (_, cands) in enumerate(self.groups["train"]):
            labels = [y for _, y in cands]
            if any(labels) and not all(labels):
                self.examples += [(g, i) for i, y in enumerate(labels) if y]
        if not self.examples:
            raise ValueError("task.path: no training question has both a correct and an "
                             "incorrect answer")
        self.vectors = load_vectors(o["glove"])

    def data_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"{s} questions": len(g) for s, g in self.groups.items()}
        out["training pairs (positives)"] = len(self.examples)
        out["vocabulary"] = len(self.vocab)
        if self.vectors is not None:
            out["pre-trained vector coverage"] = str(self.vectors.coverage(self.vocab))
        return out

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        o = self.opts
        matrix = embedding_matrix(self.vectors, self.vocab, self.seed)
        if o["scorer"] not in ("cosine", "iwan"):
            raise ValueError(f"task.scorer: expected cosine or iwan, got {o['scorer']!r}")
        if o["scorer"] == "iwan":
            from ctrlrnn.models.iwan import IwanScorer

            if o["attention"]:
                raise ValueError("task.attention: the IWAN scorer aligns the pair itself")
            return IwanScorer(len(self.vocab), encoder=encoder, encoder_args=model_args,
                              embedding_size=o["embedding_size"], embeddings=matrix,
                              freeze_embeddings=o["freeze_embeddings"], dropout=o["dropout"],
                              pad_id=self.vocab.pad_id)
        return Ranker(len(self.vocab), encoder=encoder, encoder_args=model_args,
                      embedding_size=o["embedding_size"], embeddings=matrix,
                      freeze_embeddings=o["freeze_embeddings"], pooling=o["pooling"],
                      dropout=o["dropout"], pad_id=self.vocab.pad_id,
                      attention=o["attention"])

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        if len(self.examples) < batch_size:
            raise ValueError(f"batch_size: {batch_size} is larger than the {len(self.examples)} "
                             "training pairs")
        gen = self.epoch_generator(epoch)
        order = torch.randperm(len(self.examples), generator=gen).tolist()
        n = self.opts["negatives"]
        pad = self.vocab.pad_id
        batches = []
        for k in range(0, len(order) - batch_size + 1, batch_size):
            qs, pos, negs = [], [], []
            for j in order[k : k + batch_size]:
                g, i = self.examples[j]
                question, cands = self.groups["train"][g]
                wrong = [a for a, y in cands if not y]
                picks = torch.randint(0, len(wrong), (n,), generator=gen).tolist()
                qs.append(question)
                pos.append(cands[i][0])
                negs += [wrong[p] for p in picks]
            q, a, neg = pad_sequences(qs, pad), pad_sequences(pos, pad), pad_sequences(negs, pad)
            batches.append({
                "question": q.tokens, "question_lengths": q.lengths,
                "positive": a.tokens, "positive_lengths": a.lengths,
                "negatives": neg.tokens.view(batch_size, n, -1),
                "negative_lengths": neg.lengths.view(batch_size, n),
            })
        return batches

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        q, ql = batch["question"], batch["question_lengths"]
        B, n, T = batch["negatives"].shape
        if getattr(model, "attentive", False):  # the question's vector depends on the answer
            pos = model(q, ql, batch["positive"], batch["positive_lengths"])
            neg = model(q.repeat_interleave(n, 0), ql.repeat_interleave(n, 0),
                        batch["negatives"].reshape(B * n, T),
                        batch["negative_lengths"].reshape(B * n)).view(B, n)
            return pairwise_hinge_loss(pos, neg, self.opts["margin"], self.opts["hinge"])
        qv = model.encode(q, ql)
        pv = model.encode(batch["positive"], batch["positive_lengths"])
        nv = model.encode(batch["negatives"].reshape(B * n, T),
                          batch["negative_lengths"].reshape(B * n)).view(B, n, -1)
        pos = torch.cosine_similarity(qv, pv, dim=-1, eps=1e-8)
        neg = torch.cosine_similarity(qv.unsqueeze(1), nv, dim=-1, eps=1e-8)
        return pairwise_hinge_loss(pos, neg, self.opts["margin"], self.opts["hinge"])

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        groups = self.groups[split]
        pad = self.vocab.pad_id
        # one row per (question, candidate), scored in batches of eval_batch_size rows
        rows = [(g, q, a) for g, (q, cands) in enumerate(groups) for a, _ in cands]
        size = self.opts["eval_batch_size"]
        if size < 1:
            raise ValueError(f"task.eval_batch_size: expected a positive integer, got {size}")
        scores: list[float] = []
        for count, k in enumerate(range(0, len(rows), size)):
            if max_batches and count >= max_batches:
                break
            chunk = rows[k : k + size]
            q, a = self.to_device((pad_sequences([r[1] for r in chunk], pad),
                                   pad_sequences([r[2] for r in chunk], pad)))
            scores += model(q.tokens, q.lengths, a.tokens, a.lengths).tolist()
        scored: list[tuple[list[float], list[int]]] = []
        at = 0
        for _, cands in groups:
            if at + len(cands) > len(scores):
                break  # max_batches reached: only the questions scored in full
            scored.append((scores[at : at + len(cands)], [y for _, y in cands]))
            at += len(cands)
        return map_mrr(scored)
