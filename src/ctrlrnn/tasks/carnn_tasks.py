"""The CARNN paper's tasks: contextual language modelling (4.2) and end-to-end dialog (4.1).

* ``carnn-lm`` — PTB sentences (Mikolov's split, in order); each sentence is modelled with the
  previous sentence of its split as context (eq 11: a context-free nCARNN encodes the previous
  sentence, its final state controls the current sentence's CARNN). ``--model carnn`` with
  ``model.variant=n|i|s`` (``model.hidden_size``, ``model.num_layers``, ``model.dropout``);
  any other ``--model`` is the baseline LM without context (``--model lstm``: the RNNLM row of
  table 2). The first sentence of a split has an empty context sentence (``<eos>`` alone).
  Inputs are ``<bos> w_1 .. w_n``, targets ``w_1 .. w_n <eos>``. Metric: perplexity per target
  token. ``task.source=DIR`` reads ``DIR/{train,valid,test}.txt`` (one whitespace-tokenised
  sentence per line, the prepared ``ptb`` format). The latent variable of eq 12-13 (a
  discourse relation, a dialog act) needs labels, which PTB has not: with
  ``task.latent_weight=w`` > 0 (the paper's ``1 - alpha``, 0.5) the task reads
  ``DIR/{split}.labels``, one label a line beside each sentence, and the CARNN's loss is
  ``(1 - w) L_w + w L_l``, ``L_l`` the log-loss of eq 12's classifier of the context. The
  label of the pair (sentence t-1, sentence t) is line t's (``task.latent_label=current``: the
  relation into sentence t, PDTB's) or line t-1's (``previous``: the previous utterance's
  dialog act, Switchboard's). Evaluation reads the words alone, as the paper's test does.
* ``carnn-dialog`` — response selection over a dialog history (section 4.1, eq 8-10) on
  synthetic restaurant-booking dialogs built like the bAbI dialog tasks
  (:mod:`ctrlrnn.data.synthetic.restaurant_dialogs`; ``task.dialogs=api-calls``: tasks 1-2,
  ``full``: task 5's form, with the knowledge base, proposals by rating and extra
  information), or on the real bAbI dialog files read by
  :func:`ctrlrnn.data.loaders.babi_dialog.read_babi_dialog` from ``task.path=`` (the ``-trn``
  file; ``-dev`` and ``-tst`` are found beside it; the file decides the task, so
  ``task.dialogs`` and ``task.update_prob``, which shape the generated dialogs, do not
  apply). Every bot turn is one example: the earlier utterances (user and bot, in order,
  after a one-word ``<start>`` utterance) are the history, the current user utterance is the
  context ``c = e_M``, the bot's response is the class among all responses of the data (the
  candidate set). Knowledge-base lines enter the history where the dialog prints them (in
  bAbI's files, where the API call's results arrive).
  ``--model carnn`` with ``model.variant``; other encoders are context-free baselines.
  Metrics: per-response ``accuracy`` (the paper's), ``dialog_accuracy`` (every response of
  the dialog right), and the accuracy of each kind of response that reads the dialog's
  memory, where the split has it: ``api_call_accuracy``, ``proposal_accuracy`` (bAbI task 3)
  and ``information_accuracy`` (task 4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.batching import pad_sequences
from ctrlrnn.data.loaders.babi_dialog import Dialog, read_babi_dialog
from ctrlrnn.data.sources.common import SPLITS, read_lines
from ctrlrnn.data.sources.ptb import load_ptb
from ctrlrnn.data.synthetic.restaurant_dialogs import (
    API_CALL_PREFIX,
    DIALOG_KINDS,
    INFO_PREFIX,
    PROPOSE_PREFIX,
    SILENCE,
    dialog_splits,
)
from ctrlrnn.data.tokenize import whitespace_tokenize
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.carnn_models import CARNNDialog, ContextualLM, SentenceLM
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import (
    check_splits,
    epoch_batches,
    eval_chunks,
    require_files,
    source_dir,
)


def _size_options(train: int, valid: int, test: int) -> dict[str, tuple[Any, Any]]:
    return {"train_size": (int, train), "valid_size": (int, valid), "test_size": (int, test)}


def _check_sizes(opts: dict[str, Any], allow_zero: bool) -> dict[str, int]:
    sizes = {s: int(opts[f"{s}_size"]) for s in SPLITS}
    for split, value in sizes.items():
        if value < 0 or (value == 0 and not allow_zero):
            want = "an integer >= 0 (0: all)" if allow_zero else "a positive integer"
            raise ValueError(f"task.{split}_size: expected {want}, got {value}")
    return sizes


def _carnn_args(model_args: dict[str, Any]) -> tuple[str, int, int, float]:
    variant = str(model_args.get("variant", "n"))
    return (variant, int(model_args.get("hidden_size", 128)),
            int(model_args.get("num_layers", 1)), float(model_args.get("dropout", 0.0)))


# ---------------------------------------------------------------------------- language model
class CarnnLmTask(Task):
    """``carnn-lm``: sentence LM with the previous sentence as context (CARNN paper 4.2)."""

    name = "carnn-lm"
    description = ("PTB sentence LM, previous sentence as CARNN context (CARNN paper 4.2, eq 11); "
                   "--model lstm: no context")
    metric: ClassVar[str] = "perplexity"
    higher_is_better: ClassVar[bool] = False
    options = {
        "source": (str, ""),
        **_size_options(0, 0, 0),
        "whole_vocab": (bool, False),
        "embedding_size": (int, 0),
        "latent_weight": (float, 0.0),
        "latent_label": (str, "current"),
        "eval_batch_size": (int, 64),
    }
    defaults = {"batch_size": 32, "lr": 1e-3, "clip_norm": 5.0}

    def __init__(
        self, options: dict[str, Any], seed: int,
        sentences: dict[str, Sequence[Sequence[str]]] | None = None,
        labels: dict[str, Sequence[str]] | None = None,
    ) -> None:
        """``sentences``: optional ``{split: [tokens, ...]}`` used instead of files;
        ``labels``: their latent labels, one a sentence (eq 12)."""
        super().__init__(options, seed)
        self.given = sentences
        self.given_labels = labels

    def _labels(self, data: dict[str, list[list[str]]]) -> dict[str, list[str]] | None:
        """Each split's latent labels, one a sentence (None when eq 12-13 is off)."""
        weight = float(self.opts["latent_weight"])
        if not 0.0 <= weight < 1.0:
            raise ValueError(f"task.latent_weight: expected a weight in [0, 1), got {weight}")
        if self.opts["latent_label"] not in ("current", "previous"):
            raise ValueError("task.latent_label: expected current or previous, got "
                             f"{self.opts['latent_label']!r}")
        if weight == 0.0:
            return None
        if self.given_labels is not None:
            labels = {s: list(self.given_labels.get(s, [])) for s in SPLITS}
        else:
            root = source_dir(self.opts["source"])
            if root is None:
                raise ValueError("task.latent_weight: the latent labels are read from "
                                 "task.source's {split}.labels files (PTB has none)")
            require_files(root, [f"{s}.labels" for s in SPLITS])
            labels = {s: (root / f"{s}.labels").read_text(encoding="utf-8").split()
                      for s in SPLITS}
        for split, rows in data.items():
            if len(labels[split]) != len(rows):
                raise ValueError(f"task.source: {split}.labels has {len(labels[split])} labels "
                                 f"for {len(rows)} sentences")
        return labels

    def _sentences(self) -> dict[str, list[list[str]]]:
        if self.given is not None:
            return {s: [list(x) for x in self.given.get(s, [])] for s in SPLITS}
        root = source_dir(self.opts["source"])
        if root is not None:
            require_files(root, [f"{s}.txt" for s in SPLITS])
            return {s: read_lines(root / f"{s}.txt") for s in SPLITS}
        return load_ptb(level="word")

    def setup(self) -> None:
        sizes = _check_sizes(self.opts, allow_zero=True)
        data = self._sentences()
        labels = self._labels(data)
        if labels is not None:  # the labels of the pairs, before empty lines are dropped
            if self.opts["latent_label"] == "previous":
                labels = {s: ["", *v[:-1]] for s, v in labels.items()}
            labels = {s: [y for x, y in zip(data[s], v, strict=True) if x]
                      for s, v in labels.items()}
        data = {s: [x for x in v if x] for s, v in data.items()}
        # the context of sentence t is sentence t-1 of the same split, so cut after pairing
        pairs = {s: list(zip([[]] + v[:-1], v, strict=True)) for s, v in data.items()}
        self.pairs = {s: (p[: sizes[s]] if sizes[s] else p) for s, p in pairs.items()}
        check_splits(self.pairs, "task")
        # a vocabulary that does not grow with train_size keeps perplexities comparable across
        # training-set sizes (words outside it are the unknown token, which is easy to predict)
        vocab_from = pairs["train"] if self.opts["whole_vocab"] else self.pairs["train"]
        self.vocab = Vocab.build(cur for _, cur in vocab_from)
        v = self.vocab
        self.latent_labels: list[str] = []
        latent: dict[str, list[int]] = {s: [-100] * len(p) for s, p in self.pairs.items()}
        if labels is not None:
            self.latent_labels = sorted({y for y in labels["train"] if y})
            index = {y: i for i, y in enumerate(self.latent_labels)}
            latent = {s: [index.get(y, -100) if y else -100 for y in labels[s][: len(p)]]
                      for s, p in self.pairs.items()}
        self.encoded = {
            s: [(v.encode(prev) or [v.eos_id], v.encode(cur), y)
                for (prev, cur), y in zip(p, latent[s], strict=True)]
            for s, p in self.pairs.items()
        }

    def data_summary(self) -> dict[str, Any]:
        out = {**{f"{s} sentences": len(p) for s, p in self.pairs.items()},
               "vocabulary": len(self.vocab)}
        if self.latent_labels:
            out["latent labels"] = len(self.latent_labels)
        return out

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        if encoder == "carnn":
            variant, hidden, layers, dropout = _carnn_args(model_args)
            emb = self.opts["embedding_size"] or hidden
            weight = float(self.opts["latent_weight"])
            return ContextualLM(len(self.vocab), emb, hidden, variant, num_layers=layers,
                                dropout=dropout,
                                num_latent_labels=len(self.latent_labels) or None,
                                alpha=1.0 - weight)
        if self.latent_labels:
            raise ValueError("task.latent_weight: eq 12-13 trains a CARNN's context encoder; "
                             f"--model {encoder} has none (set task.latent_weight=0)")
        emb = self.opts["embedding_size"] or int(model_args.get("hidden_size", 128))
        return SentenceLM(len(self.vocab), emb, encoder, model_args,
                          dropout=float(model_args.get("dropout", 0.0)))

    def _batch(self, rows: Sequence[tuple[list[int], list[int], int]]) -> Batch:
        v = self.vocab
        prev = pad_sequences([r[0] for r in rows], v.pad_id)
        tin = pad_sequences([[v.bos_id, *r[1]] for r in rows], v.pad_id)
        tout = pad_sequences([[*r[1], v.eos_id] for r in rows], v.pad_id)
        return {"tokens": tin.tokens, "lengths": tin.lengths, "targets": tout.tokens,
                "prev": prev.tokens, "prev_lengths": prev.lengths,
                "latent": torch.tensor([r[2] for r in rows], dtype=torch.long),
                "ntokens": int(tout.lengths.sum())}

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        data = self.encoded["train"]
        if len(data) < batch_size:
            raise ValueError(f"batch_size: {batch_size} is larger than the train set "
                             f"({len(data)} sentences)")
        order = torch.randperm(len(data), generator=self.epoch_generator(epoch)).tolist()
        return [self._batch([data[i] for i in order[k : k + batch_size]])
                for k in range(0, len(order) - batch_size + 1, batch_size)]

    def _nll(self, model: nn.Module, batch: Batch) -> Tensor:
        """The summed word log-loss of ``batch``."""
        return self._nll_and_latent(model, batch, latent=False)[0]

    def _nll_and_latent(self, model: nn.Module, batch: Batch, latent: bool = True
                        ) -> tuple[Tensor, Tensor | None]:
        """The summed word log-loss, and (``latent``, with a latent head) eq 12's logits."""
        # the softmax layer only where a target word is (half the padded batch, or less)
        tokens, lengths = batch["tokens"], batch["lengths"]
        valid = torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(
            tokens.device).unsqueeze(1)  # fmt: skip
        args = (tokens, batch["prev"], lengths, batch["prev_lengths"])
        head = None
        if latent and self.latent_labels:
            logits, head = model.forward_latent(*args, positions=valid)
        else:
            logits = model(*args, positions=valid)
        return F.cross_entropy(logits, batch["targets"][valid], reduction="sum"), head

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        # normalised by the global batch's token count (see Task.shard)
        nll, head = self._nll_and_latent(model, batch)
        words = nll * batch.get("world_size", 1) / batch["ntokens"]
        if head is None:
            return words
        weight = float(self.opts["latent_weight"])  # eq 13: alpha L_w + (1 - alpha) L_l
        labels = batch["latent"]
        if bool((labels >= 0).any()):
            latent = F.cross_entropy(head, labels, ignore_index=-100)
        else:  # no pair of this batch has a label: eq 13's L_l is 0 (kept in the graph)
            latent = head.sum() * 0.0
        return (1.0 - weight) * words + weight * latent

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        out = super().shard(batch, rank, world_size)
        out["world_size"] = world_size
        return out

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        data = self.encoded[split]
        nll = tokens = 0.0
        for idx in eval_chunks([len(r[1]) for r in data], self.opts["eval_batch_size"],
                               max_batches):
            b = self.to_device(self._batch([data[i] for i in idx]))
            nll += float(self._nll(model, b))
            tokens += b["ntokens"]
        loss = nll / max(tokens, 1.0)
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


