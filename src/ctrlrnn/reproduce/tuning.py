"""Equal hyperparameter tuning of every arm of an experiment, on the validation split.

Each arm of an experiment gets the same search: the same :class:`Tuning` (the parameters and
their ranges, the number of trials, the per-trial training budget, the sampler's seed). The
search is Optuna's TPE sampler with a fixed seed; its first ``startup`` trials are drawn at
random, the rest are proposed from the trials before. With :attr:`Tuning.arm_streams` each arm
draws from its own sampler stream (the seed combined with the arm's label), so the arms' trials
are different points of the same space rather than the same start-up points for every arm. A
trial is one training run of the arm (training seed :attr:`Tuning.train_seed`) at the proposed
values, scored by the validation split's selecting metric (the experiment's ``select``, by
default its main metric) at its best checkpoint; the test split is never looked at. The arm's
final seeds then train at the values of its best trial.

Tuning is resumable: each trial trains in its own run directory
``RUNS/<mode>/<experiment>/<arm>-tuning/trial<k>/``, its proposed values are written there
(``params.json``) before it trains, and a finished trial's result is read back instead of
training again. Trial ``k``'s values depend only on the trials before it and the seeds (a
fresh study of the finished trials, a sampler seeded for ``k``), so a search resumed after an
interruption is the one an uninterrupted run would have made; an interrupted trial resumes
with the values it was proposed.

The finished trials also travel without their run directories: :func:`tune_arm` reports the
search so far after each trial (``on_trial``), which the runner writes into the results file,
and takes the trials a results file holds (``done``) in place of the ones whose run
directories are gone, so a search resumes from a checkout alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrlrnn import files
from ctrlrnn.metric_conventions import selection_key
from ctrlrnn.reproduce.shared_study import SharedStudy, run_units
from ctrlrnn.train.logs import replace_atomically

#: the name of the sampler, as stored with each arm's trial table
SAMPLER = "optuna TPE"
#: the key of an arm's entry in a partial results file that holds its search under way (the
#: trials so far): the arm's earlier results stay beside it until the search is finished
IN_PROGRESS = "search_in_progress"
#: the key of a tuning entry that holds another arm's chosen values (:func:`borrowed`)
VALUES_OF = "values_of"
#: the configuration keys a rung of successive halving may set: the caps a finished trial is
#: continued past (a raised cap continues a run from its checkpoint)
RUNG_KEYS = ("epochs", "max_steps")


@dataclass(frozen=True)
class Param:
    """One tuned configuration key (``lr``, ``model.dropout``, ``task.dropout``) and its range."""

    key: str
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class Tuning:
    """The search every arm of an experiment gets (the same for all of them)."""

    trials: int
    params: tuple[Param, ...]
    #: configuration overrides of each trial run (a training budget; the same for every arm)
    overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0  # the sampler's seed
    train_seed: int = 0  # the training seed of every trial
    #: how many first trials are drawn at random before TPE proposes (at most ``trials``)
    startup: int = 3
    #: each arm its own sampler stream (:func:`arm_stream`); False: every arm draws the same
    #: start-up points
    arm_streams: bool = False
    #: successive halving (:func:`_halving`): the caps of each rung, shortest first (each a
    #: dict of ``epochs`` and/or ``max_steps``); empty: every trial trains the same budget
    rungs: tuple[dict[str, Any], ...] = ()
    #: the share of a rung's trials that goes on to the next rung (rounded up)
    keep: float = 1 / 3

    def __post_init__(self) -> None:
        # the start-up draws a search makes (all its trials when it has fewer): what a stored
        # record names, so a search equals the one its record describes
        startup = self.trials if self.rungs else min(self.startup, self.trials)
        object.__setattr__(self, "startup", startup)
        object.__setattr__(self, "rungs", tuple(dict(r) for r in self.rungs))
        for r, rung in enumerate(self.rungs):
            if not rung or set(rung) - set(RUNG_KEYS):
                raise ValueError(f"rungs[{r}]: expected caps ({', '.join(RUNG_KEYS)}), got "
                                 f"{rung!r}")
        if self.rungs and not 0 < self.keep < 1:
            raise ValueError(f"keep: expected a share between 0 and 1, got {self.keep!r}")

    def rung_sizes(self) -> list[int]:
        """How many trials train at each rung (one entry per rung; none without rungs)."""
        sizes: list[int] = []
        for _ in self.rungs:
            sizes.append(self.trials if not sizes else max(1, math.ceil(sizes[-1] * self.keep)))
        return sizes

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Tuning:
        """The search an arm's stored tuning record (:func:`tune_arm`'s result) ran."""
        return cls(trials=int(record["trials_planned"]),
                   params=tuple(Param(p["key"], float(p["low"]), float(p["high"]),
                                      bool(p["log"])) for p in record["space"]),
                   overrides=dict(record.get("trial_overrides", {})),
                   seed=int(record.get("sampler_seed", 0)),
                   train_seed=int(record.get("train_seed", 0)),
                   startup=int(record.get("startup_trials", 3)),
                   arm_streams=bool(record.get("arm_streams", False)),
                   rungs=tuple(dict(r) for r in record.get("rungs", ())),
                   keep=float(record.get("keep", 1 / 3)))

    def key(self) -> str:
        """A short digest of the search with its trial count left out: a search grown by more
        trials keeps its earlier trials (each depends only on those before it), any other
        change (a range, the trial budget, a seed) is another search."""
        record: dict[str, Any] = {
            "params": [[p.key, p.low, p.high, p.log] for p in self.params],
            "overrides": self.overrides, "seed": self.seed, "train_seed": self.train_seed,
            "startup": self.startup}
        if self.arm_streams:  # absent for the searches made before there was a choice
            record["arm_streams"] = True
        if self.rungs:  # absent for the searches that train every trial the same budget
            record["rungs"], record["keep"] = list(self.rungs), self.keep
        text = files.dumps(record, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]

    def describe(self) -> str:
        """One line for the pages: the search space and budget."""
        space = ", ".join(
            f"{p.key} in [{p.low:g}, {p.high:g}]{' (log)' if p.log else ''}" for p in self.params)
        budget = ", ".join(f"{k}={v}" for k, v in sorted(self.overrides.items()))
        seeded = (f"sampler seed {self.seed} combined with each arm's label (each arm its own "
                  "stream)" if self.arm_streams else f"sampler seed {self.seed}")
        if self.rungs:
            caps = " then ".join(", ".join(f"{k}={v}" for k, v in sorted(r.items()))
                                 for r in self.rungs)
            sizes = "-".join(str(n) for n in self.rung_sizes())
            return (f"successive halving: {self.trials} trials per arm drawn at random ({seeded})"
                    f" over {space}; the best {self.keep:.0%} of each rung continue (trials per "
                    f"rung {sizes}; caps {caps}); the choice is the best trial of the last rung"
                    + (f"; each trial: {budget}" if budget else ""))
        if self.startup >= self.trials:
            how = f"all drawn at random by {SAMPLER}'s start-up, {seeded}"
        else:
            how = f"{SAMPLER}, {seeded}, the first {self.startup} drawn at random"
        return (f"{self.trials} trials per arm ({how}) over {space}"
                + (f"; each trial: {budget}" if budget else ""))


def lr_and_dropout(dropout_key: str | None, *, trials: int = 6, lr: tuple[float, float] = (
        3e-4, 1e-2), dropout: tuple[float, float] = (0.0, 0.4),
        overrides: dict[str, Any] | None = None, startup: int = 3,
        arm_streams: bool = False) -> Tuning:
    """The usual search: the learning rate (log scale), and dropout where the model has it."""
    params = [Param("lr", lr[0], lr[1], log=True)]
    if dropout_key:
        params.append(Param(dropout_key, dropout[0], dropout[1]))
    return Tuning(trials=trials, params=tuple(params), overrides=dict(overrides or {}),
                  startup=startup, arm_streams=arm_streams)


def arm_stream(tuning: Tuning, arm: str) -> int:
    """The sampler seed of ``arm``'s search: the search's own seed, or with
    :attr:`Tuning.arm_streams` that seed combined with the arm's label (stable across runs and
    machines: a digest, not Python's salted ``hash``)."""
    if not tuning.arm_streams:
        return tuning.seed
    digest = hashlib.sha256(f"{tuning.seed}:{arm}".encode()).hexdigest()
    return int(digest[:8], 16)


