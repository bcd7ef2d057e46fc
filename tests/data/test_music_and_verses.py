"""Chorale piano rolls and verse markup stripping (no music21/pysword needed)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ctrlrnn.data import MissingSourceError
from ctrlrnn.data.sources import chorales, verses


@dataclass
class _Pitch:
    midi: int


@dataclass
class _Duration:
    quarterLength: float  # noqa: N815 - music21's attribute name


@dataclass
class _Note:
    offset: float
    duration: _Duration
    pitches: list[_Pitch] = field(default_factory=list)


class _Score:
    def __init__(self, notes: list[_Note]) -> None:
        self.notes = notes

    def flatten(self) -> _Score:
        return self


def test_score_to_roll_quantisation() -> None:
    score = _Score([
        _Note(0.0, _Duration(2.0), [_Pitch(60), _Pitch(64)]),  # frames 0-1
        _Note(2.0, _Duration(0.5), [_Pitch(21)]),               # frame 2
        _Note(2.5, _Duration(1.0), [_Pitch(108)]),              # sounds at t=3 only
        _Note(3.0, _Duration(1.0), [_Pitch(10)]),               # outside the piano: dropped
    ])
    roll = chorales.score_to_roll(score)
    assert roll.shape == (4, 88)
    assert roll[:, 60 - 21].tolist() == [1, 1, 0, 0] and roll[:, 64 - 21].tolist() == [1, 1, 0, 0]
    assert roll[:, 0].tolist() == [0, 0, 1, 0] and roll[:, 87].tolist() == [0, 0, 0, 1]
    assert roll.sum() == 6
    with pytest.raises(ValueError, match="frame"):
        chorales.score_to_roll(score, frame=0)


def test_chorales_missing_music21(monkeypatch, cache: Path) -> None:
    monkeypatch.setitem(sys.modules, "music21", None)
    with pytest.raises(MissingSourceError, match="pip install music21"):
        chorales.SOURCE.prepare()


RAW = ('<w lemma="x">In</w> <w>the</w> <w>beginning</w>, <w>God</w><note placement="foot">'
       '<reference type="annotateRef">1:1 </reference>The “God”</note><w>created</w> '
       '<transChange type="added">otra</transChange><w>tercera</w> hacerla'
       '<note>n</note>. <l level="1"/>next<div type="x-p"/>line')


def test_strip_osis_keeps_word_boundaries() -> None:
    clean = verses.strip_osis(RAW)
    assert clean == "In the beginning, God created otra tercera hacerla. next line"
    assert verses.glued_words(RAW, clean) == []
    naive = "In the beginning, Godcreated otratercera hacerla."
    assert verses.glued_words(RAW, naive) == ["Godcreated", "otratercera"]


def test_verses_missing_pysword(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pysword", None)
    monkeypatch.setitem(sys.modules, "pysword.modules", None)
    with pytest.raises(MissingSourceError, match=r"pip install pysword==0\.2\.8"):
        verses._read_module(tmp_path, "engWEB2015eb", "verses-en-es")


def test_verses_missing_debian_packages(fake_client, cache: Path) -> None:
    with pytest.raises(MissingSourceError, match="apt-get install sword-text-web"):
        verses.SOURCE.prepare()
