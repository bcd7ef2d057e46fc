"""The compiled ops, one list: every other table of kernels is derived from :data:`OPS`.

Each :class:`Op` lives in its own folder under ``ops/`` (``ops/<op>/`` or ``ops/cells/<cell>/``)
with the same files:

* ``reference.py``: the readable reference, written from the paper's equations;
* ``__init__.py``: the autograd op and the public function;
* ``<op>.cpp``: the CPU kernels, with a ``register_<op>`` function that defines their schemas
  and registers them in the extension's ``TORCH_LIBRARY`` namespace;
* ``triton_kernels.py``: the CUDA kernels (or, for a CPU-only op, :attr:`Op.cpu_only` says why
  there are none).

From the list come the C++ extensions' sources and their module source (:func:`sources`,
:func:`module_source`), each family's kernel functions (:func:`functions`) and the modules that
give a family's CUDA kernels (:func:`gpu_modules`). Adding an op is one entry here plus its own
folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["FAMILIES", "OPS", "Family", "Op", "families", "functions", "gpu_modules",
           "module_source", "namespace", "ops_of", "sources"]

#: The folder of ``ctrlrnn.ops``: op folders are named relative to it.
OPS_DIR = Path(__file__).resolve().parent

#: The shared C++ runtime every extension carries (``ops/csrc/runtime``), relative to
#: :data:`OPS_DIR`.
RUNTIME_SOURCE = "csrc/runtime/runtime.cpp"


@dataclass(frozen=True)
class Family:
    """One compiled extension (and its GPU counterpart): a group of ops loaded together."""

    name: str
    doc: str
    #: Attributes the loaded extension's Python object sets to true (what its kernels promise
    #: the Python side).
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Op:
    """One op: its name, its family, its folder under ``ops/`` and the kernel functions its CPU
    module and its CUDA module both expose (the same names, the same signatures)."""

    name: str
    family: str
    folder: str
    functions: tuple[str, ...]
    #: The C++ namespace of ``register_<name>``.
    namespace: str = "ctrlrnn"
    #: Why the op has no CUDA kernel ("" when ``triton_kernels.py`` provides one).
    cpu_only: str = ""

    @property
    def directory(self) -> Path:
        """The op's folder."""
        return OPS_DIR / self.folder

    @property
    def source(self) -> str:
        """Its C++ file, relative to :data:`OPS_DIR`."""
        return f"{self.folder}/{self.name}.cpp"

    @property
    def module(self) -> str:
        """The Python module of its autograd op and public function."""
        return "ctrlrnn.ops." + self.folder.replace("/", ".")

    @property
    def is_cell(self) -> bool:
        """A fused gated cell, whose CUDA kernels run in the shared host loop
        (:mod:`ctrlrnn.ops.cells.triton_host`)."""
        return self.folder.startswith("cells/")


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("scan", "ctrlrnn compiled CPU kernels: linear scan, QRNN pooling and convolution "
                   "windows, the RCRN listener, the cells' fused decoding steps"),
    Family("cells", "ctrlrnn fused gated cells (LSTM, GRU, CAS-LSTM, nCARNN, METAGROSS as "
                    "printed) on CPU", flags=("runs_recurrences_concurrently",)),
    Family("metagross", "ctrlrnn compiled CPU kernels: one METAGROSS level, gates and scan "
                        "fused"),
)}


def _cell(name: str) -> Op:
    return Op(name, "cells", f"cells/{name}", (f"{name}_forward", f"{name}_backward"),
              namespace="ctrlrnn::cells")


