"""A loaded kernel extension as one Python object: its ``torch.ops`` namespace's ops, resolved once.

Each extension registers its ops with ``TORCH_LIBRARY`` (the schemas and CPU kernels its C++
files define, the namespace :func:`ctrlrnn.ops.registry.module_source` writes), so the library
holds no Python binding and loads with ``torch.ops.load_library`` under any CPython version.
The Python side calls its kernels as it called the attributes of a pybind11 module:
``lib.linear_scan_forward(...)``. Each attribute is the op's default overload, resolved once,
on first use, and then kept as a plain attribute (its ``_op``, the callable its ``__call__``
forwards to, so a call costs one dispatcher call and no Python frame of ours); the GEMM table's
three ops, whose schemas carry lists where the Python side uses a dict, have dict-shaped
wrappers here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ctrlrnn.ops import registry

__all__ = ["KernelLibrary", "load_library", "op_names"]

#: The libraries loaded in this process, by ``torch.ops`` namespace: a namespace can be
#: registered once per process, so a second load of one returns the first.
_LOADED: dict[str, KernelLibrary] = {}


def op_names(namespace: str) -> list[str]:
    """The names of the ops registered in ``torch.ops.<namespace>`` (overload names dropped)."""
    prefix = namespace + "::"
    names = {n[len(prefix):].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith(prefix)}
    return sorted(names)


class KernelLibrary:
    """The ops of one loaded extension as attributes (see the module docstring).

    ``__file__`` is the library's path, ``namespace`` its ``torch.ops`` namespace; the
    family's flags (:attr:`ctrlrnn.ops.registry.Family.flags`) are attributes set to true.
    """

    def __init__(self, family: str, path: Path, namespace: str) -> None:
        fam = registry.FAMILIES.get(family)
        self.__name__ = f"ctrlrnn_{family}"
        self.__file__ = str(path)
        self.__doc__ = fam.doc if fam else family
        self.family = family
        self.namespace = namespace
        self.ops = op_names(namespace)
        for flag in fam.flags if fam else ():
            setattr(self, flag, True)

    def __getattr__(self, name: str) -> Any:
        """An op of the library, resolved on first use and then kept as an attribute (later
        lookups do not reach this method). The GEMM table's ops get their dict wrappers."""
        if name.startswith("__") or name not in self.__dict__.get("ops", ()):
            raise AttributeError(f"{self!r} has no op {name!r}")
        wrappers = {"gemm_table": self._gemm_table, "gemm_table_load": self._gemm_table_load,
                    "gemm_uses": self._gemm_uses}
        value = wrappers[name] if name in wrappers else self.op(name)
        setattr(self, name, value)
        return value

    def op(self, name: str) -> Any:
        """The callable of op ``name``'s default overload (its ``_op``, which the overload's
        ``__call__`` forwards to)."""
        overload = getattr(getattr(torch.ops, self.namespace), name).default
        return getattr(overload, "_op", overload)

    def __repr__(self) -> str:
        return f"<ctrlrnn kernels {self.__name__!r} (torch.ops.{self.namespace}) " \
               f"from {self.__file__!r}>"

    def _gemm_table(self) -> dict[str, tuple[str, float]]:
        """Shape class -> (path, BLAS time / oneDNN time)."""
        keys, paths, advantages = self.op("gemm_table")()
        return {k: (p, float(a)) for k, p, a in zip(keys, paths, advantages)}

    def _gemm_table_load(self, table: dict[str, Any]) -> None:
        """Add measured choices (as :meth:`_gemm_table` returns them)."""
        keys = list(table)
        self.op("gemm_table_load")(keys, [str(table[k][0]) for k in keys],
                                   [float(table[k][1]) for k in keys])

    def _gemm_uses(self) -> dict[str, tuple[str, int]]:
        """Shape class -> (path, calls) of the GEMMs run since ``gemm_uses_clear()``."""
        keys, paths, calls = self.op("gemm_uses")()
        return {k: (p, int(c)) for k, p, c in zip(keys, paths, calls)}


def load_library(family: str, path: Path, namespace: str) -> KernelLibrary:
    """Load the library at ``path`` (which registers ``torch.ops.<namespace>``) once per
    process and return its ops; a namespace already loaded returns the library loaded first
    (its kernels are the ones registered)."""
    known = _LOADED.get(namespace)
    if known is not None:
        return known
    if not op_names(namespace):
        try:
            torch.ops.load_library(str(path))
        except (OSError, RuntimeError) as exc:
            raise ImportError(f"cannot load {path}: {exc}") from exc
    if not op_names(namespace):
        raise ImportError(f"{path} registered no ops in torch.ops.{namespace}")
    lib = _LOADED[namespace] = KernelLibrary(family, path, namespace)
    return lib
