"""The kernel cache where users deploy it: read-only (a container image, a read-only mount),
not a folder, or holding a damaged library. A valid build loads without any write; an unusable
cache is one warning naming it, then the reference path; a damaged library is rebuilt from an
empty folder, never imported.

Read-only mounts are made in a private mount namespace (``unshare``), so nothing outside the
test process sees them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from install_helpers import TINY_CPP, TINY_PRELUDE, TRAIN_EVERY_LAYER, fresh_env, run_python

REPORT = TINY_PRELUDE + """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    module = e.load("tiny")
st = e.status("tiny")
print(json.dumps({"origin": st.origin, "reason": st.reason, "path": st.path,
                  "twice": module.twice(21) if module else None,
                  "warnings": [str(w.message) for w in caught]}))
"""


def _can_mount_read_only() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind -o ro / / 2>/dev/null "
                            "|| mount --bind -o ro /tmp /tmp"], capture_output=True, check=False)
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(not _can_mount_read_only(),
                                 reason="no private mount namespace (unshare -rm) here")


def run_read_only(folder: Path, argv: list[str],
                  env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``folder`` bind-mounted read-only over itself, in a private mount
    namespace."""
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, str(folder), *argv], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _tiny_source(folder: Path) -> Path:
    src = folder / "csrc"
    src.mkdir()
    (src / "tiny.cpp").write_text(TINY_CPP)
    return src


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return _tiny_source(tmp_path)


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernel cache holding one finished build of the tiny extension, compiled once for the
    module: the tests that only need a valid build to start from copy it (:func:`_build_tiny`)
    instead of compiling their own. The build's key hashes the source's bytes, not its folder
    or the cache's, so the copy is that test's finished build."""
    root = tmp_path_factory.mktemp("tiny-build")
    got = _report(run_python(REPORT, fresh_env(root), str(_tiny_source(root))))
    assert got["origin"] == "compiled" and got["twice"] == 42, got["reason"]
    return root / "cache"


def _build_tiny(tmp_path: Path, built_cache: Path) -> tuple[dict[str, str], Path]:
    """The environment of a kernel cache under ``tmp_path`` that holds a finished build of the
    tiny extension (a copy of ``built_cache``), and the path of its library."""
    shutil.copytree(built_cache, tmp_path / "cache", symlinks=True)
    (folder,) = (tmp_path / "cache" / "ext").glob("tiny-*")
    record = json.loads((folder / "build.json").read_text())
    return fresh_env(tmp_path), folder / record["library"]


@needs_mount
def test_a_read_only_cache_with_a_valid_build_loads_it_without_writing(
    tmp_path: Path, tiny: Path, built_cache: Path
) -> None:
    env, _ = _build_tiny(tmp_path, built_cache)
    cache = tmp_path / "cache"
    got = _report(run_read_only(cache, [sys.executable, "-c", textwrap.dedent(REPORT),
                                        str(tiny)], env))
    assert got["origin"] == "cached" and got["twice"] == 42 and got["warnings"] == []


@needs_mount
def test_the_real_kernels_run_from_a_read_only_cache(tmp_path: Path) -> None:
    """The kernels the suite built, with their cache mounted read-only: every layer trains on
    them, and ``ctrlrnn info`` reports them, with nothing on stderr."""
    from ctrlrnn.ops import _extension

    for name in _extension.EXTENSIONS:  # (the suite requires them built)
        assert _extension.ensure(name).loaded
    cache = _extension.cache_dir()
    env = dict(os.environ, CTRLRNN_REQUIRE_COMPILED="1", CTRLRNN_CACHE=str(cache))
    env.pop("CTRLRNN_BACKEND", None)
    trained = run_read_only(cache, [sys.executable, "-c", textwrap.dedent(TRAIN_EVERY_LAYER)],
                            env)
    got = _report(trained)
    assert got["backend"] == "compiled" and got["warnings"] == [], got
    assert trained.stderr.strip() == ""
    info = run_read_only(cache, [sys.executable, "-m", "ctrlrnn", "info"], env)
    assert info.returncode == 0, info.stderr
    assert "cpu: compiled" in info.stdout and info.stderr.strip() == ""


def _unusable_cache(tmp_path: Path, kind: str) -> tuple[list[str], Path]:
    """A command prefix that runs with the cache ``kind``, and the path the warning names."""
    cache = tmp_path / "cache"
    if kind == "a file":
        cache.write_text("not a folder")
        return [], cache
    if kind == "inside a file":
        (tmp_path / "file").write_text("not a folder")
        return [], tmp_path / "file"
    cache.mkdir()
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, str(cache)], cache


@pytest.mark.parametrize("kind", ["read-only and empty", "a file", "inside a file"])
def test_an_unusable_cache_warns_once_naming_it_and_every_layer_trains(tmp_path: Path,
                                                                        kind: str) -> None:
    if kind == "read-only and empty" and not _can_mount_read_only():
        pytest.skip("no private mount namespace (unshare -rm) here")
    prefix, named = _unusable_cache(tmp_path, kind)
    # one thread: the reference path's tiny ops gain nothing from a second one, whose waits
    # cost CPU time on a busy machine
    env = fresh_env(tmp_path, OMP_NUM_THREADS="1")
    if kind == "inside a file":
        env["CTRLRNN_CACHE"] = str(named / "cache")
    argv = [*prefix, sys.executable, "-c", textwrap.dedent(TRAIN_EVERY_LAYER)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    got = _report(proc)
    assert got["backend"] == "reference"
    assert len(got["warnings"]) == 1, got["warnings"]
    message = got["warnings"][0][0]  # (message, file, line)
    assert str(named) in message and "cannot be written" in message, message
    assert "CTRLRNN_CACHE" in message
    assert "Traceback" not in proc.stderr

    info = subprocess.run([*prefix, sys.executable, "-m", "ctrlrnn", "info"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert info.returncode == 0 and "Traceback" not in info.stderr, info.stderr
    assert str(named) in info.stdout and "cpu: reference" in info.stdout
    assert "to fix: set CTRLRNN_CACHE" in info.stdout, info.stdout
    call = "import torch, ctrlrnn\nctrlrnn.linear_scan(torch.rand(1, 2, 3), torch.rand(1, 2, 3))"
    strict = subprocess.run([*prefix, sys.executable, "-c", call],
                            env={**env, "CTRLRNN_REQUIRE_COMPILED": "1"}, capture_output=True,
                            text=True, timeout=600, check=False)
    assert strict.returncode != 0
    assert str(named) in strict.stderr and "CTRLRNN_REQUIRE_COMPILED" in strict.stderr


def _damage(library: Path, how: str) -> None:
    data = library.read_bytes()
    if how == "half":
        library.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        library.write_bytes(b"")
    else:  # one byte changed, same size
        middle = len(data) // 2
        library.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])


#: What each damage of a built library makes the loader's check say
#: (``_extension.library_fault``, against the size and SHA-256 its build recorded)
DAMAGE_FOUND = {"half": "bytes; the build wrote", "empty": "is 0 bytes; the build wrote",
                "one byte": "SHA-256"}


def test_every_damage_to_a_built_library_is_found_before_import(tmp_path: Path,
                                                                built_cache: Path) -> None:
    """The check the loader makes before it imports a cached library, against the record of a
    real build: each damage is found. Done in this process, without importing the library;
    ``test_a_damaged_library_is_rebuilt_not_imported`` follows one through a fresh process to
    its rebuild."""
    from ctrlrnn.ops._extension import library_fault

    _, library = _build_tiny(tmp_path, built_cache)
    record = json.loads((library.parent / "build.json").read_text())
    assert library_fault(library, record) is None
    data = library.read_bytes()
    for how, found in DAMAGE_FOUND.items():
        library.write_bytes(data)
        _damage(library, how)
        assert found in str(library_fault(library, record)), how


def test_a_damaged_library_is_rebuilt_not_imported(tmp_path: Path, tiny: Path,
                                                   built_cache: Path) -> None:
    """Cut in half, the damage that kills a process which imports it (a bus error)."""
    env, library = _build_tiny(tmp_path, built_cache)
    _damage(library, "half")
    again = run_python(REPORT, env, str(tiny))
    got = _report(again)  # a bus error would end the process with a signal
    assert got["origin"] == "compiled" and got["twice"] == 42 and got["warnings"] == []
    assert f"the cached library {library}" in again.stderr and "building it again" in again.stderr
    third = _report(run_python(REPORT, env, str(tiny)))
    assert third["origin"] == "cached" and third["twice"] == 42


def test_a_damaged_library_in_a_read_only_cache_is_a_warning_not_a_crash(
    tmp_path: Path, tiny: Path, built_cache: Path
) -> None:
    if not _can_mount_read_only():
        pytest.skip("no private mount namespace (unshare -rm) here")
    env, library = _build_tiny(tmp_path, built_cache)
    _damage(library, "half")
    got = _report(run_read_only(tmp_path / "cache", [sys.executable, "-c",
                                                     textwrap.dedent(REPORT), str(tiny)], env))
    assert got["origin"] == "failed" and got["twice"] is None
    assert len(got["warnings"]) == 1
    message = got["warnings"][0]
    assert "cannot be written" in message and "the build wrote" in message, message


def test_build_force_starts_from_an_empty_folder(tmp_path: Path, tiny: Path,
                                                 built_cache: Path) -> None:
    env, library = _build_tiny(tmp_path, built_cache)
    folder = library.parent
    _damage(library, "empty")
    (folder / "stale.o").write_text("junk")
    (folder / "failed.json").write_text('{"cause": "an old failure"}')
    forced = run_python(TINY_PRELUDE + """