def search_of(record: dict[str, Any] | None) -> Tuning | None:
    """The search a stored tuning ``record`` ran, or None (no record, or not a readable one)."""
    if not record:
        return None
    try:
        return Tuning.from_record(record)
    except (KeyError, TypeError, ValueError):
        return None


def borrowed(lender: str, record: dict[str, Any]) -> dict[str, Any]:
    """The tuning entry of an arm that trains at arm ``lender``'s chosen values
    (:attr:`~ctrlrnn.reproduce.experiment_spec.Arm.tuned_like`), from ``lender``'s search
    ``record``: the values and whose they are, none of the trials (they are the lender's)."""
    return {VALUES_OF: lender, "chosen": dict(record.get("chosen") or {})}


def lender_of(record: dict[str, Any] | None) -> str | None:
    """The arm whose chosen values a tuning entry holds (:func:`borrowed`), or None: the
    entry is a search of the arm's own (or there is none)."""
    value = record.get(VALUES_OF) if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def record_holds(record: dict[str, Any] | None, tuning: Tuning) -> bool:
    """Whether a stored tuning ``record`` is a finished run of the search ``tuning`` (every
    planned trial, under the same ranges, trial budget and seeds)."""
    if search_of(record) != tuning or len((record or {}).get("trials", [])) != tuning.trials:
        return False
    if not tuning.rungs:
        return True
    last = len(tuning.rungs) - 1
    finalists = [r for r in (record or {}).get("trials", []) if r.get("rung") == last]
    return len(finalists) == tuning.rung_sizes()[-1]


