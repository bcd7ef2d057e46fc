"""``ctrlrnn info``: versions, threads, and which backend each op family uses, and why."""

from __future__ import annotations

import argparse

from ctrlrnn import __version__, files
from ctrlrnn.ops.backend import backend_info


def run(args: argparse.Namespace) -> int:
    info = backend_info()
    info["ctrlrnn"] = __version__
    if args.json:
        print(files.dumps(info, indent=2))
        return 0
    print(f"ctrlrnn {__version__}  torch {info['torch']}  threads {info['threads']}")
    print(f"extension cache: {info['cache']}")
    print(f"C++ compiler: {info['compiler']}")
    for family, st in info["families"].items():
        print(f"  {family:9s} runs: {st['ops']}")
        print(f"            cpu: {st['cpu']:9s} ({st['reason']})")
        if st["path"]:
            print(f"            {st['path']}  parallel threads: {st['parallel_threads']}")
        elif st["log"] and not st["log"].startswith("cached"):
            print(f"            build log: {st['log']}")
        print(f"            cuda: {st['cuda']}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="show versions and which backend each op uses")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
