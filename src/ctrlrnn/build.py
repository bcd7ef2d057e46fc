"""``ctrlrnn build``: import every compiled extension from the cache, or compile it now.

Prints one line per extension saying whether it was ``cached`` or ``compiled`` (or why it
failed); each compile shows a clock on stderr. ``--force`` empties the build folders (cached
builds, remembered failures, object files) and compiles again.
"""

from __future__ import annotations

import argparse
import sys

from ctrlrnn.ops import _extension


def run(args: argparse.Namespace) -> int:
    failed: list[str] = []
    for name, st in _extension.build_all(force=args.force).items():
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
                   help="empty the build folders (cached builds, remembered failures) and "
                   "compile again")
    p.set_defaults(func=run)
