"""Which GEMM library the compiled CPU kernels use, per shape class
(``ops/csrc/runtime/gemm_paths.h``).

torch's CPU build carries its BLAS (MKL on x86) and oneDNN. For float32, which is faster depends
on the CPU generation and the shape: on recent AVX-512 cores oneDNN's JIT kernels run large and
mid-sized products up to twice as fast as MKL's, while on tiny products (a batch of 1-2 rows of
width 64) BLAS wins because oneDNN's per-call set-up dominates. ``torch.nn.LSTM`` on CPU runs on
oneDNN; ctrlrnn's kernels take whichever path measures faster here. A third path, ``blas1``, is
BLAS held to the calling thread: a small batch runs its time loop on the calling thread, and
there torch lets MKL thread every tiny per-step product, and waking the other threads can cost
several times the product; it is a candidate where the caller has more than one thread and
torch's MKL exports its per-thread setting (BENCHMARKS.md has what it gives where measured). A
fourth, ``tiny``, is ctrlrnn's own register-blocked kernel for the per-step products of at most
8 rows (a small batch's recurrent GEMMs), on the calling thread, a wide one's columns split over
the threads when it is called outside a parallel region: MKL chooses its code path by CPU vendor,
and on AMD cores it runs these products on its generic, unvectorised path, several times slower
than a plain vectorised loop.

The kernels time the paths the first time they meet a shape class (each dimension rounded up to
a power of two, the operands' layout, the threads), a few milliseconds, and remember the fastest.
This module persists those choices beside the kernel build, one file per CPU model and torch
build, so a later process starts with them; it also forces a path:

``CTRLRNN_GEMM=auto`` (default)
    choose per shape class by measurement;
``CTRLRNN_GEMM=blas``
    torch's BLAS (``at::mm``, MKL's packed GEMM for the per-step products) everywhere, threaded
    as torch threads it;
``CTRLRNN_GEMM=onednn``
    oneDNN everywhere (an error where this torch cannot run float32 on oneDNN);
``CTRLRNN_GEMM=blas1``
    BLAS held to the calling thread everywhere (an error where torch's BLAS is not MKL);
``CTRLRNN_GEMM=tiny``
    the tiny kernel for every per-step product of at most 8 rows, BLAS for the others.

Only float32 has a choice: torch already runs bfloat16/float16 ``mm`` on oneDNN, and float64 on
BLAS. The choice never changes results beyond float32 rounding (every path is an exact GEMM), and
the tests run the kernels under both.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files, settings

__all__ = ["ENV", "PATHS", "forced", "one_thread_usable", "requested", "table", "use", "uses"]

#: The environment variable that forces a path.
ENV = "CTRLRNN_GEMM"
#: Its values, and the code each means to the kernels (-1: choose by measurement).
PATHS: dict[str, int] = {"auto": -1, "blas": 0, "onednn": 1, "blas1": 2, "tiny": 3}

_LOCK = threading.Lock()
#: The loaded kernel libraries (:class:`ctrlrnn.ops.kernel_library.KernelLibrary`, or a
#: module with the same functions)
_MODULES: list[Any] = []
_STORE: dict[str, Any] = {"path": None, "saved": None}
#: The path :func:`use` forces (None: ``CTRLRNN_GEMM`` decides), applied to kernels loaded later.
_USING: list[str] = []


def requested() -> str:
    """The path ``CTRLRNN_GEMM`` asks for (``auto`` when unset); a
    :class:`~ctrlrnn.settings.SettingError` naming the variable when invalid."""
    return str(settings.value(ENV))


#: Bumped when the set of candidate paths changes, so choices measured among fewer paths are
#: measured again rather than kept (2: BLAS on one thread joined; 3: the tiny kernel joined;
#: 4: the tiny kernel splits wide products over the threads).
STORE_VERSION = 4


def _store_file(folder: Path, cpu_signature: str) -> Path:
    git = str(getattr(torch.version, "git_version", ""))
    ident = "|".join([cpu_signature, torch.__version__, git, f"paths-v{STORE_VERSION}"])
    return folder / f"gemm-paths-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


def _apply(mod: Any, name: str) -> None:
    if name == "onednn" and not mod.gemm_onednn_usable():
        raise RuntimeError(
            f"{ENV}=onednn: this torch ({torch.__version__}) cannot run float32 GEMMs on oneDNN "
            f"(torch.backends.mkldnn.is_available()={torch.backends.mkldnn.is_available()}); "
            f"unset {ENV} or set it to blas")
    if name == "blas1" and not mod.gemm_one_thread_usable():
        raise RuntimeError(
            f"{ENV}=blas1: this torch's BLAS cannot be held to one thread (its MKL does not "
            f"export MKL_Set_Num_Threads_Local); unset {ENV} or set it to blas")
    mod.gemm_force(PATHS[name])


def attach(mod: Any, folder: Path | None, cpu_signature: str) -> None:
    """Called by the extension loader for every compiled extension it imports: applies
    ``CTRLRNN_GEMM`` and loads the persisted choices for this CPU and torch (once), from
    ``folder`` (None: the choices are neither read nor saved, as for the prebuilt kernels,
    whose import writes nothing)."""
    if not hasattr(mod, "gemm_table"):
        return
    with _LOCK:
        if any(m is mod for m in _MODULES):
            return
        _apply(mod, _USING[-1] if _USING else requested())
        _MODULES.append(mod)
        if _STORE["path"] is None and folder is not None:
            path = _store_file(folder, cpu_signature)
            _STORE["path"] = path
            saved = files.read_dict(path)
            _STORE["saved"] = saved if isinstance(saved, dict) else {}
            atexit.register(save)
        saved = _STORE["saved"] or {}
    with contextlib.suppress(TypeError, ValueError, RuntimeError):
        mod.gemm_table_load({k: tuple(v) for k, v in saved.items()})


def table() -> dict[str, tuple[str, float]]:
    """Shape class -> (path, BLAS time / oneDNN time), as measured by the loaded kernels (the
    ratio is 0 where oneDNN was not timed: it cannot run here)."""
    out: dict[str, tuple[str, float]] = {}
    for mod in list(_MODULES):
        out.update({k: (str(v[0]), float(v[1])) for k, v in mod.gemm_table().items()})
    return out


def uses(clear: bool = False) -> dict[str, tuple[str, int]]:
    """Shape class -> (path, calls) of the GEMMs the kernels ran since the last ``clear``
    (the benchmark reports with each row which path its GEMMs took)."""
    out: dict[str, tuple[str, int]] = {}
    mods = list(_MODULES)
    if mods:  # the extensions share one table
        out = {k: (str(v[0]), int(v[1])) for k, v in mods[0].gemm_uses().items()}
        if clear:
            mods[0].gemm_uses_clear()
    return out


def summary(used: dict[str, tuple[str, int]]) -> str:
    """``uses()`` in a few words: the path of the per-step GEMMs and of the bulk ones (input
    projections, weight gradients), e.g. ``step onednn, bulk onednn+blas``."""
    parts = []
    for kind in ("step", "bulk"):
        paths = sorted({p for k, (p, _) in used.items() if k.startswith(kind + " ")})
        if paths:
            parts.append(f"{kind} {'+'.join(paths)}")
    return ", ".join(parts) or "-"


def save() -> None:
    """Add the measured choices (when any are new) to the store beside the kernel build.

    The store is read again and merged, this process's choices over the stored ones, so
    processes that measured different classes (two trainings, a benchmark beside a test run, a
    process that cleared its table to measure again) each add theirs rather than the last one to
    exit replacing the others'."""
    path = _STORE["path"]
    if path is None:
        return
    current = {k: [p, round(a, 4)] for k, (p, a) in table().items()}
    if not current or current == _STORE["saved"]:
        return
    stored = files.read_dict(path) or {}
    merged = {**stored, **current}
    if merged != stored:
        files.write_quietly(path, merged)
    _STORE["saved"] = current


