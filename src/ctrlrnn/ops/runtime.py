"""Which CPU runtime serves the compiled kernels: ``tuned`` (default) or ``plain``
(``ops/csrc/runtime/``).

The kernels ask one interface (``csrc/runtime/runtime.h``) for their outputs, their GEMMs and
their activations. Two runtimes answer it:

``tuned``
    the output cache with huge pages (:mod:`.output_cache`), the GEMM path measured per shape
    class (:mod:`.gemm_path`: MKL's packed GEMM, oneDNN, BLAS on one thread, the tiny kernel),
    streaming stores for large outputs and a vectorised polynomial exp;
``plain``
    torch alone: ``at::empty``, ``at::mm_out`` and ``addmm_``, ordinary stores, ``std::exp``
    and ``std::tanh``.

Both compute the same results up to float32 rounding, and the kernel tests run under each, so a
kernel's correctness never rests on the machinery. ``CTRLRNN_RUNTIME`` picks the runtime when
the first extension loads; :func:`use` switches it at run time (no rebuild), for every loaded
extension and those loaded later.

Three of the tuned runtime's mechanisms have no variable of their own, so that a benchmark can
measure each alone: ``CTRLRNN_RUNTIME_OFF`` (:data:`MECHANISMS`) switches them off one by one,
:func:`switch_off` at run time, and :func:`mechanism_uses` counts the calls each served.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import ModuleType

from ctrlrnn import settings

__all__ = ["ENV", "MECHANISMS", "OFF_ENV", "RUNTIMES", "attach", "current", "mechanism_uses",
           "switch_off", "switched_off", "use", "using"]

#: The environment variable that picks the runtime.
ENV = "CTRLRNN_RUNTIME"
#: The runtimes.
RUNTIMES = ("tuned", "plain")
#: The environment variable that switches tuned mechanisms off.
OFF_ENV = "CTRLRNN_RUNTIME_OFF"
#: The mechanisms it takes: MKL's packed per-step GEMM, the polynomial exp and tanh, the stacked
#: recurrences' outputs without a copy.
MECHANISMS = settings.RUNTIME_MECHANISMS

_LOCK = threading.Lock()
_MODULES: list[ModuleType] = []
#: The runtime :func:`use` chose (None: ``CTRLRNN_RUNTIME`` decides).
_CHOSEN: list[str] = []
#: The mechanisms :func:`switch_off` chose (empty: ``CTRLRNN_RUNTIME_OFF`` decides).
_OFF: list[tuple[str, ...]] = []


def requested() -> str:
    """The runtime ``CTRLRNN_RUNTIME`` asks for; a :class:`~ctrlrnn.settings.SettingError`
    naming the variable when its value is not one of :data:`RUNTIMES`."""
    return str(settings.value(ENV))


def attach(mod: ModuleType) -> None:
    """Called by the extension loader after it configured ``mod``: a runtime chosen by
    :func:`use` overrides the setting there too."""
    if not hasattr(mod, "set_runtime"):
        return
    with _LOCK:
        if not any(m is mod for m in _MODULES):
            _MODULES.append(mod)
        if _CHOSEN:
            mod.set_runtime(_CHOSEN[-1])
        if _OFF and hasattr(mod, "set_runtime_off"):
            mod.set_runtime_off(list(_OFF[-1]))


def current() -> str:
    """The runtime serving the kernels now (the chosen or requested one while no extension
    is loaded)."""
    with _LOCK:
        if _MODULES:
            return str(_MODULES[0].runtime())
        return _CHOSEN[-1] if _CHOSEN else requested()


def use(name: str) -> None:
    """Serve the kernels by runtime ``name`` (``tuned`` or ``plain``) from the next call on."""
    if name not in RUNTIMES:
        raise ValueError(f"name: expected one of {', '.join(RUNTIMES)}, got {name!r}")
    with _LOCK:
        _CHOSEN[:] = [name]
        for mod in _MODULES:
            mod.set_runtime(name)


@contextlib.contextmanager
def using(name: str) -> Iterator[None]:
    """:func:`use` ``name`` inside the ``with`` block; the runtime before it afterwards."""
    before = current()
    use(name)
    try:
        yield
    finally:
        use(before)


def switched_off() -> tuple[str, ...]:
    """The tuned mechanisms switched off now (:data:`MECHANISMS`)."""
    with _LOCK:
        if _MODULES:
            return tuple(str(n) for n in _MODULES[0].runtime_off())
        return _OFF[-1] if _OFF else tuple(settings.value(OFF_ENV))


def switch_off(*names: str) -> None:
    """Switch off exactly the tuned mechanisms ``names`` (the others on) from the next call on."""
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        raise ValueError(f"names: expected among {', '.join(MECHANISMS)}, got {unknown}")
    chosen = tuple(n for n in MECHANISMS if n in names)
    with _LOCK:
        _OFF[:] = [chosen]
        for mod in _MODULES:
            mod.set_runtime_off(list(chosen))


def mechanism_uses(clear: bool = False) -> dict[str, int]:
    """How many kernel calls each switchable mechanism served since the last clear (one count
    per process, shared by the extensions); ``clear`` resets the counts after reading them."""
    with _LOCK:
        if not _MODULES:
            return dict.fromkeys(MECHANISMS, 0)
        names, counts = _MODULES[0].mechanism_uses()
        if clear:
            _MODULES[0].mechanism_uses_clear()
    return {str(n): int(c) for n, c in zip(names, counts, strict=True)}
