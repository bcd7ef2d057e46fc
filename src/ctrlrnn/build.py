"""``ctrlrnn build``: compile (or find in the cache) every C++ extension now, and report."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from ctrlrnn.ops import _extension

    failed = False
    for name in _extension.EXTENSIONS:
        st = _extension.status(name)
        mark = "ok" if st.loaded else "FAILED"
        print(f"[build] {name:9s} {mark}: {st.reason[:400]}")
        if st.path:
            print(f"        {st.path}")
        failed |= not st.loaded
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build the compiled CPU kernels now (cached)")
    p.set_defaults(func=run)
