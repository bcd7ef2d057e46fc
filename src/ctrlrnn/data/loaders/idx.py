"""MNIST-style IDX files (``*-images-idx3-ubyte[.gz]``, ``*-labels-idx1-ubyte[.gz]``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ctrlrnn.data.errors import DataFormatError

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an IDX file (gzip-compressed when the name ends in ``.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as exc:
        raise DataFormatError(path, None, f"cannot read ({exc})") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataFormatError(path, None, "bad IDX magic number (expected 0x00 0x00 ...)")
    code, ndim = data[2], data[3]
    if code not in _DTYPES:
        raise DataFormatError(path, None, f"unknown IDX element type 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataFormatError(path, None, "truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_DTYPES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise DataFormatError(
            path, None, f"IDX shape {shape} needs {expected} bytes, file has {len(data) - header}"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def read_mnist_pair(images: str | Path, labels: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, H*W) uint8, labels (N,) int64)`` from an images/labels IDX pair."""
    x = read_idx(images)
    y = read_idx(labels)
    if x.ndim != 3:
        raise DataFormatError(images, None, f"expected a 3-D image array, got shape {x.shape}")
    if y.ndim != 1 or len(y) != len(x):
        raise DataFormatError(labels, None, f"{len(y)} labels for {len(x)} images")
    return x.reshape(len(x), -1).astype(np.uint8), y.astype(np.int64)
