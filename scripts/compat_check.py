#!/usr/bin/env python3
"""The torch compatibility check: build ctrlrnn against several torch versions and run the smoke
suite on each; write docs/compatibility.md.

For each ``TORCH@PYTHON`` pair (default: the matrix below) it creates a fresh virtual
environment with that Python, installs ``torch==TORCH`` and ctrlrnn from this working tree with
no extras (plus pytest), then:

1. ``ctrlrnn build`` into an empty kernel cache (every extension compiled; seconds recorded);
2. ``pytest tests/smoke`` with the compiled kernels required (``CTRLRNN_REQUIRE_COMPILED=1``);
3. ``pytest tests/smoke`` again on the reference path (``CTRLRNN_BACKEND=reference``).

Each pair's result is written to ``docs/compatibility/torch-<T>-py<P>.json`` as soon as it is
known, and docs/compatibility.md is regenerated from every such file, so pairs can be checked
one run at a time. The environments are deleted after use (torch's CUDA builds take ~5 GB
each) unless ``--keep``.

Usage::

    python3 scripts/compat_check.py                      # the default matrix (~10 min a pair)
    python3 scripts/compat_check.py --torch 2.15.0@3.13  # one pair
    python3 scripts/compat_check.py --report-only        # regenerate the page

Needs only the standard library (run it with any Python 3.10+), a C++ compiler, and a package
index that serves the torch versions asked for.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "compatibility"
PAGE = ROOT / "docs" / "compatibility.md"

#: torch@python pairs checked by default: the lowest torch declared (with the lowest Python),
#: 2.5.1 (whose dynamo once could not trace the layers), the GPU machines' torch 2.11 (with their
#: Python 3.12), the torch the project is developed on, and the newest release (newest Python).
DEFAULT_MATRIX = ["2.4.1@3.10", "2.5.1@3.11", "2.11.0@3.12", "2.13.0@3.11", "2.15.0@3.13"]


def find_python(version: str) -> str | None:
    """An interpreter for Python ``version`` (``3.12``) that runs: under pyenv, or on PATH
    (pyenv's shims are on PATH too, but answer only for the selected versions)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(glob.glob(str(pyenv / f"{version}.*" / "bin" / "python")), reverse=True)
    on_path = shutil.which(f"python{version}")
    for cand in [*candidates, *([on_path] if on_path else [])]:
        probe = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return cand
    return None


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None,
        timeout: float = 3600) -> tuple[int, float]:
    """Run ``cmd`` appending its output to ``log``; ``(exit status, seconds)``."""
    start = time.perf_counter()
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            fh.write(f"\n[compat] timed out after {timeout} s\n")
            rc = 124
    return rc, time.perf_counter() - start


def tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


