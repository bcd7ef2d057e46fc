"""The platform wheel with prebuilt kernels (issue 73, docs/install.md), end to end.

``scripts/build-wheel`` builds the wheel (its compiles kept in ``build/wheel``, so a second run
only repackages); it is installed into a fresh virtual environment that sees this one's torch,
and used there with no compiler (``CC``/``CXX`` set to ``/bin/false``) and an empty kernel
cache: ``ctrlrnn info`` names the prebuilt kernels, a QRNN, a CAS-LSTM and a METAGROSS train a
step on them, the first forward after ``import ctrlrnn`` takes under 10 s, and nothing is
written to the cache. The wheel's manifest edited to another torch makes the same install fall
back to the build on first use, with one line saying why. The libraries are abi3: no versioned
CPython suffix and no reference to a Python symbol.

The wheel holds the ``native`` variant: the kernel cache's builds for this CPU, packaged as they
are (``scripts/build-wheel`` builds the portable ``x86-64-v4`` and ``x86-64-v3`` by default,
minutes each). Marked ``wheel`` (``-m "not wheel"`` skips it); it skips itself where no C++
compiler is found.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from install_helpers import ROOT, build_wheel, no_compiler_env

from ctrlrnn.ops import _extension, prebuilt, registry

pytestmark = [
    pytest.mark.wheel,
    pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                       reason="no C++ compiler to build the wheel's kernels"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                       reason="the wheel's CPU variants are x86-64 ones, built on Linux"),
]

#: The test packages the kernel cache's builds for this CPU (``--variants native``): the wheel's
#: loading, its manifest and its fallback are the same for every variant, and the portable
#: variants' compile (:func:`test_a_portable_variant_compiles_for_its_level_not_this_cpu`) would
#: cost the suite minutes more.
VARIANT = "native"

#: Trains a QRNN, a CAS-LSTM and a METAGROSS one step; the last line is JSON with the seconds
#: the imports took, the seconds from after ``import ctrlrnn`` to the end of the first forward,
#: and each family's origin.
TRAIN = """
import json, time
begin = time.perf_counter()
import torch
import ctrlrnn
start = time.perf_counter()
torch.manual_seed(0)
x = torch.randn(6, 3, 8)
layers = [ctrlrnn.QRNN(8, 16, num_layers=2), ctrlrnn.CASLSTM(8, 16),
          ctrlrnn.Metagross(8, 16, depth=2)]