#: trains one trial: (trial number, its configuration overrides, run directory) -> result
TrialRunner = Callable[[int, dict[str, Any], Path], dict[str, Any]]


def _distributions(tuning: Tuning) -> dict[str, Any]:
    import optuna  # the `train` extra: only a search needs it

    return {p.key: optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
            for p in tuning.params}


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda fh: files.dump(data, fh, indent=1, sort_keys=True))


def _trial_row(number: int, params: dict[str, float], result: dict[str, Any],
               metric: str) -> dict[str, Any]:
    value = (result.get("valid") or {}).get(metric)
    return {
        "trial": number,
        "params": params,
        "valid": value,
        "valid_loss": (result.get("valid") or {}).get("loss"),
        "steps": result.get("step"),
        "best_step": result.get("best_step"),
        "stop_reason": result.get("stop_reason"),
        "train_seconds": result.get("train_seconds"),
        "device": result.get("device"),
    }


def _rank_key(row: dict[str, Any], higher_is_better: bool) -> tuple[float, float, int]:
    """A trial's place in a ranking, best first: :func:`selection_key` of its validation value
    and loss (every trial of a rung can tie at 0% exact match on a hard task), then its
    number. Rows stored before they recorded the loss tie on it, so their order is their
    numbers', as it was when they were ranked."""
    value = _score(row["valid"], higher_is_better)
    return (*selection_key(value, row.get("valid_loss"), higher_is_better), int(row["trial"]))


