"""A search shared by processes through one Optuna storage (``--storage URL``): several
processes run the same successive-halving search, every trial of every rung trains exactly
once among them, and each process ends with the record a single process makes. With a real
PostgreSQL server (when one is installed) as with SQLite.

The processes are forked from one that has imported torch, Optuna and ctrlrnn
(:mod:`warm_start`), so that their imports do not cost far more than their work."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import warm_start
from tiny_runs import without

from ctrlrnn.reproduce.shared_study import SharedStudy, run_units

#: one process of the shared search: a fake trainer (a made-up curve, a short sleep so the
#: processes interleave) that appends each unit it trains to a log
WORKER = textwrap.dedent("""
    import json, math, os, sys, time
    from pathlib import Path
    from ctrlrnn.reproduce.shared_study import SharedStudy
    from ctrlrnn.reproduce.tuning import Param, Tuning, tune_arm

    url, folder, log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    search = Tuning(trials=9, params=(Param("lr", 1e-4, 1e-1, log=True),),
                    rungs=({"epochs": 1}, {"epochs": 3}, {"epochs": 9}), arm_streams=True)

    def trainer(k, overrides, out):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {k} {overrides['epochs']}\\n")
        time.sleep(0.2)
        fast = math.log10(overrides["lr"]) + 4
        value = (0.9 - 0.1 * fast) * (1 - math.exp(-0.15 * (1 + fast) * overrides["epochs"]))
        return {"valid": {"acc": value}, "step": overrides["epochs"], "stop_reason": "epochs"}

    shared = SharedStudy(url, "ctrlrnn/test/search", heartbeat=5, grace=30) if url else None
    ready = log.parent / "ready"  # start together: each process waits for the others
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while len(list(ready.iterdir())) < int(sys.argv[4]) and time.monotonic() < deadline:
        time.sleep(0.05)
    record = tune_arm(search, folder, "acc", True, trainer, log=lambda s: None, arm="A",
                      shared=shared)
    print(json.dumps(record, sort_keys=True))
""")


#: the database drivers of the storages tested, where installed
DRIVERS = tuple(name for name in ("sqlalchemy.dialects.sqlite.pysqlite", "psycopg",
                                  "sqlalchemy.dialects.postgresql.psycopg")
                if importlib.util.find_spec(name.split(".")[0]) is not None)


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[warm_start.Starter]:
    modules = (*warm_start.CTRLRNN_MODULES, "optuna", *DRIVERS, "ctrlrnn.reproduce.runner",
               "ctrlrnn.reproduce.shared_study", "ctrlrnn.reproduce.tuning")
    with warm_start.Starter(modules, dict(os.environ, OMP_NUM_THREADS="1"),
                            tmp_path_factory.mktemp("commands")) as started:
        yield started


def _finish(procs: list[warm_start.Command]) -> list[str]:
    """The last line each of ``procs`` printed, once all have ended well."""
    try:
        said = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err
            said.append(out.strip().splitlines()[-1])
        return said
    finally:
        for proc in procs:
            proc.kill()


def _start_processes(starter: warm_start.Starter, url: str, tmp_path: Path, n: int
                     ) -> list[warm_start.Command]:
    """``n`` processes of the search in ``tmp_path``, logging what they train to its
    ``trained.log``."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    log = tmp_path / "trained.log"
    return [starter.start([str(script), url, str(tmp_path / f"runs{i}"), str(log), str(n)],
                          cwd=tmp_path) for i in range(n)]


def _check_shared(starter: warm_start.Starter, url: str, tmp_path: Path, processes: int = 3,
                  alone: bool = True) -> None:
    # the process alone (no storage) shares nothing with the others: it runs beside them
    single = _start_processes(starter, "", tmp_path / "alone", 1) if alone else []
    procs = _start_processes(starter, url, tmp_path, processes)
    records = [json.loads(line) for line in _finish([*procs, *single])]
    trained = (tmp_path / "trained.log").read_text().splitlines()
    calls = [tuple(int(x) for x in line.split()) for line in trained]  # (pid, trial, epochs)
    # a process that continues a trial another trained first replays its earlier rungs (each
    # process here has its own runs folder, as machines do): a unit met again must be such a
    # replay, followed in the same process by a later rung of that trial
    seen: set[tuple[int, int]] = set()
    for i, (pid, k, e) in enumerate(calls):
        if (k, e) in seen:
            assert any(p == pid and j == k and f > e for p, j, f in calls[i + 1:]), trained
        seen.add((k, e))
    assert len(seen) == 9 + 3 + 1, trained  # each unit trained (not replayed) exactly once
    assert len({pid for pid, _, _ in calls}) > 1  # the work was split
    for record in records:  # the shared processes', then the one alone
        assert record == records[0]
    study = SharedStudy(url, "ctrlrnn/test/search")
    assert len(study.rows()) == 13


def test_processes_sharing_a_sqlite_study_train_each_trial_once(
        tmp_path: Path, starter: warm_start.Starter) -> None:
    (tmp_path / "alone").mkdir()
    _check_shared(starter, f"sqlite:///{tmp_path / 'study.db'}", tmp_path)


def test_a_unit_of_a_dead_holder_is_claimed_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = SharedStudy(url, "s", heartbeat=1, grace=2)
    number = first.claim("u")
    assert number is not None
    second = SharedStudy(url, "s", heartbeat=1, grace=2)
    assert "u" in second.busy() and second.claim("u") is None  # a live holder keeps it
    time.sleep(3)  # no heartbeat: the holder is taken for dead
    assert "u" not in second.busy()
    taken = second.claim("u")
    assert taken is not None and taken != number
    second.complete(taken, {"value": 1}, 1.0)
    assert first.rows() == {"u": {"value": 1}}


