"""The prebuilt kernels a platform wheel carries (``scripts/build-wheel``, docs/install.md).

A wheel built ahead of time holds, under ``ctrlrnn/_kernels/``, one folder of libraries per CPU
variant (for example ``x86-64-v4`` and ``x86-64-v3``: a prebuilt library cannot use
``-march=native``) and ``manifest.json``, which records the torch they were built against (its
version, source commit and C++ ABI flag) and, per variant, the CPU flags it needs and its
libraries. At the first kernel call :func:`choice` picks the first variant whose flags this CPU
has, when the running torch is the recorded release, built from the same commit with the same
C++ ABI (:func:`mismatch`); the loader (:mod:`._extension`) then loads those libraries and
writes nothing. Otherwise it says why in one line on stderr, and the loader builds the kernels
on first use as from a source install. A source or editable install has no ``_kernels`` folder
and says nothing.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files

__all__ = ["KERNELS_DIR", "MANIFEST", "VARIANT_FLAGS", "Prebuilt", "choice", "cpu_flags",
           "describe", "mismatch", "release", "torch_record"]

#: Where a wheel's prebuilt kernels lie, and their manifest.
KERNELS_DIR = Path(__file__).resolve().parents[1] / "_kernels"
MANIFEST = "manifest.json"

#: The CPU flags (as /proc/cpuinfo names them) each x86-64 micro-architecture level needs.
_V2 = ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")
_V3 = (*_V2, "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
VARIANT_FLAGS: dict[str, tuple[str, ...]] = {
    "x86-64": (), "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4,
}


@dataclass(frozen=True)
class Prebuilt:
    """The variant chosen for this process: its name, the torch it was built for and its
    libraries (family -> ``(path, torch.ops namespace)``)."""

    variant: str
    torch: str
    libraries: dict[str, tuple[Path, str]] = field(default_factory=dict)


_LOCK = threading.Lock()
#: ``[answer]`` once :func:`choice` has run in this process.
_CHOSEN: list[Prebuilt | None] = []
#: Why the prebuilt kernels are not used ("" when they are, or when there are none).
_WHY: list[str] = [""]


def torch_record() -> dict[str, Any]:
    """What a prebuilt library depends on of the running torch: its version, the source commit
    it was built from and its C++ ABI."""
    return {"torch": torch.__version__, "torch_git": str(torch.version.git_version),
            "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))}


def release(version: object) -> str:
    """``2.13.0`` for ``2.13.0+cpu`` or ``2.13.0+cu130``: a torch version without its local build
    tag."""
    return str(version).partition("+")[0]


def cpu_flags() -> set[str]:
    """This CPU's flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def mismatch(manifest: dict[str, Any]) -> str:
    """Why kernels built as ``manifest`` records cannot load into the running torch ("" when
    they can).

    The torch release is compared without its local build tag, so kernels built on ``+cpu`` load
    into ``+cu130`` of the same release. The CPU kernels link only against libtorch's and c10's
    C++ API, which the CPU and CUDA builds of one release share. docs/install.md records the run
    in which a wheel built on 2.13.0+cpu passed the kernel tests under 2.13.0+cu130. The C++ ABI
    flag is compared because it changes the mangled name of every ``std::string`` in that API.
    The source commit (``torch.version.git_version``) is compared where the manifest records
    one, so a patched build that keeps the release number is refused.
    """
    here = torch_record()
    built, built_git = manifest.get("torch"), manifest.get("torch_git")
    abi = bool(manifest.get("cxx11_abi"))
    if (release(built) == release(here["torch"]) and abi == here["cxx11_abi"]
            and built_git in (None, here["torch_git"])):
        return ""
    return (f"they were built for torch {built} (C++11 ABI {int(abi)}, commit "
            f"{str(built_git or 'unrecorded')[:12]}) and this is torch {here['torch']} (C++11 ABI "
            f"{int(here['cxx11_abi'])}, commit {here['torch_git'][:12]})")


def _pick(manifest: dict[str, Any], root: Path) -> Prebuilt | str:
    """The first variant of ``manifest`` this CPU runs, or why none can be used."""
    why = mismatch(manifest)
    if why:
        return why
    flags = cpu_flags()
    names = []
    for variant in manifest.get("variants", []):
        names.append(variant["name"])
        if flags and not set(variant.get("cpu_flags", ())) <= flags:
            continue
        libs = {fam: (root / lib["file"], str(lib["namespace"]))
                for fam, lib in variant.get("libraries", {}).items()}
        missing = [str(p) for p, _ in libs.values() if not p.is_file()]
        if missing:
            return f"the wheel's library {missing[0]} is missing"
        return Prebuilt(variant["name"], str(manifest.get("torch")), libs)
    return f"this CPU has the flags of none of their variants ({', '.join(names) or 'none'})"


def choice() -> Prebuilt | None:
    """The prebuilt kernels this process loads, or None (no ``_kernels`` folder, or they do not
    fit: then one line on stderr says why, once per process)."""
    if _CHOSEN:
        return _CHOSEN[0]
    with _LOCK:
        if _CHOSEN:
            return _CHOSEN[0]
        manifest = files.read_dict(KERNELS_DIR / MANIFEST) if KERNELS_DIR.is_dir() else None
        picked: Prebuilt | str | None = None
        if manifest is not None:
            picked = _pick(manifest, KERNELS_DIR)
        if isinstance(picked, str):
            _WHY[0] = picked
            print(f"ctrlrnn: not using the prebuilt kernels: {picked}; building them on first "
                  f"use instead", file=sys.stderr, flush=True)
            picked = None
        _CHOSEN.append(picked)
        return picked


def describe() -> str:
    """One line for ``ctrlrnn info`` after "prebuilt kernels:": the variant in use, or why
    none is, or that this install has none."""
    chosen = choice()
    if chosen is not None:
        return f"{chosen.variant}, built for torch {chosen.torch}, in {KERNELS_DIR}"
    if _WHY[0]:
        return f"not used: {_WHY[0]}"
    return "none in this install (the kernels are built on first use)"
