"""Vocabulary, tokenisers and batching."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ctrlrnn.data import (
    SPECIALS,
    BucketBatchSampler,
    Vocab,
    batchify_stream,
    bptt_windows,
    bucket_batches,
    char_tokenize,
    pad_sequences,
    word_tokenize,
)


def test_vocab_build(tmp_path: Path) -> None:
    vocab = Vocab.build([["b", "a", "b", "c"], ["b", "a", "d"]], min_count=2)
    assert vocab.itos == [*SPECIALS, "b", "a"]
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab["zzz"] == vocab.unk_id
    assert vocab.encode(["a", "q"], add_bos=True, add_eos=True) == [2, 5, 1, 3]
    assert vocab.decode([2, 5, 0], strip_specials=True) == ["a"]
    assert len(Vocab.build([list("aabbbc")], max_size=6)) == 6
    with pytest.raises(ValueError, match="min_count"):
        Vocab.build([], min_count=0)
    with pytest.raises(ValueError, match="max_size"):
        Vocab.build([], max_size=2)
    vocab.save(tmp_path / "v.txt")
    assert Vocab.load(tmp_path / "v.txt").itos == vocab.itos
    assert vocab.coverage(["a", "b", "x", "y"]) == 0.5


def test_tokenizers() -> None:
    assert word_tokenize("Don't stop-loss, NOW!", lower=True) == [
        "don't", "stop-loss", ",", "now", "!"]
    assert char_tokenize("a  b") == ["a", "_", "b"]
    assert char_tokenize("a b", space=None) == ["a", " ", "b"]


def test_pad_sequences() -> None:
    batch = pad_sequences([[5, 6, 7], [8], torch.tensor([9, 10])], pad_id=0)
    assert batch.tokens.dtype == torch.long and batch.lengths.dtype == torch.int64
    assert batch.mask.dtype == torch.bool
    assert batch.tokens.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert batch.lengths.tolist() == [3, 1, 2]
    assert batch.mask.sum(1).tolist() == [3, 1, 2]
    assert pad_sequences([[1, 2, 3]], max_length=2).tokens.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="sequences"):
        pad_sequences([])


def test_bucket_batches_cover_and_group() -> None:
    lengths = [(i * 37) % 101 for i in range(1000)]
    batches = bucket_batches(lengths, batch_size=16, seed=1, bucket_factor=10)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    assert spread / len(batches) < 15  # random batches would spread ~90
    assert bucket_batches(lengths, 16, seed=1) == bucket_batches(lengths, 16, seed=1)
    sampler = BucketBatchSampler(lengths, 16, seed=1)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first and len(sampler) == len(first)
    assert all(len(b) == 16 for b in bucket_batches(lengths, 16, drop_last=True))
    with pytest.raises(ValueError, match="batch_size"):
        bucket_batches(lengths, 0)


def test_lm_stream() -> None:
    rows = batchify_stream(list(range(23)), 4)
    assert rows.shape == (4, 5) and rows[1, 0] == 5
    windows = list(bptt_windows(rows, 3))
    assert [w[0].shape[1] for w in windows] == [3, 1]
    assert torch.equal(windows[0][1], rows[:, 1:4])
