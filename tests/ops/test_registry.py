"""The list of ops (ctrlrnn.ops.registry): every registered op keeps its reference, its public
function, its CPU kernel and its CUDA kernel (or the reason it has none) in its own folder, and
every table of kernels (the extensions' sources and bindings, the GPU families, the exports) is
the one derived from the list."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from ctrlrnn.ops import _extension, cells_ref, fused_cells, gpu, registry

OPS_DIR = registry.OPS_DIR


def _top_level_names(path: Path) -> set[str]:
    """The functions, classes and names a Python file defines at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


@pytest.mark.parametrize("op", registry.OPS, ids=lambda op: op.name)
def test_every_registered_op_has_its_reference_and_kernels_in_its_folder(op: registry.Op) -> None:
    folder = op.directory
    assert (folder / "reference.py").is_file(), f"{op.name}: no reference.py in {folder}"
    assert (folder / "__init__.py").is_file(), f"{op.name}: no autograd op in {folder}"
    cpp = OPS_DIR / op.source
    assert cpp.is_file() and cpp.parent == folder, f"{op.name}: no {cpp.name} in {folder}"
    text = cpp.read_text(encoding="utf-8")
    assert re.search(rf"\bvoid register_{op.name}\(torch::Library& m\)", text), cpp
    assert "pybind" not in text, f"{cpp.name} uses pybind11 (its ops are TORCH_LIBRARY ones)"
    for function in op.functions:  # each defined with its schema
        assert f'm.def("{function}(' in text, f"{cpp.name} does not define {function}"
    kernels = folder / "triton_kernels.py"
    if op.cpu_only:
        assert not kernels.exists(), f"{op.name} says it is CPU-only but has {kernels}"
        assert len(op.cpu_only.split()) >= 5, "a CPU-only op states why"
        return
    assert kernels.is_file(), f"{op.name}: no triton_kernels.py and no CPU-only reason"
    defined = _top_level_names(kernels)
    # a cell's kernels are the two step kernels the shared host loop runs (cells/triton_host.py)
    wanted = {"step_forward", "step_backward"} if op.is_cell else set(op.functions)
    assert wanted <= defined, f"{kernels} lacks {sorted(wanted - defined)}"


@pytest.mark.parametrize("op", registry.OPS, ids=lambda op: op.name)
def test_every_registered_op_has_a_public_function(op: registry.Op) -> None:
    module = importlib.import_module(op.module)
    public = [getattr(module, name) for name in module.__all__]
    assert any(callable(f) for f in public), f"{op.module} exports no function"
    reference = importlib.import_module(f"{op.module}.reference")
    assert any(name.endswith(("_ref", "_reference")) and callable(getattr(reference, name))
               for name in reference.__all__), f"{op.module}.reference exports no *_ref"


def test_no_kernel_file_lies_outside_the_list() -> None:
    """Every C++ source under ops/ is a registered op's or the shared runtime's, and every op
    folder (one with a reference.py) is registered."""
    registered = {op.source for op in registry.OPS} | {registry.RUNTIME_SOURCE}
    sources = {p.relative_to(OPS_DIR).as_posix() for p in OPS_DIR.rglob("*.cpp")}
    assert sources == registered
    folders = {p.parent.relative_to(OPS_DIR).as_posix() for p in OPS_DIR.rglob("reference.py")}
    assert folders - {"cells"} == {op.folder for op in registry.OPS}


def test_the_tables_are_derived_from_the_list() -> None:
    assert set(_extension.EXTENSIONS) == set(registry.FAMILIES)
    for family, sources in _extension.EXTENSIONS.items():
        ops = registry.ops_of(family)
        assert sources == [registry.RUNTIME_SOURCE, *(op.source for op in ops)]
        module = _extension.module_text(family)
        assert module is not None and "TORCH_LIBRARY(ns, m)" in module
        assert "pybind" not in module.lower()
        assert module.count("::register_") == len(ops) + 1  # the runtime and each op
        cpu_only = {fn for op in ops if op.cpu_only for fn in op.functions}
        assert set(gpu.FAMILY_FUNCTIONS[family]) == set(registry.functions(family)) - cpu_only
    cells = [op.name for op in registry.ops_of("cells")]
    assert gpu.CELL_FUNCTIONS == tuple(f"{c}_{way}" for c in cells for way in ("forward",
                                                                               "backward"))
    for cell in cells:
        assert callable(getattr(fused_cells, f"{cell}_sequence"))
        assert callable(getattr(fused_cells, f"{cell}_sequences"))
        assert callable(getattr(cells_ref, f"{cell}_sequence_ref"))
        assert callable(getattr(cells_ref, f"{cell}_step"))


@pytest.mark.parametrize("family", registry.families())
def test_the_built_extension_binds_every_function_of_its_ops(family: str) -> None:
    module = _extension.load(family)
    if module is None:
        pytest.skip("the compiled kernels are not available here")
    missing = [fn for fn in registry.functions(family) if not callable(getattr(module, fn, None))]
    assert missing == []
    for flag in registry.FAMILIES[family].flags:
        assert getattr(module, flag) is True
