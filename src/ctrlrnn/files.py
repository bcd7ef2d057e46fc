"""What every file ctrlrnn writes obeys: strict JSON, and a full disk said in one line.

**Strict JSON.** Python's :mod:`json` writes a non-finite float as the bare words ``NaN``,
``Infinity`` and ``-Infinity``, which are not JSON: strict readers (JavaScript's
``JSON.parse``, ``jq``, most other languages' libraries) refuse the whole file. :func:`dumps`
and :func:`dump` write such a value as ``null`` (a metric that could not be computed) and pass
``allow_nan=False``, so no non-finite value can reach a file by another way.

**A full disk.** A write that fails for want of space raises :class:`NoSpaceLeft` (an
``OSError`` with ``errno.ENOSPC``) naming the file it was writing: :func:`writing` converts
what the libraries raise (``OSError``, and safetensors' ``SafetensorError``, which carries the
operating system's message in its text). The command line turns it into one line
(:func:`no_space_line`) and a non-zero exit status. The writers write to a temporary name and
rename, so what was on disk before the failed write is still there.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

#: the operating system's words for ENOSPC, as libraries that do not raise ``OSError`` (the
#: safetensors writer) put them in their messages
_NO_SPACE_TEXT = os.strerror(errno.ENOSPC)


# ------------------------------------------------------------------ strict JSON


def finite_or_null(obj: Any) -> Any:
    """``obj`` with every non-finite float (at any depth of dicts, lists and tuples) replaced
    by ``None``; tuples become lists, as JSON writes them."""
    if isinstance(obj, float):  # NumPy's float64 too (its other floats are not JSON numbers)
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite_or_null(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(value) for value in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of ``obj`` as strict JSON: non-finite floats written as ``null``."""
    return json.dumps(finite_or_null(obj), allow_nan=False, **kwargs)


def dump(obj: Any, fh: IO[str], **kwargs: Any) -> None:
    """:func:`json.dump` of ``obj`` into ``fh`` as strict JSON (see :func:`dumps`)."""
    json.dump(finite_or_null(obj), fh, allow_nan=False, **kwargs)


# ------------------------------------------------------------------ a full disk


class NoSpaceLeft(OSError):
    """No space left on the device while writing ``filename``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(errno.ENOSPC, _NO_SPACE_TEXT, str(path))


def read_dict(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object stored at ``path``; None when it is missing, unreadable or not an
    object (a cache record that can be rebuilt)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_quietly(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` by a temporary name and a rename, so the record is
    never half-written; a failed write (a read-only cache) leaves the old record and says
    nothing (for caches only: the caller can rebuild what it holds)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(data, indent=2), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # a read-only folder refuses the unlink too
            tmp.unlink(missing_ok=True)


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the device is full."""
    return _no_space_in_chain(exc) is not None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _says_no_space(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    return _NO_SPACE_TEXT in str(exc)


def _no_space_in_chain(exc: BaseException) -> BaseException | None:
    """The outermost exception of ``exc``'s chain that says the device is full."""
    return next((e for e in _chain(exc) if _says_no_space(e)), None)


def no_space_line(exc: BaseException) -> str:
    """The one line the command line prints for a full disk (``exc``: :func:`is_no_space`),
    naming the file of the outermost exception of the chain that names one."""
    path = next((e.filename for e in _chain(exc)
                 if _says_no_space(e) and getattr(e, "filename", None)), None)
    where = f" while writing {path}" if path else ""
    return f"ctrlrnn: no space left on device{where}"


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise :class:`NoSpaceLeft` when the body fails for want of space (other errors pass
    unchanged). It names ``path``, unless the write that failed named a file outside the
    folder of ``path`` (a work folder on another device): then that file."""
    try:
        yield
    except NoSpaceLeft:
        raise
    except Exception as exc:
        found = _no_space_in_chain(exc)
        if found is None:
            raise
        target = Path(path)
        inner = getattr(found, "filename", None)
        if isinstance(inner, (str, os.PathLike)) and not _within(Path(inner), target.parent):
            target = Path(inner)
        raise NoSpaceLeft(target) from exc


def _within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (OSError, ValueError):
        return False
    return True
