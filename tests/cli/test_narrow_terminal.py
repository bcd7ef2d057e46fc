"""Every command readable at 80 columns: tables fold or drop columns, progress bars keep the
count and the times, nothing numeric is cut with an ellipsis, no header wraps.

The commands run as subprocesses twice: under a pseudo-terminal of 80x24 (``COLUMNS=80``,
``LINES=24`` and the window size set with ``TIOCSWINSZ``), and with plain pipes and
``COLUMNS=80``. The captured bytes are reduced to what a reader sees: colours dropped, each
frame of a redrawn progress line kept (every frame must fit, not only the last one).
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pty = pytest.importorskip("pty")
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")

import struct  # noqa: E402

from rich.console import Console  # noqa: E402

from ctrlrnn.progress import FittedProgress, TrainingProgressBar, progress_bar  # noqa: E402
from ctrlrnn.tables import Col, fit_table  # noqa: E402

WIDTH = 80
CTRLRNN = [sys.executable, "-m", "ctrlrnn"]
#: colours and styles (removed); other control sequences move the cursor (a frame boundary)
SGR = re.compile(r"\x1b\[[0-9;:]*m")
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]"
                     r"|\x1b[=>78]|[\x07\x08]")
#: a number cut short: an ellipsis right after or before a digit
CUT_NUMBER = re.compile(r"\d(…|\.\.\.)|(…|\.\.\.)\d")
COUNT = re.compile(r"\b(\d+)/(\d+)\b")
TIME = re.compile(r"\b\d+:\d\d:\d\d\b")
#: a time, or rich's "not known yet" remaining time
ANY_TIME = re.compile(r"\b\d+:\d\d:\d\d\b|-:--:--")


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS=str(WIDTH), LINES="24", TERM="xterm-256color",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("NO_COLOR", None)
    return env


def run_tty(argv: list[str], timeout: float = 120.0, cwd: Path | None = None
            ) -> tuple[int, str]:
    """Run ``argv`` under an 80x24 pseudo-terminal; its exit code and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, WIDTH, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_env(),
                            close_fds=True, cwd=cwd)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def run_pipe(argv: list[str], timeout: float = 120.0, cwd: Path | None = None
             ) -> tuple[int, str]:
    """Run ``argv`` with plain pipes (not a terminal) and ``COLUMNS=80``."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=timeout,
                          cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def frames(raw: str) -> list[str]:
    """Every line as drawn: each frame of a line redrawn in place is one entry."""
    text = SGR.sub("", raw).replace("\r\n", "\n")
    text = CONTROL.sub("\r", text)
    out = []
    for line in text.split("\n"):
        pieces = line.split("\r")
        out.extend(p for p in pieces if p.strip()) if len(pieces) > 1 else out.append(line)
    return out


def final_lines(raw: str) -> list[str]:
    """The final state of each line (the last frame of a redrawn one)."""
    text = CONTROL.sub("\r", SGR.sub("", raw).replace("\r\n", "\n"))
    out = []
    for line in text.split("\n"):
        pieces = [p for p in line.split("\r") if p.strip()]
        out.append(pieces[-1] if pieces else "")
    while out and not out[-1].strip():
        out.pop()
    return out


def check_readable(raw: str) -> list[str]:
    """Assert the 80-column rules on every frame; return the final lines."""
    for line in frames(raw):
        assert len(line.rstrip()) <= WIDTH, f"{len(line.rstrip())} columns: {line!r}"
        assert not CUT_NUMBER.search(line), f"a number is cut: {line!r}"
    return final_lines(raw)


def check_progress(lines: list[str], label: str) -> None:
    """A progress line of ``label`` shows ``done/total`` (done == total at the end) and times."""
    bars = [line for line in lines if line.lstrip().startswith(label) and COUNT.search(line)]
    assert bars, "no progress line:\n" + "\n".join(lines)
    last = bars[-1]
    done, total = COUNT.search(last).groups()  # type: ignore[union-attr]
    assert done == total, last
    assert len(TIME.findall(last)) == 2, f"elapsed and remaining time expected: {last!r}"


# --------------------------------------------------------------------------------------------
# The commands
# --------------------------------------------------------------------------------------------


@pytest.fixture
def short_tmp():
    """A temporary folder with a short name, to run in: the commands print their output paths
    as given (plain text the terminal wraps), so the runs use short relative ones."""
    path = Path(tempfile.mkdtemp(prefix="nt"))
    yield path
    shutil.rmtree(path, ignore_errors=True)

#: 120 steps of a tiny model (a few seconds): a three-digit count and a validation metric
#: beside the loss, which an 80-column line used to cut (``120/1…``, ``0:00:…``)
TRAIN = ["train", "--task", "copy", "--model", "lstm", "--max-steps", "120",
         "model.hidden_size=8", "task.embedding_size=8", "task.train_size=1000",
         "task.valid_size=16", "task.test_size=16", "batch_size=8", "eval_every=40",
         "eval_batches=1", "threads=1"]


@pytest.mark.parametrize("runner", [run_tty, run_pipe], ids=["tty", "pipe"])
def test_train_progress_fits(runner, short_tmp: Path) -> None:
    code, raw = runner(CTRLRNN + TRAIN + ["--out", "run"], cwd=short_tmp)
    assert code == 0, raw
    lines = check_readable(raw)
    check_progress(lines, "train")
    bar = [line for line in lines if line.startswith("train")][-1]
    assert "120/120" in bar and "loss" in bar


@pytest.mark.parametrize("runner", [run_tty, run_pipe], ids=["tty", "pipe"])
def test_data_list_fits_and_is_short(runner, short_tmp: Path) -> None:
    from ctrlrnn.data import entries

    code, raw = runner(CTRLRNN + ["data", "list", "--cache-dir", "cache"], cwd=short_tmp)
    assert code == 0, raw
    lines = check_readable(raw)
    assert len(lines) <= 50, f"{len(lines)} lines:\n" + "\n".join(lines)
    text = "\n".join(lines)
    for name in entries():
        assert re.search(rf"^\W*{re.escape(name)}\s", text, re.M), name  # names in full
    headers = [line for line in lines if "what it is" in line]
    assert headers and all("size" in h and "ready" in h for h in headers), headers
    assert "not shown at 80 columns" in " ".join(text.split())


@pytest.fixture(scope="module")
def bench_json():
    """One real ``ctrlrnn bench --tiny`` run under the terminal."""
    folder = Path(tempfile.mkdtemp(prefix="nt"))
    out = folder / "r.json"
    code, raw = run_tty(CTRLRNN + ["bench", "--tiny", "--only", "gru", "--repeats", "1",
                                   "--warmup", "0", "--threads", "1", "--out", "r.json"],
                        cwd=folder)
    assert code == 0, raw
    yield out, raw
    shutil.rmtree(folder, ignore_errors=True)


def test_bench_fits_in_a_terminal(bench_json) -> None:
    path, raw = bench_json
    lines = check_readable(raw)
    check_progress(lines, "done")
    text = "\n".join(lines)
    assert "results written to" in text
    head = next(line for line in lines if line.lstrip().startswith("case"))
    assert "fwd+bwd" in head  # the headers are on one line
    assert json.loads(path.read_text())["grid"] == "tiny"


@pytest.mark.parametrize("argv", [["--list"], ["--from", "JSON"]], ids=["list", "from"])
def test_bench_tables_fit_in_a_pipe(argv, bench_json) -> None:
    argv = [str(bench_json[0]) if a == "JSON" else a for a in argv]
    code, raw = run_pipe(CTRLRNN + ["bench", *argv])
    assert code == 0, raw
    lines = check_readable(raw)
    assert any(line.lstrip().startswith("case") for line in lines)


# --------------------------------------------------------------------------------------------
# The pieces, at several widths (no subprocess)
# --------------------------------------------------------------------------------------------


def _render(progress: FittedProgress) -> list[str]:
    """The bar's lines as drawn now, at the width of its console (not its live output)."""
    console = Console(width=progress.console.width, file=io.StringIO(), color_system=None)
    with console.capture() as cap:
        console.print(progress.make_tasks_table(progress.tasks))
    return cap.get().splitlines()


