"""Work shared by several processes or machines through Optuna's storage: ``ctrlrnn reproduce
--storage URL``.

Each machine runs the same command with the same storage URL (SQLite for processes of one
machine, PostgreSQL or MySQL for several machines). The work of a search or of an
experiment's seeds is split into *units* (a trial at a rung, a seed of an arm), each a name.
A process *claims* a unit by creating a running Optuna trial that carries the unit's name,
made in one transaction with the trial's id; of the trials that claim one unit, the one with
the lowest id holds it, and the others step back. The holder trains the unit and stores
its result in the trial (``row``), so every process reads it back instead of training it
again: each unit is trained once and counted once.

A holder records a heartbeat while it trains. A process that dies leaves a trial whose
heartbeat stops; after the grace period any process marks it failed, and the unit is free to
claim again.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: seconds between a holder's heartbeats, and after which a silent holder is taken for dead
HEARTBEAT_S = 20
GRACE_S = 120


#: tries at opening a storage or a study that other processes may be creating at that moment
OPEN_ATTEMPTS = 6


#: what SQLite and PostgreSQL say when another process created the same table or row first
#: (PostgreSQL's "duplicate key" comes from its catalog, pg_type, on a concurrent CREATE TABLE)
_RACE_WORDS = ("already exists", "UNIQUE constraint", "duplicate key")


def _lost_race(exc: BaseException) -> bool:
    """Whether ``exc`` says another process was creating the same tables at the same time."""
    kind = type(exc).__name__ in ("IntegrityError", "OperationalError", "ProgrammingError")
    return kind and any(word in str(exc) for word in _RACE_WORDS)


def _open(optuna: Any, url: str, kwargs: dict[str, Any], heartbeat: int, grace: int) -> Any:
    """Optuna's storage at ``url``. Processes that start together race to create its tables,
    and the losers see an error ("already exists", a unique constraint): they try again, as
    the tables are then there. A missing driver or an unreachable database is one line naming
    ``--storage``."""
    for attempt in range(OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # the heartbeat is "experimental" to Optuna
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs,
                                                  heartbeat_interval=heartbeat,
                                                  grace_period=grace)
        except (ImportError, ModuleNotFoundError) as exc:
            raise ValueError(f"--storage: {url.split(':', 1)[0]} needs a database driver "
                             f"that is not installed ({exc})") from exc
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's errors: one line naming it
            if _lost_race(exc) and attempt + 1 < OPEN_ATTEMPTS:
                time.sleep(0.5 * (attempt + 1))
                continue
            raise ValueError(f"--storage: cannot open {url!r} ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0]})") from exc
    raise AssertionError("unreachable")


class SharedStudy:
    """One Optuna study of a storage, used as a table of units: who trains each, and its
    result once trained (module docstring)."""

    def __init__(self, url: str, name: str, *, heartbeat: int = HEARTBEAT_S,
                 grace: int = GRACE_S) -> None:
        import optuna  # the `train` extra

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):  # several processes write one file: wait for its lock
            kwargs = {"connect_args": {"timeout": 120}}
        self.storage = _open(optuna, url, kwargs, heartbeat, grace)
        for attempt in range(OPEN_ATTEMPTS):  # processes starting together race to create it
            try:
                self.study = optuna.create_study(storage=self.storage, study_name=name,
                                                 load_if_exists=True)
                break
            except Exception:  # noqa: BLE001 - a lost race: the other process made it
                if attempt + 1 == OPEN_ATTEMPTS:
                    raise
                time.sleep(0.5 * (attempt + 1))
        self.name = name
        self._optuna = optuna
        self.heartbeat = heartbeat

    def _trials(self, *states: Any) -> list[Any]:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def rows(self) -> dict[str, dict[str, Any]]:
        """unit -> its stored result, for every unit trained so far."""
        done: dict[str, dict[str, Any]] = {}
        complete = self._optuna.trial.TrialState.COMPLETE
        for t in sorted(self._trials(complete), key=lambda t: t._trial_id):
            unit, row = t.user_attrs.get("unit"), t.user_attrs.get("row")
            if unit is not None and row is not None and unit not in done:
                done[unit] = row
        return done

    def _fail_stale(self) -> None:
        """Mark failed the running trials whose holders stopped beating (Optuna's heartbeat,
        which it calls experimental: its warning is not the user's concern)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            self._optuna.storages.fail_stale_trials(self.study)

    def busy(self) -> set[str]:
        """The units a live process trains now (a holder silent past the grace period is
        marked failed first, which frees its unit)."""
        self._fail_stale()
        running = self._optuna.trial.TrialState.RUNNING
        return {t.user_attrs["unit"] for t in self._trials(running) if "unit" in t.user_attrs}

    def claim(self, unit: str) -> int | None:
        """The id of a running trial that holds ``unit`` for this process, or None when
        another process holds it (a live one) or it is done."""
        state = self._optuna.trial.TrialState
        self._fail_stale()
        template = self._optuna.trial.FrozenTrial(
            number=-1, state=state.RUNNING, value=None, datetime_start=None,
            datetime_complete=None, params={}, distributions={}, user_attrs={"unit": unit},
            system_attrs={}, intermediate_values={}, trial_id=-1)
        trial_id = self.storage.create_new_trial(self.study._study_id, template_trial=template)
        self.storage.record_heartbeat(trial_id)  # a claim of a process that dies goes stale
        # the order of the claims is their trials' ids (the storage's own key, unique where
        # trial numbers, counted by each writer, may repeat under concurrent writes)
        holders = [t._trial_id for t in self._trials(state.RUNNING, state.COMPLETE)
                   if t.user_attrs.get("unit") == unit]
        if min(holders, default=trial_id) != trial_id:
            self.storage.set_trial_user_attr(trial_id, "stepped_back", True)
            self.storage.set_trial_state_values(trial_id, state.PRUNED)
            return None
        return trial_id

    def complete(self, trial_id: int, row: dict[str, Any], value: float) -> None:
        """Store ``row`` as the result of the unit the trial ``trial_id`` holds."""
        self.storage.set_trial_user_attr(trial_id, "row", row)
        finite = value == value and abs(value) != float("inf")
        if not finite:  # a diverged unit is done too: its row says so, its value is a stand-in
            self.storage.set_trial_user_attr(trial_id, "diverged", True)
        self.storage.set_trial_state_values(trial_id, self._optuna.trial.TrialState.COMPLETE,
                                            [value if finite else 0.0])

    def abandon(self, trial_id: int) -> None:
        """Give the unit of trial ``trial_id`` up (its training stopped): it can be claimed
        again."""
        self.storage.set_trial_state_values(trial_id, self._optuna.trial.TrialState.FAIL)

    @contextmanager
    def holding(self, trial_id: int) -> Iterator[None]:
        """Heartbeats for trial ``trial_id`` while the body trains its unit; the unit is given
        up if the body fails or is interrupted."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.heartbeat):
                self.storage.record_heartbeat(trial_id)

        self.storage.record_heartbeat(trial_id)
        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        except BaseException:
            done.set()
            thread.join()
            self.abandon(trial_id)
            raise
        done.set()
        thread.join()


def run_units(study: SharedStudy | None, units: list[str],
              local: Callable[[str], tuple[dict[str, Any], float] | None],
              train: Callable[[str], tuple[dict[str, Any], float]],
              wait: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """The rows of ``units``, in any order of completion: each read from ``local(unit)`` (a
    result on this machine, published to the study when it lacks it), from the study (trained
    elsewhere), or trained here by ``train(unit)`` once this process holds it (both give
    ``(row, value)``); ``wait()`` between rounds while other processes still train some.
    A row with an ``error`` key (a unit that failed here) is returned but not published, so
    another try may train it. Without a study every unit is read locally or trained here, in
    order."""
    rows: dict[str, dict[str, Any]] = {}
    while len(rows) < len(units):
        published = study.rows() if study is not None else {}
        busy = study.busy() if study is not None else set()
        pending = False
        for unit in units:
            if unit in rows:
                continue
            if unit in published:
                rows[unit] = published[unit]
                continue
            here = local(unit)
            if study is None:
                rows[unit] = (here or train(unit))[0]
                continue
            number = None if unit in busy else study.claim(unit)
            if number is None:  # another process holds it (or has just finished it)
                pending = True
                continue
            if here is None:
                with study.holding(number):
                    here = train(unit)
            if "error" in here[0]:  # failed here: free for another try, not published
                study.abandon(number)
            else:
                study.complete(number, *here)
            rows[unit] = here[0]
        if pending and len(rows) < len(units):
            wait()
    return rows
