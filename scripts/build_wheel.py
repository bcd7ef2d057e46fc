"""Build a platform wheel of ctrlrnn with its CPU kernels prebuilt (run by scripts/build-wheel).

The kernels are compiled ahead of time against the torch of the running interpreter, once per
CPU variant (``-march=x86-64-v4``, ``-march=x86-64-v3``, ...: never ``-march=native``, so the
wheel runs on other x86-64 CPUs), each extension a plain library that registers its ops with
``TORCH_LIBRARY`` and uses no Python API (abi3). The pure wheel setuptools writes is then given
the libraries under ``ctrlrnn/_kernels/<variant>/``, a ``manifest.json`` recording the torch
they were built for (version and C++ ABI) and each variant's CPU flags, the local version
``+pt<major><minor><torch's local tag>`` (``0.1.0+pt213cpu``) and the tag ``cp310-abi3-<platform>``.
torch stays required as pyproject.toml says (not pinned to the build's version): another torch
falls back to the build on first use, saying why (:mod:`ctrlrnn.ops.prebuilt`).

The compiles keep their objects in ``--work`` (default ``build/wheel``), so building again after
a change recompiles only what changed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from ctrlrnn.ops import _build, _extension, prebuilt, registry

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VARIANTS = ("x86-64-v4", "x86-64-v3")


def torch_tag() -> str:
    """``pt213cpu`` for torch 2.13.0+cpu: the torch minor version and its local tag."""
    version, _, local = torch.__version__.partition("+")
    major, minor = version.split(".")[:2]
    return f"pt{major}{minor}{re.sub(r'[^a-z0-9]', '', local.lower())}"


def compile_variant(variant: str, work: Path) -> dict[str, dict[str, str]]:
    """Compile every extension for ``variant`` into ``work/<variant>/<family>``; returns
    family -> {"built": library path, "namespace": ...}."""
    cflags = [f"-march={variant}" if f == "-march=native" else f for f in _extension.CFLAGS]
    cflags.append("-mtune=generic")
    out: dict[str, dict[str, str]] = {}
    for family in registry.families():
        folder = work / variant / family
        folder.mkdir(parents=True, exist_ok=True)
        module = folder / f"{family}_module.cpp"
        text = registry.module_source(family)
        if not module.is_file() or module.read_text(encoding="utf-8") != text:
            module.write_text(text, encoding="utf-8")
        sources = [str(registry.OPS_DIR / s) for s in registry.sources(family)] + [str(module)]
        namespace = registry.namespace(family)
        job = _build.Job(f"ctrlrnn_{family}", sources, [str(_extension.CSRC)],
                         [*cflags, f"-D{registry.NAMESPACE_MACRO}={namespace}"],
                         _extension.LDFLAGS, folder, "build.log", f"wheel build {variant}")
        start = time.perf_counter()
        print(f"[build-wheel] compiling {family} for {variant} ...", flush=True)
        lib, cause, _, _ = _build.compile_extension(job)
        if lib is None:
            sys.exit(f"build-wheel: {family} for {variant} failed: {cause} "
                     f"(log: {folder / 'build.log'})")
        print(f"[build-wheel] {family} for {variant}: {time.perf_counter() - start:.0f} s",
              flush=True)
        out[family] = {"built": str(lib), "namespace": namespace}
    return out


def native_variant() -> dict[str, dict[str, str]]:
    """The kernel cache's builds for this CPU (``-march=native``; built now if missing), packaged
    as they are: a wheel for machines with this CPU's flags, such as a cluster of one machine
    type, made without a second compile. Returns what :func:`compile_variant` returns."""
    out: dict[str, dict[str, str]] = {}
    for family in registry.families():
        st = _extension.ensure(family)
        if not st.loaded or not st.path or st.origin == "prebuilt":
            sys.exit(f"build-wheel: no kernel cache build of {family} to package as the native "
                     f"variant ({st.reason or st.origin})")
        folder = Path(st.path).parent
        out[family] = {"built": st.path,
                       "namespace": _extension.cache_namespace(family, folder)}
    return out


def variant_flags(variant: str) -> list[str]:
    """The CPU flags a machine needs to run ``variant``: for ``native``, every flag of this
    CPU."""
    if variant == "native":
        return sorted(prebuilt.cpu_flags())
    return list(prebuilt.VARIANT_FLAGS[variant])


def pure_wheel(dest: Path) -> Path:
    """The wheel setuptools writes for the source tree (pure Python, no kernels)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dest), str(ROOT)], check=True)
    return next(dest.glob("ctrlrnn-*.whl"))


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def platform_wheel(pure: Path, libraries: dict[str, dict[str, dict[str, str]]],
                   out_dir: Path) -> Path:
    """``pure`` given the kernels, the manifest, the local version and the abi3 platform tag."""
    version = pure.name.split("-")[1]
    local = f"{version}+{torch_tag()}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"cp310-abi3-{platform}"
    old_info, new_info = f"ctrlrnn-{version}.dist-info", f"ctrlrnn-{local}.dist-info"
    entries: dict[str, bytes] = {}
    with zipfile.ZipFile(pure) as zin:
        for item in zin.infolist():
            name = item.filename
            if name == f"{old_info}/RECORD":
                continue
            data = zin.read(item)
            if name == f"{old_info}/METADATA":
                data = re.sub(rb"^Version: .*$", f"Version: {local}".encode(), data, count=1,
                              flags=re.MULTILINE)
            elif name == f"{old_info}/WHEEL":
                text = data.decode()
                text = re.sub(r"^Root-Is-Purelib: .*$", "Root-Is-Purelib: false", text,
                              flags=re.MULTILINE)
                text = re.sub(r"^Tag: .*$", f"Tag: {tag}", text, flags=re.MULTILINE)
                data = text.encode()
            entries[name.replace(old_info, new_info, 1)] = data
    manifest = {**prebuilt.torch_record(),
                "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "compiler": _build.compiler().version, "variants": []}
    for variant, libs in libraries.items():
        entry = {"name": variant, "cpu_flags": variant_flags(variant),
                 "libraries": {}}
        for family, lib in libs.items():
            rel = f"{variant}/ctrlrnn_{family}.so"
            entries[f"ctrlrnn/_kernels/{rel}"] = Path(lib["built"]).read_bytes()
            entry["libraries"][family] = {"file": rel, "namespace": lib["namespace"]}
        manifest["variants"].append(entry)
    entries["ctrlrnn/_kernels/manifest.json"] = json.dumps(manifest, indent=2).encode()
    record = [_record_line(n, d) for n, d in entries.items()] + [f"{new_info}/RECORD,,"]
    entries[f"{new_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"ctrlrnn-{local}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in entries.items():
            zout.writestr(name, data)
    return wheel


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="CPU variants, best first (-march values: x86-64-v4, x86-64-v3, "
                             "x86-64-v2, x86-64; or native: the kernel cache's builds for this "
                             "CPU, for machines with its flags); default %(default)s")
    parser.add_argument("--out", default=str(ROOT / "dist"), help="folder of the wheel")
    parser.add_argument("--work", default=str(ROOT / "build" / "wheel"),
                        help="folder of the compiles (kept, so a rebuild is incremental)")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in prebuilt.VARIANT_FLAGS and v != "native"]
    if unknown:
        parser.error(f"unknown variant {unknown[0]}; known: {', '.join(prebuilt.VARIANT_FLAGS)}")
    work = Path(args.work) / torch_tag()
    libraries = {v: native_variant() if v == "native" else compile_variant(v, work)
                 for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        wheel = platform_wheel(pure_wheel(Path(tmp)), libraries, Path(args.out))
    print(f"[build-wheel] wrote {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