from ctrlrnn.cli import main
raise SystemExit(main(["build", "--force"]))
""", env, str(tiny))
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "[build] tiny      compiled in " in forced.stdout
    assert not (folder / "stale.o").exists() and not (folder / "failed.json").exists()
    got = _report(run_python(REPORT, env, str(tiny)))
    assert got["origin"] == "cached" and got["twice"] == 42


def test_library_fault_checks_size_checksum_and_elf_structure(tmp_path: Path) -> None:
    from ctrlrnn.ops._extension import library_fault

    lib = Path(sys.executable).resolve()  # any complete ELF file
    data = lib.read_bytes()
    if data[:4] != b"\x7fELF":
        pytest.skip("not an ELF platform")
    copy = tmp_path / "lib.so"
    copy.write_bytes(data)
    assert library_fault(copy, {}) is None
    assert "bytes; the build wrote" in str(library_fault(copy, {"size": len(data) + 1}))
    assert "SHA-256" in str(library_fault(copy, {"size": len(data), "sha256": "0" * 64}))
    copy.write_bytes(data[: len(data) - 100])  # the section table sits at the end
    assert "cut short" in str(library_fault(copy, {}))
    copy.write_bytes(b"")
    assert library_fault(copy, {}) == "is empty"
    assert "cannot be read" in str(library_fault(tmp_path / "missing.so", {}))


def test_the_clock_counts_on_a_terminal_with_the_estimate() -> None:
    import io
    import time

    from ctrlrnn.ops.build_progress import about, ticking

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    with ticking("compiling cells", stream=screen, every=0.02, expected=95):
        time.sleep(0.2)
    shown = screen.getvalue()
    assert "\r[build] compiling cells ... 00:00 of ~01:35" in shown
    assert shown.endswith("\r\033[K")
    assert about(42) == "about 40 s" and about(200) == "about 3 min"


def test_the_estimate_follows_this_machine_and_its_load(tmp_path: Path, monkeypatch) -> None:
    from ctrlrnn.ops import build_progress as bp

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert bp.estimate("cells", tmp_path) == bp.DEFAULT_SECONDS["cells"]
    bp.record("cells", tmp_path, 300.0, load_factor=2.0)  # took 300 s on a machine twice busy
    assert bp.estimate("cells", tmp_path) == 150.0
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.0, 0.0))  # 3 busy + the compile
    assert bp.estimate("cells", tmp_path) == 300.0


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_process_killed_while_compiling_leaves_no_compiler_behind(
    tmp_path: Path, tiny: Path, signal_name: str
) -> None:
    """The compiler (here a stand-in that sleeps) dies with the process that started the build,
    however that process ends."""
    import signal
    import time

    pids = tmp_path / "compiler-pids"
    fake = tmp_path / "bin" / "slow-c++"
    fake.parent.mkdir()
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in --version|-v|-dumpversion|-dumpfullversion) echo "slow-c++ 1"; exit 0;; esac
        echo $$ >> {pids}
        exec sleep 120
        """))
    fake.chmod(0o755)
    env = fresh_env(tmp_path, CXX=str(fake))
    # A child inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt for
    # it; a test run can leave SIGINT ignored in its worker. The build's process starts as a
    # user's does: SIGINT raising KeyboardInterrupt.
    as_a_user = ("import signal\n"
                 "signal.signal(signal.SIGINT, signal.default_int_handler)\n")
    script = as_a_user + textwrap.dedent(REPORT)
    parent = subprocess.Popen([sys.executable, "-c", script, str(tiny)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().strip()):
            assert parent.poll() is None, parent.communicate()
            assert time.monotonic() < deadline, "the compiler never started"
            time.sleep(0.1)
        compiler = int(pids.read_text().split()[0])
        parent.send_signal(getattr(signal, signal_name))
        # read its pipes while waiting, so that a parent with much to say never blocks on them
        try:
            _, err = parent.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            parent.kill()
            _, err = parent.communicate()
            raise AssertionError(f"the build's process outlived {signal_name} by 120 s; it "
                                 f"wrote: {err.decode(errors='replace')[-2000:]}") from None
        deadline = time.monotonic() + 30
        while _alive(compiler) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(compiler), f"the compiler (pid {compiler}) outlived its build"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
