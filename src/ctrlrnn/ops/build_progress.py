"""What a compile of the C++ kernels shows while it runs: a line when it starts, with an
estimate, and a clock on stderr until it ends.

The estimate is the last time this machine took for the same extension (kept in
``build-times.json`` in the kernel cache), else a default for an idle 2-core x86 machine. Either
is scaled by the machine's load: a compile shares the cores with whatever else runs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from ctrlrnn import files

#: Seconds each extension takes to compile on an idle 2-core x86 machine with g++ 12.
DEFAULT_SECONDS: dict[str, float] = {"scan": 60.0, "cells": 100.0, "metagross": 55.0}
#: Seconds assumed for an extension missing from :data:`DEFAULT_SECONDS` (a test's own).
UNKNOWN_SECONDS = 30.0
TIMES_FILE = "build-times.json"


def _load_factor() -> float:
    """How much slower than idle a compile runs now: the 1-minute load average per core, plus
    the compile itself, over one (never below 1)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        return 1.0
    return max(1.0, (load + 1.0) / cores)


def _idle_seconds(name: str, folder: Path) -> float:
    """The idle compile time of ``name``: this machine's last one, else the default, scaled
    from 2 cores to this machine's (ninja compiles the sources in parallel)."""
    seen = files.read_dict(folder / TIMES_FILE) or {}
    last = seen.get(name)
    if isinstance(last, dict) and isinstance(last.get("idle_seconds"), int | float):
        return float(last["idle_seconds"])
    cores = max(1, min(os.cpu_count() or 1, 4))
    return DEFAULT_SECONDS.get(name, UNKNOWN_SECONDS) * 2 / cores


def estimate(name: str, folder: Path) -> float:
    """The expected seconds of compiling extension ``name`` now (cache root ``folder``)."""
    return _idle_seconds(name, folder) * _load_factor()


def record(name: str, folder: Path, seconds: float, load_factor: float) -> None:
    """Remember how long ``name`` took (as idle seconds) for the next estimate; a read-only
    cache keeps the old record."""
    path = folder / TIMES_FILE
    seen = files.read_dict(path) or {}
    seen[name] = {"idle_seconds": round(seconds / max(load_factor, 1.0), 1),
                  "seconds": round(seconds, 1), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    files.write_quietly(path, seen)


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def about(seconds: float) -> str:
    """``seconds`` as a reader rounds it: ``about 40 s`` or ``about 3 min``."""
    return f"about {round(seconds / 10) * 10 or 10:.0f} s" if seconds < 90 else \
        f"about {round(seconds / 60):.0f} min"


@contextmanager
def ticking(label: str, stream: TextIO | None = None, every: float = 1.0,
            expected: float | None = None) -> Iterator[None]:
    """Show ``label`` with the elapsed time (and ``expected``, when given) while the body runs:
    rewritten in place on a terminal, one line every 30 s elsewhere (logs)."""
    out = sys.stderr if stream is None else stream
    tty = out.isatty()
    done = threading.Event()
    start = time.monotonic()
    total = f" of ~{_clock(expected)}" if expected else ""

    def show() -> None:
        last_line = 0.0
        while not done.wait(every):
            elapsed = time.monotonic() - start
            if tty:
                out.write(f"\r[build] {label} ... {_clock(elapsed)}{total}")
                out.flush()
            elif elapsed - last_line >= 30:
                last_line = elapsed
                out.write(f"[build] {label} ... {_clock(elapsed)}{total}\n")
                out.flush()

    thread = threading.Thread(target=show, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if tty:
            out.write("\r\033[K")
            out.flush()


@contextmanager
def compiling(name: str, cache_root: Path, position: str = "") -> Iterator[float]:
    """Announce the compile of extension ``name`` on stderr, with an estimate, and show a clock
    until it ends. ``position`` (``"2 of 3"``) places it in a batch of compiles. Yields the
    machine's load factor, for :func:`record` once the compile succeeded."""
    expected = estimate(name, cache_root)
    where = f" ({position})" if position else ""
    print(f"ctrlrnn: compiling the C++ kernels, extension {name!r}{where}: once, "
          f"{about(expected)} on this machine now, then cached in {cache_root}",
          file=sys.stderr, flush=True)
    with ticking(f"compiling {name}", expected=expected):
        yield _load_factor()
