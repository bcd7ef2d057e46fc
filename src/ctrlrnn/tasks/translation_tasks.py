"""Translation tasks on the ``verses-en-es`` pairs: BLEU with beam search, train time per epoch.

* ``translate-char`` — character-level translation with the QRNN encoder-decoder of the QRNN paper
  section 3.3 / table 3: any encoder by ``--model``; the decoder is the QRNN decoder of eq 7-8
  when the encoder is ``qrnn``, else the attentional LSTM decoder (``task.decoder=`` overrides;
  ``task.decoder_init=layers`` starts its layer l from encoder layer l's final state, as the
  QRNN decoder's eq 7 pairs them, the default ``top`` every layer from the encoder's top one);
  a unified character vocabulary for both languages; training pairs with a side longer than
  ``task.max_length`` (300) characters dropped; source fed reversed (``task.reverse_source``);
  beam 8 with length normalisation alpha 0.6 (the appendix's eq 9). The paper trains for 10
  epochs on batches of 16 with Adam at 1e-3 and clips gradients to 5 (the task's defaults).
  Its first encoder layer uses filter width 6 and the others 2, and its encoder convolutions
  are not masked: ``--model qrnn 'model.window=[6, 2]' model.causal=false`` for two layers (the
  experiment ``translation-char-qrnn`` sets them). The QRNN decoder's convolutions are masked,
  width 2, and its layer l reads encoder layer l's final state (eq 7), so it has the
  encoder's depth.
* ``translate-word`` — word-level translation with ``task.arch=``

  - ``rnn``: the attentional encoder-decoder of :mod:`ctrlrnn.models.seq2seq` with any encoder;
  - ``transformer``: the Transformer of :mod:`ctrlrnn.models.transformer` whose feed-forward
    blocks are ``task.ffn=relu`` or ``metagross`` (METAGROSS paper 3.4; the default picks
    METAGROSS when ``--model metagross``, whose ``model.depth`` / ``model.depth_gate`` then set
    the unit; else ``task.ffn_depth``). ``model.hidden_size``, ``model.num_layers`` and
    ``model.dropout`` set the width, the layers per stack and the dropout; ``--model`` chooses
    nothing else;
  - ``cas``: the 2-layer attentional LSTM seq2seq of the CAS-LSTM paper 4.4
    (:mod:`ctrlrnn.models.attn_lstm_seq2seq`) — ``--model caslstm model.num_layers=2`` gives
    CAS-LSTM encoder and decoder, ``--model lstm model.num_layers=2`` the paper's baseline;
    the paper decodes with beam 10.

Data: the prepared ``verses-en-es`` source (``ctrlrnn data prepare verses-en-es``), or
``task.source=DIR`` with ``{train,valid,test}.tsv`` files in the same
``KEY<TAB>english<TAB>spanish`` format, or pairs given to the constructor (tests).
``task.direction`` is ``en-es`` or ``es-en``. The papers' IWSLT files:
``task.iwslt=DIR`` with ``task.pair`` (``de-en``: German source, English target),
``task.valid_set`` and ``task.test_set`` (``IWSLT16.TED.tst2013``, or ``tst2012`` for the
Stanford En-Vi files; :func:`ctrlrnn.tasks.paper_files.parallel_splits`); there
``task.direction`` is not read.

Metrics: teacher-forced ``loss`` / ``perplexity`` / ``token_accuracy``; ``bleu`` (sacreBLEU,
corpus level, 13a tokenisation; character level: the characters joined, ``_`` back to spaces,
which is the original text; word level: the task's words and punctuation marks joined by
spaces, so it is BLEU on tokenised text (as in the CAS-LSTM paper's fairseq set-up, Moses
tokens; the METAGROSS paper does not say), and 13a leaves those tokens as they are) and
``exact_match`` of the beam-search translations (``task.beam=1``: greedy); ``epoch_seconds``,
the training wall time per epoch (mean time of a training step, measured between consecutive
training steps, times the steps of an epoch — the "train time" column of the QRNN paper
table 3), once steps have run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.batching import bucket_batches
from ctrlrnn.data.sources.common import SPLITS
from ctrlrnn.data.sources.verses import load_verses, read_pairs
from ctrlrnn.data.synthetic.common import Seq2SeqExample
from ctrlrnn.data.tokenize import char_tokenize, word_tokenize
from ctrlrnn.data.vocab import Vocab
from ctrlrnn.models.attn_lstm_seq2seq import DECODER_CELLS, AttnLSTMSeq2Seq
from ctrlrnn.models.seq2seq import DECODER_INITS, DECODERS, Seq2Seq
from ctrlrnn.models.transformer import TransformerSeq2Seq
from ctrlrnn.tasks.base import Batch
from ctrlrnn.tasks.common import require_files, source_dir
from ctrlrnn.tasks.seq2seq_tasks import Seq2SeqTask

BLEU_EXTRA = "pip install 'ctrlrnn[bleu]'  (or: pip install sacrebleu)"
ARCHS = ("rnn", "transformer", "cas")
DIRECTIONS = ("en-es", "es-en")


def _sacrebleu() -> Any:
    try:
        import sacrebleu
    except ImportError as exc:
        raise ImportError(
            f"BLEU needs sacrebleu, which is in ctrlrnn's 'bleu' extra: {BLEU_EXTRA}"
        ) from exc
    return sacrebleu


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of ``hypotheses`` against one reference each (sacreBLEU, 13a).

    Word-level text arrives tokenised (punctuation split off), which sacreBLEU would flag
    with a warning at every evaluation; ``force=True`` silences only that warning and leaves
    the score as it is.
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses: expected one per reference ({len(references)}), got {len(hypotheses)}"
        )
    if not hypotheses:
        return 0.0
    sacrebleu = _sacrebleu()
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], force=True).score)


class StepClock:
    """Training wall time from the intervals between consecutive training steps.

    :meth:`tick` is called at the start of every training step; the interval since the
    previous tick is one whole step (forward, backward, optimizer). :meth:`pause` (at the
    start of an evaluation) closes the running step, and the next tick starts a new interval,
    so evaluation time is never counted.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.steps = 0
        self._last: float | None = None

    def tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.seconds += now - self._last
            self.steps += 1
        self._last = now

    def pause(self) -> None:
        self.tick()
        self._last = None

    def per_step(self) -> float | None:
        return self.seconds / self.steps if self.steps else None


