"""The stable-ABI trial of docs/install.md: compile scan_stable.cpp (LibTorch stable ABI,
STABLE_TORCH_LIBRARY) and scan_unstable.cpp (the same loop on ATen, TORCH_LIBRARY), check they
agree, and time a tiny call (the dispatch cost) and a large one (the loop) of each, and of
ctrlrnn's own linear-scan kernel. Usage: python benchmarks/stable_abi/run.py [build folder]."""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
FLAGS = ["-O3", "-march=native", "-fopenmp", "-DPy_LIMITED_API=0x030a0000"]


def build(name: str, folder: Path, extra: list[str]) -> None:
    """Compile ``<name>.cpp`` into ``folder/<name>`` and load it (``torch.ops``)."""
    out = folder / name
    out.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=name, sources=[str(HERE / f"{name}.cpp")], extra_cflags=FLAGS + extra,
                       extra_ldflags=["-fopenmp", "-Wl,--as-needed"], build_directory=str(out),
                       is_python_module=False, verbose=False)


def best(fn: Callable[[], object], n: int) -> float:
    """Seconds per call of ``fn``: the best of 7 repeats of ``n`` calls."""
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n


def main() -> None:
    """Build both, check them, print the times."""
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "build/stable_abi")
    build("scan_stable", folder, ["-DTORCH_TARGET_VERSION=0x020a000000000000"])
    build("scan_unstable", folder, [])
    from ctrlrnn.ops import _extension

    ours = _extension.load("scan")
    stable = torch.ops.ctrlrnn_stable_trial.scan_forward.default
    plain = torch.ops.ctrlrnn_unstable_trial.scan_forward.default
    for shape, n in (((1, 1, 8), 20000), ((32, 256, 1024), 20)):
        a, b = torch.rand(shape), torch.rand(shape)
        got, want = stable(a, b), plain(a, b)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[0], ours.linear_scan_forward(a, b, None, None, False)[0])
        rows = {"stable ABI": (stable, ()), "TORCH_LIBRARY": (plain, ()),
                "ctrlrnn kernel": (ours.linear_scan_forward, (None, None, False))}
        for label, (op, rest) in rows.items():
            seconds = best(lambda op=op, rest=rest, a=a, b=b: op(a, b, *rest), n)
            print(f"{shape} {label}: {seconds * 1e6:.1f} us")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
