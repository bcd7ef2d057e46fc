"""The settings the compiled kernels use are read by ctrlrnn.settings and handed to the C++ code
when an extension loads: a bad value is one SettingError naming its variable, a good one reaches
the kernel, and no C++ file or ops module reads the environment itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ctrlrnn.ops import _extension, registry
from ctrlrnn.settings import SettingError

KERNEL_SETTINGS = {
    "CTRLRNN_STREAMING_BYTES": "8MB",
    "CTRLRNN_HUGE_PAGES": "maybe",
    "CTRLRNN_OUTPUT_CACHE_MB": "lots",
    "CTRLRNN_METAGROSS_SPLIT": "sideways",
    "CTRLRNN_RUNTIME": "fast",
}


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in KERNEL_SETTINGS}
    return subprocess.run([sys.executable, "-c", code], env={**full, **env},
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize(("name", "bad"), sorted(KERNEL_SETTINGS.items()))
def test_a_bad_value_is_one_error_naming_the_variable(monkeypatch, name: str, bad: str) -> None:
    monkeypatch.setenv(name, bad)
    with pytest.raises(SettingError, match=re.escape(f"{name}={bad!r}")):
        _extension.kernel_settings()


def test_a_bad_value_stops_the_extension_from_loading() -> None:
    done = _python("from ctrlrnn.ops import _extension\n_extension.load('scan')\n",
                   CTRLRNN_OUTPUT_CACHE_MB="lots")
    assert done.returncode != 0
    errors = [ln for ln in done.stderr.splitlines() if "Error" in ln and ":" in ln]
    assert errors[-1].startswith("ctrlrnn.settings.SettingError: CTRLRNN_OUTPUT_CACHE_MB='lots'")


def test_the_values_reach_the_kernels() -> None:
    if _extension.load("scan") is None or _extension.load("cells") is None:
        pytest.skip("the compiled kernels are not available here")
    code = (
        "import json\n"
        "from ctrlrnn.ops import _extension\n"
        "scan, cells = _extension.load('scan'), _extension.load('cells')\n"
        "print(json.dumps([scan.streaming_threshold(), scan.output_cache_stats()[1],\n"
        "                  scan.output_cache_huge_pages(), cells.metagross_state_split(0),\n"
        "                  cells.streaming_threshold(),\n"
        "                  scan.configure(streaming_bytes=1, huge_pages=True,\n"
        "                                 output_cache_mb=1)]))\n")
    done = _python(code, CTRLRNN_STREAMING_BYTES="12345", CTRLRNN_OUTPUT_CACHE_MB="3",
                   CTRLRNN_HUGE_PAGES="0", CTRLRNN_METAGROSS_SPLIT="hidden")
    assert done.returncode == 0, done.stderr
    threshold, limit, huge, split, shared, again = json.loads(done.stdout.splitlines()[-1])
    assert (threshold, limit, huge, split) == (12345, 3 << 20, False, 2)
    # one runtime per process: the second extension sees the same threshold, and only the
    # first configure of a process applies
    assert shared == 12345 and again is False


def test_no_kernel_and_no_ops_module_reads_the_environment() -> None:
    readers = re.compile(r"\bgetenv\b|\bos\.environ\b|\bsecure_getenv\b")
    offenders = []
    for path in sorted(registry.OPS_DIR.rglob("*")):
        if path.suffix in {".cpp", ".h", ".py"}:
            text = path.read_text(encoding="utf-8")
            code = "\n".join(ln for ln in text.splitlines()
                             if not ln.lstrip().startswith(("//", "#")))
            if readers.search(code):
                offenders.append(path.relative_to(registry.OPS_DIR).as_posix())
    assert offenders == []