def _score(value: Any, higher_is_better: bool) -> float:
    """A trial's value for the study; a diverged trial (NaN or missing) is the worst."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return -math.inf if higher_is_better else math.inf
    return float(value)


def tune_arm(tuning: Tuning, tuning_dir: Path, metric: str, higher_is_better: bool,
             run_trial: TrialRunner, log: Callable[[str], None] = print,
             arm: str = "", done: Sequence[dict[str, Any]] = (),
             on_trial: Callable[[dict[str, Any]], None] | None = None,
             shared: SharedStudy | None = None) -> dict[str, Any]:
    """Run (or finish) the search of one arm; returns its trial table and chosen values.

    ``run_trial(k, overrides, out)`` trains trial ``k`` with ``overrides`` (the tuned keys at
    their proposed values) in the run directory ``out`` and returns the run's result (as
    :func:`ctrlrnn.train.cli.train_run` does). ``arm``: the arm's label, which seeds its own
    sampler stream when the search has :attr:`Tuning.arm_streams`.

    ``done``: the first trials of this same search as a stored record holds them (its
    ``trials`` rows, trial 0 onwards); trial ``k < len(done)`` is read from there when its run
    directory holds no result. ``on_trial(record)`` is called after each trial that was not
    read from ``done``, with the record of the trials so far (:func:`search_record`; fewer
    trials than planned until the last).
    """
    dists = _distributions(tuning)
    stream = arm_stream(tuning, arm)
    if tuning.rungs:
        return _halving(tuning, tuning_dir, metric, higher_is_better, run_trial, log, stream,
                        done, on_trial, shared)
    if shared is not None:
        raise ValueError("--storage: this search proposes each trial from the ones before it "
                         "(TPE), so it cannot be split across processes; only a successive-"
                         "halving search (Tuning.rungs) can")
    rows: list[dict[str, Any]] = []
    for k in range(tuning.trials):
        out = tuning_dir / f"trial{k}"
        result = _read(out / "result.json")
        if result is None and k < len(done):  # trained elsewhere: the results file has it
            rows.append(dict(done[k]))
            continue
        stored = _read(out / "params.json")
        if stored is None:
            params = _propose(tuning, dists, rows, k, higher_is_better, stream)
            _write(out / "params.json", params)
        else:  # proposed before an interruption: keep those values
            params = {key: float(v) for key, v in stored.items()}
        if result is None:
            log(f"[tune] trial {k + 1}/{tuning.trials}: " + ", ".join(
                f"{key}={v:.3g}" for key, v in params.items()))
            result = run_trial(k, {**tuning.overrides, **params}, out)
        rows.append(_trial_row(k, params, result, metric))
        if on_trial is not None:
            on_trial(search_record(tuning, stream, metric, higher_is_better, rows))
    return search_record(tuning, stream, metric, higher_is_better, rows)


def search_record(tuning: Tuning, stream: int, metric: str, higher_is_better: bool,
                  rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored record of a search (``rows``: its trials so far, in order) with the values
    of its best trial; :meth:`Tuning.from_record` reads the search back from it."""
    finalists = [r for r in rows if r.get("rung") == len(tuning.rungs) - 1] if tuning.rungs \
        else rows
    best = _best(finalists, higher_is_better)
    halving = {"rule": "successive halving", "rungs": [dict(r) for r in tuning.rungs],
               "keep": tuning.keep} if tuning.rungs else {}
    return {
        **halving,
        "sampler": SAMPLER,
        "sampler_seed": tuning.seed,
        **({"arm_streams": True, "arm_stream_seed": stream} if tuning.arm_streams else {}),
        "startup_trials": tuning.startup,
        "train_seed": tuning.train_seed,
        "trials_planned": tuning.trials,
        "space": [{"key": p.key, "low": p.low, "high": p.high, "log": p.log}
                  for p in tuning.params],
        "trial_overrides": dict(tuning.overrides),
        "metric": metric,  # the validation metric each trial is scored by
        "higher_is_better": higher_is_better,
        "trials": list(rows),
        "best_trial": best["trial"] if best else None,
        "chosen": dict(best["params"]) if best else {},
    }


def _propose(tuning: Tuning, dists: dict[str, Any], rows: list[dict[str, Any]], k: int,
             higher_is_better: bool, stream: int | None = None) -> dict[str, float]:
    """Trial ``k``'s values: a function of the finished trials and the seeds alone.

    A fresh study holds the finished trials and a sampler seeded for trial ``k`` of the arm's
    ``stream`` (:func:`arm_stream`; the search's seed when None), so a search resumed after an
    interruption proposes what the uninterrupted one would have.
    """
    import optuna  # the `train` extra: only a search needs it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = tuning.seed if stream is None else stream
    sampler = optuna.samplers.TPESampler(seed=(base * 10_007 + k) % 2**32,
                                         n_startup_trials=tuning.startup)
    study = optuna.create_study(direction="maximize" if higher_is_better else "minimize",
                                sampler=sampler)
    for row in rows:
        study.add_trial(optuna.trial.create_trial(
            params=row["params"], distributions=dists,
            value=_score(row["valid"], higher_is_better)))
    trial = study.ask(dists)
    return {key: float(v) for key, v in trial.params.items()}