class TranslationTask(Seq2SeqTask):
    """Shared machinery of the translation tasks (see the module docstring)."""

    metric: ClassVar[str] = "bleu"
    higher_is_better: ClassVar[bool] = True
    level: ClassVar[str]
    base_options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "source": (str, ""),
        "direction": (str, "en-es"),
        "iwslt": (str, ""),
        "pair": (str, "de-en"),
        "valid_set": (str, "IWSLT16.TED.tst2013"),
        "test_set": (str, "IWSLT16.TED.tst2014"),
        "train_size": (int, 0),
        "valid_size": (int, 0),
        "test_size": (int, 0),
        "min_count": (int, 1),
        "vocab_size": (int, 0),
        "embedding_size": (int, 64),
        "decoder": (str, ""),
        "decoder_init": (str, "top"),
        "beam": (int, 8),
        "alpha": (float, 0.6),
        "eval_batch_size": (int, 64),
    }

    def __init__(
        self,
        options: dict[str, Any],
        seed: int,
        pairs: dict[str, Sequence[tuple[str, str]]] | None = None,
    ) -> None:
        """``pairs``: optional ``{split: [(english, spanish), ...]}`` used instead of files."""
        super().__init__(options, seed)
        self.given_pairs = pairs
        self.clock = StepClock()
        self.batches_per_epoch = 0

    # ------------------------------------------------------------------ data
    def tokenize(self, text: str) -> list[str]:
        return word_tokenize(text) if self.level == "word" else char_tokenize(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        if self.level == "word":
            return " ".join(tokens)
        return "".join(tokens).replace("_", " ")

    def _raw_pairs(self) -> dict[str, list[tuple[list[str], list[str]]]]:
        """``(english tokens, spanish tokens)`` per split."""
        if self.given_pairs is not None:
            missing = [s for s in SPLITS if s not in self.given_pairs]
            if missing:
                raise ValueError(f"pairs: expected the splits {SPLITS}, missing {missing}")
            return {s: [(self.tokenize(en), self.tokenize(es)) for en, es in self.given_pairs[s]]
                    for s in SPLITS}
        if self.opts["iwslt"]:
            if self.opts["source"]:
                raise ValueError("task.iwslt: give task.source or task.iwslt, not both")
            from ctrlrnn.tasks.paper_files import parallel_splits

            pairs = parallel_splits(self.opts["iwslt"], self.opts["pair"],
                                    self.opts["valid_set"], self.opts["test_set"])
            return {s: [(self.tokenize(a), self.tokenize(b)) for a, b in rows]
                    for s, rows in pairs.items()}
        root = source_dir(self.opts["source"])
        if root is not None:
            require_files(root, [f"{s}.tsv" for s in SPLITS])
            return {s: [(self.tokenize(en), self.tokenize(es))
                        for _, en, es in read_pairs(root / f"{s}.tsv")] for s in SPLITS}
        return load_verses(level=self.level)

    def make_splits(self, sizes: dict[str, int]) -> dict[str, list[Seq2SeqExample]]:
        if self.opts["direction"] not in DIRECTIONS:
            raise ValueError(f"task.direction: expected one of {DIRECTIONS}, "
                             f"got {self.opts['direction']!r}")
        swap = self.opts["direction"] == "es-en" and not self.opts["iwslt"]
        max_len = self.opts["max_length"]
        splits: dict[str, list[Seq2SeqExample]] = {}
        for split, rows in self._raw_pairs().items():
            examples = [Seq2SeqExample(tuple(b if swap else a), tuple(a if swap else b))
                        for a, b in rows if a and b]
            if split == "train" and max_len > 0:
                examples = [e for e in examples
                            if len(e.source) <= max_len and len(e.target) <= max_len]
            if sizes[split] > 0:
                examples = examples[: sizes[split]]
            if not examples:
                raise ValueError(f"task: the {split} split is empty (after task.max_length)")
            splits[split] = examples
        return splits

    def setup(self) -> None:
        _sacrebleu()  # fail before training, not at the first evaluation
        for key in ("train_size", "valid_size", "test_size", "vocab_size"):
            if self.opts[key] < 0:
                raise ValueError(f"task.{key}: expected an integer >= 0 (0: all), "
                                 f"got {self.opts[key]}")
        for key in ("beam", "eval_batch_size", "min_count", "embedding_size"):
            if self.opts[key] < 1:
                raise ValueError(f"task.{key}: expected a positive integer, got {self.opts[key]}")
        sizes = {s: self.opts[f"{s}_size"] for s in SPLITS}
        self.splits = self.make_splits(sizes)
        train = self.splits["train"]
        limit = self.opts["vocab_size"] or None
        if self.level == "char":  # one unified vocabulary (QRNN paper 3.3)
            self.src_vocab = Vocab.build([t for e in train for t in (e.source, e.target)],
                                         self.opts["min_count"], limit)
            self.vocab = self.src_vocab
        else:
            self.src_vocab = Vocab.build([e.source for e in train], self.opts["min_count"], limit)
            self.vocab = Vocab.build([e.target for e in train], self.opts["min_count"], limit)
        self.encoded = {name: self._encode(exs) for name, exs in self.splits.items()}

    def _encode(self, examples: Sequence[Seq2SeqExample]) -> list[tuple[list[int], list[int]]]:
        rev = self.opts["reverse_source"]
        return [(self.src_vocab.encode(e.source[::-1] if rev else e.source),
                 self.vocab.encode(e.target)) for e in examples]

    def data_summary(self) -> dict[str, Any]:
        return {
            **super().data_summary(),
            "level": self.level,
            "direction": self.opts["direction"],
            "source vocabulary": len(self.src_vocab),
            "target vocabulary": len(self.vocab),
        }

    # ------------------------------------------------------------------ model
    def _decoder_for(self, encoder: str) -> str:
        decoder = self.opts["decoder"] or ("qrnn" if encoder == "qrnn" else "lstm")
        if decoder not in DECODERS:
            raise ValueError(f"task.decoder: expected one of {DECODERS}, got {decoder!r}")
        return decoder

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        init = self.opts["decoder_init"]
        if init not in DECODER_INITS:
            raise ValueError(f"task.decoder_init: expected one of {DECODER_INITS}, got {init!r}")
        try:
            return Seq2Seq(
                len(self.src_vocab), len(self.vocab), encoder=encoder, encoder_args=model_args,
                decoder=self._decoder_for(encoder), embedding_size=self.opts["embedding_size"],
                dropout=float(model_args.get("dropout", 0.0)), decoder_init=init,
                pad_id=self.vocab.pad_id, bos_id=self.vocab.bos_id, eos_id=self.vocab.eos_id,
            )
        except ValueError as exc:  # the model's refusal, named as the option that asked it
            if str(exc).startswith("decoder_init:"):
                raise ValueError(f"task.{exc}") from exc
            raise

    # ------------------------------------------------------------------ training
    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        """Length-bucketed batches (full ones only), shuffled by (seed, epoch)."""
        data = self.encoded["train"]
        seed = self.seed * 1_000_003 + epoch
        groups = bucket_batches([len(s) for s, _ in data], batch_size, shuffle=True, seed=seed,
                                drop_last=True)
        batches = [self._batch([data[i] for i in g]) for g in groups]
        self.batches_per_epoch = len(batches)
        return batches

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        if model.training:
            self.clock.tick()
        return super().loss(model, batch)

    # ------------------------------------------------------------------ evaluation
    def translate(self, model: nn.Module, batch: Batch) -> list[list[int]]:
        """Beam-search translations (greedy at ``task.beam=1``) of a batch, as target ids."""
        max_len = 2 * int(batch["src_lengths"].max()) + 10
        if self.opts["beam"] > 1:
            return model.beam_search(batch["src"], batch["src_lengths"], beam=self.opts["beam"],
                                     alpha=self.opts["alpha"], max_len=max_len)
        return model.greedy(batch["src"], batch["src_lengths"], max_len)

    def _matches(self, split: str, i: int, hyp: list[int]) -> bool:
        """Whether the detokenised translation ``hyp`` equals example ``i``'s reference text,
        as :meth:`evaluate` counts an exact match."""
        return self.detokenize(self.vocab.decode(hyp)) == self.detokenize(
            self.splits[split][i].target)

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0,
                 outputs: dict[int, list[int]] | None = None) -> dict[str, float]:
        self.clock.pause()
        examples = self.splits[split]
        data = self.encoded[split]
        order = sorted(range(len(data)), key=lambda i: len(data[i][0]))  # less padding
        size = self.opts["eval_batch_size"]
        nll = tokens = correct = exact = 0.0
        hyps: list[str] = []
        refs: list[str] = []
        for count, k in enumerate(range(0, len(order), size)):
            if max_batches and count >= max_batches:
                break
            idx = order[k : k + size]
            b = self.to_device(self._batch([data[i] for i in idx]))
            logits = model(b["src"], b["src_lengths"], b["tgt_in"])
            mask = b["tgt_out"] != self.vocab.pad_id
            nll += float(F.cross_entropy(logits.flatten(0, 1), b["tgt_out"].flatten(),
                                         ignore_index=self.vocab.pad_id, reduction="sum"))
            tokens += float(mask.sum())
            correct += float(((logits.argmax(-1) == b["tgt_out"]) & mask).sum())
            for i, out in zip(idx, self.translate(model, b), strict=True):
                if outputs is not None:
                    outputs[i] = out
                hyp = self.detokenize(self.vocab.decode(out))
                ref = self.detokenize(examples[i].target)
                hyps.append(hyp)
                refs.append(ref)
                exact += float(hyp == ref)
        loss = nll / max(tokens, 1.0)
        metrics = {
            "loss": loss,
            "perplexity": math.exp(min(loss, 50.0)),
            "token_accuracy": correct / max(tokens, 1.0),
            "bleu": corpus_bleu(hyps, refs),
            "exact_match": exact / max(len(hyps), 1),
        }
        per_step = self.clock.per_step()
        if per_step is not None and self.batches_per_epoch:
            metrics["epoch_seconds"] = per_step * self.batches_per_epoch
        return metrics


