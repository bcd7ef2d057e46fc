"""Installing ctrlrnn from a working tree with no network: ``pip install --no-deps
--no-build-isolation --no-index --target DIR``, so the machine's own torch is left untouched.
Used by ``scripts/gpu-check`` (:mod:`ctrlrnn.bench.gpu_check`)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctrlrnn.settings import child_environment


def install_command(repo: Path, target: Path, python: str = sys.executable) -> list[str]:
    """The pip command installing the working tree into ``target`` with no network and no
    dependencies (torch stays the machine's own)."""
    return [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
            "--no-cache-dir", "--disable-pip-version-check", "--target", str(target),
            str(repo)]  # fmt: skip


def offline_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the environment) with pip forced offline and no proxy to reach anything."""
    env = child_environment() if base is None else dict(base)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):  # fmt: skip
        env.pop(key, None)
    env["PIP_NO_INDEX"] = "1"
    env["PIP_NO_DEPS"] = "1"
    return env


def install(repo: Path, target: Path, timeout: float, python: str = sys.executable,
            run: Callable[..., Any] = subprocess.run) -> dict[str, Any]:  # fmt: skip
    """Install into ``target``; returns what happened, with ``path`` the folder to put first on
    ``PYTHONPATH`` (``target``, or the working tree's ``src`` when pip failed)."""
    cmd = install_command(repo, target, python)
    t0 = time.monotonic()
    try:
        res = run(cmd, cwd=str(repo), env=offline_env(), capture_output=True, text=True,
                  timeout=max(timeout, 1.0))  # fmt: skip
        ok, log = res.returncode == 0, (res.stdout or "") + (res.stderr or "")
    except (subprocess.TimeoutExpired, OSError) as exc:
        ok, log = False, f"{type(exc).__name__}: {exc}"
    ok = ok and (target / "ctrlrnn" / "__init__.py").exists()
    return {
        "command": cmd, "ok": ok, "seconds": round(time.monotonic() - t0, 1),
        "path": str(target if ok else repo / "src"),
        "mode": "pip --target" if ok else "working tree src (pip install failed)",
        "log_tail": log[-2000:],
    }  # fmt: skip
