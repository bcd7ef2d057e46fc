"""Tiny files in the real distribution formats of the papers' data sets, for the paper-scale
experiments' tests: one writer per ``--data`` name (:data:`WRITERS`), and the task options that
point a task whose data can be had here at tiny files of its prepared format
(:func:`prepared`).

Each writer builds files a few kilobytes long in ``root`` and returns the path ``--data NAME``
takes. Labels follow a cue word, so a few steps can move the loss."""

from __future__ import annotations

import gzip
import json
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

WORDS = [f"w{i}" for i in range(30)]


def _sentence(rng: random.Random, cue: str = "", n: tuple[int, int] = (3, 8)) -> list[str]:
    words = rng.choices(WORDS, k=rng.randint(*n))
    if cue:
        words.insert(rng.randint(0, len(words)), cue)
    return words


def glove(root: Path, dim: int = 300, extra: int = 0) -> Path:
    """A GloVe text file of the writers' words (and the cue words) at ``dim``."""
    rng = np.random.default_rng(0)
    words = [*WORDS, *(f"cue{k}" for k in range(6)), *(f"x{i}" for i in range(extra))]
    path = root / f"glove.tiny.{dim}d.txt"
    root.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for w in words:
            fh.write(w + " " + " ".join(f"{x:.3f}" for x in rng.normal(size=dim)) + "\n")
    return path


def text_lines(root: Path, n: int = 40, vocab: int = 0, labels: int = 0,
               names: tuple[str, str, str] = ("train", "valid", "test")) -> Path:
    """``{split}.txt`` of tokenised sentences (PTB's format); ``vocab``: the train split holds
    that many distinct words; ``labels``: ``{split}.labels``, one of that many labels a line."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split in names:
        lines = [" ".join(_sentence(rng)) for _ in range(n)]
        if vocab and split == "train":
            lines += [" ".join(f"v{i}" for i in range(k, min(k + 50, vocab)))
                      for k in range(0, vocab, 50)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if labels:
            (root / f"{split}.labels").write_text(
                "".join(f"rel{rng.randrange(labels)}\n" for _ in lines), encoding="utf-8")
    return root


def labelled_tsv(root: Path, classes: int = 2, n: int = 40) -> Path:
    """``{split}.tsv`` of ``label<TAB>tokens`` (our prepared sentence format)."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        rows = []
        for _ in range(n):
            y = rng.randrange(classes)
            rows.append(f"{y}\t{' '.join(_sentence(rng, f'cue{y}'))}\n")
        (root / f"{split}.tsv").write_text("".join(rows), encoding="utf-8")
    return root


def mtl(root: Path) -> Path:
    """Liu et al.'s ``<name>.task.train`` / ``.task.test`` (``label<TAB>text``) for every data
    set of the RCRN paper's table 1."""
    from ctrlrnn.reproduce.paper_tables import MTL

    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for name in (*(f for f, _ in MTL.values()), "MR"):
        for split, n in (("train", 60), ("test", 20)):
            rows = []
            for _ in range(n):
                y = rng.randrange(2)
                rows.append(f"{y}\t{' '.join(_sentence(rng, f'cue{y}'))}\n")
            (root / f"{name}.task.{split}").write_text("".join(rows), encoding="utf-8")
    return root


