"""JSB Chorales (and Nottingham, Piano-midi, MuseData) in the pickle of Boulanger-Lewandowski
et al. (2012): ``{'train': [song, ...], 'valid': ..., 'test': ...}``, a song being a list of
time steps, each a list of sounding MIDI pitches (21..108).

The pickle is read with a restricted unpickler that can build nothing but plain containers
and numbers: any reference to a class or function (which could run code) is refused with
:class:`~ctrlrnn.data.errors.DataFormatError`. Unreachable here: supply ``JSB_Chorales.pickle``.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from ctrlrnn.data.errors import DataFormatError

LOWEST_PITCH = 21  # A0, the lowest of the 88 piano keys
N_KEYS = 88
_ALLOWED = {("builtins", n) for n in ("list", "dict", "tuple", "int", "float", "str")}
_ALLOWED |= {("__builtin__", n) for n in ("list", "dict", "tuple", "int", "float", "str")}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only builtins list/dict/tuple/int/float/str."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def safe_load_pickle(path: str | Path) -> object:
    """Unpickle ``path`` with :class:`RestrictedUnpickler` (Python 2 pickles read as latin-1)."""
    path = Path(path)
    try:
        return RestrictedUnpickler(io.BytesIO(path.read_bytes()), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DataFormatError(path, None, f"unsafe or malformed pickle ({exc})") from None


def piano_roll(song: list, path: Path | None = None) -> np.ndarray:
    """``(T, 88)`` float32 binary roll of a song (list of lists of MIDI pitches)."""
    roll = np.zeros((len(song), N_KEYS), dtype=np.float32)
    for t, notes in enumerate(song):
        for pitch in notes:
            key = int(pitch) - LOWEST_PITCH
            if not 0 <= key < N_KEYS:
                raise DataFormatError(path or "<song>", None,
                                      f"pitch {pitch} at step {t} is outside the 88 keys")
            roll[t, key] = 1.0
    return roll


def read_jsb_pickle(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Piano rolls per split (``train``/``valid``/``test``) of a Boulanger-Lewandowski pickle."""
    path = Path(path)
    data = safe_load_pickle(path)
    if not isinstance(data, dict) or not {"train", "valid", "test"} <= set(data):
        raise DataFormatError(path, None, "expected a dict with train/valid/test")
    out = {}
    for split in ("train", "valid", "test"):
        songs = data[split]
        if not isinstance(songs, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and all(isinstance(n, (list, tuple)) for n in s)
            for s in songs
        ):
            raise DataFormatError(path, None, f"{split}: expected a list of songs of note lists")
        out[split] = [piano_roll(list(s), path) for s in songs]
    return out
