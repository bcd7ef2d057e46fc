"""What every experiment definition shares (:mod:`ctrlrnn.reproduce.experiments`): the
successive-halving search every arm gets, the seq2seq experiment's builder, and the
sentences that say what changed in the searches of the earlier verdicts."""

from __future__ import annotations

import math
from typing import Any

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment, PaperScale, PaperSetting
from ctrlrnn.reproduce.tuning import RUNG_KEYS, Tuning, halving_search

SMALL = {"hidden_size": 64}
#: the logical inference cap: the LSTM's validation accuracy still rose by ~0.6 points an
#: epoch at the 12 epochs first set, so its runs stop by patience well before this cap
LOGIC_EPOCHS = 50


def logic_runs() -> dict[str, dict[str, Any]]:
    """The logical inference experiments' quick and full runs and their search, shared by
    every paper's logic experiment so that their arms compare on equal footing: quick on 5,000
    training pairs, full at width 128 up to :data:`LOGIC_EPOCHS` epochs with patience 3."""
    return {
        "quick": {"max_steps": 200, "epochs": 3, "model.hidden_size": 64, "eval_batches": 10,
                  "task.train_size": 5000, "task.valid_size": 500, "task.test_per_count": 200},
        "full": {"epochs": LOGIC_EPOCHS, "model.hidden_size": 128, "patience": 3},
        "tuning_full": epochs_search("task.dropout", 5, 312),
    }


#: the search of every experiment: successive halving (:func:`halving_search`), 9 trials per
#: arm drawn at random from the arm's own stream, the best third of each rung continued from
#: its checkpoint; the rungs' caps are a third of, equal to and three times an experiment's
#: trial budget (the budget each trial of the earlier searches trained)
HALVING_TRIALS = 9
HALVING_KEEP = 1 / 3
RUNG_FACTORS = (1 / 3, 1, 3)


def equal_search(key: str, budget: dict[str, Any], dropout: tuple[float, float] = (0.0, 0.4),
                  lr: tuple[float, float] = (3e-4, 1e-2)) -> Tuning:
    """The search of the experiments compared on equal footing: successive halving over
    ``lr`` and ``dropout`` (``key``), every arm the same rungs, each its own stream of random
    draws. ``budget``'s caps (``epochs``, ``max_steps``) become the rungs' caps
    (:data:`RUNG_FACTORS` times each, rounded up); its other keys (a patience) hold for every
    rung. Runs are ranked where the last rung ends them, so a fast starter that stalls loses."""
    caps = {k: v for k, v in budget.items() if k in RUNG_KEYS}
    if not caps:
        raise ValueError(f"budget: expected a cap ({', '.join(RUNG_KEYS)}), got {budget!r}")
    rungs = tuple({k: max(1, math.ceil(v * factor)) for k, v in caps.items()}
                  for factor in RUNG_FACTORS)
    rest = {k: v for k, v in budget.items() if k not in RUNG_KEYS}
    return halving_search(key, rungs, trials=HALVING_TRIALS, keep=HALVING_KEEP, lr=lr,
                          dropout=dropout, overrides=rest)


def epochs_search(key: str, epochs: int, steps_per_epoch: int,
                   dropout: tuple[float, float] = (0.0, 0.4),
                   lr: tuple[float, float] = (3e-4, 1e-2)) -> Tuning:
    """:func:`equal_search` whose rungs train whole epochs, ``epochs`` the middle rung's cap
    (no early stop within it: the patience is ``epochs``); ``steps_per_epoch`` only documents
    the budget in steps."""
    del steps_per_epoch
    return equal_search(key, {"epochs": epochs, "patience": epochs}, dropout=dropout, lr=lr)


#: what changed in the searches of the experiments tuned before the equal-footing rules
CLASSIFIER_CHANGED = notes.search_changed(
    "2026-11-23", "the same 6 points of 2 epochs (patience 1), 3 drawn at random")
SEQ2SEQ_CHANGED = notes.search_changed(
    "2026-11-23", "the same 3 random points of at most 6 epochs (patience 2)")
TRANSLATION_CHANGED = notes.search_changed(
    "2026-11-24", "the same 4 points of 2 epochs, 3 drawn at random")


def seq2seq(task: str, exp_id: str, title: str, arms: tuple[Arm, ...],
             claims: tuple[Claim, ...], task_args: dict[str, Any], paper_metric: str, *,
             tuning: Tuning, metric: str = "exact_match", page: str = "metagross",
             also: tuple[str, ...] = (), note: str = "",
             paper_comparable: bool = False, full: dict[str, Any] | None = None,
             paper_setting: PaperSetting | None = None,
             paper_scale: PaperScale | None = None,
             probe_files: tuple[str, ...] = ()) -> Experiment:
    """A seq2seq experiment: full mode trains to a patience of 4 evaluations (one per epoch)
    or a cap of 100 epochs, after the arms' equal ``tuning``; ``full`` overrides that mode's
    settings (the training-set size). (The cap was 30 epochs until the runs at sorting n = 10
    and tree traversal n = 4 hit it while still improving; runs that stopped at it continue
    from their checkpoints, see :mod:`ctrlrnn.reproduce.stopping`.)"""
    return Experiment(
        id=exp_id, paper=page, title=title, task=task, metric=metric,
        higher_is_better=metric != "perplexity", arms=arms, claims=claims,
        task_args=task_args, paper_metric=paper_metric, also=also, note=note,
        paper_comparable=paper_comparable,
        quick={"max_steps": 150, "epochs": 20, "batch_size": 64, "eval_every": 75,
               "task.train_size": 3000, "task.valid_size": 300, "task.test_size": 300},
        full={"epochs": 100, "batch_size": 64, "patience": 4,
              "task.train_size": 10000, "task.valid_size": 1000, "task.test_size": 1000,
              **(full or {})},
        tuning_full=tuning, paper_setting=paper_setting, paper_scale=paper_scale,
        probe_files=probe_files,
    )