def store_path() -> Path | None:
    """The file holding this CPU's and torch's choices (None before any kernel is loaded)."""
    return _STORE["path"]


def forced() -> str:
    """The path the loaded kernels are forced to (``auto`` when they choose)."""
    codes = {v: k for k, v in PATHS.items()}
    if _MODULES:
        return codes[_MODULES[0].gemm_forced()]
    return _USING[-1] if _USING else requested()


def onednn_usable() -> bool | None:
    """Whether this torch runs float32 GEMMs on oneDNN (None before any kernel is loaded)."""
    return bool(_MODULES[0].gemm_onednn_usable()) if _MODULES else None


def one_thread_usable() -> bool | None:
    """Whether the kernels can hold BLAS to the calling thread (the ``blas1`` path; None before
    any kernel is loaded)."""
    if not _MODULES or not hasattr(_MODULES[0], "gemm_one_thread_usable"):
        return None
    return bool(_MODULES[0].gemm_one_thread_usable())


@contextlib.contextmanager
def use(name: str) -> Iterator[None]:
    """Force path ``name`` (``auto``, ``blas``, ``onednn``, ``blas1`` or ``tiny``) in this
    block, for every kernel loaded before or during it; the tests and ``ctrlrnn bench --gemm``
    use it."""
    if name not in PATHS:
        raise ValueError(f"name: expected one of {sorted(PATHS)}, got {name!r}")
    before = {id(m): m.gemm_forced() for m in _MODULES}
    _USING.append(name)
    try:
        for mod in _MODULES:
            _apply(mod, name)
        yield
    finally:
        _USING.pop()
        outer = PATHS[_USING[-1] if _USING else requested()]
        for mod in _MODULES:
            mod.gemm_force(before.get(id(mod), outer))