def test_a_unit_trained_before_is_published_not_trained_again(tmp_path: Path) -> None:
    study = SharedStudy(f"sqlite:///{tmp_path / 'study.db'}", "s")
    trained: list[str] = []

    def train(unit: str) -> tuple[dict, float]:
        trained.append(unit)
        return {"unit": unit}, 0.5

    local = {"a": ({"unit": "a", "here": True}, 0.7)}
    rows = run_units(study, ["a", "b"], local.get, train, lambda: None)
    assert trained == ["b"] and rows["a"]["here"]
    assert set(study.rows()) == {"a", "b"}
    again = run_units(study, ["a", "b"], lambda unit: None, train, lambda: None)
    assert trained == ["b"] and again == rows


def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--storage"):
        SharedStudy("nosuchdb://x/y", "s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("initdb") is None or shutil.which("pg_ctl") is None,
                    reason="no PostgreSQL server installed")
def test_processes_sharing_a_postgresql_study_train_each_trial_once(
        tmp_path: Path, starter: warm_start.Starter) -> None:
    pytest.importorskip("psycopg", reason="no PostgreSQL driver (psycopg) installed")
    home = Path(tempfile.mkdtemp(prefix="ctrlrnn-pg-"))  # a folder the server's user reaches
    data = home / "pg"
    data.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as nobody
        home.chmod(0o755)
        shutil.chown(data, "nobody")
        run_as = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    port = _free_port()
    try:
        subprocess.run([*run_as, "initdb", "-D", str(data), "-U", "ctrlrnn", "--auth=trust"],
                       check=True, capture_output=True, timeout=120, cwd="/")
        subprocess.run([*run_as, "pg_ctl", "-D", str(data), "-w", "-l", str(data / "log"),
                        "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"],
                       check=True, capture_output=True, timeout=120, cwd="/")
        subprocess.run([*run_as, "createdb", "-h", "127.0.0.1", "-p", str(port), "-U",
                        "ctrlrnn", "search"], check=True, capture_output=True, timeout=60)
        (tmp_path / "alone").mkdir()
        # two processes, compared with each other (the SQLite test compares with one alone)
        _check_shared(starter, f"postgresql://ctrlrnn@127.0.0.1:{port}/search", tmp_path, 2,
                      False)
    finally:
        subprocess.run([*run_as, "pg_ctl", "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, timeout=120, check=False, cwd="/")
        shutil.rmtree(home, ignore_errors=True)


#: one "machine" of ``ctrlrnn reproduce --storage``: a tiny experiment whose search is
#: successive halving, run into its own runs and results folders
MACHINE = textwrap.dedent("""
    import json, sys, torch
    from pathlib import Path
    from ctrlrnn.reproduce import runner
    from tiny_runs import tiny_halving_experiment

    torch.set_num_threads(1)
    url, folder = sys.argv[1], Path(sys.argv[2])
    exp = tiny_halving_experiment("tiny-shared", seeds=2)
    data = runner.run_experiment(exp, "quick", folder / "runs", folder / "results",
                                 show_progress=False, log=lambda s: None,
                                 storage=url or None)
    print(json.dumps(data["arms"], sort_keys=True))
""")

#: what differs between machines: timings, and where a run read its result from
MACHINE_ONLY = {"train_seconds", "seconds_per_epoch", "cpu_share", "load_start", "threads"}


def _same(data: object) -> object:
    return without(data, MACHINE_ONLY)


def test_machines_sharing_a_storage_split_an_experiment_and_agree(
        tmp_path: Path, starter: warm_start.Starter) -> None:
    script = tmp_path / "machine.py"
    script.write_text(MACHINE)
    here = str(Path(__file__).resolve().parent)  # the script imports tiny_runs from here
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    url = f"sqlite:///{tmp_path / 'study.db'}"
    # two machines sharing the storage, and beside them one alone (no storage) to compare with
    procs = [starter.start([str(script), url, str(tmp_path / f"m{i}")], cwd=tmp_path, env=env)
             for i in range(2)]
    procs.append(starter.start([str(script), "", str(tmp_path / "alone")], cwd=tmp_path,
                               env=env))
    *arms, alone = [json.loads(line) for line in _finish(procs)]
    # the last rung of each trial trained once; an earlier rung trains again only on a machine
    # that continues a trial trained elsewhere (it replays the same path: module tuning)
    last = [p.parent.name for p in tmp_path.glob("m*/runs/**/rung1.json")]
    assert len(last) == len(set(last)) == 2
    first = {p.parent.name for p in tmp_path.glob("m*/runs/**/rung0.json")}
    assert first == {"trial0", "trial1", "trial2"}
    import optuna

    (search,) = [n for n in optuna.study.get_all_study_names(url) if "/search-" in n]
    assert len(SharedStudy(url, search).rows()) == 3 + 2  # every unit counted once
    seeds = [p.parent.name for p in tmp_path.glob("m*/runs/**/*seed*/result.json")]
    assert sorted(seeds) == sorted(set(seeds)) and len(seeds) == 2  # each seed trained once
    assert _same(arms[0]) == _same(arms[1])
    # each seed's validation curve too, on the machine that did not train it as well
    assert all(seed.get("curve") for machine in arms for arm in machine.values()
               for seed in arm["seeds"].values())
    assert _same(alone) == _same(arms[0])