def _quiet(width: int) -> Console:
    """A terminal console of ``width`` columns whose live output goes nowhere."""
    return Console(width=width, file=io.StringIO(), color_system=None, force_terminal=True)


@pytest.mark.parametrize("width", [40, 60, 80, 100, 140])
def test_progress_drops_bar_then_speed_then_info(width: int) -> None:
    bar = TrainingProgressBar(123456, 0, enabled=True, console=_quiet(width))
    try:
        bar.progress.update(bar.task_id, completed=98765,
                            info="loss 12.3456  token_accuracy 0.1234",
                            speed="1234.5 steps/s")
        lines = _render(bar.progress)
    finally:
        bar.close()
    text = " ".join(lines)
    assert all(len(line) <= width for line in lines), lines
    assert "98765/123456" in text and len(ANY_TIME.findall(text)) == 2, lines
    assert not CUT_NUMBER.search(text), lines
    has_bar, has_speed, has_info = "━" in text, "steps/s" in text, "loss" in text
    assert (not has_bar or has_speed) and (not has_speed or has_info), lines  # the order
    if width >= 140:
        assert has_bar and has_speed and has_info
    if width <= 60:
        assert not has_bar and not has_speed


def test_progress_description_wraps_never_cuts() -> None:
    progress = progress_bar(console=_quiet(50))
    progress.start()
    try:
        progress.add_task("qrnn_fo, qrnn_ifo, lstm B=32 T=1024 C=1024 and more", total=250,
                          completed=17)
        lines = _render(progress)
    finally:
        progress.stop()
    text = " ".join(lines)
    assert all(len(line) <= 50 for line in lines), lines
    assert "17/250" in text and "C=1024" in text and len(ANY_TIME.findall(text)) == 2, lines


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_fit_table_never_cuts_numbers_nor_wraps_headers(width: int) -> None:
    cols = [Col("case"), Col("batch size", justify="right"),
            Col("forward time", justify="right", drop=2),
            Col("description", wrap=True, min_width=20),
            Col("speed-up", wrap=", ", drop=1)]
    rows = [[f"case_{i}", f"{10 ** i:,}", f"{1234.5678 * i:.4f} ms",
             "a long description of this case " * 2, "1.07x vs lstm, 0.93x vs gru"]
            for i in range(1, 6)]
    layout = fit_table(width, cols, rows)
    console = Console(width=width, file=io.StringIO(), color_system=None)
    with console.capture() as cap:
        console.print(layout.table(rows, title="cases"))
    lines = cap.get().splitlines()
    text = "\n".join(lines)
    assert all(len(line) <= width for line in lines), text
    assert not CUT_NUMBER.search(text) and "…" not in text, text
    for r in rows:
        assert r[1] in text
        if "forward time" not in layout.dropped:
            assert r[2] in text
    for col in layout.columns:  # each header on one line
        header = col.short if (col.short and layout.style == "compact") else col.header
        assert header in text
    if layout.dropped:
        assert f"not shown at {width} columns" in " ".join(text.split())
    if width >= 200:
        assert not layout.dropped and layout.style == "boxed"


@pytest.mark.parametrize("command", [[], ["train"], ["eval"], ["data"], ["data", "prepare"],
                                     ["bench"], ["reproduce"], ["info"], ["build"]])
def test_help_fits_80_columns(command, monkeypatch, capsys):
    from ctrlrnn.cli import main

    monkeypatch.setenv("COLUMNS", "80")  # argparse and the train epilog read the width
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    wide = [line for line in capsys.readouterr().out.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
