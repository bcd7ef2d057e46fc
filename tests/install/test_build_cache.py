"""The extension build cache: built once, whatever PATH and ninja hold; failures remembered,
reported once at the user's call site; the reference path trains every layer without a compiler.

Each case runs in a fresh Python process (the loader keeps per-process state). The builds here
compile a tiny extension (one op), not the real kernels, so each takes seconds; the tests of a
fresh cache's first build share one (``first_build``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from install_helpers import (
    TINY_CPP,
    TINY_PRELUDE,
    TRAIN_EVERY_LAYER,
    fresh_env,
    line_of,
    run_python,
)


def _path_without_ninja(tmp_path: Path) -> str:
    """A PATH that has every program of the system's but no ninja."""
    folder = tmp_path / "bin-no-ninja"
    folder.mkdir(exist_ok=True)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry) or entry.startswith(sys.prefix):
            continue
        for prog in os.listdir(entry):
            target = folder / prog
            if prog != "ninja" and not target.exists():
                target.symlink_to(os.path.join(entry, prog))
    return str(folder)


def _fake_tool(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return tool


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    src = tmp_path / "csrc"
    src.mkdir()
    (src / "tiny.cpp").write_text(TINY_CPP)
    return src


#: The loader pointed at two tiny extensions (the same source, two cache folders).
TWO_EXTENSIONS = TINY_PRELUDE + """
e.EXTENSIONS = {"tiny": ["tiny.cpp"], "tiny2": ["tiny.cpp"]}
"""

#: Asks for both, the first again after the second, and prints, for each call, where its
#: extension came from and its library.
ASK_BOTH = """
print(json.dumps([{"origin": st.origin, "path": st.path, "reason": st.reason,
                   "twice": st.module.twice(21) if st.module else None}
                  for st in (e.ensure(n) for n in ("tiny", "tiny2", "tiny"))]))
"""

#: What a killed build leaves: torch's builder's ``lock`` file in the build folder, which it
#: would wait on forever.
KILLED_BUILD_LEFT = """
folder = e.build_dir("tiny")
folder.mkdir(parents=True)
(folder / "lock").write_text("")
"""


@dataclass(frozen=True)
class FirstBuild:
    """The first process of a fresh cache (:func:`first_build`): its environment, its source
    folder, what it printed and the folder it left."""

    env: dict[str, str]
    tiny: Path
    proc: subprocess.CompletedProcess
    cache: Path

    def calls(self) -> list[dict]:
        assert self.proc.returncode == 0, self.proc.stderr
        return json.loads(self.proc.stdout)


@pytest.fixture(scope="module")
def first_build(tmp_path_factory: pytest.TempPathFactory) -> FirstBuild:
    """Both tiny extensions built on first use by one process, in a fresh cache, with no ninja
    anywhere on PATH (the interpreter's own is found) and torch's ``lock`` file left in the
    first one's folder by a killed build. Compiles cost seconds each, so the module's tests of
    a first build share this one, and each checks its own part of it."""
    root = tmp_path_factory.mktemp("first-build")
    tiny = root / "csrc"
    tiny.mkdir()
    (tiny / "tiny.cpp").write_text(TINY_CPP)
    env = fresh_env(root, PATH=_path_without_ninja(root))
    code = TWO_EXTENSIONS + KILLED_BUILD_LEFT + ASK_BOTH
    return FirstBuild(env, tiny, run_python(code, env, str(tiny)), root / "cache")


def test_built_once_whatever_path_and_ninja(tmp_path: Path, first_build: FirstBuild) -> None:
    built = first_build.calls()[0]  # the first build: no ninja on PATH
    assert built["origin"] == "compiled", built["reason"]
    assert built["twice"] == 42
    lib = Path(built["path"])
    mtime = lib.stat().st_mtime_ns
    ext = first_build.cache / "ext"
    folders = sorted(p.name for p in ext.iterdir() if p.is_dir())
    assert [name.rsplit("-", 1)[0] for name in folders] == ["tiny", "tiny2"]

    # then: another ninja first on PATH (one that must never run) with the venv "activated"
    # ahead of the system's programs, and the system's PATH alone (its ninja, no venv). The
    # build's own PATH again is the second process of the test of what compiles say.
    ninja_log = tmp_path / "ninja-calls"
    fake = _fake_tool(tmp_path / "other-ninja", "ninja", f'echo "$@" >> {ninja_log}\nexit 1\n')
    system_path = os.environ.get("PATH", "")
    venv_bin = str(Path(sys.executable).parent)
    env = first_build.env
    for path in (os.pathsep.join([str(fake.parent), venv_bin, system_path]), system_path):
        again = run_python(TWO_EXTENSIONS + ASK_BOTH, {**env, "PATH": path}, str(first_build.tiny))
        assert again.returncode == 0, again.stderr
        got = json.loads(again.stdout)
        assert [c["origin"] for c in got] == ["cached"] * 3, (path, got)
        assert got[0]["path"] == str(lib) and got[0]["twice"] == 42
    assert lib.stat().st_mtime_ns == mtime
    assert not ninja_log.exists()
    assert sorted(p.name for p in ext.iterdir() if p.is_dir()) == folders  # none added


def test_failed_build_remembered_reported_once_and_forced(tmp_path: Path, tiny: Path) -> None:
    calls = tmp_path / "compiler-calls"
    fake_cxx = _fake_tool(tmp_path / "fake-cc", "fake-c++", textwrap.dedent(f"""\
        case "$1" in
          --version|-v|-dumpversion|-dumpfullversion) echo "fake-c++ 12.2.0"; exit 0;;
        esac
        echo call >> {calls}
        echo "tiny.cpp:3:1: error: boom (a planted compile error)" >&2
        exit 1
        """))
    env = fresh_env(tmp_path, CXX=str(fake_cxx))
    run = TINY_PRELUDE + """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    for _ in range(3):
        e.load("tiny")  # call site
print(json.dumps({"warnings": [[str(w.message), w.filename, w.lineno] for w in caught],
                  "reason": e.status("tiny").reason}), flush=True)
if sys.argv[2:]:  # the compiler's calls so far, then `ctrlrnn build --force` here
    print(Path(sys.argv[2]).read_text().count("call"), flush=True)
    from ctrlrnn.cli import main
    raise SystemExit(main(["build", "--force"]))
"""
    first = run_python(run, env, str(tiny))
    assert first.returncode == 0, first.stderr
    got = json.loads(first.stdout)
    assert len(got["warnings"]) == 1
    message, filename, lineno = got["warnings"][0]
    assert "error: boom" in message and "ctrlrnn build --force" in message
    assert (filename, lineno) == ("<string>", line_of(run, "# call site"))
    assert calls.read_text().count("call") == 1

    # a new process: remembered, not retried; then `ctrlrnn build --force` in it retries
    second = run_python(run, env, str(tiny), str(calls))
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr
    remembered, calls_then, forced = second.stdout.split("\n", 2)
    got = json.loads(remembered)
    assert "error: boom" in got["reason"] and "remembered" in got["reason"]
    assert len(got["warnings"]) == 1
    assert calls_then == "1"
    assert "error: boom" in forced + second.stderr
    assert calls.read_text().count("call") == 2


def test_every_compile_says_so_with_an_estimate_and_the_cache_says_nothing(
    tmp_path: Path, first_build: FirstBuild
) -> None:
    assert [c["origin"] for c in first_build.calls()] == ["compiled", "compiled", "compiled"]
    lines = [line for line in first_build.proc.stderr.splitlines() if line.strip()]
    cache = first_build.cache / "ext"
    assert len(lines) == 2, lines  # one line per compile, whichever call started it
    for line, name in zip(lines, ("tiny", "tiny2")):
        assert re.fullmatch(rf"ctrlrnn: compiling the C\+\+ kernels, extension '{name}': once, "
                            rf"about \d+ (s|min) on this machine now, then cached in "
                            rf"{re.escape(str(cache))}", line), line
    times = json.loads((cache / "build-times.json").read_text())
    assert set(times) == {"tiny", "tiny2"} and times["tiny"]["seconds"] > 0
    again = run_python(TWO_EXTENSIONS + ASK_BOTH, first_build.env, str(first_build.tiny))
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert [c["origin"] for c in got] == ["cached", "cached", "cached"]
    assert got[0]["path"] == first_build.calls()[0]["path"] and got[0]["twice"] == 42
    assert again.stderr.strip() == ""

    built = run_python(TWO_EXTENSIONS + """
from ctrlrnn.cli import main
raise SystemExit(main(["build"]))
""", fresh_env(tmp_path / "other"), str(first_build.tiny))
    assert built.returncode == 0, built.stderr
    assert "[build] tiny      compiled in " in built.stdout
    assert "extension 'tiny' (1 of 2)" in built.stderr
    assert "extension 'tiny2' (2 of 2)" in built.stderr


@pytest.mark.parametrize("missing", ["CXX=/bin/false", "no c++ on PATH"])
def test_no_compiler_one_warning_at_call_site_and_every_layer_trains(
    tmp_path: Path, missing: str
) -> None:
    # one thread: the reference path's tiny ops gain nothing from a second one, whose waits
    # cost CPU time on a busy machine
    if missing == "CXX=/bin/false":
        env = fresh_env(tmp_path, CXX="/bin/false", OMP_NUM_THREADS="1")
        named = "/bin/false"
    else:
        (tmp_path / "empty").mkdir()
        env = fresh_env(tmp_path, CXX=None, PATH=str(tmp_path / "empty"), OMP_NUM_THREADS="1")
        named = "'c++'"
    code = TRAIN_EVERY_LAYER
    proc = run_python(code, env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["backend"] == "reference"
    assert len(got["warnings"]) == 1, got["warnings"]
    message, filename, lineno = got["warnings"][0]
    assert (filename, lineno) == ("<string>", line_of(code, "# call site"))
    assert named in message and "install a C++ compiler" in message
    assert "CTRLRNN_BACKEND=reference" in message
    assert proc.stderr.strip() == "", proc.stderr  # no build banners, nothing else printed


def test_require_compiled_turns_the_failure_into_an_error(tmp_path: Path) -> None:
    proc = run_python("import torch, ctrlrnn\nctrlrnn.linear_scan(torch.rand(1, 2, 3), "
                   "torch.rand(1, 2, 3))", fresh_env(tmp_path, CXX="/bin/false",
                                                 CTRLRNN_REQUIRE_COMPILED="1"))
    assert proc.returncode != 0
    assert "CTRLRNN_REQUIRE_COMPILED" in proc.stderr and "/bin/false" in proc.stderr


def test_first_error_line_finds_the_compiler_error() -> None:
    from ctrlrnn.ops._extension import first_error_line

    log = textwrap.dedent("""\
        [1/2] c++ -MMD -MF scan.o.d -DTORCH_EXTENSION_NAME=ctrlrnn_scan -c scan.cpp
        FAILED: scan.o
        c++ -MMD -c scan.cpp -o scan.o
        In file included from /torch/include/c10/macros/Macros.h:3,
        /torch/include/c10/util/C++17.h:13:2: error: #error C++20 or later compatible compiler is required
        ninja: build stopped: subcommand failed.
        RuntimeError: Error building extension 'ctrlrnn_scan'
        """)  # noqa: E501
    assert first_error_line(log).startswith("/torch/include/c10/util/C++17.h:13:2: error: #error")
    assert first_error_line("") == "no output"


def test_a_killed_build_does_not_block_the_next(first_build: FirstBuild) -> None:
    """torch's builder leaves a ``lock`` file in the folder when its process is killed, and
    would wait on it forever; the next build removes it (the folder lock makes it stale). The
    module's first build starts from such a folder."""
    got = first_build.calls()[0]
    assert got["origin"] == "compiled" and got["twice"] == 42, got["reason"]