class CharTranslationTask(TranslationTask):
    name = "translate-char"
    description = ("character-level en-es verse translation, QRNN encoder-decoder protocol "
                   "(QRNN paper 3.3, table 3); BLEU with beam search")
    level = "char"
    options = {**TranslationTask.base_options, "max_length": (int, 300),
               "reverse_source": (bool, True)}
    defaults = {"batch_size": 16, "lr": 1e-3, "clip_norm": 5.0, "epochs": 10}


class WordTranslationTask(TranslationTask):
    name = "translate-word"
    description = ("word-level en-es verse translation: attentional seq2seq (task.arch=rnn), "
                   "Transformer with ReLU or METAGROSS feed-forward (transformer), CAS-LSTM "
                   "seq2seq (cas); BLEU with beam search")
    level = "word"
    options = {
        **TranslationTask.base_options,
        "max_length": (int, 50),
        "reverse_source": (bool, False),
        "arch": (str, "rnn"),
        "ffn": (str, ""),
        "ffn_depth": (int, 2),
        "ffn_size": (int, 0),
        "heads": (int, 4),
        "norm": (str, "pre"),
        "input_feeding": (bool, True),
    }
    defaults = {"batch_size": 32, "lr": 1e-3, "clip_norm": 5.0}

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        arch = self.opts["arch"]
        if arch not in ARCHS:
            raise ValueError(f"task.arch: expected one of {ARCHS}, got {arch!r}")
        if arch != "rnn" and self.opts["decoder_init"] != "top":
            raise ValueError(f"task.decoder_init: an option of task.arch=rnn's LSTM decoder, "
                             f"got {self.opts['decoder_init']!r} with task.arch={arch}")
        specials = {"pad_id": self.vocab.pad_id, "bos_id": self.vocab.bos_id,
                    "eos_id": self.vocab.eos_id}
        if arch == "rnn":
            return super().build_model(encoder, model_args)
        if arch == "cas":
            decoder = self.opts["decoder"] or ("caslstm" if encoder == "caslstm" else "lstm")
            if decoder not in DECODER_CELLS:
                raise ValueError(f"task.decoder: expected one of {DECODER_CELLS} with "
                                 f"task.arch=cas, got {decoder!r}")
            cas_keys = ("lambda_", "peephole")
            decoder_args = ({k: model_args[k] for k in cas_keys if k in model_args}
                            if decoder == "caslstm" else {})
            return AttnLSTMSeq2Seq(
                len(self.src_vocab), len(self.vocab), encoder=encoder, encoder_args=model_args,
                decoder=decoder, decoder_args=decoder_args,
                embedding_size=self.opts["embedding_size"],
                input_feeding=self.opts["input_feeding"],
                dropout=float(model_args.get("dropout", 0.0)), **specials,
            )
        ffn = self.opts["ffn"] or ("metagross" if encoder == "metagross" else "relu")
        meta = encoder == "metagross"
        return TransformerSeq2Seq(
            len(self.src_vocab), len(self.vocab),
            d_model=int(model_args.get("hidden_size", 128)), heads=self.opts["heads"],
            layers=int(model_args.get("num_layers", 1)), ffn_size=self.opts["ffn_size"] or None,
            ffn=ffn, ffn_depth=int(model_args["depth"]) if meta else self.opts["ffn_depth"],
            ffn_depth_gate=str(model_args["depth_gate"]) if meta else "token",
            norm=self.opts["norm"], dropout=float(model_args.get("dropout", 0.0)), **specials,
        )

