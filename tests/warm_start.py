"""Commands run as processes forked from one interpreter that has imported their modules.

A fresh ``python -m ctrlrnn train`` spends most of its CPU time importing torch, torch's
compiler (the optimizers import it), matplotlib and ctrlrnn, far more than a test's few tiny
steps take. A test that needs many such processes (signal after signal, each stopping its own
run) starts a :class:`Starter` once: a Python process that imports the given modules, then forks
a process for each command. Each command is still a process of its own, which a signal reaches
as ``kill`` delivers it, with its own exit status, output and environment, that runs the
command as ``python ARGV`` would (``-m MODULE`` or a script, ``__main__`` and ``sys.argv`` as
there, the exit handlers run at its end); only its imports were done before the fork.

The starter forks only while it has a single thread, so no lock is held across a fork, and its
environment is the one the commands see when their modules are imported: variables read at
import time belong to the starter's environment, those read later may differ per command.

``python warm_start.py MODULE...`` is the starter: it reads one JSON request a line on stdin.
Each command is watched by a process between the starter and it, which writes the command's
pid and then its exit status to files, and reaps it only after that, so a pid whose status
file is absent is still the command's (a signal can never reach another process by it). A
watcher, its command and the command's children form a process group, which the starter kills
when its input ends (the test has closed it, or died), so nothing a test started outlives it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

_READY = "ready"

#: what ``ctrlrnn train``, ``eval`` and ``reproduce`` import: the command modules (``MODULE:F``:
#: import MODULE, then call its F: the parser imports every command's module), the model
#: and task of the tests' runs, torch's compiler (the optimizers import it) and matplotlib's
#: backend (the report's figure)
CTRLRNN_MODULES = (
    "torch", "torch._dynamo", "matplotlib.pyplot", "matplotlib.backends.backend_agg",
    "ctrlrnn.cli:build_parser", "ctrlrnn.train.run", "ctrlrnn.train.trainer",
    "ctrlrnn.tasks.seq2seq_tasks", "ctrlrnn.models.seq2seq", "ctrlrnn.nn.qrnn",
)

#: what the starter's imports wrote to stderr
_IMPORTS_SAID: list[bytes] = []


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a reader sees it complete or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _exit_code(exc: SystemExit) -> int:
    """The exit status the interpreter gives ``sys.exit(code)`` (its message printed)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_command(request: dict[str, Any]) -> None:
    """In the forked process: become ``python ARGV`` in the request's folder, environment and
    files, run it, and end with its exit status; never returns."""
    import atexit
    import io
    import runpy
    import threading
    import traceback

    code = 1
    try:
        folder = Path(request["files"])
        os.chdir(request["cwd"])
        added = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep)
                 if p and p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            out = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        os.write(2, b"".join(_IMPORTS_SAID))
        # unbuffered, as the tests' PYTHONUNBUFFERED=1 makes a fresh interpreter
        sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True,
            line_buffering=True)
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
            write_through=True, line_buffering=True)
        argv = list(request["argv"])
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[:1] = [os.getcwd(), *added]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path[:1] = [str(Path(argv[0]).resolve().parent), *added]
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        # the interpreter's own end for an uncaught Ctrl-C: the traceback, then death by SIGINT
        traceback.print_exc()
        atexit._run_exitfuncs()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process with status 1
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # wait for non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _watch(request: dict[str, Any]) -> None:
    """In the process between the starter and a command: fork the command, write its pid and
    then its exit status (as :attr:`subprocess.Popen.returncode` gives it); never returns."""
    try:
        os.setpgid(0, 0)  # a group of its own, which the starter can end whole
        pid = os.fork()
        if pid == 0:
            _run_command(request)
        folder = Path(request["files"])
        _write(folder / "pid", str(pid))
        # WNOWAIT: the command stays a zombie, its pid its own, until its status is written
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert info is not None
        exited = info.si_code == os.CLD_EXITED
        _write(folder / "returncode", str(info.si_status if exited else -info.si_status))
        os.waitpid(pid, 0)
    finally:
        os._exit(0)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def serve(modules: Iterable[str]) -> None:
    """The starter: import ``modules``, say so, then fork a watched command for each request
    line until stdin ends."""
    import tempfile

    # what the imports print (a warning) each command prints first, as its own imports would
    with tempfile.TemporaryFile() as said:
        kept = os.dup(2)
        os.dup2(said.fileno(), 2)
        try:
            for name in modules:
                module, _, call = name.partition(":")
                imported = importlib.import_module(module)
                if call:
                    getattr(imported, call)()
        finally:
            sys.stderr.flush()
            os.dup2(kept, 2)
            os.close(kept)
        said.seek(0)
        _IMPORTS_SAID.append(said.read())
    if _threads() != 1:  # a fork would copy locks other threads hold
        print(f"the imports started {_threads() - 1} thread(s); cannot fork", flush=True)
        sys.exit(1)
    print(_READY, flush=True)
    watchers: set[int] = set()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _watch(request)
        watchers.add(pid)
        while watchers:  # reap the watchers that have ended
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            watchers.discard(pid)
    # stdin has ended: the test has ended its commands, or is gone; end what is left of them
    # (a command's own children, or the commands of a test that died), then the watchers.
    # A watcher not yet reaped keeps its group's id from being taken by another process.
    for pid in watchers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


