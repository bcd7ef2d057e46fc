r"""Language modelling on :class:`~ctrlrnn.models.language_model.LanguageModel` (QRNN paper 3.2).

* ``ptb-lm`` — Penn Treebank, Mikolov's split, word level (10k vocabulary);
* ``ptb-char`` — the same text as characters (``_`` between words); metric bits per character;
* ``brown-lm`` — the Brown corpus, word level; words outside the ``task.max_vocab`` (10,000)
  most frequent training words become ``<unk>``.

Each split is one continuous stream: the sentences in order, each followed by ``<eos>``. A
training epoch cuts the stream into ``batch_size`` contiguous rows (``batchify_stream``) after
skipping ``offset`` tokens drawn from the epoch's generator (``0 <= offset < bptt``, so window
boundaries move from epoch to epoch; ``task.random_offset=false`` turns this off), and yields
windows of ``task.bptt`` steps in order. The encoder state is carried from each window to the
next (detached: truncated BPTT) and reset at the start of every epoch, and whenever a window
does not follow the previous one (a resumed run starts from a zero state). Evaluation runs the
same way over ``task.eval_batch_size`` rows, reporting loss (nats per token), perplexity
(``exp`` of the loss) and, for ``ptb-char``, bits per character.

The defaults (batch 20, BPTT 35, Adam at 2e-3, gradient norm clipped to 0.25, validation on
40 windows every 100 steps) are meant for a short CPU run of the two-layer 256-unit models::

    ctrlrnn train --task ptb-lm --model qrnn --max-steps 300 model.hidden_size=256 \
        model.num_layers=2
    ctrlrnn train --task ptb-lm --model lstm --max-steps 300 model.hidden_size=256 \
        model.num_layers=2

QRNN paper 3.2's full setting is ``model.hidden_size=640 model.num_layers=2 model.zoneout=0.1
task.embedding_dropout=0.5 model.dropout=0.5 task.output_dropout=0.5 optimizer=sgd lr=1
lr_decay=0.95 lr_decay_start=6 epochs=72 weight_decay=2e-4 clip_norm=10 task.bptt=105``
(the paper does not tie the embeddings: add ``task.tie_weights=false`` for its model).

``task.source=DIR`` reads ``DIR/{train,valid,test}.txt`` (one whitespace-tokenised sentence per
line, the prepared format of ``ptb`` and ``brown``) instead of the prepared data set.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten, treespec_dumps, treespec_loads

from ctrlrnn.data.batching import batchify_stream
from ctrlrnn.data.sources.brown import load_brown
from ctrlrnn.data.sources.common import SPLITS, read_lines
from ctrlrnn.data.sources.ptb import load_ptb
from ctrlrnn.data.tokenize import char_tokenize
from ctrlrnn.data.vocab import EOS, PAD, UNK, Vocab
from ctrlrnn.models.language_model import LanguageModel, detach_state, perplexity
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import check_splits, require_files, source_dir

#: specials of an LM vocabulary: no <bos>; <pad> is never predicted (no padding in a stream)
LM_SPECIALS = (PAD, UNK, EOS)


class LanguageModelTask(Task):
    """Word or character language modelling over a continuous stream (module docstring)."""

    metric: ClassVar[str] = "perplexity"
    higher_is_better: ClassVar[bool] = False
    level: ClassVar[str] = "word"
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "source": (str, ""),
        "bptt": (int, 35),
        "embedding_size": (int, 0),
        "tie_weights": (bool, True),
        "embedding_dropout": (float, 0.1),
        "output_dropout": (float, 0.1),
        "max_vocab": (int, 0),
        "random_offset": (bool, True),
        "eval_batch_size": (int, 10),
    }
    defaults: ClassVar[dict[str, Any]] = {
        "batch_size": 20, "lr": 2e-3, "epochs": 1, "clip_norm": 0.25, "eval_every": 100,
        "eval_batches": 40, "log_every": 10, "checkpoint_every": 100,
    }
    model_defaults: ClassVar[dict[str, Any]] = {"hidden_size": 256, "num_layers": 2}

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        super().__init__(options, seed)
        self._state: Any = None
        self._next: tuple[int, int] | None = None  # (epoch, window) the carried state fits

    @abstractmethod
    def load_prepared(self) -> dict[str, list[list[str]]]:
        """Sentences (token lists) per split of the prepared data set."""

    def load(self) -> dict[str, list[list[str]]]:
        directory = source_dir(self.opts["source"])
        if directory is None:
            return self.load_prepared()
        require_files(directory, [f"{s}.txt" for s in SPLITS])
        data = {s: read_lines(directory / f"{s}.txt") for s in SPLITS}
        if self.level == "char":
            return {s: [char_tokenize(" ".join(x)) for x in v] for s, v in data.items()}
        return data

    def setup(self) -> None:
        o = self.opts
        for key in ("bptt", "eval_batch_size"):
            if o[key] < 1:
                raise ValueError(f"task.{key}: expected a positive integer, got {o[key]}")
        if o["max_vocab"] < 0 or 0 < o["max_vocab"] < len(LM_SPECIALS) + 1:
            raise ValueError(f"task.max_vocab: expected 0 (no limit) or > {len(LM_SPECIALS)}, "
                             f"got {o['max_vocab']}")
        sentences = self.load()
        check_splits(sentences, f"task {self.name}")
        # PTB writes its unknown word as "<unk>" already: it maps onto the UNK special
        self.vocab = Vocab.build(sentences["train"], max_size=o["max_vocab"] or None,
                                 specials=LM_SPECIALS)
        eos = self.vocab.eos_id
        self.streams = {
            s: torch.tensor([i for sent in v for i in (*self.vocab.encode(sent), eos)],
                            dtype=torch.long)
            for s, v in sentences.items()
        }

    def data_summary(self) -> dict[str, Any]:
        return {**{f"{s} tokens": int(v.numel()) for s, v in self.streams.items()},
                "vocabulary": len(self.vocab), "level": self.level, "bptt": self.opts["bptt"]}

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        o = self.opts
        return LanguageModel(len(self.vocab), encoder=encoder, encoder_args=model_args,
                             embedding_size=o["embedding_size"], tie_weights=o["tie_weights"],
                             embedding_dropout=o["embedding_dropout"],
                             output_dropout=o["output_dropout"])

    def _windows(self, stream: Tensor, rows: int, offset: int = 0) -> list[tuple[Tensor, Tensor]]:
        data = batchify_stream(stream[offset:], rows)
        if data.shape[1] < 2:
            raise ValueError(f"batch_size: {rows} rows leave fewer than 2 tokens per row")
        bptt = self.opts["bptt"]
        return [(data[:, k : min(k + bptt, data.shape[1] - 1)],
                 data[:, k + 1 : min(k + bptt, data.shape[1] - 1) + 1])
                for k in range(0, data.shape[1] - 1, bptt)]

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        offset = 0
        if self.opts["random_offset"]:
            offset = int(torch.randint(0, self.opts["bptt"], (1,),
                                       generator=self.epoch_generator(epoch)))
        windows = self._windows(self.streams["train"], batch_size, offset)
        return [{"input": x, "target": y, "epoch": epoch, "window": i,
                 "ntokens": int(y.numel())} for i, (x, y) in enumerate(windows)]

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """The carried BPTT state, so that a resumed run continues the same stream exactly."""
        nxt = list(self._next) if self._next else None
        if self._state is None:
            return {"next": nxt, "spec": None}, {}
        leaves, spec = tree_flatten(self._state)
        tensors = {f"s{i}": t for i, t in enumerate(leaves)}
        return {"next": nxt, "spec": treespec_dumps(spec)}, tensors

    def restore_state(self, meta: dict[str, Any], tensors: dict[str, Tensor]) -> None:
        if meta.get("spec") is None:
            self._state = None
        else:
            leaves = [self.to_device(tensors[f"s{i}"]) for i in range(len(tensors))]
            self._state = tree_unflatten(leaves, treespec_loads(meta["spec"]))
        self._next = tuple(meta["next"]) if meta.get("next") else None

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        here = (batch["epoch"], batch["window"])
        state = self._state if self._next == here else None
        logits, state = model(batch["input"], state)
        self._state = detach_state(state)
        self._next = (here[0], here[1] + 1)
        total = F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(),
                                reduction="sum")
        # normalised by the global batch's token count (see Task.shard)
        return total * batch.get("world_size", 1) / batch["ntokens"]

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        out = super().shard(batch, rank, world_size)
        out["world_size"] = world_size
        return out

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        nll, count, state = 0.0, 0, None
        for k, (x, y) in enumerate(self._windows(self.streams[split],
                                                 self.opts["eval_batch_size"])):
            if max_batches and k >= max_batches:
                break
            x, y = self.to_device((x, y))
            logits, state = model(x, state)
            state = detach_state(state)
            nll += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"))
            count += y.numel()
        loss = nll / count
        out = {"loss": loss, "perplexity": perplexity(nll, count)}
        if self.level == "char":
            out["bpc"] = loss / math.log(2.0)
        return out


class PtbLmTask(LanguageModelTask):
    name = "ptb-lm"
    description = "Penn Treebank word-level language model, tied embeddings (QRNN paper 3.2)"

    def load_prepared(self) -> dict[str, list[list[str]]]:
        return load_ptb(level="word")


class PtbCharTask(LanguageModelTask):
    name = "ptb-char"
    description = "Penn Treebank character-level language model (bits per character)"
    metric: ClassVar[str] = "bpc"
    level: ClassVar[str] = "char"
    options: ClassVar[dict[str, tuple[Any, Any]]] = {**LanguageModelTask.options,
                                                     "bptt": (int, 100)}
    defaults: ClassVar[dict[str, Any]] = {**LanguageModelTask.defaults, "batch_size": 32}

    def load_prepared(self) -> dict[str, list[list[str]]]:
        return load_ptb(level="char")


class BrownLmTask(LanguageModelTask):
    name = "brown-lm"
    description = "Brown corpus word-level language model (10k-word vocabulary by default)"
    options: ClassVar[dict[str, tuple[Any, Any]]] = {**LanguageModelTask.options,
                                                     "max_vocab": (int, 10_000)}

    def load_prepared(self) -> dict[str, list[list[str]]]:
        return load_brown()