def junit_summary(xml_path: Path) -> dict:
    """Passed/failed/skipped counts and each failure's first message line."""
    if not xml_path.is_file():
        return {"passed": 0, "failed": 0, "skipped": 0, "failures": ["no test report"]}
    root = ET.parse(xml_path).getroot()
    passed = failed = skipped = 0
    failures = []
    for case in root.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            failed += 1
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            failures.append(f"{case.get('name')}: {msg[0][:300] if msg else '?'}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return {"passed": passed, "failed": failed, "skipped": skipped, "failures": failures}


def check_pair(torch_version: str, py_version: str, work: Path, keep: bool) -> dict:
    """Install, build and smoke-test one torch@python pair; the result record."""
    tag = f"torch-{torch_version}-py{py_version}"
    venv, log = work / tag, work / f"{tag}.log"
    cache = work / f"{tag}-cache"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip() or "?"
    result: dict = {"torch": torch_version, "python": py_version, "date": time.strftime("%Y-%m-%d"),
                    "commit": commit, "machine": f"{platform.machine()} {platform.system()}",
                    "log": str(log)}
    python = find_python(py_version)
    if python is None:
        result["status"] = f"Python {py_version} not found"
        return result
    for stale in (venv, cache):
        shutil.rmtree(stale, ignore_errors=True)
    log.unlink(missing_ok=True)
    py = str(venv / "bin" / "python")
    steps = [
        ([python, "-m", "venv", str(venv)], "venv"),
        ([py, "-m", "pip", "install", "--disable-pip-version-check", f"torch=={torch_version}"],
         "install torch"),
        ([py, "-m", "pip", "install", "--disable-pip-version-check", "-e", str(ROOT),
          "pytest>=7"], "install ctrlrnn (no extras)"),
    ]
    try:
        for cmd, what in steps:
            rc, _ = run(cmd, log)
            if rc != 0:
                result["status"] = f"{what} failed (exit {rc})"
                result["log_tail"] = tail(log)
                return result
        probe = subprocess.run([py, "-c", "import torch, sys, platform; print(torch.__version__,"
                                " platform.python_version())"], capture_output=True, text=True,
                               check=False)
        result["torch_installed"], result["python_full"] = (probe.stdout.split() + ["?", "?"])[:2]
        env = dict(os.environ, CTRLRNN_CACHE=str(cache))
        env.pop("CTRLRNN_BACKEND", None)
        rc, seconds = run([py, "-m", "ctrlrnn", "build"], log, env=env)
        result["build"] = {"ok": rc == 0, "seconds": round(seconds, 1)}
        if rc != 0:
            result["build"]["error"] = tail(log, 8)
        for backend in ("compiled", "reference"):
            benv = dict(env)
            if backend == "compiled":
                benv["CTRLRNN_REQUIRE_COMPILED"] = "1"
            else:
                benv["CTRLRNN_BACKEND"] = "reference"
            xml = work / f"{tag}-{backend}.xml"
            xml.unlink(missing_ok=True)
            rc, seconds = run([py, "-m", "pytest", "tests/smoke", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={xml}"], log, env=benv)
            result[backend] = {**junit_summary(xml), "exit": rc, "seconds": round(seconds, 1)}
        ok = result["build"]["ok"] and all(
            result[b]["exit"] == 0 and result[b]["failed"] == 0 for b in ("compiled", "reference"))
        result["status"] = "pass" if ok else "FAIL"
        return result
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)


def _version_key(record: dict) -> tuple:
    def num(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))

    return num(record["torch"]), num(record["python"])


def _smoke_cell(r: dict, backend: str) -> str:
    """A row's smoke-suite cell for ``backend`` ("compiled" or "reference")."""
    s = r.get(backend)
    if not s:
        return "-"
    text = f"{s['passed']} passed"
    if s["failed"]:
        text += f", **{s['failed']} failed**"
    if s["skipped"]:
        text += f", {s['skipped']} skipped"
    return text


def _row(r: dict) -> str:
    """One result record's table row."""
    build = r.get("build", {})
    b = f"compiled in {build['seconds']:.0f} s" if build.get("ok") else "FAILED" if build else "-"
    return (f"| {r['torch']} | {r.get('python_full', r['python'])} | {b} | "
            f"{_smoke_cell(r, 'compiled')} | {_smoke_cell(r, 'reference')} | "
            f"{r.get('status', '?')} | {r['date']}, {r.get('commit', '?')} |")


def _failure_lines(records: list[dict]) -> list[str]:
    """The page's list of what failed: smoke tests, statuses other than pass/FAIL, builds."""
    failures = []
    for r in records:
        pair = f"torch {r['torch']} / Python {r['python']}"
        for backend in ("compiled", "reference"):
            for f in (r.get(backend) or {}).get("failures", []):
                failures.append(f"- {pair} ({backend}): {f}")
        if r.get("status") not in ("pass", "FAIL"):
            failures.append(f"- {pair}: {r.get('status')}")
        if r.get("build") and not r["build"]["ok"]:
            failures.append(f"- {pair}: build failed\n\n```\n{r['build'].get('error', '')}\n```")
    return failures


def write_page(records: list[dict]) -> str:
    """docs/compatibility.md from the result records."""
    records = sorted(records, key=_version_key)
    rows = [_row(r) for r in records]
    failures = _failure_lines(records)
    passed = [r["torch"] for r in records if r.get("status") == "pass"]
    span = (f"{min(passed, key=lambda v: _version_key({'torch': v, 'python': '0'}))} to "
            f"{max(passed, key=lambda v: _version_key({'torch': v, 'python': '0'}))}"
            if passed else "none")
    lines = [
        "# Compatibility",
        "",
        "Which torch and Python versions ctrlrnn builds and runs on, as measured by "
        "`scripts/compat_check.py` (generated from `docs/compatibility/*.json`; do not edit "
        "by hand).",
        "",
        "Each row is a fresh virtual environment with only `torch==T`, ctrlrnn from the working "
        "tree **without extras** and pytest: the C++ kernels compiled into an empty cache "
        "(`ctrlrnn build`), then the smoke suite `tests/smoke` twice, with the compiled "
        "kernels required (`CTRLRNN_REQUIRE_COMPILED=1`) and on the reference path "
        "(`CTRLRNN_BACKEND=reference`). The smoke suite runs every layer forward and backward "
        "on the compiled kernels against the reference (float64), gradcheck of "
        "`linear_scan`, `torch.compile(fullgraph=True)` and `torch.export` of a QRNN, "
        "`torch.compile` as the first call of a fresh process, `torch.jit.trace` of three "
        "layers run at another batch and length (and `torch.jit.script` refused), every layer "
        "under bfloat16 autocast, and `torch.func.grad`. torch builds other than 2.13.0 come "
        "from the registry as CUDA builds; they run on the CPU here. Build times are wall times "
        "on a 2-core machine and vary with its load.",
        "",
        f"Passed: torch {span}. `pyproject.toml` declares the range that passed.",
        "",
        "| torch | Python | kernels | smoke, compiled | smoke, reference | result | "
        "checked (date, commit) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if failures:
        lines += ["## Failures", "", *failures, ""]
    machine = records[0]["machine"] if records else ""
    lines += [
        "## Running the check",
        "",
        "```bash",
        "python3 scripts/compat_check.py                      # the default matrix",
        "python3 scripts/compat_check.py --torch 2.15.0@3.13  # one torch@Python pair",
        "python3 scripts/compat_check.py --report-only        # rebuild this page",
        "```",
        "",
        "It needs the Python versions asked for (on PATH as `python3.X`, or under pyenv), a C++ "
        "compiler and a package index serving the torch versions; each pair downloads torch "
        "(~5 GB for a CUDA build), compiles the three extensions (~3-4 min on 2 cores) and "
        "takes about 10 minutes in all. The environments are deleted afterwards (`--keep` "
        "keeps them). A pip constraint file (`pip config list` shows one) that caps torch fails "
        "the install; `PIP_CONSTRAINT=/dev/null` lifts it for the run. "
        "It is not part of `.ci/run` (too long); run it when the torch range or "
        f"the build changes. Last run on: {machine}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", action="append", metavar="TORCH@PYTHON",
                        help=f"a pair to check (repeatable; default {' '.join(DEFAULT_MATRIX)})")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) /
                        "ctrlrnn-compat", help="where the environments and logs go")
    parser.add_argument("--keep", action="store_true", help="keep the environments")
    parser.add_argument("--report-only", action="store_true",
                        help="only regenerate docs/compatibility.md from the stored results")
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        args.work.mkdir(parents=True, exist_ok=True)
        for pair in args.torch or DEFAULT_MATRIX:
            torch_version, _, py_version = pair.partition("@")
            py_version = py_version or f"{sys.version_info.major}.{sys.version_info.minor}"
            print(f"[compat] torch {torch_version} on Python {py_version} ...", flush=True)
            result = check_pair(torch_version, py_version, args.work, args.keep)
            out = RESULTS / f"torch-{torch_version}-py{py_version}.json"
            out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            print(f"[compat] torch {torch_version} on Python {py_version}: "
                  f"{result.get('status')}  ({out.relative_to(ROOT)})", flush=True)
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RESULTS.glob("*.json"))]
    PAGE.write_text(write_page(records), encoding="utf-8")
    print(f"[compat] wrote {PAGE.relative_to(ROOT)}")
    return 0 if all(r.get("status") == "pass" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
