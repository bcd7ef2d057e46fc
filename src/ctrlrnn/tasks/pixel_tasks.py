"""Pixel-by-pixel image classification (METAGROSS paper 3.2, table 3) on
:class:`~ctrlrnn.models.pixel_classifier.PixelClassifier`.

* ``mnist-5k`` — the 5,000-image MNIST subset (400/50/50 per digit);
* ``fashion-mnist`` — Fashion-MNIST (55,000/5,000/10,000).

Each image is a sequence of 784 one-pixel steps in [0, 1]; ``task.permuted=true`` reads the
pixels in the fixed order of :func:`ctrlrnn.data.pixels.pixel_permutation` with
``task.permutation_seed`` (pMNIST protocol). The table-3 model is
``--model metagross model.num_layers=3 model.hidden_size=128 model.base=lstm model.depth=2``
(a recurrent base unit of depth 2, METAGROSS paper table 9).

``task.source=DIR`` reads ``DIR/{split}_images.npy`` (uint8, N x P) and
``DIR/{split}_labels.npy`` (int64), the prepared format, instead of the prepared data set;
any P works (e.g. tiny images in tests). ``task.train_size=N`` trains on N images of the
train split, the first of a fixed random order (the same sample for every run; 0: all).
``task.forget_bias=B`` starts the encoder's forget gates B higher
(:mod:`ctrlrnn.tasks.forget_bias`: ``nn.LSTM`` and METAGROSS's linear base);
``task.couple_gates=true`` starts ``nn.LSTM``'s input gates B lower as well, so that it writes
as little as it forgets, as METAGROSS does by construction. ``task.output_bias=B`` starts
METAGROSS's output gates B higher (its output gate multiplies the state it carries). Metric:
accuracy.

The papers' data, from the user's files (they cannot be had here):

* ``mnist`` — the whole MNIST, ``task.idx=DIR`` of its four gzipped IDX files; the last
  twelfth of the training images (5,000) is the validation split;
* ``cifar10`` — CIFAR-10 pixel by pixel, ``task.cifar=DIR`` of its binary batches
  (``data_batch_1.bin`` .. ``_5.bin``, ``test_batch.bin``): 1,024 steps of the three colour
  values of a pixel (METAGROSS table 3); the last 5,000 training images validate.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctrlrnn.data.pixels import PixelSequences
from ctrlrnn.data.sources.common import SPLITS
from ctrlrnn.data.sources.pixel_images import load_fashion_mnist, load_mnist_5k
from ctrlrnn.models.classifier import parse_pooling
from ctrlrnn.models.pixel_classifier import PixelClassifier
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import require_files, source_dir
from ctrlrnn.tasks.forget_bias import offset_forget_bias, offset_output_bias

NUM_CLASSES = 10


class PixelTask(Task):
    """Sequential (or permuted) pixel classification of 10-class images."""

    metric: ClassVar[str] = "accuracy"
    higher_is_better: ClassVar[bool] = True
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "source": (str, ""),
        "idx": (str, ""),
        "cifar": (str, ""),
        "permuted": (bool, False),
        "permutation_seed": (int, 0),
        "pooling": (str, "last"),
        "dropout": (float, 0.0),
        "train_size": (int, 0),
        "eval_batch_size": (int, 200),
        "forget_bias": (float, 0.0),
        "couple_gates": (bool, False),
        "output_bias": (float, 0.0),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 50, "lr": 1e-3, "epochs": 10,
                                          "clip_norm": 1.0}

    #: values a step reads: 1 (grey pixels), 3 (CIFAR-10's colours)
    channels: ClassVar[int] = 1

    @abstractmethod
    def load_prepared(self, permute: bool, seed: int) -> dict[str, PixelSequences]:
        """The prepared data set's pixel sequences per split."""

    def load(self) -> dict[str, PixelSequences]:
        permute, seed = self.opts["permuted"], self.opts["permutation_seed"]
        for key, wanted in (("idx", "mnist"), ("cifar", "cifar10")):
            if self.opts[key] and self.name != wanted:
                raise ValueError(f"task.{key}: only task {wanted} reads it")
        directory = source_dir(self.opts["source"])
        if directory is None:
            return self.load_prepared(permute, seed)
        names = [f"{s}_{k}.npy" for s in SPLITS for k in ("images", "labels")]
        require_files(directory, names)
        return {
            s: PixelSequences(np.load(directory / f"{s}_images.npy", allow_pickle=False),
                              np.load(directory / f"{s}_labels.npy", allow_pickle=False),
                              permute=permute, seed=seed)
            for s in SPLITS
        }

    def setup(self) -> None:
        parse_pooling(self.opts["pooling"])
        if self.opts["eval_batch_size"] < 1:
            raise ValueError("task.eval_batch_size: expected a positive integer, got "
                             f"{self.opts['eval_batch_size']}")
        if self.opts["train_size"] < 0:
            raise ValueError("task.train_size: expected an integer >= 0 (0: all), got "
                             f"{self.opts['train_size']}")
        self.data = self.load()
        self.data["train"] = self._cut(self.data["train"], self.opts["train_size"])
        for split, ds in self.data.items():
            if len(ds) == 0:
                raise ValueError(f"task {self.name}: the {split} split is empty")
            if int(ds.labels.min()) < 0 or int(ds.labels.max()) >= NUM_CLASSES:
                raise ValueError(f"task {self.name}: {split} labels must be 0..9")
        # a fixed shuffled order, so that an evaluation cut short by ``eval_batches`` sees a
        # sample of all classes (the prepared files are grouped by class)
        generator = torch.Generator().manual_seed(0)
        self.eval_order = {s: torch.randperm(len(d), generator=generator)
                           for s, d in self.data.items()}

    @staticmethod
    def _cut(train: PixelSequences, size: int) -> PixelSequences:
        """The first ``size`` images of a fixed random order of ``train`` (seed 0, the same
        for every run and seed; 0: all of them)."""
        if not size:
            return train
        if size > len(train):
            raise ValueError(f"task.train_size: {size} is more than the {len(train)} images "
                             "of the train split")
        keep = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:size]
        cut = PixelSequences(train.images[keep], train.labels[keep])
        cut.permutation = train.permutation
        return cut

    def data_summary(self) -> dict[str, Any]:
        return {**{f"{s} images": len(d) for s, d in self.data.items()},
                "steps": int(self.data["train"].images.shape[1]),
                "permuted": self.opts["permuted"]}

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        model = PixelClassifier(NUM_CLASSES, encoder=encoder, encoder_args=model_args,
                                input_size=self.channels, pooling=self.opts["pooling"],
                                dropout=self.opts["dropout"])
        offset_forget_bias(model.encoder, self.opts["forget_bias"], self.opts["couple_gates"])
        offset_output_bias(model.encoder, self.opts["output_bias"])
        return model

    def _batch(self, split: str, index: Tensor) -> Batch:
        ds = self.data[split]
        pixels = ds.images[index]
        if ds.permutation is not None:
            pixels = pixels[:, ds.permutation]
        steps = pixels.float().div(255.0).view(len(index), -1, self.channels)
        return {"pixels": steps, "labels": ds.labels[index]}

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        n = len(self.data["train"])
        if n < batch_size:
            raise ValueError(f"batch_size: {batch_size} is larger than the train set ({n})")
        order = torch.randperm(n, generator=self.epoch_generator(epoch))
        return [self._batch("train", order[k : k + batch_size])
                for k in range(0, n - batch_size + 1, batch_size)]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        return F.cross_entropy(model(batch["pixels"]), batch["labels"])

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        n = len(self.data[split])
        size = self.opts["eval_batch_size"]
        nll = correct = seen = 0.0
        for count, k in enumerate(range(0, n, size)):
            if max_batches and count >= max_batches:
                break
            b = self.to_device(self._batch(split, self.eval_order[split][k : k + size]))
            logits = model(b["pixels"])
            nll += float(F.cross_entropy(logits, b["labels"], reduction="sum"))
            correct += float((logits.argmax(-1) == b["labels"]).sum())
            seen += len(b["labels"])
        return {"loss": nll / max(seen, 1.0), "accuracy": correct / max(seen, 1.0)}


