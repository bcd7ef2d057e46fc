"""Polyphonic music modelling (METAGROSS paper 3.5, table 7) on
:class:`~ctrlrnn.models.music.MusicModel`.

``chorales`` — Bach chorales of the music21 corpus as 88-key piano rolls, one frame per
quarter note (a JSB-like set, see docs/data.md). The model predicts each next frame; the
metric is the NLL per time step (Bernoulli NLL summed over the 88 keys, averaged over all
predicted frames), lower is better.

``task.source=DIR`` reads ``DIR/{split}_rolls.npy`` (stacked frames, F x 88) and
``DIR/{split}_offsets.npy`` (start frame of each piece, plus the end), the prepared format;
``task.pickle=FILE`` reads a Boulanger-Lewandowski pickle (``JSB_Chorales.pickle``,
Nottingham, Piano-midi, MuseData) with the restricted unpickler of the data layer instead.
Pieces shorter than two frames are skipped (nothing to predict).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ctrlrnn.data.loaders.jsb_pickle import read_jsb_pickle
from ctrlrnn.data.sources.chorales import load_chorales
from ctrlrnn.data.sources.common import SPLITS
from ctrlrnn.models.music import N_KEYS, MusicModel, frame_nll
from ctrlrnn.tasks.base import Batch, Task
from ctrlrnn.tasks.common import epoch_batches, eval_chunks, require_files, source_dir


def read_roll_dir(directory: Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls per split from the prepared ``{split}_rolls.npy`` / ``_offsets.npy``."""
    require_files(directory, [f"{s}_{k}.npy" for s in SPLITS for k in ("rolls", "offsets")])
    out = {}
    for split in SPLITS:
        rolls = np.load(directory / f"{split}_rolls.npy", allow_pickle=False)
        offsets = np.load(directory / f"{split}_offsets.npy", allow_pickle=False)
        if rolls.ndim != 2 or rolls.shape[1] != N_KEYS or offsets[-1] != len(rolls):
            raise ValueError(f"task.source: {directory} {split} rolls/offsets do not match")
        out[split] = [rolls[a:b].astype(np.float32) for a, b in zip(offsets[:-1], offsets[1:])]
    return out


class ChoralesTask(Task):
    name = "chorales"
    description = "Bach chorales 88-key next-frame prediction, NLL per frame (METAGROSS paper 3.5)"
    metric: ClassVar[str] = "nll"
    higher_is_better: ClassVar[bool] = False
    options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "source": (str, ""),
        "pickle": (str, ""),
        "dropout": (float, 0.0),
        "eval_batch_size": (int, 32),
    }
    defaults: ClassVar[dict[str, Any]] = {"batch_size": 16, "lr": 1e-3, "epochs": 20}

    def load(self) -> dict[str, list[np.ndarray]]:
        if self.opts["source"] and self.opts["pickle"]:
            raise ValueError("task.pickle: give task.source or task.pickle, not both")
        if self.opts["pickle"]:
            path = Path(self.opts["pickle"]).expanduser()
            if not path.is_file():
                raise ValueError(f"task.pickle: no such file {path}")
            return read_jsb_pickle(path)
        directory = source_dir(self.opts["source"])
        if directory is not None:
            return read_roll_dir(directory)
        return load_chorales()

    def setup(self) -> None:
        if self.opts["eval_batch_size"] < 1:
            raise ValueError("task.eval_batch_size: expected a positive integer, got "
                             f"{self.opts['eval_batch_size']}")
        loaded = self.load()
        self.rolls = {s: [torch.from_numpy(np.ascontiguousarray(r, dtype=np.float32))
                          for r in loaded[s] if len(r) >= 2] for s in SPLITS}
        for split, rolls in self.rolls.items():
            if not rolls:
                raise ValueError(f"task {self.name}: the {split} split has no piece of 2+ frames")

    def data_summary(self) -> dict[str, Any]:
        return {**{f"{s} pieces": len(r) for s, r in self.rolls.items()},
                **{f"{s} frames": sum(len(x) for x in r) for s, r in self.rolls.items()}}

    def build_model(self, encoder: str, model_args: dict[str, Any]) -> nn.Module:
        return MusicModel(N_KEYS, encoder=encoder, encoder_args=model_args,
                          dropout=self.opts["dropout"])

    @staticmethod
    def _batch(rolls: Sequence[Tensor]) -> Batch:
        lengths = torch.tensor([len(r) - 1 for r in rolls], dtype=torch.long)
        T = int(lengths.max())
        inputs = torch.zeros(len(rolls), T, N_KEYS)
        targets = torch.zeros(len(rolls), T, N_KEYS)
        for i, r in enumerate(rolls):
            inputs[i, : len(r) - 1] = r[:-1]
            targets[i, : len(r) - 1] = r[1:]
        return {"inputs": inputs, "targets": targets, "lengths": lengths,
                "nframes": int(lengths.sum())}

    def train_batches(self, epoch: int, batch_size: int) -> Sequence[Batch]:
        rolls = self.rolls["train"]
        index = epoch_batches([len(r) for r in rolls], batch_size, self.epoch_generator(epoch))
        return [self._batch([rolls[i] for i in b]) for b in index]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        total, _ = frame_nll(model(batch["inputs"], batch["lengths"]), batch["targets"],
                             batch["lengths"])
        # per frame of the global batch, so that the mean over processes is the global mean
        return total * batch.get("world_size", 1) / batch["nframes"]

    def shard(self, batch: Batch, rank: int, world_size: int) -> Batch:
        out = super().shard(batch, rank, world_size)
        out["world_size"] = world_size
        return out

    def evaluate(self, model: nn.Module, split: str, max_batches: int = 0) -> dict[str, float]:
        rolls = self.rolls[split]
        total, frames = 0.0, 0
        for chunk in eval_chunks([len(r) for r in rolls], self.opts["eval_batch_size"],
                                 max_batches):
            b = self.to_device(self._batch([rolls[i] for i in chunk]))
            nll, n = frame_nll(model(b["inputs"], b["lengths"]), b["targets"], b["lengths"])
            total += float(nll)
            frames += n
        return {"nll": total / max(frames, 1), "frames": float(frames)}
