"""Checks of the layers' constructor arguments: each error is a ValueError naming the argument.

(The tensors a forward call receives are checked by :mod:`ctrlrnn.nn.base` and
:mod:`ctrlrnn.ops.validation`.)
"""

from __future__ import annotations

import math
from typing import Any

from ctrlrnn.ops.validation import check_flag

__all__ = ["check_choice", "check_flag", "check_positive_int", "check_rate"]


def check_positive_int(name: str, value: Any) -> int:
    """An ``int`` >= 1 (``bool`` is refused: ``True`` is not a size)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def check_rate(name: str, value: Any, *, upper_open: bool = False) -> float:
    """A probability: a real number in ``[0, 1]`` (``[0, 1)`` with ``upper_open``)."""
    interval = "[0, 1)" if upper_open else "[0, 1]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name}: expected a probability in {interval}, got {value!r}")
    if not (0.0 <= float(value) < 1.0 if upper_open else 0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name}: expected a probability in {interval}, got {value}")
    return float(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value
