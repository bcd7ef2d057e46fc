"""The compiled kernels' cache of freed output blocks (``ops/csrc/output_pool.h``).

On Linux, glibc hands blocks above its mmap threshold (at most 32 MiB) straight back to the
system when they are freed, so a training loop that allocates the same large outputs every step
pays a page fault and a page clear on every first write to them again (measured at ~7 GB/s
against ~35-40 GB/s for writes into mapped memory on this project's CPU machines). The compiled
kernels therefore take their outputs of 1 MiB or more from a small per-extension cache of freed
blocks, like the CUDA caching allocator does on GPUs.

The free blocks held are capped by ``CTRLRNN_OUTPUT_CACHE_MB`` (default 512 per extension, read
when the extension loads; 0 disables the cache) or :func:`set_output_cache_limit`;
:func:`empty_cache` returns them all to the system.
"""

from __future__ import annotations

from typing import Any

from ctrlrnn.ops import _extension

__all__ = ["empty_cache", "output_cache_info", "set_output_cache_limit"]


def _loaded() -> dict[str, Any]:
    """The loaded compiled extensions that keep an output cache."""
    return {
        name: mod
        for name, mod in _extension.loaded_modules().items()
        if hasattr(mod, "output_cache_stats")
    }


def output_cache_info() -> dict[str, dict[str, int]]:
    """Per loaded extension: ``held_bytes`` (free blocks kept), ``limit_bytes``,
    ``fresh_allocations`` and ``reuses`` since the process started."""
    info: dict[str, dict[str, int]] = {}
    for name, mod in _loaded().items():
        held, limit, fresh, reused = mod.output_cache_stats()
        info[name] = {"held_bytes": held, "limit_bytes": limit, "fresh_allocations": fresh,
                      "reuses": reused}
    return info


def empty_cache() -> int:
    """Return every cached free block to the system; the bytes freed (live outputs are not
    touched: their blocks return to the cache, or to the system when the cache is off, when they
    die)."""
    return sum(int(mod.output_cache_release()) for mod in _loaded().values())


def set_output_cache_limit(megabytes: int) -> None:
    """Cap the free blocks each loaded extension keeps at ``megabytes`` MiB (0 disables the
    cache and frees what it held). Extensions loaded later read ``CTRLRNN_OUTPUT_CACHE_MB``."""
    if not isinstance(megabytes, int) or isinstance(megabytes, bool) or megabytes < 0:
        raise ValueError(f"megabytes: expected an integer >= 0, got {megabytes!r}")
    for mod in _loaded().values():
        mod.output_cache_set_limit(megabytes << 20)
