"""Options checked by name and type: the checks behind ``ctrlrnn train``'s configuration keys
and the ``model.*`` / ``task.*`` options the encoders and tasks declare.

A declaration is ``{key: (type, default)}``; :func:`check_options` fills in the defaults and
refuses, with a :class:`ConfigError` naming the key, an unknown key (suggesting a close one) or
a value of the wrong type. :func:`coerce` turns a command-line string (or a TOML value) into the
declared type.
"""

from __future__ import annotations

import difflib
import math
import sys
import types
import typing
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration value that cannot be used (names the key)."""


def _type_ok(value: Any, annotation: Any) -> bool:
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is tuple:
        args = typing.get_args(annotation)
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: every element an X
            return all(_type_ok(v, args[0]) for v in value)
        return True
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return True


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", str(annotation))


def coerce(key: str, raw: Any, annotation: Any) -> Any:
    """Convert a command-line string (or TOML value) to ``annotation``; refuse with the key."""
    value = raw
    if isinstance(raw, str) and annotation is not str:
        word = raw.strip().lower()
        if word in ("true", "false"):  # TOML's spelling, or Python's True/False
            value = word == "true"
        else:
            try:
                value = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                value = raw
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not _type_ok(value, annotation):
        raise ConfigError(
            f"{key}: expected a value of type {_type_name(annotation)}, got {raw!r}"
        )
    if not _finite(value):
        raise ConfigError(f"{key}: expected a finite number, got {raw!r}")
    return value


def _finite(value: Any) -> bool:
    """False when ``value`` is, or holds (in a list, tuple or dict), a NaN or an infinity."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def check_options(
    kind: str, name: str, given: dict[str, Any], declared: dict[str, tuple[Any, Any]]
) -> dict[str, Any]:
    """Type-check ``given`` options against ``declared`` ``{key: (type, default)}``.

    Returns the full option dict (defaults filled in). ``kind`` is ``"model"`` or ``"task"``.
    """
    out = {k: default for k, (_t, default) in declared.items()}
    for key, value in given.items():
        if key not in declared:
            known = ", ".join(f"{kind}.{k}" for k in sorted(declared)) or "none"
            close = difflib.get_close_matches(key, sorted(declared), n=1, cutoff=0.75)
            hint = f"; did you mean {kind}.{close[0]}?" if close else ""
            raise ConfigError(f"{kind}.{key}: unknown option for {kind} {name!r}{hint} "
                              f"(known: {known})")
        out[key] = coerce(f"{kind}.{key}", value, declared[key][0])
    return out