# ---------------------------------------------------------------------------- dialog
def babi_files(path: str) -> dict[str, Path]:
    """The ``-trn``, ``-dev``, ``-tst`` files of a bAbI dialog task, from the ``-trn`` one."""
    trn = Path(path).expanduser()
    if "-trn" not in trn.name:
        raise ValueError(f"task.path: expected a bAbI '...-trn.txt' file, got {trn}")
    files = {s: trn.with_name(trn.name.replace("-trn", f"-{tag}"))
             for s, tag in zip(SPLITS, ("trn", "dev", "tst"), strict=True)}
    for split, file in files.items():
        if not file.is_file():
            raise ValueError(f"task.path: no {split} file {file}")
    return files


#: bAbI's wording of the responses that read the dialog's memory: the API call (the slots
#: given earlier), a proposal (the call's results, task 3), information (one result, task 4)
RESPONSE_KINDS = ((API_CALL_PREFIX, "api_call_accuracy"),
                  (PROPOSE_PREFIX, "proposal_accuracy"),
                  (INFO_PREFIX, "information_accuracy"))


def response_kind(response: str) -> str | None:
    """The per-kind accuracy metric that ``response`` counts towards (None: no kind)."""
    for start, metric in RESPONSE_KINDS:
        if response.startswith(start):
            return metric
    return None


