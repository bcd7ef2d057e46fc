"""Whether a results file's stored seeds and tunings still answer the experiment as defined now.

A results file is committed without its run directories, so what it holds must say what it was
trained under. A seed's summary, or an arm's tuning record, stands for the definition now only
when it was trained

* in the same **setting**: the mode's overrides other than the stopping budget (model and data
  sizes, batch, ...), the experiment's and the arm's task arguments, the arm's model and model
  arguments (:func:`setting`); and
* under a stopping **budget** that trains the same run (:func:`~ctrlrnn.reproduce.stopping.
  run_holds`): for a tuning, the budget of its trials, the mode's overrides under the search's
  own, every trial judged by how it stopped.

Entries record both; entries written before they did take them from their file's stored
definition. A tuning record must also be a finished run of the same search
(:func:`~ctrlrnn.reproduce.tuning.record_holds`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ctrlrnn import files
from ctrlrnn.reproduce.experiment_spec import Arm, Experiment
from ctrlrnn.reproduce.stopping import CAPS, RULE, run_holds, seed_holds, stopping_budget
from ctrlrnn.reproduce.tuning import Tuning, borrowed, record_holds, search_of


def setting(overrides: dict[str, Any], task_args: dict[str, Any],
            arm: dict[str, Any]) -> dict[str, Any]:
    """The setting of an arm's runs (as JSON stores it): the mode's ``overrides`` without the
    stopping keys, the experiment's ``task_args`` under the arm's, the arm's model and
    arguments (``arm`` as a definition stores it)."""
    record = {
        "overrides": {k: v for k, v in overrides.items() if k not in (*CAPS, *RULE)},
        "task_args": {**task_args, **(arm.get("task_args") or {})},
        "model": arm.get("model"),
        "model_args": dict(arm.get("model_args") or {}),
    }
    return json.loads(files.dumps(record, sort_keys=True, default=str))


def trial_budget(overrides: dict[str, Any], tuning: Tuning) -> dict[str, Any]:
    """The stopping budget of a search's trials: the mode's, under the search's overrides."""
    return stopping_budget({**overrides, **tuning.overrides})


