"""Building, caching and loading the compiled CPU extensions.

Each family of ops (``scan`` for the linear scan and QRNN pooling, ``cells`` for the fused gated
cells) is one C++ extension compiled against the installed PyTorch with
:func:`torch.utils.cpp_extension.load`. The build happens once per machine, PyTorch version and
source hash, into ``$CTRLRNN_CACHE/ext`` (default ``~/.cache/ctrlrnn/ext``), and is reused after.

Policy (never silently slow):

* ``CTRLRNN_BACKEND=reference`` forces the readable reference implementations (for debugging).
* When a build fails, one :class:`RuntimeWarning` names the extension and the compiler error,
  and :func:`ctrlrnn.backend_info` reports the reason; with ``CTRLRNN_REQUIRE_COMPILED=1`` the
  failure is an error instead (the test suite sets it).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

CSRC = Path(__file__).resolve().parent / "csrc"

#: The extensions ctrlrnn ships: name -> C++ source files under ``ops/csrc``.
EXTENSIONS: dict[str, list[str]] = {
    "scan": ["scan.cpp"],
    "cells": ["cells.cpp"],
    "metagross": ["metagross.cpp"],
}


@dataclass
class ExtensionStatus:
    """What happened when an extension was asked for."""

    name: str
    loaded: bool = False
    reason: str = "not built yet"
    path: str | None = None
    threads: int | None = None
    module: ModuleType | None = field(default=None, repr=False)


_STATUS: dict[str, ExtensionStatus] = {}
_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Root of ctrlrnn's on-disk cache (``$CTRLRNN_CACHE`` or ``~/.cache/ctrlrnn``)."""
    root = os.environ.get("CTRLRNN_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ctrlrnn"


def forced_reference() -> bool:
    """True when ``CTRLRNN_BACKEND=reference`` asks for the reference implementations."""
    return os.environ.get("CTRLRNN_BACKEND", "").lower() in {"reference", "ref", "python"}


def _cpu_signature() -> str:
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("model name", "flags")):
                    model += line
    except OSError:
        pass
    return model


CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast", "-fno-math-errno",
          "-fno-trapping-math", "-std=c++17"]


def _build_key(name: str) -> str:
    h = hashlib.sha256()
    h.update(" ".join(CFLAGS).encode())
    for src in EXTENSIONS[name]:
        h.update((CSRC / src).read_bytes())
    for extra in sorted(CSRC.glob("*.h")):
        h.update(extra.read_bytes())
    h.update(torch.__version__.encode())
    h.update(sys.version.encode())
    h.update(_cpu_signature().encode())
    return h.hexdigest()[:16]


def _build(name: str, verbose: bool) -> ModuleType:
    from torch.utils import cpp_extension

    build_dir = cache_dir() / "ext" / f"{name}-{_build_key(name)}"
    build_dir.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name=f"ctrlrnn_{name}",
        sources=[str(CSRC / s) for s in EXTENSIONS[name]],
        extra_cflags=CFLAGS,
        extra_ldflags=["-fopenmp"],
        build_directory=str(build_dir),
        verbose=verbose,
    )


def load(name: str, *, verbose: bool = False) -> ModuleType | None:
    """Return the compiled extension ``name``, building it on first use; None if unavailable.

    A failure warns once (or raises under ``CTRLRNN_REQUIRE_COMPILED=1``); the reason is kept for
    :func:`ctrlrnn.backend_info`.
    """
    if name not in EXTENSIONS:
        raise ValueError(f"name: unknown extension {name!r}; known: {sorted(EXTENSIONS)}")
    st = _STATUS.get(name)
    if st is not None and (st.loaded or st.reason != "not built yet"):
        return st.module
    with _LOCK:
        st = _STATUS.get(name)
        if st is not None and (st.loaded or st.reason != "not built yet"):
            return st.module
        st = ExtensionStatus(name)
        if forced_reference():
            st.reason = "CTRLRNN_BACKEND=reference set"
            _STATUS[name] = st
            return None
        try:
            mod = _build(name, verbose)
        except Exception as exc:  # noqa: BLE001 - any build failure is reported, not hidden
            st.reason = f"build failed: {type(exc).__name__}: {str(exc).strip()[-2000:]}"
            _STATUS[name] = st
            if os.environ.get("CTRLRNN_REQUIRE_COMPILED", "") not in {"", "0"}:
                raise RuntimeError(
                    f"ctrlrnn: the compiled extension {name!r} could not be built and "
                    f"CTRLRNN_REQUIRE_COMPILED is set.\n{st.reason}"
                ) from exc
            warnings.warn(
                f"ctrlrnn: compiled CPU extension {name!r} unavailable, using the slow reference "
                f"implementation. {st.reason[:500]}  (Needs a C++ compiler and ninja; "
                f"`ctrlrnn info` shows details.)",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        st.loaded = True
        st.module = mod
        st.path = getattr(mod, "__file__", None)
        st.reason = "compiled C++ extension"
        threads = getattr(mod, "num_threads", None)
        st.threads = int(threads()) if callable(threads) else None
        _STATUS[name] = st
        return mod


def status(name: str) -> ExtensionStatus:
    """The status of extension ``name`` (building it if it has not been asked for yet)."""
    load(name)
    return _STATUS[name]


def build_all(verbose: bool = True) -> dict[str, ExtensionStatus]:
    """Build every extension now (used by the installer and ``ctrlrnn build``)."""
    return {name: status(name) for name in EXTENSIONS if (load(name, verbose=verbose) or True)}
