"""``ctrlrnn build``: import every compiled extension from the cache, or compile it now.

Prints one line per extension saying whether it was ``cached`` or ``compiled`` (or why it
failed), with a clock while a compile runs; ``--force`` forgets cached builds and remembered
failures and compiles again.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ctrlrnn.ops import _extension


@contextmanager
def ticking(label: str, stream: TextIO = sys.stderr, every: float = 1.0) -> Iterator[None]:
    """Show ``label`` with the elapsed time while the body runs: rewritten in place on a
    terminal, one line every 30 s elsewhere (logs)."""
    tty = stream.isatty()
    done = threading.Event()
    start = time.monotonic()

    def show() -> None:
        last_line = 0.0
        while not done.wait(every):
            elapsed = time.monotonic() - start
            clock = f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}"
            if tty:
                stream.write(f"\r[build] {label} ... {clock}")
                stream.flush()
            elif elapsed - last_line >= 30:
                last_line = elapsed
                stream.write(f"[build] {label} ... {clock}\n")
                stream.flush()

    thread = threading.Thread(target=show, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if tty:
            stream.write("\r\033[K")
            stream.flush()


def run(args: argparse.Namespace) -> int:
    names = list(_extension.EXTENSIONS)
    failed: list[str] = []
    for i, name in enumerate(names, 1):
        state = "missing" if args.force else _extension.cached_state(name)
        if state == "missing":
            with ticking(f"compiling {name} ({i}/{len(names)})"):
                st = _extension.ensure(name, force=args.force, announce=False)
        else:
            st = _extension.ensure(name, announce=False)
        if st.loaded:
            took = f" in {st.seconds:.0f} s" if st.origin == "compiled" and st.seconds else ""
            print(f"[build] {name:9s} {st.origin}{took}: {st.path}")
        else:
            failed.append(name)
            print(f"[build] {name:9s} FAILED: {st.reason}")
            if st.log and not st.log.startswith("cached"):
                print(f"          build log: {st.log}")
    if failed:
        cause = _extension.failure_message(_extension.ensure(failed[0]))
        print(f"[build] {cause}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build the compiled CPU kernels now (cached)",
                       description="Import the compiled CPU kernels from the cache, or compile "
                       "them now (a few minutes the first time).")
    p.add_argument("--force", action="store_true",
                   help="forget cached builds and remembered failures, and compile again")
    p.set_defaults(func=run)
