"""Building, caching and loading the compiled CPU extensions.

Each family of ops (``scan`` for the linear scan, QRNN pooling, the convolution windows and the
RCRN listener, ``cells`` for the fused gated cells, ``metagross`` for the METAGROSS level) is one
C++ extension compiled against the running PyTorch: the runtime (``csrc/runtime/runtime.cpp``),
each op's C++ file, and a module source written from :mod:`.registry` that registers every op in
one ``TORCH_LIBRARY`` namespace. No pybind11, no Python API (``Py_LIMITED_API``): the library is
loaded with ``torch.ops.load_library``, its ops reached through a :class:`.KernelLibrary`. A
cache build registers ``ctrlrnn_<name>_<key>`` (``CTRLRNN_OPS_NAMESPACE``), so two builds never
collide in one process. :func:`configure` hands a loaded extension its settings
(:mod:`ctrlrnn.settings`); the C++ code reads no environment.

**Cache.** A build lives in ``$CTRLRNN_CACHE/ext/<name>-<key>`` (default
``~/.cache/ctrlrnn/ext``), where ``key`` hashes everything that changes the binary: the sources,
the module source and the headers, the flags, torch's version, git revision and C++ ABI, the
Python version and extension suffix, the compiler (``$CXX`` or ``c++``: its path and
``--version``) and the CPU (the kernels use ``-march=native``). A finished build is recorded in
``build.json`` beside the library; later processes import that library directly, without asking
ninja or the compiler anything, so neither PATH, an activated virtual environment nor another
ninja can trigger a rebuild.

**Building.** The compile runs in a child process (``_build_worker.py``) through
:func:`torch.utils.cpp_extension.load`, with the C++ standard torch itself asks for (ctrlrnn
adds no ``-std``), and with the ninja that belongs to the running interpreter put first on the
child's PATH (the ``ninja`` package's, else the one beside the interpreter, else PATH's). Its
whole output goes to ``build.log`` in the build folder. Every compile, whichever call started
it, says so on stderr with an estimate and shows a clock until it ends
(:mod:`.build_progress`); importing from the cache prints nothing. A file lock makes concurrent
processes build once, and every build starts from an empty folder.

**Reading the cache.** A finished build is imported without the lock and without writing, so
a read-only cache (a container image, a read-only mount) serves its builds. The library is
checked first against the size and SHA-256 recorded when its build finished: importing a
truncated library would kill the process, so a damaged one is built again. A cache that cannot
be written (read-only, not a folder, no permission) and holds no build is a failure that names
it.

**Failures** (never silently slow). A failed compile is remembered in ``failed.json`` for that
key, so later processes do not retry it (``ctrlrnn build --force`` does); one
:class:`KernelBuildWarning` for the whole package, raised at the user's call site, names the
first compiler error line and what to do. ``CTRLRNN_REQUIRE_COMPILED=1`` makes it an error (the
test suite sets it); ``CTRLRNN_BACKEND=reference`` selects the reference implementations without
building or warning (read at every call, so it can be switched at run time).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from ctrlrnn import files, settings
from ctrlrnn.ops import build_progress, gemm_path, prebuilt, registry
from ctrlrnn.ops import runtime as cpu_runtime
from ctrlrnn.ops._build import (
    Compiler,
    Job,
    _cpu_signature,
    advice,
    compile_extension,
    compiler,
    first_error_line,
    ninja_dir,
)
from ctrlrnn.ops.compiled_op import untraced
from ctrlrnn.ops.kernel_library import KernelLibrary, load_library

try:  # POSIX file locks; without them (Windows) concurrent first builds are not serialised
    import fcntl
except ImportError:  # pragma: no cover - not on Linux/macOS
    fcntl = None  # type: ignore[assignment]

__all__ = ["Compiler", "ExtensionStatus", "KernelBuildWarning", "advice", "build_all",
           "cache_dir", "compiler", "ensure", "failure_message", "first_error_line",
           "forced_reference", "load", "loaded_modules", "ninja_dir", "require_compiled",
           "status"]

#: The folder the extensions' sources are named relative to (``ops/``).
SOURCE_ROOT = registry.OPS_DIR
#: The shared C++ runtime headers, on every compile's include path.
CSRC = SOURCE_ROOT / "csrc"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

#: The extensions ctrlrnn ships: name -> C++ sources relative to :data:`SOURCE_ROOT`, derived
#: from the list of ops (:mod:`.registry`), which also writes each one's module source.
EXTENSIONS: dict[str, list[str]] = {name: registry.sources(name) for name in registry.families()}

#: Optimisation flags. No ``-std=``: torch's own build flags carry the standard its headers
#: need (C++17 up to torch 2.12, C++20 after). ``Py_LIMITED_API`` (3.10) keeps the libraries
#: abi3: nothing of Python's full API can be reached from them.
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast", "-fno-math-errno",
          "-fno-trapping-math", "-DPy_LIMITED_API=0x030a0000"]
#: ``--as-needed``: the library records only the torch libraries it uses (not
#: ``libtorch_python``, which cpp_extension links by default).
LDFLAGS = ["-fopenmp", "-Wl,--as-needed"]

BUILD_RECORD = "build.json"
FAILURE_RECORD = "failed.json"
BUILD_LOG = "build.log"


class KernelBuildWarning(RuntimeWarning):
    """The compiled kernels could not be built; ctrlrnn runs its reference implementations."""


@dataclass
class ExtensionStatus:
    """What happened when an extension was asked for.

    ``origin`` is ``"prebuilt"`` (the wheel's kernels), ``"cached"`` (imported from an earlier
    build), ``"compiled"`` (built by this process), ``"failed"`` (the build failed now),
    ``"failed earlier"`` (a remembered failure), ``"reference"`` (``CTRLRNN_BACKEND=reference``)
    or ``""`` (not asked for yet).
    """

    name: str
    loaded: bool = False
    reason: str = "not built yet"
    origin: str = ""
    path: str | None = None
    log: str | None = None
    seconds: float | None = None
    threads: int | None = None
    module: KernelLibrary | ModuleType | None = field(default=None, repr=False)


_STATUS: dict[str, ExtensionStatus] = {}
#: The loaded extensions by name: :func:`load`'s fast path (no lock, no status object)
_READY: dict[str, KernelLibrary | ModuleType] = {}
_LOCK = threading.RLock()
_WARNED = False


def cache_dir() -> Path:
    """Root of ctrlrnn's on-disk cache (``$CTRLRNN_CACHE`` or ``~/.cache/ctrlrnn``)."""
    root = settings.value("CTRLRNN_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = settings.raw("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ctrlrnn"


#: ``(text, answer)``: the last ``CTRLRNN_BACKEND`` text :func:`forced_reference` parsed and
#: its answer, so that a call on the hot path reads the variable once and parses nothing
_BACKEND_SEEN: tuple[str | None, bool] | None = None


def forced_reference() -> bool:
    """True when ``CTRLRNN_BACKEND=reference`` asks for the reference implementations (read
    at every call, so it can be switched at run time; parsed only when its text changes)."""
    global _BACKEND_SEEN
    text = settings.raw("CTRLRNN_BACKEND")
    seen = _BACKEND_SEEN
    if seen is not None and seen[0] == text:
        return seen[1]
    answer = settings.value("CTRLRNN_BACKEND") == "reference"
    _BACKEND_SEEN = (text, answer)
    return answer


def require_compiled() -> bool:
    """True when ``CTRLRNN_REQUIRE_COMPILED`` makes a failed build an error."""
    return bool(settings.value("CTRLRNN_REQUIRE_COMPILED"))


# ------------------------------------------------------------------ what goes into the key


def build_inputs(name: str) -> dict[str, str]:
    """Everything (but the source bytes) that determines the binary of extension ``name``."""
    cxx = compiler()
    return {
        "extension": name,
        "cflags": " ".join(CFLAGS),
        "ldflags": " ".join(LDFLAGS),
        "torch": torch.__version__,
        "torch_git": str(getattr(torch.version, "git_version", "")),
        "cxx11_abi": str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", "")),
        "python": sys.version,
        "ext_suffix": str(sysconfig.get_config_var("EXT_SUFFIX") or ""),
        "compiler": cxx.command,
        "compiler_path": str(cxx.path),
        "compiler_version": cxx.version,
        "cpu": hashlib.sha256(_cpu_signature().encode()).hexdigest()[:16],
    }


def module_text(name: str) -> str | None:
    """The module source :mod:`.registry` writes for extension ``name`` (None for an extension
    outside the list, whose sources register themselves in ``CTRLRNN_OPS_NAMESPACE``)."""
    return registry.module_source(name) if name in registry.FAMILIES else None


def cache_namespace(name: str, folder: Path) -> str:
    """The ``torch.ops`` namespace of the build of ``name`` in cache folder ``folder``
    (``<name>-<key>``): ``ctrlrnn_<name>_<key>``."""
    return f"ctrlrnn_{name}_{folder.name.rsplit('-', 1)[-1]}"


def build_key(name: str) -> str:
    """The cache key of extension ``name`` (module docstring)."""
    h = hashlib.sha256(files.dumps(build_inputs(name), sort_keys=True).encode())
    for src in EXTENSIONS[name]:
        h.update((SOURCE_ROOT / src).read_bytes())
    h.update((module_text(name) or "").encode())
    for header in sorted(SOURCE_ROOT.rglob("*.h")):
        h.update(header.relative_to(SOURCE_ROOT).as_posix().encode())
        h.update(header.read_bytes())
    return h.hexdigest()[:16]


def build_dir(name: str) -> Path:
    """The cache folder of extension ``name`` for the running torch, Python and compiler."""
    return cache_dir() / "ext" / f"{name}-{build_key(name)}"


# ------------------------------------------------------------------ records on disk


_read_json = files.read_dict
_write_json = files.write_quietly


def cached_state(name: str) -> str:
    """``"cached"`` (a finished build exists), ``"failed"`` (a remembered failure) or
    ``"missing"`` for extension ``name`` under the running configuration."""
    folder = build_dir(name)
    record = _read_json(folder / BUILD_RECORD)
    if record and (folder / str(record.get("library", ""))).is_file():
        return "cached"
    return "failed" if (folder / FAILURE_RECORD).is_file() else "missing"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _elf_fault(path: Path, size: int) -> str | None:
    """Why an ELF library is visibly incomplete (its section table lies past its end), or None
    (also for other formats, which this check does not read)."""
    with open(path, "rb") as fh:
        head = fh.read(64)
    if head[:4] != b"\x7fELF":
        return None if size else "is empty"
    if len(head) < 64 or head[4] != 2:  # 64-bit ELF: the kernels are built for 64-bit hosts
        return f"is cut short ({size} bytes)"
    order = "little" if head[5] == 1 else "big"
    table_offset = int.from_bytes(head[0x28:0x30], order)
    table_end = table_offset + int.from_bytes(head[0x3A:0x3C], order) * int.from_bytes(
        head[0x3C:0x3E], order)
    return f"is cut short ({size} bytes, its section table ends at {table_end})" \
        if table_end > size else None


def library_fault(library: Path, record: dict) -> str | None:
    """Why the cached ``library`` cannot be trusted, or None: it is checked against the size and
    SHA-256 the finished build recorded (``record``), and as an ELF file, before it is imported,
    because importing a truncated library kills the process with a bus error."""
    try:
        size = library.stat().st_size
        if record.get("size") is not None and size != record["size"]:
            return f"is {size} bytes; the build wrote {record['size']}"
        if record.get("sha256") and _sha256(library) != record["sha256"]:
            return "differs from what the build wrote (its SHA-256 does not match)"
        return _elf_fault(library, size)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"


def _clear_folder(folder: Path) -> None:
    """Remove everything in ``folder`` but its lock file, so a build starts from nothing (a
    damaged object file or library would otherwise look up to date to ninja)."""
    for entry in folder.iterdir():
        if entry.name == ".lock":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _unwritable(folder: Path, exc: OSError) -> str:
    """The cause line of a kernel cache that cannot be written."""
    what = exc.strerror or type(exc).__name__
    blocked = Path(exc.filename) if exc.filename else folder
    if blocked.parent == folder:  # a file of the build folder: name the folder
        blocked = folder
    return (f"the kernel cache {blocked} cannot be written ({what}), so the kernels cannot be "
            f"built there")


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` across processes (one builder at a time)."""
    if fcntl is None:
        yield
        return
    with open(folder / ".lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# ------------------------------------------------------------------ compiling


def _import_library(name: str, path: Path, namespace: str,
                    store: Path | None = None) -> KernelLibrary:
    """Load the library at ``path`` (its ops in ``torch.ops.<namespace>``), attach it to the
    GEMM paths' choices (persisted in the folder ``store``; None: not persisted, as for the
    prebuilt kernels, whose import writes nothing) and configure it."""
    values = kernel_settings()  # a bad setting fails before anything is imported
    mod = load_library(name, path, namespace)
    gemm_path.attach(mod, store, _cpu_signature())
    configure(mod, values)
    cpu_runtime.attach(mod)
    return mod


def kernel_settings() -> dict[str, object]:
    """The settings the C++ kernels take, read and checked (:mod:`ctrlrnn.settings`): a bad
    value is one :class:`~ctrlrnn.settings.SettingError` naming its variable."""
    names = {"streaming_bytes": "STREAMING_BYTES", "huge_pages": "HUGE_PAGES",
             "output_cache_mb": "OUTPUT_CACHE_MB", "metagross_split": "METAGROSS_SPLIT",
             "runtime": "RUNTIME", "runtime_off": "RUNTIME_OFF"}
    return {key: settings.value(f"CTRLRNN_{name}") for key, name in names.items()}


def configure(mod: KernelLibrary | ModuleType, values: dict[str, object] | None = None) -> None:
    """Hand a freshly imported extension the settings its C++ runtime and kernels use (the C++
    code reads no environment). An extension without the runtime (a test's tiny one) is left
    alone; the runtime applies its part once per process (``configure`` in
    ``csrc/runtime/runtime.cpp``)."""
    v = kernel_settings() if values is None else values
    if callable(getattr(mod, "configure", None)):
        mod.configure(v["streaming_bytes"], v["huge_pages"], v["output_cache_mb"], v["runtime"],
                      ",".join(v["runtime_off"]))
    split = getattr(mod, "metagross_state_split", None)
    if callable(split):
        split(v["metagross_split"])


def _compile(name: str, folder: Path) -> tuple[Path | None, str, float, bool]:
    """Compile extension ``name`` into ``folder`` (:func:`ctrlrnn.ops._build.compile_extension`):
    its sources, plus the module source :mod:`.registry` writes for it."""
    sources = [str(SOURCE_ROOT / s) for s in EXTENSIONS[name]]
    text = module_text(name)
    if text is not None:
        module_file = folder / f"{name}_module.cpp"
        module_file.write_text(text, encoding="utf-8")
        sources.append(str(module_file))
    header = f"ctrlrnn build of {name!r}\n{files.dumps(build_inputs(name), indent=2)}"
    cflags = [*CFLAGS, f"-D{registry.NAMESPACE_MACRO}={cache_namespace(name, folder)}"]
    return compile_extension(Job(f"ctrlrnn_{name}", sources, [str(CSRC)], cflags, LDFLAGS,
                                 folder, BUILD_LOG, header))


def _loaded_status(st: ExtensionStatus, mod: KernelLibrary, path: Path) -> ExtensionStatus:
    st.loaded, st.module, st.path = True, mod, str(path)
    threads = getattr(mod, "num_threads", None)
    st.threads = int(threads()) if callable(threads) else None
    return st


def _import_cached(st: ExtensionStatus, folder: Path) -> str | None:
    """Import the finished build in ``folder`` into ``st`` without writing anything (a
    read-only cache serves as well as a writable one). Returns None when there is no finished
    build, else why it was not used ("" when it was)."""
    record = _read_json(folder / BUILD_RECORD)
    if not record or not record.get("library"):
        return None
    lib = folder / str(record["library"])
    if not lib.exists():
        return None
    fault = library_fault(lib, record)
    if fault is not None:
        return f"the cached library {lib} {fault}"
    try:
        _loaded_status(st, _import_library(st.name, lib, cache_namespace(st.name, folder),
                                           cache_dir() / "ext"), lib)
    except ImportError as exc:
        return f"the cached library {lib} does not import ({exc})"
    st.origin, st.reason = "cached", "compiled C++ extension (cached)"
    st.seconds = record.get("seconds")
    return ""


def _remembered_failure(st: ExtensionStatus, folder: Path) -> bool:
    failure = _read_json(folder / FAILURE_RECORD)
    if failure is None:
        return False
    st.origin, st.log = "failed earlier", failure.get("log")
    st.reason = (f"{failure.get('cause', 'build failed')} (a failed build remembered from "
                 f"{failure.get('when', 'earlier')}; `ctrlrnn build --force` retries)")
    return True


def _build(st: ExtensionStatus, folder: Path, position: str) -> None:
    """Compile ``st.name`` into ``folder`` (locked, emptied) with a clock on stderr, import it,
    and record the library's size and SHA-256 (or the failure)."""
    name = st.name
    with build_progress.compiling(name, cache_dir() / "ext", position) as load_factor:
        lib, cause, seconds, remember = _compile(name, folder)
    st.seconds, st.log = seconds, str(folder / BUILD_LOG)
    if lib is not None:
        try:
            _loaded_status(st, _import_library(name, lib, cache_namespace(name, folder),
                                               cache_dir() / "ext"), lib)
        except ImportError as exc:
            lib, cause, remember = None, f"the built library does not import: {exc}", True
    if lib is None:
        st.origin, st.reason = "failed", cause
        if remember:
            _write_json(folder / FAILURE_RECORD, {
                "cause": cause, "log": st.log, "seconds": round(seconds, 1),
                "when": time.strftime("%Y-%m-%d %H:%M:%S"), **build_inputs(name)})
        return
    build_progress.record(name, cache_dir() / "ext", seconds, load_factor)
    _write_json(folder / BUILD_RECORD, {
        "library": lib.name, "size": lib.stat().st_size, "sha256": _sha256(lib),
        "seconds": round(seconds, 1), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        **build_inputs(name)})
    st.origin, st.reason = "compiled", f"compiled C++ extension (built in {seconds:.0f} s)"


def _import_prebuilt(st: ExtensionStatus) -> bool:
    """Load the wheel's prebuilt library of ``st.name`` when it fits this torch and CPU
    (:mod:`.prebuilt`), writing nothing; False (and the build on first use) otherwise."""
    chosen = prebuilt.choice()
    if chosen is None or st.name not in chosen.libraries:
        return False
    lib, namespace = chosen.libraries[st.name]
    try:
        _loaded_status(st, _import_library(st.name, lib, namespace, None), lib)
    except ImportError as exc:
        print(f"ctrlrnn: the prebuilt library {lib} does not load ({exc}); building it on first "
              f"use instead", file=sys.stderr, flush=True)
        return False
    st.origin = "prebuilt"
    st.reason = f"prebuilt kernels {chosen.variant}, built for torch {chosen.torch}"
    return True


def _obtain(name: str, force: bool, position: str = "") -> ExtensionStatus:
    """Import the cached build of ``name``, or build it (or recall that it failed).

    A finished build is imported without the lock or any write. Building needs a writable
    cache: an unusable one (read-only, not a folder, no permission) is a failure that names it.
    A damaged library is rebuilt from an empty folder, and so is every ``force`` build.
    """
    st = ExtensionStatus(name)
    if not force and _import_prebuilt(st):
        return st
    cxx = compiler()
    folder = build_dir(name)
    if cxx.error is not None:  # (no build can exist under a key without a compiler)
        st.origin, st.reason = "failed", cxx.error
        return st
    damage = None if force else _import_cached(st, folder)
    if damage == "":
        return st
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _folder_lock(folder):
            if not force and damage is None:  # another process may have built it meanwhile
                damage = _import_cached(st, folder)
                if damage == "":
                    return st
            if damage is None and not force and _remembered_failure(st, folder):
                return st
            if damage:
                print(f"ctrlrnn: {damage}; building it again", file=sys.stderr, flush=True)
            if force or damage or any(p.name != ".lock" for p in folder.iterdir()):
                _clear_folder(folder)
            _build(st, folder, position)
    except OSError as exc:
        if st.loaded:  # built and imported; only a record could not be written
            return st
        st.origin, st.reason = "failed", _unwritable(folder, exc)
        if damage:
            st.reason += f"; {damage}"
    return st


# ------------------------------------------------------------------ reporting a failure


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised by the caller of this function at the
    first frame outside ctrlrnn and torch (the user's call site)."""
    skip = (str(PACKAGE_DIR), str(Path(torch.__file__).resolve().parent), "<frozen ")
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and frame.f_back is not None:
        if not frame.f_code.co_filename.startswith(skip):
            break
        frame = frame.f_back
        level += 1
    return level


def failure_message(st: ExtensionStatus) -> str:
    """The one-paragraph explanation of a failed build, with what to do."""
    cause = st.reason
    log = f" Build log: {st.log}." if st.log and not st.log.startswith("cached") else ""
    return (
        f"ctrlrnn: the compiled CPU kernels are unavailable (extension {st.name!r}: {cause}); "
        f"the reference implementations run instead (correct, several times slower). To fix: "
        f"{advice(cause)}, then run `ctrlrnn build --force`. To use the reference path "
        f"without this warning, set CTRLRNN_BACKEND=reference.{log}"
    )


def _report_failure(st: ExtensionStatus) -> None:
    global _WARNED
    if require_compiled():
        raise RuntimeError(failure_message(st) + "\n(CTRLRNN_REQUIRE_COMPILED is set.)")
    if not _WARNED:
        _WARNED = True
        warnings.warn(failure_message(st), KernelBuildWarning, stacklevel=_user_stacklevel())


# ------------------------------------------------------------------ public entry points


def ensure(name: str, force: bool = False, *, position: str = "") -> ExtensionStatus:
    """The status of extension ``name``, importing or building it on first use (``force``:
    build again, from an empty folder). A compile says so on stderr with a clock;
    ``position`` (``"2 of 3"``) places it in a batch of compiles."""
    if name not in EXTENSIONS:
        raise ValueError(f"name: unknown extension {name!r}; known: {sorted(EXTENSIONS)}")
    st = _STATUS.get(name)
    if st is None or force:
        with _LOCK:
            st = _STATUS.get(name)
            if st is None or force:
                _READY.pop(name, None)
                st = _obtain(name, force, position)
                _STATUS[name] = st
                if st.loaded and st.module is not None:
                    _READY[name] = st.module
    return st


def load(name: str) -> KernelLibrary | ModuleType | None:
    """Return the compiled extension ``name`` (imported from the cache, or built on first use);
    None when the reference implementations must run. A failure warns once for the whole
    package, at the user's call site (or raises under ``CTRLRNN_REQUIRE_COMPILED=1``)."""
    if forced_reference():
        if name not in EXTENSIONS:
            raise ValueError(f"name: unknown extension {name!r}; known: {sorted(EXTENSIONS)}")
        return None
    ready = _READY.get(name)
    if ready is not None:  # the hot path: imported already
        return ready
    with untraced():  # (a model traced before any eager call loads its kernels here)
        st = ensure(name)
    if not st.loaded:
        _report_failure(st)
    return st.module


def status(name: str) -> ExtensionStatus:
    """The status of extension ``name`` (importing or building it if not asked for yet),
    without warning."""
    if forced_reference():
        return ExtensionStatus(name, reason="CTRLRNN_BACKEND=reference set", origin="reference")
    return ensure(name)


def loaded_modules() -> dict[str, KernelLibrary | ModuleType]:
    """The extensions imported so far in this process."""
    return {n: st.module for n, st in list(_STATUS.items()) if st.loaded and st.module}


def build_all(*, force: bool = False) -> dict[str, ExtensionStatus]:
    """Build (or import from the cache) every extension now, numbering the compiles."""
    todo = [n for n in EXTENSIONS if force or (n not in _STATUS and cached_state(n) != "cached")]
    return {name: ensure(name, force, position=f"{todo.index(name) + 1} of {len(todo)}"
                         if name in todo and len(todo) > 1 else "")
            for name in EXTENSIONS}
