"""Why the ``carnn-lm`` experiment's validation perplexity was so far above its test perplexity.

Under its earlier definition its full mode validated on the first 500 validation sentences
of PTB and tested on the first 1,000 test sentences, after training on the first 10,000
training sentences. The trained models scored about 290 on the first slice and 200 on the
second. This module measures how hard each slice is for simple count models of the same
training sentences, which see no context and have no training noise:

* a unigram model, add-one smoothed over the task's vocabulary (every training word, plus
  ``<unk>`` and ``<eos>``);
* a bigram model with interpolated Kneser-Ney smoothing (discount 0.75).

Both are scored on the targets the task scores (each sentence's words, then ``<eos>``; the
bigram model also reads ``<bos>``). It also reports the share of targets that are ``<unk>``
under that vocabulary. The same numbers for the whole validation and test splits show
whether a slice is typical of its split.

    python -m ctrlrnn.reproduce.carnn_lm_splits        # needs `ctrlrnn data prepare ptb`

The page of ``carnn-lm`` quotes the result (``CARNN_LM_SPLITS_NOTE`` in
:mod:`ctrlrnn.reproduce.experiment_notes`); ``tests/reproduce`` checks the models on small
sentences.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

UNK, BOS, EOS = "<unk>", "<bos>", "<eos>"
#: the Kneser-Ney discount
DISCOUNT = 0.75


@dataclass(frozen=True)
class SliceStats:
    """A slice's size, its perplexities under the two count models and its ``<unk>`` share."""

    name: str
    sentences: int
    tokens: int
    unigram_perplexity: float
    bigram_perplexity: float
    oov_rate: float


class CountModels:
    """The unigram and Kneser-Ney bigram models of ``train`` (module docstring)."""

    def __init__(self, train: Sequence[Sequence[str]]) -> None:
        self.vocab = {w for sentence in train for w in sentence}
        self.types = len(self.vocab | {UNK, EOS})
        self.unigrams: Counter[str] = Counter()
        self.bigrams: Counter[tuple[str, str]] = Counter()
        for sentence in train:
            seq = self.sequence(sentence)
            self.unigrams.update(seq[1:])
            self.bigrams.update(zip(seq, seq[1:]))
        self.total = sum(self.unigrams.values())
        self.left: Counter[str] = Counter()  # how often each word is a bigram's first word
        self.followers: Counter[str] = Counter()  # how many distinct words follow it
        self.continuations: Counter[str] = Counter()  # how many distinct words precede it
        for (a, b), n in self.bigrams.items():
            self.left[a] += n
            self.followers[a] += 1
            self.continuations[b] += 1

    def sequence(self, sentence: Sequence[str]) -> list[str]:
        """``<bos>``, the sentence's words (``<unk>`` outside the vocabulary), ``<eos>``."""
        return [BOS, *(w if w in self.vocab else UNK for w in sentence), EOS]

    def unigram(self, word: str) -> float:
        return (self.unigrams[word] + 1) / (self.total + self.types)

    def bigram(self, prev: str, word: str) -> float:
        # the continuation distribution, itself add-half smoothed so no target has mass 0
        base = (self.continuations[word] + 0.5) / (len(self.bigrams) + 0.5 * self.types)
        seen = self.left[prev]
        if not seen:
            return base
        return (max(self.bigrams[(prev, word)] - DISCOUNT, 0.0) / seen
                + DISCOUNT * self.followers[prev] / seen * base)

    def stats(self, name: str, sentences: Sequence[Sequence[str]]) -> SliceStats:
        uni = bi = 0.0
        tokens = unknown = 0
        for sentence in sentences:
            seq = self.sequence(sentence)
            for prev, word in zip(seq, seq[1:]):
                uni -= math.log(self.unigram(word))
                bi -= math.log(self.bigram(prev, word))
                tokens += 1
                unknown += word == UNK
        n = max(tokens, 1)
        return SliceStats(name, len(sentences), tokens, math.exp(uni / n), math.exp(bi / n),
                          unknown / n)


def carnn_lm_slices(train_size: int = 10_000, valid_size: int = 500, test_size: int = 1_000
                    ) -> list[SliceStats]:
    """The statistics of the ``carnn-lm`` full mode's former slices of PTB, of the next 500
    validation sentences and of the whole validation and test splits (the prepared ``ptb``
    source; empty lines dropped, as the task drops them)."""
    from ctrlrnn.data.sources.ptb import load_ptb

    data = {s: [x for x in v if x] for s, v in load_ptb(level="word").items()}
    models = CountModels(data["train"][:train_size])
    return [
        models.stats(f"valid, first {valid_size:,}", data["valid"][:valid_size]),
        models.stats(f"valid, next {valid_size:,}", data["valid"][valid_size:2 * valid_size]),
        models.stats(f"test, first {test_size:,}", data["test"][:test_size]),
        models.stats("valid, whole", data["valid"]),
        models.stats("test, whole", data["test"]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.parse_args(argv)
    print("| slice | sentences | target tokens | unigram perplexity | bigram (Kneser-Ney) "
          "perplexity | <unk> share |")
    print("|---|---|---|---|---|---|")
    for s in carnn_lm_slices():
        print(f"| {s.name} | {s.sentences:,} | {s.tokens:,} | {s.unigram_perplexity:.1f} | "
              f"{s.bigram_perplexity:.1f} | {100 * s.oov_rate:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
