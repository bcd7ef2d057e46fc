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
    print(f"prebuilt kernels: {info['prebuilt']}")
    for family, st in info["families"].items():
        print(f"  {family:9s} runs: {st['ops']}")
        print(f"            cpu: {st['cpu']:9s} ({st['reason']})")
        if st["path"]:
            print(f"            {st['path']}  parallel threads: {st['parallel_threads']}")
        elif st["log"] and not st["log"].startswith("cached"):
            print(f"            build log: {st['log']}")
        if st.get("fix"):
            print(f"            to fix: {st['fix']}")
        print(f"            cuda: {st['cuda']}")
    print(f"CUDA graphs of the fused cells' step loops: {info['cuda']['step_graphs']}")
    print(f"CPU runtime of the compiled kernels (CTRLRNN_RUNTIME): {info['cpu_runtime']}")
    _print_gemm(info["gemm"])
    return 0


def _print_gemm(g: dict) -> None:
    """The GEMM path of the compiled CPU kernels (ctrlrnn.ops.gemm_path)."""
    usable = {True: "yes", False: "no", None: "unknown (no kernel loaded)"}[g["onednn_usable"]]
    how = ("chosen per shape class by measurement" if g["forced"] == "auto"
           else f"forced to {g['forced']}")
    one = {True: "yes", False: "no", None: "unknown"}[g.get("one_thread_usable")]
    print(f"float32 GEMMs (CTRLRNN_GEMM={g['requested']}): {how}; oneDNN reachable: {usable}; "
          f"BLAS on one thread (blas1): {one}")
    print("  step = the per-step recurrent products, bulk = input projections and weight "
          "gradients; blas1 = BLAS held to the calling thread; tiny = ctrlrnn's own kernel "
          "for per-step products of at most 8 rows")
    if g["store"]:
        print(f"  choices kept in {g['store']}")
    classes = g["classes"]
    if not classes:
        print("  none measured yet (the first GEMM of each shape class measures it)")
    for key, c in classes.items():
        ratio = c["blas_over_onednn"]
        speed = f"oneDNN {ratio:.2f}x BLAS's speed" if ratio else "oneDNN not timed"
        print(f"  {key:32s} {c['path']:7s} ({speed})")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="show versions and which backend each op uses")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
