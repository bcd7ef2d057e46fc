"""The optional packages of ctrlrnn's extras, and which extra installs each.

The layers need none of them; the commands that train, plot, fetch data or score BLEU do. A
command that meets a missing one names the extra to install (:func:`missing_extra`).
"""

from __future__ import annotations

#: optional package -> the extra of ctrlrnn that installs it (pyproject.toml). The layers need
#: none of them; the commands that train, plot, fetch data or score BLEU do.
EXTRA_FOR: dict[str, str] = {
    "rich": "train",
    "safetensors": "train",
    "matplotlib": "train",
    "optuna": "train",
    "music21": "data",
    "pysword": "data",
    "pyarrow": "data",
    "sacrebleu": "bleu",
    "triton": "gpu",
}


def missing_extra(exc: ImportError) -> tuple[str, str] | None:
    """``(package, extra)`` when ``exc`` is an optional package of an extra not installed."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    return (name, EXTRA_FOR[name]) if name in EXTRA_FOR else None