def _tree(rng: random.Random, label: int, depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.3:
        return f"({label} {rng.choice(WORDS)})"
    return (f"({label} {_tree(rng, rng.randrange(5), depth + 1)} "
            f"{_tree(rng, rng.randrange(5), depth + 1)})")


def sst(root: Path) -> Path:
    """SST's PTB-format trees: ``{train,dev,test}.txt``, the root's label cued by a leaf."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        lines = []
        for _ in range(40):
            y = rng.randrange(5)
            lines.append(f"({y} ({y} cue{y}) {_tree(rng, 2)})")
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def imdb(root: Path) -> Path:
    """The ``aclImdb`` layout: ``{train,test}/{pos,neg}/<id>_<stars>.txt``."""
    rng = random.Random(0)
    for split in ("train", "test"):
        for folder, y in (("neg", 0), ("pos", 1)):
            d = root / "aclImdb" / split / folder
            d.mkdir(parents=True, exist_ok=True)
            for i in range(20):
                text = " ".join(_sentence(rng, f"cue{y}", (5, 12))) + " <br /><br />the end"
                (d / f"{i}_{7 if y else 2}.txt").write_text(text, encoding="utf-8")
    return root / "aclImdb"


def trec(root: Path) -> Path:
    """``train_5500.label`` and ``TREC_10.label`` (Latin-1, ``COARSE:fine words``)."""
    from ctrlrnn.data.loaders.trec import COARSE

    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train_5500.label", 80), ("TREC_10.label", 20)):
        rows = []
        for _ in range(n):
            k = rng.randrange(len(COARSE))
            rows.append(f"{COARSE[k]}:other {' '.join(_sentence(rng, f'cue{k}'))} ?\n")
        (root / name).write_text("".join(rows), encoding="latin-1")
    return root


_NLI = ("entailment", "neutral", "contradiction")


def _nli_rows(rng: random.Random, n: int, labels: tuple[str, ...]) -> str:
    rows = []
    for _ in range(n):
        k = rng.randrange(len(labels))
        rows.append(json.dumps({"sentence1": " ".join(_sentence(rng)),
                                "sentence2": " ".join(_sentence(rng, f"cue{k}")),
                                "gold_label": labels[k], "genre": "fiction"}) + "\n")
    rows.append(json.dumps({"sentence1": "a", "sentence2": "b", "gold_label": "-"}) + "\n")
    return "".join(rows)


def nli_jsonl(pattern: str, splits: tuple[str, str, str],
              labels: tuple[str, ...] = _NLI) -> Callable[[Path], Path]:
    """The writer of an SNLI-like data set: one file of ``_nli_rows`` a split, named by
    ``pattern`` with the split in place of ``{split}``."""
    def write(root: Path) -> Path:
        rng = random.Random(0)
        root.mkdir(parents=True, exist_ok=True)
        for split in splits:
            (root / pattern.format(split=split)).write_text(_nli_rows(rng, 40, labels),
                                                            encoding="utf-8")
        return root

    return write


snli = nli_jsonl("snli_1.0_{split}.jsonl", ("train", "dev", "test"))
multinli = nli_jsonl("multinli_1.0_{split}.jsonl", ("train", "dev_matched", "dev_mismatched"))
scitail = nli_jsonl("scitail_1.0_{split}.txt", ("train", "dev", "test"), ("entailment", "neutral"))


def quora(root: Path) -> Path:
    """Wang et al.'s ``{train,dev,test}.tsv``: ``label<TAB>q1<TAB>q2<TAB>id``."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        rows = []
        for i in range(40):
            y = rng.randrange(2)
            rows.append(f"{y}\t{' '.join(_sentence(rng))}\t"
                        f"{' '.join(_sentence(rng, f'cue{y}'))}\t{i}\n")
        (root / f"{split}.tsv").write_text("".join(rows), encoding="utf-8")
    return root


def qa(fmt: str) -> Callable[[Path], Path]:
    """WikiQA's (header, 7 columns) or TrecQA's (``question<TAB>answer<TAB>label``) files:
    a question names topic ``tK``, its correct answer too, the wrong ones other topics."""
    def write(root: Path) -> Path:
        rng = random.Random(0)
        root.mkdir(parents=True, exist_ok=True)
        header = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n"
        for split, n in (("train", 20), ("dev", 6), ("test", 6)):
            lines = []
            for q in range(n):
                topic = rng.randrange(8)
                question = f"what about t{topic} {rng.choice(['then', 'now'])} ?"
                cands = [(f"it is t{topic} indeed", 1)] + [
                    (f"it is t{(topic + d) % 8} indeed", 0) for d in rng.sample(range(1, 8), 3)]
                rng.shuffle(cands)
                for s, (answer, label) in enumerate(cands):
                    lines.append(f"Q{split}{q}\t{question}\tD{q}\ttitle\tD{q}-{s}\t{answer}\t"
                                 f"{label}\n" if fmt == "wikiqa"
                                 else f"{question} #{q}\t{answer}\t{label}\n")
            name = f"WikiQA-{split}.tsv" if fmt == "wikiqa" else f"{split}.tsv"
            text = (header if fmt == "wikiqa" else "") + "".join(lines)
            (root / name).write_text(text, encoding="utf-8")
        return root

    return write


def _idx(path: Path, array: np.ndarray) -> None:
    code = {np.dtype(np.uint8): 0x08}[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.tobytes())


def mnist(root: Path) -> Path:
    """MNIST's four gzipped IDX files, 28 x 28 images, class k lighting pixel row k."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", 60), ("t10k", 20)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        images[np.arange(n), labels, :] = 255
        _idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
        _idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return root


def cifar10(root: Path) -> Path:
    """CIFAR-10's binary batches: a label byte, then 3 x 1024 bytes, a record."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in [*((f"data_batch_{k}.bin", 12) for k in range(1, 6)), ("test_batch.bin", 20)]:
        labels = rng.integers(0, 10, n).astype(np.uint8)
        pixels = rng.integers(0, 40, (n, 3072)).astype(np.uint8)
        pixels[np.arange(n), labels] = 255
        (root / name).write_bytes(np.concatenate([labels[:, None], pixels], 1).tobytes())
    return root


def music_pickle(name: str) -> Callable[[Path], Path]:
    def write(root: Path) -> Path:
        rng = random.Random(0)
        chords = [[60, 64, 67], [62, 65, 69], [64, 67, 71]]
        data = {split: [[chords[(s + t) % 3] for t in range(rng.randint(6, 10))]
                        for s in range(6)] for split in ("train", "valid", "test")}
        root.mkdir(parents=True, exist_ok=True)
        path = root / name
        path.write_bytes(pickle.dumps(data, protocol=2))
        return path

    return write


def _xml(path: Path, lines: list[str]) -> None:
    segs = "".join(f'<seg id="{i}"> {x} </seg>\n' for i, x in enumerate(lines, 1))
    path.write_text(f"<mteval>\n<doc>\n{segs}</doc>\n</mteval>\n", encoding="utf-8")


def iwslt(pair: str, sets: tuple[str, str], prefix: str) -> Callable[[Path], Path]:
    """IWSLT's ``train.tags.<pair>.<lang>`` and ``<prefix>.<set>.<pair>.<lang>.xml``."""
    def write(root: Path) -> Path:
        rng = random.Random(0)
        src, tgt = pair.split("-")
        root.mkdir(parents=True, exist_ok=True)
        def pairs(n: int) -> list[tuple[str, str]]:
            out = []
            for _ in range(n):
                words = _sentence(rng)
                out.append((" ".join(words), " ".join(w.upper() for w in words)))
            return out
        train = pairs(40)
        for lang, k in ((src, 0), (tgt, 1)):
            (root / f"train.tags.{pair}.{lang}").write_text(
                "<url>http://x</url>\n" + "".join(p[k] + "\n" for p in train), encoding="utf-8")
        for name in sets:
            rows = pairs(8)
            for lang, k in ((src, 0), (tgt, 1)):
                _xml(root / f"{prefix}.{name}.{pair}.{lang}.xml", [p[k] for p in rows])
        return root

    return write


def iwslt_plain(root: Path) -> Path:
    """The Stanford IWSLT'15 En-Vi files: ``train.{en,vi}``, ``tst2012.*``, ``tst2013.*``."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", 40), ("tst2012", 8), ("tst2013", 8)):
        rows = [_sentence(rng) for _ in range(n)]
        (root / f"{name}.en").write_text("".join(" ".join(r) + "\n" for r in rows),
                                         encoding="utf-8")
        (root / f"{name}.vi").write_text("".join(" ".join(w.upper() for w in r) + "\n"
                                                 for r in rows), encoding="utf-8")
    return root


def babi_dialog(root: Path) -> Path:
    """bAbI dialog task 6 files (``-trn``, ``-dev``, ``-tst``)."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for tag in ("trn", "dev", "tst"):
        lines = []
        for _ in range(6):
            food = rng.choice(["thai", "indian"])
            lines += ["1 hello\thello what can i help you with today",
                      f"2 i want {food} food\tapi_call {food} R_location R_price",
                      f"3 {food}_place R_cuisine {food}",
                      "4 thank you\tyou're welcome", ""]
        (root / f"dialog-babi-task6-dstc2-{tag}.txt").write_text("\n".join(lines),
                                                                  encoding="utf-8")
    return root / "dialog-babi-task6-dstc2-trn.txt"


WRITERS: dict[str, Callable[[Path], Path]] = {
    "glove840b": lambda root: glove(root),
    "sst": sst,
    "imdb": imdb,
    "trec": trec,
    "snli": snli,
    "multinli": multinli,
    "scitail": scitail,
    "quora": quora,
    "wikiqa": qa("wikiqa"),
    "trecqa": qa("trecqa"),
    "mnist": mnist,
    "cifar10": cifar10,
    "jsb": music_pickle("JSB Chorales.pickle"),
    "nottingham": music_pickle("Nottingham.pickle"),
    "piano": music_pickle("Piano-midi.de.pickle"),
    "iwslt-de-en": iwslt("de-en", ("tst2013", "tst2014"), "IWSLT16.TED"),
    "iwslt14-de-en": iwslt("de-en", ("dev2010", "tst2012"), "IWSLT14.TED"),
    "iwslt15-en-vi": iwslt_plain,
    "babi-dialog": babi_dialog,
    "pdtb": lambda root: text_lines(root, labels=4),
    "switchboard": lambda root: text_lines(root, labels=4),
    "mtl": mtl,
    "mr": mtl,
}


def prepared(task: str, root: Path) -> dict[str, Any]:
    """Task options pointing a task whose data can be had here at tiny files of its prepared
    format (``task.source``), or small sizes of a generated task."""
    if task in ("ptb-lm", "carnn-lm"):
        return {"task.source": str(text_lines(root / "text"))}
    if task in ("copy", "addition", "sort", "tree-traversal"):
        return {"task.train_size": 32, "task.valid_size": 8, "task.test_size": 8}
    if task == "logic":
        return {"task.train_size": 64, "task.valid_size": 16, "task.test_per_count": 2}
    if task == "carnn-dialog":
        return {"task.train_size": 8, "task.valid_size": 2, "task.test_size": 2}
    return {}