class Mnist5kTask(PixelTask):
    name = "mnist-5k"
    description = "pixel-by-pixel MNIST-5k (784 steps; task.permuted=true for pMNIST)"

    def load_prepared(self, permute: bool, seed: int) -> dict[str, PixelSequences]:
        return load_mnist_5k(permute=permute, seed=seed)


class FashionMnistTask(PixelTask):
    name = "fashion-mnist"
    description = "pixel-by-pixel Fashion-MNIST (784 steps; task.permuted=true for permuted)"

    def load_prepared(self, permute: bool, seed: int) -> dict[str, PixelSequences]:
        return load_fashion_mnist(permute=permute, seed=seed)


def _split_off(images: np.ndarray, labels: np.ndarray, valid: int, permute: bool, seed: int
               ) -> tuple[PixelSequences, PixelSequences]:
    """The training files' images as (train, valid): the last ``valid`` validate."""
    cut = len(images) - valid
    return (PixelSequences(images[:cut], labels[:cut], permute=permute, seed=seed),
            PixelSequences(images[cut:], labels[cut:], permute=permute, seed=seed))


class MnistTask(PixelTask):
    name = "mnist"
    description = "pixel-by-pixel MNIST, the whole set from its IDX files (task.idx)"

    def load_prepared(self, permute: bool, seed: int) -> dict[str, PixelSequences]:
        from ctrlrnn.data.errors import DataFormatError
        from ctrlrnn.data.loaders.idx import read_mnist_pair
        from ctrlrnn.tasks.paper_files import _dir, _file

        if not self.opts["idx"]:
            raise ValueError("task mnist: the whole MNIST cannot be fetched here; give "
                             "task.idx (its four IDX files) or task.source")
        root = _dir(self.opts["idx"], "idx")
        try:
            x, y = read_mnist_pair(_file(root, "train-images-idx3-ubyte.gz", "idx"),
                                   _file(root, "train-labels-idx1-ubyte.gz", "idx"))
            tx, ty = read_mnist_pair(_file(root, "t10k-images-idx3-ubyte.gz", "idx"),
                                     _file(root, "t10k-labels-idx1-ubyte.gz", "idx"))
        except DataFormatError as exc:
            raise ValueError(f"task.idx: {exc}") from None
        train, valid = _split_off(x, y, len(x) // 12, permute, seed)
        return {"train": train, "valid": valid,
                "test": PixelSequences(tx, ty, permute=permute, seed=seed)}


def read_cifar_bin(path: Any) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's binary batch: per image a label byte, then 1,024 red, 1,024 green and 1,024
    blue values; returned as ``(N, 1024 * 3)`` images, each pixel's three values together,
    and ``(N,)`` labels."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size % 3073:
        raise ValueError(f"task.cifar: {path} is not a whole number of 3,073-byte records")
    rows = raw.reshape(-1, 3073)
    images = rows[:, 1:].reshape(-1, 3, 1024).transpose(0, 2, 1).reshape(-1, 3072)
    return np.ascontiguousarray(images), rows[:, 0].astype(np.int64)


class Cifar10Task(PixelTask):
    name = "cifar10"
    description = ("pixel-by-pixel CIFAR-10, 1,024 steps of 3 colours, from its binary batches "
                   "(task.cifar; METAGROSS table 3)")
    channels = 3

    def load_prepared(self, permute: bool, seed: int) -> dict[str, PixelSequences]:
        from ctrlrnn.tasks.paper_files import _dir, _file

        if not self.opts["cifar"]:
            raise ValueError("task cifar10: CIFAR-10 cannot be fetched here; give task.cifar "
                             "(its binary batches)")
        if permute:
            raise ValueError("task.permuted: not defined for CIFAR-10's colour pixels")
        root = _dir(self.opts["cifar"], "cifar")
        parts = [read_cifar_bin(_file(root, f"data_batch_{k}.bin", "cifar")) for k in range(1, 6)]
        x = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        tx, ty = read_cifar_bin(_file(root, "test_batch.bin", "cifar"))
        train, valid = _split_off(x, y, len(x) // 10, False, seed)
        return {"train": train, "valid": valid, "test": PixelSequences(tx, ty)}