@dataclass
class DialogExample:
    """One bot turn: the earlier utterances, the current user utterance, the response."""

    history: list[list[str]]
    context: list[str]
    response: str
    dialog: int


def knowledge_positions(dialog: Dialog) -> list[int]:
    """For each knowledge-base line of ``dialog``, how many turns precede it: as the dialog
    records it, else after the first ``api_call`` response (never, without one)."""
    if dialog.knowledge_turns is not None:
        if len(dialog.knowledge_turns) != len(dialog.knowledge):
            raise ValueError(f"knowledge_turns: expected one position per knowledge line "
                             f"({len(dialog.knowledge)}), got {len(dialog.knowledge_turns)}")
        return dialog.knowledge_turns
    call = next((i + 1 for i, (_, bot) in enumerate(dialog.turns)
                 if bot.startswith(API_CALL_PREFIX)), len(dialog.turns))
    return [call] * len(dialog.knowledge)


def dialog_examples(dialogs: Sequence[Dialog], max_history: int = 0) -> list[DialogExample]:
    """Every bot turn of ``dialogs`` as an example (see the module docstring)."""
    out = []
    for number, dialog in enumerate(dialogs):
        history: list[list[str]] = [["<start>"]]
        placed = knowledge_positions(dialog)
        for turn, (user, bot) in enumerate(dialog.turns):
            history += [whitespace_tokenize(line)
                        for line, at in zip(dialog.knowledge, placed, strict=True) if at == turn]
            context = whitespace_tokenize(user) or [SILENCE]
            kept = history if not max_history else [history[0], *history[1:][-max_history:]]
            out.append(DialogExample([list(u) for u in kept], context, bot, number))
            history += [context, whitespace_tokenize(bot)]
    return out