first = None
for m in layers:
    before = [p.detach().clone() for p in m.parameters()]
    out = m(x)
    first = first or time.perf_counter() - start
    # (after the timed forward: the first optimizer imports torch._dynamo, seconds of its own)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    out = out[0] if isinstance(out, tuple) else out
    out.square().sum().backward()
    opt.step()
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
from ctrlrnn.ops import _extension
print(json.dumps({"first_forward_s": first, "import_s": start - begin, "file": ctrlrnn.__file__,
                  "origins": {n: s.origin for n, s in _extension._STATUS.items()}}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``scripts/build-wheel`` writes for :data:`VARIANT`."""
    return build_wheel(tmp_path_factory.mktemp("dist"), VARIANT)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed; it sees this environment's
    packages (torch) through a ``.pth`` line, after its own."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    here = next(p for p in sys.path if p.endswith("site-packages"))
    Path(site.stdout.strip(), "outer.pth").write_text(here + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(wheel)], check=True, timeout=600)
    return env_dir


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_the_wheel_is_abi3_and_records_its_torch(wheel: Path) -> None:
    import torch

    assert "-cp310-abi3-linux_x86_64" in wheel.name and "+pt" in wheel.name
    with zipfile.ZipFile(wheel) as z:
        libs = [n for n in z.namelist() if n.endswith(".so")]
        manifest = json.loads(z.read("ctrlrnn/_kernels/manifest.json"))
        assert manifest["torch"] == torch.__version__
        assert [v["name"] for v in manifest["variants"]] == [VARIANT]
        assert len(libs) == len(manifest["variants"][0]["libraries"]) == 3
        assert not [n for n in libs if "cpython" in n or "abi3" in n], libs
        extract = wheel.parent / "libs"
        z.extractall(extract, members=libs)
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm to list the libraries' symbols")
    for lib in libs:
        undefined = subprocess.run([nm, "-D", "--undefined-only", str(extract / lib)],
                                   capture_output=True, text=True, check=True).stdout.split()
        assert not [s for s in undefined if s.startswith(("Py", "_Py"))], lib


def test_the_wheel_trains_without_a_compiler_and_writes_nothing(installed: Path,
                                                                tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    env = no_compiler_env(cache)
    info = subprocess.run([str(installed / "bin" / "ctrlrnn"), "info"], env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    assert f"prebuilt kernels: {VARIANT}, built for torch" in info.stdout, info.stdout
    assert info.stdout.count(f"(prebuilt kernels {VARIANT}, ") == 3, info.stdout
    run = subprocess.run([str(installed / "bin" / "python"), "-c", TRAIN], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["file"].startswith(str(installed)), got
    assert set(got["origins"].values()) == {"prebuilt"}, got
    assert got["first_forward_s"] < 10, got
    assert "prebuilt" not in run.stderr and "compil" not in run.stderr, run.stderr
    assert _files(cache) == []


def test_another_torch_falls_back_with_one_line(installed: Path, tmp_path: Path) -> None:
    """The recorded torch edited to another version: the kernels are built on first use (here
    that fails, there being no compiler, and the reference runs after its warning)."""
    py = installed / "bin" / "python"
    where = subprocess.run([str(py), "-c", "from ctrlrnn.ops import prebuilt; "
                            "print(prebuilt.KERNELS_DIR / prebuilt.MANIFEST)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    manifest = Path(where)
    saved = manifest.read_text()
    manifest.write_text(json.dumps({**json.loads(saved), "torch": "2.12.0+cpu"}))
    try:
        run = subprocess.run([str(py), "-c", TRAIN], env=no_compiler_env(tmp_path / "cache"),
                             capture_output=True, text=True, timeout=300, check=False)
    finally:
        manifest.write_text(saved)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "prebuilt" in line]
    assert len(said) == 1, run.stderr
    assert "built for torch 2.12.0+cpu" in said[0] and "building them on first use" in said[0]
    got = json.loads(run.stdout.splitlines()[-1])
    assert "prebuilt" not in got["origins"].values(), got
    # the build on first use has every source it compiles in the installed package
    code = ("from ctrlrnn.ops import registry as r; print([s for f in r.families() "
            "for s in r.sources(f) if not (r.OPS_DIR / s).is_file()])")
    missing = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    assert missing.stdout.strip() == "[]", missing.stdout


def test_a_portable_variant_compiles_for_its_level_not_this_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``scripts/build-wheel --variants x86-64-v3`` compiles every extension's sources for that
    level (never ``-march=native``), tuned generically, in the namespace the wheel registers;
    the compile itself is the one the kernel cache runs (``_build.compile_extension``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_wheel", ROOT / "scripts" /
                                                  "build_wheel.py")
    assert spec is not None and spec.loader is not None
    build_wheel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_wheel)
    jobs = []

    def fake_compile(job):  # records the job, "builds" an empty library
        jobs.append(job)
        lib = job.folder / f"{job.module}.so"
        lib.write_bytes(b"")
        return lib, "", 0.0, False

    monkeypatch.setattr(build_wheel._build, "compile_extension", fake_compile)
    built = build_wheel.compile_variant("x86-64-v3", tmp_path)
    assert sorted(built) == sorted(registry.families())
    for job in jobs:
        family = job.module.removeprefix("ctrlrnn_")
        assert "-march=x86-64-v3" in job.cflags and "-mtune=generic" in job.cflags
        assert "-march=native" not in job.cflags
        assert f"-D{registry.NAMESPACE_MACRO}={registry.namespace(family)}" in job.cflags
        assert built[family]["namespace"] == registry.namespace(family)
        wanted = {str(registry.OPS_DIR / s) for s in registry.sources(family)}
        assert wanted <= set(job.sources)
        assert [c for c in _extension.CFLAGS if c != "-march=native"] == [
            c for c in job.cflags if c in _extension.CFLAGS]
    assert build_wheel.variant_flags("x86-64-v3") == list(prebuilt.VARIANT_FLAGS["x86-64-v3"])
    assert set(build_wheel.variant_flags("native")) == prebuilt.cpu_flags()
