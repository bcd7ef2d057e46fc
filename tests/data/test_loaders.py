"""Loaders for files that must be supplied by the user, tested on files written here."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

from ctrlrnn.data import DataFormatError
from ctrlrnn.data.loaders.answer_selection import (
    WIKIQA_HEADER,
    group_by_question,
    read_qa_tsv,
    read_wikiqa,
)
from ctrlrnn.data.loaders.babi_dialog import read_babi_dialog
from ctrlrnn.data.loaders.idx import read_idx, read_mnist_pair
from ctrlrnn.data.loaders.imdb import read_imdb
from ctrlrnn.data.loaders.iwslt import read_parallel
from ctrlrnn.data.loaders.jsb_pickle import read_jsb_pickle, safe_load_pickle
from ctrlrnn.data.loaders.nli import read_nli_jsonl
from ctrlrnn.data.loaders.sst import read_sst_trees
from ctrlrnn.data.loaders.trec import read_trec


def test_imdb(tmp_path: Path) -> None:
    for label, text in (("pos", "Great<br />film"), ("neg", "Dull")):
        (tmp_path / "train" / label).mkdir(parents=True)
        (tmp_path / "train" / label / "0_9.txt").write_text(text)
    assert sorted(read_imdb(tmp_path)) == [("Dull", 0), ("Great film", 1)]
    with pytest.raises(DataFormatError, match="test"):
        read_imdb(tmp_path, "test")
    (tmp_path / "train" / "pos" / "1_8.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(DataFormatError, match="1_8.txt:1"):
        read_imdb(tmp_path)


def test_sst_trees(tmp_path: Path) -> None:
    path = tmp_path / "train.txt"
    path.write_text("(3 (2 It) (4 (2 's) (4 good)))\n\n(1 (1 bad))\n(2 (2 oops)\n")
    with pytest.raises(DataFormatError, match=r"train\.txt:4"):
        read_sst_trees(path)
    path.write_text("(3 (2 It) (4 (2 's) (4 good)))\n(1 (1 bad))\n")
    trees = read_sst_trees(path)
    assert trees[0].leaves() == ["It", "'s", "good"] and trees[0].label == 3
    assert [t.binary_label() for t in trees] == [1, 0]


def test_nli_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "snli.jsonl"
    path.write_text(
        '{"sentence1": "A man.", "sentence2": "A person.", "gold_label": "entailment"}\n'
        '{"sentence1": "A", "sentence2": "B", "gold_label": "-"}\n'
        '{"sentence1": "A", "sentence2": "B", "gold_label": "contradiction", "genre": "x"}\n'
    )
    rows = read_nli_jsonl(path)
    assert [(r.label, r.genre) for r in rows] == [(0, None), (2, "x")]
    path.write_text('{"sentence1": "A", "sentence2": "B", "gold_label": "neutral"}\n{bad\n')
    with pytest.raises(DataFormatError, match=r"snli\.jsonl:2"):
        read_nli_jsonl(path)


def test_trec(tmp_path: Path) -> None:
    path = tmp_path / "train_5500.label"
    path.write_bytes("DESC:manner How did serfdom develop ?\nHUM:ind Who is Caf\xe9 ?\n"
                     .encode("latin-1"))
    rows = read_trec(path)
    assert rows[0].coarse_label == 1 and rows[1].tokens[-2] == "Café"
    path.write_text("DESC:manner ok ?\nnolabel here\n")
    with pytest.raises(DataFormatError, match=r"label:2"):
        read_trec(path)


def test_answer_selection(tmp_path: Path) -> None:
    wiki = tmp_path / "WikiQA-train.tsv"
    wiki.write_text("\t".join(WIKIQA_HEADER) + "\nQ1\tWhy?\tD1\tT\tD1-0\tBecause.\t1\n"
                    "Q1\tWhy?\tD1\tT\tD1-1\tNo.\t0\n")
    pairs = read_wikiqa(wiki)
    assert [p.label for p in group_by_question(pairs)["Q1"]] == [1, 0]
    wiki.write_text("\t".join(WIKIQA_HEADER) + "\nQ1\tWhy?\tD1\tT\tD1-0\tBecause.\t2\n")
    with pytest.raises(DataFormatError, match=r"WikiQA-train\.tsv:2"):
        read_wikiqa(wiki)
    trec = tmp_path / "trecqa.tsv"
    trec.write_text("who ?\tme\t1\nwho ?\tyou\t0\nwhat ?\tit\t1\n")
    assert [p.question_id for p in read_qa_tsv(trec)] == ["Q0", "Q0", "Q1"]
    trec.write_text("who ?\tme\n")
    with pytest.raises(DataFormatError, match=r"trecqa\.tsv:1"):
        read_qa_tsv(trec)


class Evil:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/ctrlrnn-evil-marker"),))


def test_jsb_pickle_restricted(tmp_path: Path) -> None:
    path = tmp_path / "JSB_Chorales.pickle"
    songs = {"train": [[[60, 64, 67], [62]], [[21]]], "valid": [[[108]]], "test": [[[]]]}
    path.write_bytes(pickle.dumps(songs, protocol=2))
    rolls = read_jsb_pickle(path)
    assert rolls["train"][0].shape == (2, 88) and rolls["train"][0][0].sum() == 3
    assert rolls["train"][0][0, 60 - 21] == 1 and rolls["valid"][0][0, 87] == 1
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"train": Evil()}))
    with pytest.raises(DataFormatError, match="evil.pickle"):
        safe_load_pickle(evil)
    assert not Path("/tmp/ctrlrnn-evil-marker").exists()
    path.write_bytes(pickle.dumps({"train": [[[200]]], "valid": [], "test": []}))
    with pytest.raises(DataFormatError, match="outside the 88 keys"):
        read_jsb_pickle(path)


def test_mnist_idx(tmp_path: Path) -> None:
    images = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    ip, lp = tmp_path / "train-images-idx3-ubyte.gz", tmp_path / "train-labels-idx1-ubyte"
    ip.write_bytes(gzip.compress(bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 28, 0, 0, 0, 28])
                                 + images.tobytes()))
    lp.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 1, 2]))
    x, y = read_mnist_pair(ip, lp)
    assert x.shape == (3, 784) and (x[1] == images[1].reshape(-1)).all()
    assert y.tolist() == [7, 1, 2]
    lp.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 4, 7, 1, 2]))
    with pytest.raises(DataFormatError, match="train-labels-idx1-ubyte"):
        read_idx(lp)


def test_iwslt_pairs(tmp_path: Path) -> None:
    de, en = tmp_path / "train.tags.de-en.de", tmp_path / "IWSLT.dev.en.xml"
    de.write_text("<url>http://x</url>\nHallo Welt\nGuten Tag\n")
    en.write_text('<doc>\n<seg id="1"> Hello world </seg>\n<seg id="2">Good day &amp; all</seg>\n')
    assert read_parallel(de, en) == [("Hallo Welt", "Hello world"), ("Guten Tag",
                                                                      "Good day & all")]
    de.write_text("Hallo Welt\nGuten Tag\nNoch einer\n")
    with pytest.raises(DataFormatError, match=r"train\.tags\.de-en\.de:3"):
        read_parallel(de, en)


def test_babi_dialog(tmp_path: Path) -> None:
    path = tmp_path / "dialog-babi-task1-trn.txt"
    path.write_text("1 resto_1 R_cuisine italian\n2 hi\thello what can I help you with\n"
                    "3 <SILENCE>\tok\n\n1 bye\tyou are welcome\n")
    dialogs = read_babi_dialog(path)
    assert len(dialogs) == 2 and dialogs[0].knowledge == ["resto_1 R_cuisine italian"]
    assert dialogs[0].knowledge_turns == [0] and dialogs[1].knowledge_turns is None
    path.write_text("1 hi\thello\n2 resto_1 R_rating 3\n3 book\tapi_call x\n"
                    "4 resto_2 R_rating 5\n5 resto_2 R_phone p2\n6 bye\tok\n")
    (dialog,) = read_babi_dialog(path)
    assert dialog.knowledge == ["resto_1 R_rating 3", "resto_2 R_rating 5", "resto_2 R_phone p2"]
    assert dialog.knowledge_turns == [1, 2, 2]  # where each line was printed
    assert dialogs[0].turns[1] == ("<SILENCE>", "ok")
    path.write_text("1 hi\thello\nx oops\n")
    with pytest.raises(DataFormatError, match=r"trn\.txt:2"):
        read_babi_dialog(path)