OPS: tuple[Op, ...] = (
    Op("linear_scan", "scan", "linear_scan", ("linear_scan_forward", "linear_scan_backward")),
    Op("qrnn_pooling", "scan", "qrnn_pooling", ("qrnn_pooling_forward", "qrnn_pooling_backward")),
    Op("rcrn_listener", "scan", "rcrn_listener",
       ("rcrn_listener_forward", "rcrn_listener_backward")),
    Op("conv_windows", "scan", "conv_windows", ("shifted_windows", "shifted_windows_adjoint"),
       cpu_only="on CUDA the reference's pad and concatenation are already one kernel each, "
                "and its output goes to torch's caching allocator"),
    Op("cell_steps", "scan", "cell_steps",
       ("qrnn_cell_step", "rcrn_cell_step", "carnn_cell_step", "metagross_cell_step",
        "metagross_printed_step", "caslstm_cell_step"),
       cpu_only="the fused steps serve small-batch decoding on CPU, where a step's dispatcher "
                "calls cost more than its arithmetic; on CUDA a step is launch-bound either way"),
    Op("cell_step_grads", "scan", "cell_step_grads",
       ("rcrn_cell_step_backward", "metagross_step_backward", "caslstm_step_backward",
        "carnn_step_backward", "qrnn_step_backward"),
       cpu_only="the steps that record a graph serve short training calls at small batches on "
                "CPU, where the whole-sequence path's fixed cost per call exceeds the arithmetic"),
    Op("metagross_level", "metagross", "metagross_level", ("forward", "backward")),
    _cell("lstm"),
    _cell("gru"),
    _cell("cas_lstm"),
    _cell("ncarnn"),
    _cell("metagross_state"),
)


def families() -> list[str]:
    """The extensions, in build order."""
    return list(FAMILIES)


def ops_of(family: str, ops: tuple[Op, ...] | None = None) -> list[Op]:
    """The ops of ``family`` (from ``ops``, default :data:`OPS`)."""
    return [op for op in (OPS if ops is None else ops) if op.family == family]


def sources(family: str, ops: tuple[Op, ...] | None = None) -> list[str]:
    """The C++ sources of extension ``family``, relative to :data:`OPS_DIR`: the runtime and
    each op's file."""
    return [RUNTIME_SOURCE, *(op.source for op in ops_of(family, ops))]


def functions(family: str, ops: tuple[Op, ...] | None = None) -> tuple[str, ...]:
    """The kernel functions family ``family``'s CPU and CUDA modules expose."""
    return tuple(fn for op in ops_of(family, ops) for fn in op.functions)


def gpu_modules(family: str, ops: tuple[Op, ...] | None = None) -> list[str]:
    """The modules holding the CUDA kernels of ``family``'s ops that have them (for the cells,
    the shared host loop, which runs each cell's ``triton_kernels``)."""
    names: list[str] = []
    for op in ops_of(family, ops):
        if op.cpu_only:
            continue
        name = "ctrlrnn.ops.cells.triton_host" if op.is_cell else f"{op.module}.triton_kernels"
        if name not in names:
            names.append(name)
    return names


#: The macro naming the ``TORCH_LIBRARY`` namespace of an extension: its compile defines it (the
#: kernel cache and the wheel name their own), else the module source defaults it to
#: :func:`namespace`.
NAMESPACE_MACRO = "CTRLRNN_OPS_NAMESPACE"


def namespace(family: str) -> str:
    """The ``torch.ops`` namespace extension ``family`` registers its ops in when its compile
    names none (:data:`NAMESPACE_MACRO`)."""
    return f"ctrlrnn_{family}"


def module_source(family: str, ops: tuple[Op, ...] | None = None) -> str:
    """The C++ file that registers extension ``family``'s ops in one ``TORCH_LIBRARY``
    namespace (:data:`NAMESPACE_MACRO`): it declares and calls the runtime's
    ``register_runtime`` and each op's ``register_<op>``, which define the ops' schemas and CPU
    kernels. The library holds no Python binding: ``torch.ops.load_library`` loads it, under any
    CPython version."""
    chosen = ops_of(family, ops)
    lines = ["// Written by ctrlrnn/ops/registry.py from its list of ops: edit that list.",
             "#include <torch/library.h>", "", f"#ifndef {NAMESPACE_MACRO}",
             f"#define {NAMESPACE_MACRO} {namespace(family)}", "#endif",
             "// TORCH_LIBRARY pastes its argument: one more macro expands the namespace first",
             "#define CTRLRNN_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)", "",
             "namespace ctrlrnn {", "void register_runtime(torch::Library& m);",
             "}  // namespace ctrlrnn"]
    for op in chosen:
        lines += [f"namespace {op.namespace} {{",
                  f"void register_{op.name}(torch::Library& m);",
                  f"}}  // namespace {op.namespace}"]
    lines += ["", f"CTRLRNN_LIBRARY({NAMESPACE_MACRO}, m) {{", "  ctrlrnn::register_runtime(m);"]
    lines += [f"  {op.namespace}::register_{op.name}(m);" for op in chosen]
    lines += ["}", ""]
    return "\n".join(lines)