class Standing:
    """What ``exp``'s results file (``cached``, or None) holds that still stands in ``mode``."""

    def __init__(self, exp: Experiment, mode: str, cached: dict[str, Any] | None) -> None:
        self.exp, self.mode = exp, mode
        definition = (cached or {}).get("definition") or {}
        stored = definition.get(mode)
        #: the stored definition's mode overrides (what entries without a record trained under)
        self.stored_overrides: dict[str, Any] | None = stored if isinstance(stored, dict) else None
        if self.stored_overrides is not None and definition.get("select"):
            # as Experiment.overrides: the stored definition's selecting metric
            self.stored_overrides = {**self.stored_overrides, "monitor": definition["select"]}
        self.stored_arms = {a.get("label"): a for a in definition.get("arms", [])
                            if isinstance(a, dict)}
        self.stored_task_args = dict(definition.get("task_args") or {})
        #: the stopping budget of the stored definition (what entries without a record of
        #: theirs were trained under), or None
        self.trained_under = (stopping_budget(self.stored_overrides)
                              if self.stored_overrides is not None else None)
        self.budget = stopping_budget(exp.overrides(mode))

    def setting(self, arm: Arm) -> dict[str, Any]:
        """The setting ``arm``'s runs train in now."""
        return setting(self.exp.overrides(self.mode), self.exp.task_args, asdict(arm))

    def stored_setting(self, label: str) -> dict[str, Any] | None:
        """The setting of the file's stored definition for the arm ``label``, or None."""
        arm = self.stored_arms.get(label)
        if self.stored_overrides is None or arm is None:
            return None
        return setting(self.stored_overrides, self.stored_task_args, arm)

    def same_setting(self, arm: Arm, entry: dict[str, Any]) -> bool:
        """Whether a stored ``entry`` (a seed's summary, a tuning record) of ``arm`` was trained
        in the setting now."""
        then = entry.get("setting") or self.stored_setting(arm.label)
        return then is not None and then == self.setting(arm)

    def other_setting(self, arm: Arm, entry: dict[str, Any]) -> bool:
        """Whether a stored ``entry`` of ``arm`` is known to have trained in another setting
        than the one now (an entry whose setting is unknown, with no stored definition to
        take it from, is not)."""
        then = entry.get("setting") or self.stored_setting(arm.label)
        return then is not None and then != self.setting(arm)

    def seed(self, arm: Arm, summary: dict[str, Any] | None,
             params: dict[str, float] | None) -> bool:
        """Whether a seed's stored ``summary`` stands for ``arm`` trained at ``params`` (the
        arm's tuned values; None: the arm is not tuned)."""
        if not summary:
            return False
        if params is not None and summary.get("params") != params:
            return False  # trained at other values (before tuning, or another search's)
        return self.same_setting(arm, summary) and seed_holds(summary, self.budget,
                                                              self.trained_under)

    def tuning(self, arm: Arm, record: dict[str, Any] | None) -> bool:
        """Whether an arm's stored tuning ``record`` is a finished run of the search now, in
        the setting now, and every trial is the run the budget now trains."""
        search = self.exp.tuning(self.mode)
        if search is None or not record or not record_holds(record, search):
            return False
        if not self.same_setting(arm, record):
            return False
        budgets = self._trial_budgets(record, search)
        return budgets is not None and all(
            run_holds(row.get("stop_reason"), *budgets) for row in record["trials"])

    def values(self, arm: Arm, entries: dict[str, Any]) -> dict[str, Any] | None:
        """The tuning entry whose chosen values ``arm``'s seeds train at, from a results
        file's arm ``entries``: the arm's own search where it stands; for an arm trained at
        another's values (:meth:`Experiment.values_from`), a :func:`borrowed` entry of that
        arm's standing search. None while no such search stands."""
        lender = self.exp.values_from(arm, self.mode)
        owner = arm if lender is None else next(a for a in self.exp.arms if a.label == lender)
        record = (entries.get(owner.label) or {}).get("tuning")
        if not self.tuning(owner, record):
            return None
        return record if lender is None else borrowed(lender, record)

    def _trial_budgets(self, record: dict[str, Any], search: Tuning
                       ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The trial budget a stored tuning ``record`` was trained under (its own, else the
        stored definition's) and the one ``search`` trains under now; None when the first is
        unknown."""
        then = record.get("budget")
        if then is None:
            if self.stored_overrides is None:
                return None
            then = trial_budget(self.stored_overrides, search)
        return then, trial_budget(self.exp.overrides(self.mode), search)

    def finished_trials(self, arm: Arm, *records: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The trials of the search now that stored ``records`` of ``arm`` already hold (a
        finished tuning, or the search in progress that the runner writes after each trial):
        the longest run of them from trial 0 that is the same search (its trial count aside:
        :meth:`Tuning.key`), in the setting now, each trial stopped as the budget now stops
        it. What a resumed search takes instead of training those trials again."""
        search = self.exp.tuning(self.mode)
        best: list[dict[str, Any]] = []
        for record in records:
            stored = search_of(record)
            if search is None or record is None or stored is None \
                    or stored.key() != search.key() or not self.same_setting(arm, record):
                continue
            budgets = self._trial_budgets(record, search)
            if budgets is None:
                continue
            rows: list[dict[str, Any]] = []
            for k, row in enumerate(record.get("trials") or []):
                if not isinstance(row, dict) or row.get("trial") != k or k >= search.trials \
                        or not run_holds(row.get("stop_reason"), *budgets):
                    break
                rows.append(row)
            if len(rows) > len(best):
                best = rows
        return best

    def stamp_tuning(self, arm: Arm, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with the setting and trial budget it was trained under now."""
        search = self.exp.tuning(self.mode)
        assert search is not None
        return {**record, "setting": self.setting(arm),
                "budget": trial_budget(self.exp.overrides(self.mode), search)}

    def date_entries(self, cached: dict[str, Any] | None) -> None:
        """Write into ``cached``'s entries that record no budget or setting those of the file's
        stored definition (in place), so that they keep them when a file written under a new
        definition carries them (a failed part keeps its earlier entry)."""
        for label, entry in (cached or {}).get("arms", {}).items():
            stored = self.stored_setting(label)
            records = list(entry.get("seeds", {}).values())
            record = entry.get("tuning")
            search = search_of(record)
            if record and search is not None and self.stored_overrides is not None:
                record.setdefault("budget", trial_budget(self.stored_overrides, search))
                records.append(record)
            for item in records:
                if self.trained_under is not None:
                    item.setdefault("budget", self.trained_under)
                if stored is not None:
                    item.setdefault("setting", stored)
