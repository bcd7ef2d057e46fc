"""The CUDA tests of ``scripts/gpu-check``: pytest on :data:`TESTS` with native Triton, in a
subprocess on the installed package, and the counts and failures read from its junit report."""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ctrlrnn.settings import child_environment

TESTS = ("tests/gpu/test_cuda_layers.py", "tests/gpu/test_cuda_dispatch.py",
         "tests/gpu/test_cuda_training.py")


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and the failing tests' names from a pytest ``--junitxml`` file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    for s in suites:
        for key in counts:
            counts[key] += int(s.get(key, 0))
        for case in s.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"passed": passed, "failed": counts["failures"], "errors": counts["errors"],
            "skipped": counts["skipped"], "failing": failed}  # fmt: skip


def run_tests(repo: Path, out: Path, pythonpath: str, timeout: float,
              python: str = sys.executable) -> dict[str, Any]:  # fmt: skip
    xml = out / "tests.xml"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *TESTS]
    env = child_environment(PYTHONPATH=pythonpath, CTRLRNN_TRITON_NATIVE="1")
    env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=str(repo), env=env, capture_output=True, text=True,
                             timeout=max(timeout, 1.0))  # fmt: skip
        log, rc = (res.stdout or "") + (res.stderr or ""), res.returncode
    except subprocess.TimeoutExpired as exc:
        log, rc = f"timed out after {timeout:.0f} s\n{exc.stdout or ''}", -1
    (out / "tests.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    result: dict[str, Any] = {"command": " ".join(cmd[1:]), "returncode": rc,
                              "seconds": round(time.monotonic() - t0, 1), "files": list(TESTS)}
    if xml.exists():
        result.update(parse_junit(xml))
    else:
        result.update(passed=0, failed=0, errors=1, skipped=0, failing=["(no junit report)"])
    result["ok"] = rc == 0 and result["failed"] == 0 and result["errors"] == 0
    result["log_tail"] = log[-3000:] if isinstance(log, str) else ""
    return result
