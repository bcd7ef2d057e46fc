"""The machine and software a benchmark ran on, and the git commit it measured.

:func:`machine` describes the CPU, memory, threads and versions for the result document of
``ctrlrnn bench``; :func:`git_commit` and :func:`git_changed` stamp any result with the commit
of the working tree it came from (``ctrlrnn bench`` and ``scripts/gpu-check`` both).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import ctrlrnn
from ctrlrnn.bench.workloads import backend_info
from ctrlrnn.cpu import describe_cpu
from ctrlrnn.settings import raw


def _meminfo_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def git_commit(where: str | os.PathLike[str], *, short: bool = False) -> str | None:
    """The commit checked out in the working tree at ``where`` (abbreviated with ``short``), or
    None outside a git working tree or without git."""
    cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    try:
        out = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=10,
                             check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def git_changed(repo: str | os.PathLike[str]) -> list[str]:
    """Tracked files of ``repo`` that differ from its commit (what was measured is then not
    exactly the commit); empty outside a git working tree or without git."""
    try:
        res = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                             capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(line[3:] for line in res.stdout.splitlines() if len(line) > 3)


def _cpu_jiffies(cpus: set[int] | None) -> float | None:
    """Clock ticks the CPUs in ``cpus`` (all when None) spent not idle (user, nice, system,
    irq, softirq, and steal: time a hypervisor gave to others) since boot, from /proc/stat."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    total = 0.0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or len(fields) < 8:
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(float, fields[:8])
        total += user + nice + system + irq + softirq + steal
    return total


def busy_cpus_elsewhere(seconds: float = 0.5) -> float | None:
    """How many of this process's CPUs other processes kept busy over the next ``seconds``
    (this process sleeping meanwhile): the CPUs' busy time from /proc/stat less this process's
    own CPU time, over the wall time. Unlike the load average, which trails the last minute,
    this is the contention at the moment a run starts. None where /proc/stat is not readable."""
    try:
        cpus: set[int] | None = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = None
    tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    before, own0, t0 = _cpu_jiffies(cpus), os.times(), time.perf_counter()
    if before is None:
        return None
    time.sleep(seconds)
    after, own1, t1 = _cpu_jiffies(cpus), os.times(), time.perf_counter()
    if after is None:
        return None
    own = (own1.user - own0.user) + (own1.system - own0.system)
    return max(0.0, ((after - before) / tick - own) / (t1 - t0))


#: :func:`machine`'s default: measure the CPUs other processes keep busy there and then.
MEASURE = "measure"


def machine(busy_elsewhere: float | None | str = MEASURE) -> dict[str, Any]:
    """Describe this machine and software: CPU model, cores, memory, threads, versions, and the
    active ctrlrnn backend (``ctrlrnn.backend_info()``). ``busy_elsewhere``: the CPUs other
    processes kept busy at the start (:func:`busy_cpus_elsewhere`), where the caller measured it
    already (None: it could not be measured); by default measured here (half a second)."""
    if busy_elsewhere == MEASURE:
        busy_elsewhere = busy_cpus_elsewhere()
    version = getattr(ctrlrnn, "__version__", None)
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    parallel = [ln.strip() for ln in torch.__config__.parallel_info().splitlines() if ln.strip()]
    info: dict[str, Any] = {
        **describe_cpu(),
        "logical_cpus": os.cpu_count(),
        "cpus_available": affinity,
        "memory_bytes": _meminfo_bytes(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "torch_parallel_info": parallel,
        "env": {
            k: text
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CTRLRNN_BACKEND")
            if (text := raw(k)) is not None
        },
        "load_average_at_start": load,
        "busy_cpus_elsewhere_at_start": busy_elsewhere,
        "ctrlrnn_version": version,
        "git_commit": git_commit(Path(__file__).resolve().parent, short=True),
        "backend": backend_info(),
    }
    return info


def machine_summary(m: dict[str, Any]) -> str:
    """One line: CPU model, cores, threads, torch version."""
    cores = m.get("physical_cores")
    cpus = m.get("cpus_available") or m.get("logical_cpus")
    return (
        f"{m.get('cpu_model')} ({cores} physical cores, {cpus} logical CPUs available), "
        f"torch {m.get('torch')} with {m.get('torch_threads')} threads"
    )
