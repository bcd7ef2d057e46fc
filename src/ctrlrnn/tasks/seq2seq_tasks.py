"""Sequence-to-sequence tasks on the attentional encoder-decoder of :mod:`ctrlrnn.models.seq2seq`.

* ``copy`` and ``addition`` of variable-length decimal numbers (QRNN paper appendix);
* ``sort`` of integer sequences and ``tree-traversal`` (inorder + preorder -> postorder) from
  METAGROSS paper section 3.1.

Metrics: teacher-forced loss and perplexity and token accuracy, and exact match of greedily
decoded outputs (beam search with ``task.beam > 1``, ranked as in the QRNN paper eq 9).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.batching import pad_sequences
from ctrlrnn.data.synthetic.arithmetic import addition_splits, copy_splits
from ctrlrnn.data.synthetic.common import Seq2SeqExample
from ctrlrnn.data.synthetic.sort import sort_splits
from ctrlrnn.data.synthetic.tree_traversal import tree_traversal_splits
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.seq2seq import Seq2Seq
from ctrlrnn.tasks.base import Batch, MemoryNeed, Task

#: bytes each token of an example holds in memory at least: a slot in its tuple of symbols and
#: one in its list of ids
_BYTES_PER_TOKEN = 16
#: bytes of one attention score (float32)
_BYTES_PER_SCORE = 4


class LengthScore(NamedTuple):
    """What :meth:`Seq2SeqTask.exact_match_by_length` counts at one target length."""

    examples: int
    #: outputs exactly their targets
    exact: int
    #: wrong outputs that hold exactly their targets' tokens in another order
    reordered: int


class Seq2SeqTask(Task):
    """Common machinery: vocabulary, padding, batching, loss and metrics."""

    metric: ClassVar[str] = "exact_match"
    higher_is_better: ClassVar[bool] = True
    common_options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "train_size": (int, 10_000),
        "valid_size": (int, 1_000),
        "test_size": (int, 1_000),
        "embedding_size": (int, 64),
        "decoder": (str, ""),
        "decoder_layers": (int, 0),
        "attention": (str, "dot"),
        "beam": (int, 1),
        "alpha": (float, 0.6),
        "eval_batch_size": (int, 256),
    }

    @abstractmethod
    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        """The train/valid/test examples, generated from ``self.seed``."""

    def longest(self) -> tuple[str, int, int] | None:
        """``(option, source length, target length)``: the longest example the options allow,
        where lengths are drawn uniformly up to it, and the option that sets it; None where
        the longest possible example says little about the usual one."""
        return None

    def memory_needs(self, batch_size: int) -> list[MemoryNeed]:
        """The examples of the three splits (lengths uniform up to :meth:`longest`: half of
        it on average), and the attention scores of a training batch, whose width is about
        the longest example."""
        longest = self.longest()
        if longest is None:
            return []
        option, source, target = longest
        examples = sum(int(self.opts[f"{split}_size"]) for split in ("train", "valid", "test"))
        data = examples * (source + target + 1) // 2 * _BYTES_PER_TOKEN
        scores = batch_size * source * (target + 1) * _BYTES_PER_SCORE
        return [
            MemoryNeed(option, scores, f"the attention scores of a training batch of "
                       f"{batch_size} sequences up to {source:,} tokens long", True,
                       ("batch_size",)),
            MemoryNeed(option, data, f"{examples:,} examples up to {source:,} tokens long",
                       False, ("task.train_size",)),
        ]

    def setup(self) -> None:
        sizes = {"train": self.opts["train_size"], "valid": self.opts["valid_size"],
                 "test": self.opts["test_size"]}
        for key, value in sizes.items():
            if value < 1:
                raise ValueError(f"task.{key}_size: expected a positive integer, got {value}")
        self.splits = self.make_splits(sizes)
        tokens = [t for ex in self.splits["train"] for t in (*ex.source, *ex.target)]
        self.vocab = Vocab.build([tokens])
        self.encoded = {name: self._encode(exs) for name, exs in self.splits.items()}

    def _encode(self, examples: Sequence[Seq2SeqExample]) -> list[tuple[list[int], list[int]]]:
        return [(self.vocab.encode(ex.source), self.vocab.encode(ex.target)) for ex in examples]

    def data_summary(self) -> dict[str, Any]:
        return {
            **{f"{k} examples": len(v) for k, v in self.splits.items()},
            "vocabulary": len(self.vocab),
            "mean source length": sum(len(e.source) for e in self.splits["train"])
            / len(self.splits["train"]),
        }

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        decoder = self.opts["decoder"] or ("qrnn" if encoder == "qrnn" else "lstm")
        return Seq2Seq(
            len(self.vocab), len(self.vocab), encoder=encoder, encoder_args=model_args,
            decoder=decoder, embedding_size=self.opts["embedding_size"],
            decoder_layers=self.opts["decoder_layers"] or None,
            attention=self.opts["attention"],
            dropout=float(model_args.get("dropout", 0.0)),
            pad_id=self.vocab.pad_id, bos_id=self.vocab.bos_id, eos_id=self.vocab.eos_id,
        )

    def _batch(self, pairs: Sequence[tuple[list[int], list[int]]]) -> Batch:
        v = self.vocab
        src = pad_sequences([s for s, _ in pairs], v.pad_id)
        tin = pad_sequences([[v.bos_id, *t] for _, t in pairs], v.pad_id)
        tout = pad_sequences([[*t, v.eos_id] for _, t in pairs], v.pad_id)
        return {"src": src.tokens, "src_lengths": src.lengths, "tgt_in": tin.tokens,
                "tgt_out": tout.tokens, "ntokens": int(tout.lengths.sum())}

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        data = self.encoded["train"]
        order = torch.randperm(len(data), generator=self.epoch_generator(epoch)).tolist()
        return [self._batch([data[i] for i in order[k : k + batch_size]])
                for k in range(0, len(order) - batch_size + 1, batch_size)]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        # the output layer at the target words only, not over the padding
        valid = batch["tgt_out"] != self.vocab.pad_id
        logits = model(batch["src"], batch["src_lengths"], batch["tgt_in"], positions=valid)
        total = F.cross_entropy(logits, batch["tgt_out"][valid], reduction="sum")
        # normalised by the global batch's token count, so the average over processes equals
        # the single-process mean (see Task.shard)
        return total * batch.get("world_size", 1) / batch["ntokens"]

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0,
                 outputs: dict[int, list[int]] | None = None) -> dict[str, float]:
        """The split's loss, perplexity, token accuracy and exact match. With ``outputs``,
        each decoded output is also stored there under its example's index, so
        :meth:`exact_match_by_length` can count them without decoding again."""
        data = self.encoded[split]
        size = self.opts["eval_batch_size"]
        nll = tokens = correct_tokens = exact = n = 0.0
        batches = range(0, len(data), size)
        for count, k in enumerate(batches):
            if max_batches and count >= max_batches:
                break
            pairs = data[k : k + size]
            b = self.to_device(self._batch(pairs))
            logits = model(b["src"], b["src_lengths"], b["tgt_in"])
            mask = b["tgt_out"] != self.vocab.pad_id
            nll += float(F.cross_entropy(logits.flatten(0, 1), b["tgt_out"].flatten(),
                                         ignore_index=self.vocab.pad_id, reduction="sum"))
            tokens += float(mask.sum())
            correct_tokens += float(((logits.argmax(-1) == b["tgt_out"]) & mask).sum())
            hyps = self._decode(model, b, pairs)
            if outputs is not None:
                outputs.update((k + j, h) for j, h in enumerate(hyps))
            exact += sum(self._matches(split, k + j, h) for j, h in enumerate(hyps))
            n += len(pairs)
        loss = nll / max(tokens, 1.0)
        return {
            "loss": loss,
            "perplexity": math.exp(min(loss, 50.0)),
            "token_accuracy": correct_tokens / max(tokens, 1.0),
            "exact_match": exact / max(n, 1.0),
        }

    def _decode(self, model: nn.Module, batch: Batch,
                pairs: Sequence[tuple[list[int], list[int]]]) -> list[list[int]]:
        """The outputs of ``batch`` as ids: greedy, or beam search with ``task.beam > 1``, up
        to 5 tokens past the longest target."""
        max_len = max(len(t) for _, t in pairs) + 5
        if self.opts["beam"] > 1:
            return model.beam_search(batch["src"], batch["src_lengths"], beam=self.opts["beam"],
                                     alpha=self.opts["alpha"], max_len=max_len)
        return model.greedy(batch["src"], batch["src_lengths"], max_len)

    def _matches(self, split: str, i: int, hyp: list[int]) -> bool:
        """Whether ``hyp`` is exactly the target of example ``i`` of ``split``, as
        :meth:`evaluate` counts it."""
        return hyp == self.encoded[split][i][1]

    def exact_match_by_length(self, model: nn.Module, split: str,
                              outputs: dict[int, list[int]] | None = None
                              ) -> dict[int, LengthScore]:
        """The :class:`LengthScore` of each target length (in tokens) on ``split``: where the
        exact match is lost as outputs grow longer. ``outputs`` are the decoded outputs
        :meth:`evaluate` stored for the whole split; without them the split is evaluated
        here. The caller puts ``model`` in eval mode, as for :meth:`evaluate`."""
        if split not in self.encoded:
            raise ValueError(f"split: expected one of {sorted(self.encoded)}, got {split!r}")
        data = self.encoded[split]
        if outputs is None:
            outputs = {}
            with torch.no_grad():
                self.evaluate(model, split, 0, outputs=outputs)
        if sorted(outputs) != list(range(len(data))):
            raise ValueError(f"outputs: expected one output for each of the {len(data)} "
                             f"examples of {split!r}, got {len(outputs)}")
        counts: dict[int, list[int]] = {}
        for i, hyp in outputs.items():
            target = data[i][1]
            exact = self._matches(split, i, hyp)
            row = counts.setdefault(len(target), [0, 0, 0])
            row[0] += 1
            row[1] += int(exact)
            row[2] += int(not exact and sorted(hyp) == sorted(target))
        return {length: LengthScore(*row) for length, row in sorted(counts.items())}

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        out = super().shard(batch, rank, world_size)
        out["world_size"] = world_size
        return out


class CopyTask(Seq2SeqTask):
    name = "copy"
    description = "copy a variable-length decimal number (QRNN paper appendix)"
    options = {**Seq2SeqTask.common_options, "digits": (int, 5)}
    defaults = {"batch_size": 64, "lr": 3e-3}

    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        return copy_splits(self.opts["digits"], sizes, self.seed)

    def longest(self) -> tuple[str, int, int] | None:
        return "digits", self.opts["digits"], self.opts["digits"]


class AdditionTask(Seq2SeqTask):
    name = "addition"
    description = "add two variable-length decimal numbers, e.g. 73952+9462 -> 83414 (QRNN paper)"
    options = {**Seq2SeqTask.common_options, "digits": (int, 5)}
    defaults = {"batch_size": 64, "lr": 3e-3}

    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        return addition_splits(self.opts["digits"], sizes, self.seed)

    def longest(self) -> tuple[str, int, int] | None:
        digits = self.opts["digits"]
        return "digits", 2 * digits + 1, digits + 1


class SortTask(Seq2SeqTask):
    name = "sort"
    description = "sort a sequence of integers (METAGROSS paper 3.1)"
    options = {**Seq2SeqTask.common_options, "max_length": (int, 10), "max_value": (int, 100)}
    defaults = {"batch_size": 64, "lr": 3e-3}

    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        return sort_splits(self.opts["max_length"], sizes, self.seed,
                           max_value=self.opts["max_value"])

    def longest(self) -> tuple[str, int, int] | None:
        return "max_length", self.opts["max_length"], self.opts["max_length"]


class TreeTraversalTask(Seq2SeqTask):
    name = "tree-traversal"
    description = "inorder + preorder -> postorder of a random tree (METAGROSS paper 3.1)"
    options = {**Seq2SeqTask.common_options, "max_depth": (int, 5), "p": (float, 0.7)}
    defaults = {"batch_size": 64, "lr": 3e-3}

    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        return tree_traversal_splits(self.opts["max_depth"], sizes, self.seed, p=self.opts["p"])
