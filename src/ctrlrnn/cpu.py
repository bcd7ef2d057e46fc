"""The CPU this process runs on, as the kernel describes it (``/proc/cpuinfo``): its model
name, its physical cores and the vector extensions that decide which GEMM kernels the BLAS
libraries pick. Benchmarks and probes record it with their measurements."""

from __future__ import annotations

import platform
from typing import Any

#: CPU flags named with the machine: machines of one model name differ in these, and with them
#: the GEMM path that is fastest (MKL against oneDNN)
CPU_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_vp2intersect",
                 "avx512_fp16", "amx_bf16", "amx_tile")


def describe_cpu() -> dict[str, Any]:
    """``cpu_model`` (the kernel's model name, else the platform's processor or machine type),
    ``physical_cores`` (None where the kernel does not say) and ``cpu_isa`` (the flags of
    :data:`CPU_ISA_FLAGS` this CPU has)."""
    model = platform.processor() or platform.machine()
    cores: set[tuple[str, str]] = set()
    phys = core = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        text = ""
    found_model = False
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and not found_model:
            model, found_model = value, True
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
            cores.add((phys, core))
        elif key == "flags" and not flags:
            flags = set(value.split())
    isa = [f for f in CPU_ISA_FLAGS if f in flags]
    return {"cpu_model": model, "physical_cores": len(cores) or None, "cpu_isa": isa}


def cpu_model() -> str:
    """The CPU's model name (:func:`describe_cpu`)."""
    return str(describe_cpu()["cpu_model"])