class CarnnDialogTask(Task):
    """``carnn-dialog``: response selection with a CARNN over the dialog history (4.1)."""

    name = "carnn-dialog"
    description = ("dialog response selection, CARNN over Position-Encoded utterances + eq 8 "
                   "(CARNN paper 4.1); synthetic bAbI-like dialogs or task.path=bAbI files")
    metric: ClassVar[str] = "accuracy"
    higher_is_better: ClassVar[bool] = True
    options = {
        "path": (str, ""),
        **_size_options(1000, 100, 100),
        "dialogs": (str, "api-calls"),
        "update_prob": (float, 0.5),
        "max_history": (int, 0),
        "eval_batch_size": (int, 64),
    }
    defaults = {"batch_size": 32, "lr": 1e-3, "clip_norm": 5.0}

    def __init__(
        self, options: dict[str, Any], seed: int,
        dialogs: dict[str, Sequence[Dialog]] | None = None,
    ) -> None:
        """``dialogs``: optional ``{split: [Dialog, ...]}`` used instead of generating them."""
        super().__init__(options, seed)
        self.given = dialogs

    def _dialogs(self) -> dict[str, list[Dialog]]:
        if self.given is not None:
            return {s: list(self.given.get(s, [])) for s in SPLITS}
        if self.opts["path"]:
            return {s: read_babi_dialog(f) for s, f in babi_files(self.opts["path"]).items()}
        sizes = _check_sizes(self.opts, allow_zero=False)
        if not 0.0 <= self.opts["update_prob"] <= 1.0:
            raise ValueError(f"task.update_prob: expected a probability, "
                             f"got {self.opts['update_prob']}")
        if self.opts["dialogs"] not in DIALOG_KINDS:
            raise ValueError(f"task.dialogs: expected one of {', '.join(DIALOG_KINDS)}, "
                             f"got {self.opts['dialogs']!r}")
        return dialog_splits(sizes, self.seed, self.opts["update_prob"], self.opts["dialogs"])

    def setup(self) -> None:
        if self.opts["max_history"] < 0:
            raise ValueError(f"task.max_history: expected an integer >= 0 (0: all), "
                             f"got {self.opts['max_history']}")
        self.dialogs = self._dialogs()
        check_splits(self.dialogs, "task")
        self.examples = {s: dialog_examples(d, self.opts["max_history"])
                         for s, d in self.dialogs.items()}
        self.responses = sorted({e.response for v in self.examples.values() for e in v})
        self.response_id = {r: i for i, r in enumerate(self.responses)}
        cand_tokens = [whitespace_tokenize(r) for r in self.responses]
        words = [u for e in self.examples["train"] for u in (*e.history, e.context)]
        self.vocab = Vocab.build([*words, *cand_tokens])
        cands = pad_sequences([self.vocab.encode(c) for c in cand_tokens], self.vocab.pad_id)
        self.candidates, self.candidate_lengths = cands.tokens, cands.lengths

    def data_summary(self) -> dict[str, Any]:
        return {
            **{f"{s} dialogs": len(d) for s, d in self.dialogs.items()},
            **{f"{s} responses": len(e) for s, e in self.examples.items()},
            "candidate responses": len(self.responses),
            "vocabulary": len(self.vocab),
        }

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        hidden = int(model_args.get("hidden_size", 128))
        args = dict(model_args)
        args.pop("hidden_size", None)
        return CARNNDialog(len(self.vocab), hidden, self.candidates, self.candidate_lengths,
                           encoder=encoder, encoder_args=args, pad_id=self.vocab.pad_id)

    def _batch(self, rows: Sequence[DialogExample]) -> Batch:
        v = self.vocab
        B = len(rows)
        M = max(len(r.history) for r in rows)
        J = max(len(u) for r in rows for u in r.history)
        history = torch.full((B, M, J), v.pad_id, dtype=torch.long)
        ulen = torch.ones(B, M, dtype=torch.long)  # padded utterances: length 1, all padding
        for b, r in enumerate(rows):
            for m, u in enumerate(r.history):
                history[b, m, : len(u)] = torch.tensor(v.encode(u))
                ulen[b, m] = len(u)
        context = pad_sequences([v.encode(r.context) for r in rows], v.pad_id)
        return {
            "history": history, "utterance_lengths": ulen,
            "history_lengths": torch.tensor([len(r.history) for r in rows]),
            "context": context.tokens, "context_lengths": context.lengths,
            "targets": torch.tensor([self.response_id[r.response] for r in rows]),
            "count": B,
        }

    def _scores(self, model: nn.Module, b: Batch) -> Tensor:
        return model(b["history"], b["utterance_lengths"], b["history_lengths"], b["context"],
                     b["context_lengths"])

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        data = self.examples["train"]
        groups = epoch_batches([len(e.history) for e in data], batch_size,
                               self.epoch_generator(epoch))
        return [self._batch([data[i] for i in g]) for g in groups]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        total = F.cross_entropy(self._scores(model, batch), batch["targets"], reduction="sum")
        return total * batch.get("world_size", 1) / batch["count"]

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        out = super().shard(batch, rank, world_size)
        out["world_size"] = world_size
        return out

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        data = self.examples[split]
        nll = correct = n = 0.0
        dialog_ok: dict[int, bool] = {}
        kinds: dict[str, list[int]] = {}  # metric -> [right, responses]
        for idx in eval_chunks([len(e.history) for e in data], self.opts["eval_batch_size"],
                               max_batches):
            rows = [data[i] for i in idx]
            b = self.to_device(self._batch(rows))
            scores = self._scores(model, b)
            nll += float(F.cross_entropy(scores, b["targets"], reduction="sum"))
            right = (scores.argmax(-1) == b["targets"]).tolist()
            correct += sum(right)
            n += len(rows)
            for r, ok in zip(rows, right):
                dialog_ok[r.dialog] = dialog_ok.get(r.dialog, True) and bool(ok)
                kind = response_kind(r.response)
                if kind is not None:
                    count = kinds.setdefault(kind, [0, 0])
                    count[0] += int(ok)
                    count[1] += 1
        return {
            "loss": nll / max(n, 1.0),
            "accuracy": correct / max(n, 1.0),
            "dialog_accuracy": sum(dialog_ok.values()) / max(len(dialog_ok), 1),
            **{kind: right / total for kind, (right, total) in sorted(kinds.items())},
        }