def _halving(tuning: Tuning, tuning_dir: Path, metric: str, higher_is_better: bool,
             run_trial: TrialRunner, log: Callable[[str], None], stream: int,
             done: Sequence[dict[str, Any]],
             on_trial: Callable[[dict[str, Any]], None] | None,
             shared: SharedStudy | None = None, poll: float = 5.0) -> dict[str, Any]:
    """Successive halving: every trial trains to the first rung's caps, the best
    :attr:`Tuning.keep` of them continue from their checkpoints to the next rung's, and so on;
    the choice is the best trial of the last rung, so a fast starter that stalls is passed.

    Each trial's values are drawn at random (a function of the seeds alone) and kept in its
    ``params.json``; each rung's result of a trial is kept in its ``rung<r>.json``, so an
    interrupted search resumes where it stopped. ``done`` rows (a results file's) stand in for
    the rungs whose files are gone. A row's ``rungs`` lists its validation value at each rung
    it reached, ``rung`` the last of them.

    ``shared``: the study through which several processes or machines split each rung's
    trials (:mod:`ctrlrnn.reproduce.shared_study`); a rung waits, polling every ``poll``
    seconds, until all its trials are done wherever they trained.
    """
    held = {int(r["trial"]): r for r in done if isinstance(r, dict) and "trial" in r}
    search = _HalvingSearch(tuning, tuning_dir, metric, higher_is_better, run_trial, log, stream,
                            on_trial, held, _halving_params(tuning, tuning_dir, held,
                                                            higher_is_better, stream))
    rows = search.rows
    alive = list(range(tuning.trials))
    for r, caps in enumerate(tuning.rungs):
        rung = _Rung(search, r, caps, {k: list(rows.get(k, {}).get("rungs", [])) for k in alive})
        units = [f"rung{r}/trial{k}" for k in alive]
        found = run_units(shared, units, rung.finished, rung.train, lambda: time.sleep(poll))
        for unit, row in found.items():
            rows[int(unit.rsplit("trial", 1)[1])] = row
        if r + 1 < len(tuning.rungs):
            ranked = sorted(alive, key=lambda i: _rank_key(rows[i], higher_is_better))
            alive = sorted(ranked[:tuning.rung_sizes()[r + 1]])
    return search_record(tuning, stream, metric, higher_is_better,
                         [rows[i] for i in sorted(rows)])


def _halving_params(tuning: Tuning, tuning_dir: Path, held: dict[int, dict[str, Any]],
                    higher_is_better: bool, stream: int) -> dict[int, dict[str, float]]:
    """Each trial's values: its ``params.json``, else the results file's row, else a new draw
    (then written to its ``params.json``)."""
    dists = _distributions(tuning)
    params: dict[int, dict[str, float]] = {}
    for k in range(tuning.trials):
        stored = _read(tuning_dir / f"trial{k}" / "params.json")
        if stored is None and k in held:
            stored = held[k]["params"]
        if stored is None:
            stored = _propose(tuning, dists, [], k, higher_is_better, stream)
            _write(tuning_dir / f"trial{k}" / "params.json", stored)
        params[k] = {key: float(v) for key, v in stored.items()}
    return params


@dataclass
class _HalvingSearch:
    """What every rung of one successive-halving search reads: its definition and folder,
    how a trial trains, the results file's rows (``held``) and each trial's values."""

    tuning: Tuning
    tuning_dir: Path
    metric: str
    higher_is_better: bool
    run_trial: TrialRunner
    log: Callable[[str], None]
    stream: int
    on_trial: Callable[[dict[str, Any]], None] | None
    held: dict[int, dict[str, Any]]
    params: dict[int, dict[str, float]]
    #: each trial's row at the last rung it finished
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)

    def rows_so_far(self) -> dict[int, dict[str, Any]]:
        """Each trial's furthest row: the one this search has reached, or the results file's
        where that went further (a rung this search has not come to yet)."""
        rows = dict(self.rows)
        for k, past in self.held.items():
            if len(past.get("rungs", [])) > len(rows.get(k, {}).get("rungs", [])):
                rows[k] = past
        return rows


