"""The papers' experiments at the scale this machine allows, as data: :data:`EXPERIMENTS`.

Each is an :class:`~ctrlrnn.reproduce.experiment_spec.Experiment` (its arms, seeds, claims, the
configuration overrides of the quick and full modes, its search; what those are:
:mod:`ctrlrnn.reproduce.experiment_spec`). The definitions live in one module a paper
(``experiments_qrnn`` ... ``experiments_carnn``); what they share (the successive-halving
search of every arm) in :mod:`ctrlrnn.reproduce.experiment_builders`.
"""

from __future__ import annotations

from ctrlrnn.reproduce.experiment_builders import HALVING_KEEP, HALVING_TRIALS, RUNG_FACTORS
from ctrlrnn.reproduce.experiment_spec import (
    PAGES,
    PAPER,
    Arm,
    Claim,
    Experiment,
)
from ctrlrnn.reproduce.experiments_carnn import CARNN_EXPERIMENTS
from ctrlrnn.reproduce.experiments_cas import CAS_EXPERIMENTS
from ctrlrnn.reproduce.experiments_metagross import (
    METAGROSS_EXPERIMENTS,
    PIXEL_LR,
    PIXEL_RECIPE,
)
from ctrlrnn.reproduce.experiments_qrnn import QRNN_EXPERIMENTS
from ctrlrnn.reproduce.experiments_rcrn import RCRN_EXPERIMENTS
from ctrlrnn.reproduce.experiments_translation import TRANSLATION_EXPERIMENTS

__all__ = ["EXPERIMENTS", "HALVING_KEEP", "HALVING_TRIALS", "PAGES", "PIXEL_LR", "PIXEL_RECIPE",
           "RUNG_FACTORS", "Arm", "Claim", "Experiment", "at_scale", "by_id",
           "paper_scale_experiments"]

#: every experiment at our scale, in the order of the pages
EXPERIMENTS: tuple[Experiment, ...] = (
    *QRNN_EXPERIMENTS, *RCRN_EXPERIMENTS, *CAS_EXPERIMENTS, *METAGROSS_EXPERIMENTS,
    *TRANSLATION_EXPERIMENTS, *CARNN_EXPERIMENTS)


def by_id() -> dict[str, Experiment]:
    """Every experiment of :data:`EXPERIMENTS` by its id."""
    return {e.id: e for e in EXPERIMENTS}


def paper_scale_experiments() -> tuple[Experiment, ...]:
    """Every experiment with a paper scale, as defined: ours first (in their order), then
    those whose data cannot be had here (the paper's scale alone)."""
    from ctrlrnn.reproduce.paper_experiments import PAPER_ONLY

    return (*(e for e in EXPERIMENTS if e.paper_scale is not None), *PAPER_ONLY)


def at_scale(scale_name: str, data: dict[str, str] | None = None) -> tuple[Experiment, ...]:
    """The experiments a scale trains: ``"ours"`` (the quick and full modes) the definitions
    of :data:`EXPERIMENTS`; :data:`~ctrlrnn.reproduce.experiment_spec.PAPER` each paper-scale
    experiment as that scale trains it, reading the user's files ``data`` (``--data``)."""
    if scale_name != PAPER:
        return EXPERIMENTS
    return tuple(e.at_paper_scale(data) for e in paper_scale_experiments())
