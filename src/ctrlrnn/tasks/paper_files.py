"""The papers' data sets that cannot be had here, read from the files their distributions ship
(the data layer's loaders, :mod:`ctrlrnn.data.loaders`), into the tasks' train/valid/test
splits. Each function takes the path a user gives (``task.<option>``, or ``ctrlrnn reproduce
--scale paper --data NAME=PATH``) and says in its error which file is missing.

Where a distribution has no validation split, a fixed one is held out of its training files
(never at random): every tenth training example in file order (``_hold_out``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from ctrlrnn.data.errors import DataFormatError
from ctrlrnn.data.tokenize import word_tokenize

T = TypeVar("T")

Example = tuple[list[str], int]


def _dir(path: str, option: str) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"task.{option}: no such directory {root}")
    return root


def _file(root: Path, name: str, option: str) -> Path:
    path = root / name
    if not path.is_file():
        raise ValueError(f"task.{option}: {root} has no {name}")
    return path


def _hold_out(examples: Sequence[T], every: int = 10) -> tuple[list[T], list[T]]:
    """``(train, valid)``: every ``every``-th example (from the first) held out as valid."""
    valid = [x for i, x in enumerate(examples) if i % every == 0]
    train = [x for i, x in enumerate(examples) if i % every != 0]
    return train, valid


def sst_splits(path: str, classes: int, phrases: bool) -> dict[str, list[Example]]:
    """SST's PTB-format trees (``train.txt``, ``dev.txt``, ``test.txt``): the sentences'
    labels, 0..4 (``classes=5``) or binary with neutral dropped (``classes=2``, SST-2);
    ``phrases``: train on every labelled phrase of the training trees, as the CAS-LSTM paper
    does (valid and test stay whole sentences)."""
    from ctrlrnn.data.loaders.sst import SentimentTree, read_sst_trees

    root = _dir(path, "sst")

    def label(tree: SentimentTree) -> int | None:
        return tree.label if classes == 5 else tree.binary_label()

    def nodes(tree: SentimentTree) -> list[SentimentTree]:
        return [tree, *(n for c in tree.children for n in nodes(c))]

    out: dict[str, list[Example]] = {}
    for split, name in (("train", "train.txt"), ("valid", "dev.txt"), ("test", "test.txt")):
        trees = read_sst_trees(_file(root, name, "sst"))
        chosen = [n for t in trees for n in nodes(t)] if phrases and split == "train" else trees
        out[split] = [(t.leaves(), y) for t in chosen if (y := label(t)) is not None]
    return out


def imdb_splits(path: str) -> dict[str, list[Example]]:
    """IMDB's ``aclImdb`` folder: ``train`` less every tenth review (the validation split),
    and ``test``; reviews word-tokenised, case kept (the QRNN paper's GloVe is cased)."""
    from ctrlrnn.data.loaders.imdb import read_imdb

    root = _dir(path, "imdb")
    try:
        rows = {s: [(word_tokenize(text), y) for text, y in read_imdb(root, s)]
                for s in ("train", "test")}
    except DataFormatError as exc:
        raise ValueError(f"task.imdb: {exc}") from None
    train, valid = _hold_out(rows["train"])
    return {"train": train, "valid": valid, "test": rows["test"]}


def trec_splits(path: str) -> dict[str, list[Example]]:
    """TREC's ``train_5500.label`` (less every tenth question: the validation split) and
    ``TREC_10.label``: the six coarse classes."""
    from ctrlrnn.data.loaders.trec import read_trec

    root = _dir(path, "trec")
    train = [(list(q.tokens), q.coarse_label)
             for q in read_trec(_file(root, "train_5500.label", "trec"))]
    test = [(list(q.tokens), q.coarse_label)
            for q in read_trec(_file(root, "TREC_10.label", "trec"))]
    train, valid = _hold_out(train)
    return {"train": train, "valid": valid, "test": test}


def mtl_splits(prefix: str) -> dict[str, list[Example]]:
    """A data set of Liu et al. (2017)'s 16 (14 Amazon review sets, IMDB, MR), as their files
    ship: ``<prefix>.task.train`` and ``<prefix>.task.test``, ``label<TAB>text`` a line
    (``prefix``: the folder and the set's name, ``DIR/camera``). The validation split is every
    eighth training line (200 of 1,600: their 1,400 / 200 / 400 split)."""
    base = Path(prefix).expanduser()
    out: dict[str, list[Example]] = {}
    for split in ("train", "test"):
        path = base.with_name(f"{base.name}.task.{split}")
        if not path.is_file():
            raise ValueError(f"task.mtl: no file {path}")
        rows: list[Example] = []
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                label, sep, text = line.rstrip("\n").partition("\t")
                if not sep or label.strip() not in ("0", "1"):
                    raise ValueError(f"task.mtl: {path}:{number}: expected 'label<TAB>text' "
                                     "with label 0 or 1")
                rows.append((word_tokenize(text, lower=True) or ["<unk>"], int(label)))
        out[split] = rows
    out["train"], out["valid"] = _hold_out(out["train"], every=8)
    return out


Pair = tuple[list[str], list[str], int]

#: the pair data sets' files: train, valid, test (MultiNLI: valid and test are its matched
#: development set, and ``test_mismatched`` its mismatched one; their test sets are not public)
PAIR_FILES: dict[str, dict[str, str]] = {
    "snli": {"train": "snli_1.0_train.jsonl", "valid": "snli_1.0_dev.jsonl",
             "test": "snli_1.0_test.jsonl"},
    "multinli": {"train": "multinli_1.0_train.jsonl", "valid": "multinli_1.0_dev_matched.jsonl",
                 "test": "multinli_1.0_dev_matched.jsonl",
                 "test_mismatched": "multinli_1.0_dev_mismatched.jsonl"},
    "scitail": {"train": "scitail_1.0_train.txt", "valid": "scitail_1.0_dev.txt",
                "test": "scitail_1.0_test.txt"},
    "quora": {"train": "train.tsv", "valid": "dev.tsv", "test": "test.tsv"},
}
#: classes of each pair data set
PAIR_CLASSES = {"snli": 3, "multinli": 3, "scitail": 2, "quora": 2}


def pair_splits(path: str, fmt: str, lower: bool = False) -> dict[str, list[Pair]]:
    """``(sentence 1, sentence 2, label)`` per split of SNLI, MultiNLI, SciTail (its
    ``snli_format`` jsonl, entailment 0 and neutral 1) or Quora Question Pairs (Wang et al.'s
    ``label<TAB>q1<TAB>q2<TAB>id`` files, label 1: paraphrase)."""
    from ctrlrnn.data.loaders.nli import read_nli_jsonl

    if fmt not in PAIR_FILES:
        raise ValueError(f"task.format: expected one of {tuple(PAIR_FILES)}, got {fmt!r}")
    root = _dir(path, "path")

    def tokens(text: str) -> list[str]:
        return word_tokenize(text, lower=lower) or ["<unk>"]

    out: dict[str, list[Pair]] = {}
    for split, name in PAIR_FILES[fmt].items():
        file = _file(root, name, "path")
        if fmt == "quora":
            out[split] = _quora(file, tokens)
            continue
        try:
            rows = read_nli_jsonl(file)
        except DataFormatError as exc:
            raise ValueError(f"task.path: {exc}") from None
        out[split] = [(tokens(r.premise), tokens(r.hypothesis), r.label) for r in rows]
        if fmt == "scitail" and any(y == 2 for _, _, y in out[split]):
            raise ValueError(f"task.path: {file}: SciTail has no contradiction label")
    return out


def _quora(path: Path, tokens) -> list[Pair]:  # noqa: ANN001 - a tokenizer
    rows: list[Pair] = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 3 or cols[0] not in ("0", "1"):
                raise ValueError(f"task.path: {path}:{number}: expected 'label<TAB>question "
                                 "1<TAB>question 2<TAB>id' with label 0 or 1")
            rows.append((tokens(cols[1]), tokens(cols[2]), int(cols[0])))
    return rows


def parallel_splits(path: str, pair: str, valid: str, test: str
                    ) -> dict[str, list[tuple[str, str]]]:
    """IWSLT sentence pairs of a folder: training from ``train.tags.<pair>.<lang>`` (or the
    Stanford files' ``train.<lang>``), validation and test from the sets named ``valid`` and
    ``test`` (their ``<set>.<pair>.<lang>.xml``, as ``IWSLT16.TED.tst2013.de-en.de.xml``, or
    plain ``<set>.<lang>``, as ``tst2012.en``); ``pair`` ``"de-en"`` gives (German, English)."""
    from ctrlrnn.data.loaders.iwslt import read_parallel

    root = _dir(path, "iwslt")
    src, _, tgt = pair.partition("-")
    if not src or not tgt:
        raise ValueError(f"task.pair: expected SRC-TGT such as de-en, got {pair!r}")

    def found(*patterns: str) -> tuple[Path, Path] | None:
        for pattern in patterns:
            a, b = (root / pattern.format(lang=lang) for lang in (src, tgt))
            if a.is_file() and b.is_file():
                return a, b
        return None

    out: dict[str, list[tuple[str, str]]] = {}
    for split, name in (("train", "train"), ("valid", valid), ("test", test)):
        files = (found(f"train.tags.{pair}.{{lang}}", "train.{lang}") if split == "train"
                 else found(f"{name}.{pair}.{{lang}}.xml", f"{name}.{{lang}}"))
        if files is None:
            raise ValueError(f"task.iwslt: {root} has no {split} files ({name}, {pair})")
        try:
            out[split] = read_parallel(*files)
        except DataFormatError as exc:
            raise ValueError(f"task.iwslt: {exc}") from None
    return out
