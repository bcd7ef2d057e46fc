"""Compiling one extension: the compiler and ninja a build uses, the child process that runs
the compile, and what its log says went wrong. :mod:`._extension` decides when to build and
keeps the cache; this module only runs a compile.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO

from ctrlrnn import files, settings

WORKER = Path(__file__).resolve().parent / "_build_worker.py"
BUILD_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Compiler:
    """The C++ compiler torch's build would call (``$CXX``, default ``c++``)."""

    command: str
    path: str | None  # with symlinks resolved: the binary that runs
    version: str
    error: str | None


@lru_cache(maxsize=8)
def _probe_compiler(command: str, search_path: str) -> Compiler:
    argv = shlex.split(command) or ["c++"]
    found = shutil.which(argv[0], path=search_path)
    path = os.path.realpath(found) if found else None  # c++ -> /etc/alternatives -> g++-12
    if path is None:
        where = "$CXX" if settings.raw("CXX") is not None else "the default c++"
        return Compiler(command, None, "", f"no C++ compiler: {argv[0]!r} (from {where}) is not "
                        "on PATH")
    try:
        proc = subprocess.run([path, *argv[1:], "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Compiler(command, path, "", f"the C++ compiler {command!r} does not run ({exc})")
    lines = [ln.strip() for ln in (proc.stdout or proc.stderr).splitlines() if ln.strip()]
    if proc.returncode != 0:
        return Compiler(command, path, "", f"the C++ compiler {command!r} does not run "
                        f"(`{command} --version` exited with status {proc.returncode})")
    return Compiler(command, path, lines[0] if lines else "", None)


def compiler() -> Compiler:
    """The compiler a build would use now (probed once per ``$CXX`` and PATH)."""
    return _probe_compiler(settings.raw("CXX") or "c++", settings.raw("PATH") or os.defpath)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ninja_dir() -> str | None:
    """The folder of the ninja that belongs to the running interpreter, whatever PATH holds:
    the ``ninja`` package's, else the one beside the interpreter, else the first on PATH."""
    candidates: list[Path] = []
    try:
        import ninja  # the PyPI package ctrlrnn depends on

        bin_dir = getattr(ninja, "BIN_DIR", None)
        if bin_dir:
            candidates.append(Path(bin_dir))
    except ImportError:
        pass
    candidates += [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for folder in candidates:
        if _is_executable(folder / "ninja"):
            return str(folder)
    found = shutil.which("ninja")
    return str(Path(found).parent) if found else None


@lru_cache(maxsize=1)
def _cpu_signature() -> str:
    """The CPU's model and feature flags (the kernels are built with ``-march=native``)."""
    seen: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key = line.split(":", 1)[0].strip()
                if key in ("model name", "flags", "Features", "CPU part") and key not in seen:
                    seen[key] = line.strip()
    except OSError:
        pass
    import platform

    return platform.machine() + platform.processor() + "".join(seen.values())


_ERROR_LINE = re.compile(
    r"(#error|\berror:|fatal error|undefined reference|cannot find -l|No such file or directory"
    r"|Ninja is required|command not found|not found|Error building extension)",
    re.IGNORECASE,
)


def first_error_line(log: str) -> str:
    """The first line of a build log that says what went wrong (else its last line)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in lines:
        if _ERROR_LINE.search(ln) and not ln.startswith(("[", "FAILED:", "c++ ", "g++ ")):
            return ln[:400]
    for ln in lines:
        if _ERROR_LINE.search(ln):
            return ln[:400]
    return lines[-1][:400] if lines else "no output"


def advice(cause: str) -> str:
    """What to do about a build that failed with ``cause``."""
    if cause.startswith("the kernel cache"):
        return ("set CTRLRNN_CACHE to a writable folder (or run `ctrlrnn build` once where this "
                "one is writable)")
    if cause.startswith(("no C++ compiler", "the C++ compiler")):
        return "install a C++ compiler (e.g. `apt install g++`) or point $CXX at one"
    if "ninja" in cause.lower():
        return "install ninja into this environment (`pip install ninja`)"
    return "see the build log"


def run_worker(spec: dict, log: IO[str], env: dict[str, str]) -> int:
    """Run the build worker in a process group of its own and wait for it. Whatever ends the
    wait (the timeout, Ctrl-C, SIGTERM) ends the whole group, ninja and the compilers included;
    the worker itself ends the group when this process dies (``_build_worker.py``)."""
    proc = subprocess.Popen([sys.executable, str(WORKER), files.dumps(spec)], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=BUILD_TIMEOUT_S)
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)  # the worker ends ninja's compilers, then itself
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise


@dataclass(frozen=True)
class Job:
    """One compile: the extension module's name, its sources and generated module source, the
    include folders and flags, the build folder and the log's header."""

    module: str
    sources: list[str]
    include_dirs: list[str]
    cflags: list[str]
    ldflags: list[str]
    folder: Path
    log_name: str
    header: str


def compile_extension(job: Job) -> tuple[Path | None, str, float, bool]:
    """Compile ``job`` into its folder in a child process: ``(library or None, cause, seconds,
    whether a failure is worth remembering)``. A compile killed by a signal or stopped by the
    timeout is not remembered: the next process tries again."""
    ninja = ninja_dir()
    if ninja is None:
        return (None, "ninja not found (it is installed with ctrlrnn: `pip install ninja`)", 0.0,
                False)
    env = settings.child_environment(PATH=ninja + os.pathsep + (settings.raw("PATH") or ""))
    spec = {"module": job.module, "sources": job.sources, "include_dirs": job.include_dirs,
            "cflags": job.cflags, "ldflags": job.ldflags, "build_dir": str(job.folder)}
    log_path = job.folder / job.log_name
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"{job.header}\nPATH={env['PATH']}\n\n")
        log.flush()
        try:
            rc: int | str = run_worker(spec, log, env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            rc = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    text = log_path.read_text(encoding="utf-8", errors="replace")
    marker = re.findall(r"^CTRLRNN_LIBRARY=(.+)$", text, flags=re.MULTILINE)
    if rc == 0 and marker and Path(marker[-1]).is_file():
        return Path(marker[-1]), "", seconds, False
    if isinstance(rc, str) or rc < 0:
        return None, f"the compile was stopped ({rc})", seconds, False
    if rc == 0 and marker:  # compiled and loaded, yet the named library is not there
        return None, f"the build named no library file ({marker[-1]!r})", seconds, True
    return None, first_error_line(text), seconds, True
