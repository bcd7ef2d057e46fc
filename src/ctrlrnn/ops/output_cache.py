"""The compiled kernels' cache of freed output blocks (``ops/csrc/runtime/pool.h``).

On Linux, glibc hands blocks above its mmap threshold (at most 32 MiB) straight back to the
system when they are freed, so a training loop that allocates the same large outputs every step
pays a page fault and a page clear on every first write to them again (writing fresh pages
runs several times slower than writing memory already mapped). The compiled kernels therefore
take their outputs of 1 MiB or more from a cache of freed blocks, like the CUDA caching
allocator does on GPUs.

**One pool for all the extensions.** The three compiled extensions (``scan``, ``cells``,
``metagross``) share a single cache in the process: the pool is the function-local static of an
inline function of the header they all include, which GCC emits as a unique global symbol
(``STB_GNU_UNIQUE``), and the dynamic loader binds every library holding such a symbol to the
first definition it loaded, although Python loads extensions with ``RTLD_LOCAL``. So there is
one limit and one count of blocks: setting the limit through any extension sets it for all, and
an output freed by one kernel can be reused by another's. (A toolchain that emits no unique
symbols, clang or macOS, gives each extension a pool of its own; :func:`output_cache_info`
tells which by comparing the address each library resolves the pool's symbol to, and reports
``pools`` > 1 with the totals.)

The free blocks held are capped by ``CTRLRNN_OUTPUT_CACHE_MB``: 512 MiB in all by default, 0
disables the cache; it is read once, when the pool is first used (the first compiled kernel
call or cache query of the process), so set it before then, or call
:func:`set_output_cache_limit`. :func:`empty_cache` returns the free blocks to the system.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

from ctrlrnn.ops import _extension

__all__ = ["empty_cache", "output_cache_info", "set_output_cache_limit"]

#: the mangled name of ``ctrlrnn::OutputPool::instance()::pool`` (Itanium C++ ABI)
_POOL_SYMBOL = "_ZZN7ctrlrnn10OutputPool8instanceEvE4pool"

_pool_ids: dict[str, Any] = {}


def _loaded() -> dict[str, Any]:
    """The loaded compiled extensions that keep an output cache."""
    return {
        name: mod
        for name, mod in _extension.loaded_modules().items()
        if hasattr(mod, "output_cache_stats")
    }


def _pool_id(name: str, mod: ModuleType) -> Any:
    """Which pool an extension uses: the address its library resolves the pool's symbol to
    (one address for all when the symbol is unique in the process), else the extension's own."""
    path = getattr(mod, "__file__", None)
    key = f"{name}:{path}"
    if key not in _pool_ids:
        _pool_ids[key] = ("own", key)  # unless the symbol is found: a pool of its own
        if path:
            try:
                lib = ctypes.CDLL(path)  # already loaded: the same handle, nothing is re-run
                _pool_ids[key] = ctypes.addressof(ctypes.c_void_p.in_dll(lib, _POOL_SYMBOL))
            except (OSError, ValueError):
                pass
    return _pool_ids[key]


def _pools() -> dict[Any, list[tuple[str, Any]]]:
    """The distinct pools of the loaded extensions: pool id -> [(name, module), ...]."""
    pools: dict[Any, list[tuple[str, Any]]] = {}
    for name, mod in _loaded().items():
        pools.setdefault(_pool_id(name, mod), []).append((name, mod))
    return pools


def output_cache_info() -> dict[str, Any]:
    """The output cache, reported once however many extensions share it.

    Keys: ``held_bytes`` (free blocks kept), ``limit_bytes`` (the cap on them),
    ``fresh_allocations`` and ``reuses`` (since the process started), ``extensions`` (the names
    of the loaded compiled extensions using it) and ``pools`` (how many distinct pools they use:
    1 where they share one, 0 when no extension is loaded; with several, the numbers are totals
    over the pools), and ``huge_pages`` (whether its blocks of 2 MiB or more are advised onto
    huge pages: ``CTRLRNN_HUGE_PAGES``, on unless set to 0; False where the extensions predate
    it). All zero before a compiled extension is loaded.
    """
    pools = _pools()
    info: dict[str, Any] = {"held_bytes": 0, "limit_bytes": 0, "fresh_allocations": 0,
                            "reuses": 0, "extensions": [], "pools": len(pools),
                            "huge_pages": False}
    for members in pools.values():
        held, limit, fresh, reused = members[0][1].output_cache_stats()
        info["held_bytes"] += int(held)
        info["limit_bytes"] += int(limit)
        info["fresh_allocations"] += int(fresh)
        info["reuses"] += int(reused)
        info["extensions"].extend(name for name, _ in members)
        huge = getattr(members[0][1], "output_cache_huge_pages", None)
        info["huge_pages"] = info["huge_pages"] or bool(huge is not None and huge())
    info["extensions"].sort()
    return info


def empty_cache() -> int:
    """Return every cached free block to the system; the bytes freed (live outputs are not
    touched: their blocks return to the cache, or to the system when the cache is off, when they
    die)."""
    return sum(int(members[0][1].output_cache_release()) for members in _pools().values())


def set_output_cache_limit(megabytes: int) -> None:
    """Cap the free blocks the output cache keeps at ``megabytes`` MiB, for all the extensions
    sharing it (0 disables the cache and frees what it held). With no compiled extension loaded
    yet, nothing is set: the pool reads ``CTRLRNN_OUTPUT_CACHE_MB`` when first used."""
    if not isinstance(megabytes, int) or isinstance(megabytes, bool) or megabytes < 0:
        raise ValueError(f"megabytes: expected an integer >= 0, got {megabytes!r}")
    for members in _pools().values():
        members[0][1].output_cache_set_limit(megabytes << 20)