class Command:
    """A command forked by a :class:`Starter`: :class:`subprocess.Popen`'s ways of watching,
    signalling and reading it."""

    def __init__(self, folder: Path, argv: Sequence[str]) -> None:
        self.folder = folder
        self.args = list(argv)
        deadline = time.monotonic() + 60
        while not (folder / "pid").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the starter did not start {argv}")
            time.sleep(0.005)
        self.pid = int((folder / "pid").read_text())
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and (self.folder / "returncode").exists():
            self.returncode = int((self.folder / "returncode").read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the command unless it has ended (its pid may then be another's)."""
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    @property
    def stdout(self) -> str:
        return (self.folder / "stdout").read_text()

    @property
    def stderr(self) -> str:
        return (self.folder / "stderr").read_text()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.stdout, self.stderr


class Starter:
    """``python warm_start.py MODULE...`` for one test module: :meth:`start` and :meth:`run`
    are :class:`subprocess.Popen` and :func:`subprocess.run` for commands run in forks of it.
    ``env`` is the starter's environment (a command's defaults); ``folder`` holds each
    command's files."""

    def __init__(self, modules: Sequence[str], env: Mapping[str, str], folder: Path) -> None:
        self.env = dict(env)
        self.folder = folder
        self.commands: list[Command] = []
        self._proc = subprocess.Popen([sys.executable, __file__, *modules], env=self.env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        self._stdin: IO[str] = stdin
        said = stdout.readline().strip()
        if said != _READY:
            self.close()
            raise RuntimeError(f"the starter failed: {said or self._proc.wait()}")

    def start(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None
              ) -> Command:
        """``python ARGV`` in ``cwd`` (with ``env`` added to the starter's environment)."""
        files = self.folder / str(len(self.commands))
        files.mkdir()
        request = {"argv": list(argv), "cwd": str(cwd), "files": str(files),
                   "env": {**self.env, **(env or {})}}
        self._stdin.write(json.dumps(request) + "\n")
        self._stdin.flush()
        command = Command(files, argv)
        self.commands.append(command)
        return command

    def run(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        command = self.start(argv, cwd=cwd, env=env)
        try:
            out, err = command.communicate(timeout)
        finally:
            command.kill()
        return subprocess.CompletedProcess(command.args, command.wait(), out, err)

    def close(self) -> None:
        """End every command still running, then the starter."""
        for command in self.commands:
            command.kill()
        self._stdin.close()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> Starter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


if __name__ == "__main__":
    serve(sys.argv[1:])
    os._exit(0)  # nothing to flush: skip tearing the imported modules down
