"""Bach chorales from the music21 corpus as 88-key piano rolls (a JSB-like data set).

``music21.corpus.chorales.Iterator(returnType='filename')`` yields the 371 four-voice
chorales of the corpus bundled with PyPI ``music21`` (BSD). Each is parsed once and
sampled at a fixed quantisation of one frame per quarter note (the JSB Chorales
convention): a key is on in frame ``t`` when a note of that pitch sounds at time ``t``
quarters (``offset <= t < offset + duration``); pitches outside MIDI 21..108 are dropped.

Split (fixed, documented): :func:`~ctrlrnn.data.sources.common.hash_split` of the corpus
file name (e.g. ``bwv26.6.mxl``), about 80/10/10.

Prepared as ``{split}_rolls.npy`` (all frames of a split stacked, uint8, F x 88),
``{split}_offsets.npy`` (int64 start frame of each chorale plus the end) and
``{split}_names.txt``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ctrlrnn.data.errors import MissingSourceError
from ctrlrnn.data.loaders.jsb_pickle import LOWEST_PITCH, N_KEYS
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import SPLITS, hash_split
from ctrlrnn.data.stats import DatasetStats, SplitStats
from ctrlrnn.progress import track

FRAME_QUARTERS = 1.0
INSTALL = "pip install music21"


def _music21():
    try:
        import music21
    except ImportError as exc:
        raise MissingSourceError("chorales", INSTALL, "music21 is not installed") from exc
    return music21


def score_to_roll(score, frame: float = FRAME_QUARTERS) -> np.ndarray:
    """``(T, 88)`` uint8 piano roll of a music21 score sampled every ``frame`` quarters."""
    if frame <= 0:
        raise ValueError(f"frame must be > 0, got {frame}")
    notes = []
    for element in score.flatten().notes:
        start = float(element.offset)
        end = start + float(element.duration.quarterLength)
        for pitch in element.pitches:
            notes.append((start, end, int(pitch.midi)))
    length = max((math.ceil(end / frame) for _, end, _ in notes), default=0)
    roll = np.zeros((length, N_KEYS), dtype=np.uint8)
    for start, end, midi in notes:
        key = midi - LOWEST_PITCH
        if 0 <= key < N_KEYS:
            roll[math.ceil(start / frame - 1e-9) : math.ceil(end / frame - 1e-9), key] = 1
    return roll


class ChoralesSource(PreparedSource):
    name = "chorales"
    summary = "Bach chorales (music21 corpus) as 88-key piano rolls, 1 frame/quarter (JSB-like)"
    size = "371 chorales"
    origin = "PyPI music21 (bundled corpus)"
    licence = "BSD (music21); corpus files per piece"
    install = INSTALL

    def build(self, work: Path, out: Path) -> None:
        music21 = _music21()
        files = sorted(str(f) for f in music21.corpus.chorales.Iterator(returnType="filename"))
        rolls: dict[str, list[tuple[str, np.ndarray]]] = {s: [] for s in SPLITS}
        for name in track(files, description="parsing chorales", transient=True):
            roll = score_to_roll(music21.corpus.parse(name))
            if len(roll):
                base = Path(name).name
                rolls[hash_split(base)].append((base, roll))
        for split in SPLITS:
            items = sorted(rolls[split], key=lambda item: item[0])
            offsets = np.cumsum([0] + [len(r) for _, r in items]).astype(np.int64)
            stacked = (np.concatenate([r for _, r in items]) if items
                       else np.zeros((0, N_KEYS), np.uint8))
            np.save(out / f"{split}_rolls.npy", stacked)
            np.save(out / f"{split}_offsets.npy", offsets)
            (out / f"{split}_names.txt").write_text("".join(n + "\n" for n, _ in items))

    def compute_stats(self, out: Path) -> DatasetStats:
        splits, notes = [], 0
        for split in SPLITS:
            rolls = _read_split(out, split)
            splits.append(SplitStats(split, len(rolls), sum(len(r) for r in rolls)))
            if split == "train":
                frames = sum(len(r) for r in rolls)
                notes = sum(int(r.sum()) for r in rolls)
                used = int(np.any(np.concatenate(rolls) > 0, axis=0).sum()) if rolls else 0
        return DatasetStats(self.name, splits, N_KEYS, unit="frames (quarter notes)",
                            extra={"mean notes per frame (train)": f"{notes / max(frames, 1):.2f}",
                                   "keys used (train)": str(used)})


def _read_split(directory: Path, split: str) -> list[np.ndarray]:
    stacked = np.load(directory / f"{split}_rolls.npy", allow_pickle=False)
    offsets = np.load(directory / f"{split}_offsets.npy", allow_pickle=False)
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    return [stacked[a:b].astype(np.float32) for a, b in bounds]


SOURCE = ChoralesSource()


def load_chorales(cache_dir: CacheDir = None) -> dict[str, list[np.ndarray]]:
    """``(T, 88)`` float32 piano rolls per split."""
    directory = SOURCE.ready_dir(cache_dir)
    return {s: _read_split(directory, s) for s in SPLITS}