class _Rung:
    """Rung ``r`` of a search: whether a trial has finished it (:meth:`finished`) and how a
    trial trains to its caps (:meth:`train`); ``earlier`` holds each live trial's validation
    values at the rungs before."""

    def __init__(self, search: _HalvingSearch, r: int, caps: dict[str, Any],
                 earlier: dict[int, list[Any]]) -> None:
        self.search = search
        self.r = r
        self.caps = caps
        self.earlier = earlier

    def finished(self, unit: str) -> tuple[dict[str, Any], float] | None:
        """The row and score of the trial ``unit`` names at this rung, or None when it has
        not finished it."""
        s, r = self.search, self.r
        k = int(unit.rsplit("trial", 1)[1])
        result = _read(s.tuning_dir / f"trial{k}" / f"rung{r}.json")
        past = s.held.get(k, {})
        if result is None and len(past.get("rungs", [])) > r:  # the results file has it
            last = len(past["rungs"]) == r + 1  # the row's loss is its last rung's
            row = {**past, "rungs": list(past["rungs"][:r + 1]), "rung": r,
                   "valid": past["rungs"][r],
                   "valid_loss": past.get("valid_loss") if last else None}
        elif result is None:
            return None
        else:
            row = _trial_row(k, s.params[k], result, s.metric)
            row = {**row, "rungs": [*self.earlier[k], row["valid"]], "rung": r}
        s.rows[k] = row  # at once, so the records saved during this rung hold it
        return row, _score(row["valid"], s.higher_is_better)

    def train(self, unit: str) -> tuple[dict[str, Any], float]:
        """Train the trial ``unit`` names to this rung's caps; its row and score."""
        s, r, tuning = self.search, self.r, self.search.tuning
        k = int(unit.rsplit("trial", 1)[1])
        out = s.tuning_dir / f"trial{k}"
        s.log(f"[tune] rung {r + 1}/{len(tuning.rungs)}, trial {k + 1}/{tuning.trials}: "
              + ", ".join(f"{key}={v:.3g}" for key, v in s.params[k].items()))
        # the earlier rungs first where they trained elsewhere: the run stops, evaluates
        # and checkpoints at each rung's cap, so only the same path gives the same result
        for j, before in enumerate(tuning.rungs[:r]):
            if not (out / f"rung{j}.json").exists():
                _write(out / f"rung{j}.json",
                       s.run_trial(k, {**tuning.overrides, **before, **s.params[k]}, out))
        _write(out / f"rung{r}.json",
               s.run_trial(k, {**tuning.overrides, **self.caps, **s.params[k]}, out))
        found = self.finished(unit)
        assert found is not None
        if s.on_trial is not None:
            done_now = s.rows_so_far()
            s.on_trial(search_record(tuning, s.stream, s.metric, s.higher_is_better,
                                     [done_now[i] for i in sorted(done_now)]))
        return found


def halving_search(dropout_key: str | None, rungs: Sequence[dict[str, Any]], *, trials: int = 9,
                   keep: float = 1 / 3, lr: tuple[float, float] = (3e-4, 1e-2),
                   dropout: tuple[float, float] = (0.0, 0.4),
                   overrides: dict[str, Any] | None = None) -> Tuning:
    """:func:`lr_and_dropout`'s space searched by successive halving over ``rungs`` (caps,
    shortest first), each arm its own stream of random draws."""
    base = lr_and_dropout(dropout_key, trials=trials, lr=lr, dropout=dropout,
                          overrides=overrides, startup=trials, arm_streams=True)
    return Tuning(trials=base.trials, params=base.params, overrides=base.overrides,
                  startup=trials, arm_streams=True, rungs=tuple(rungs), keep=keep)


def _best(rows: list[dict[str, Any]], higher_is_better: bool) -> dict[str, Any] | None:
    """The trial with the best validation value (a tie: :func:`_rank_key`); None if all
    diverged."""
    scored = [r for r in rows if math.isfinite(_score(r["valid"], higher_is_better))]
    if not scored:
        return None
    return min(scored, key=lambda r: _rank_key(r, higher_is_better))
