"""What an experiment is: :class:`Experiment`, its arms (:class:`Arm`) and the claims it checks
(:class:`Claim`), and the results pages they are shown on (:data:`PAGES`).

An :class:`Experiment` trains the same task model with several encoders (its *arms*: the
paper's architecture and the baselines the paper used, at equal width or equal parameters as
the paper did) over several seeds, and states the orderings the paper claims (:class:`Claim`)
so that the results page can say whether each held at our scale. ``quick`` and ``full`` are the
configuration overrides of the two modes; the paper's own numbers are kept beside each arm for
reference, never used in a verdict. The experiments themselves are
:data:`ctrlrnn.reproduce.experiments.EXPERIMENTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctrlrnn.metric_conventions import higher_is_better
from ctrlrnn.reproduce.tuning import Tuning


@dataclass(frozen=True)
class Arm:
    label: str
    model: str
    model_args: dict[str, Any] = field(default_factory=dict)
    task_args: dict[str, Any] = field(default_factory=dict)
    paper: float | None = None  # the paper's number for this arm, on the paper's data
    paper_also: dict[str, float] = field(default_factory=dict)  # for the experiment's ``also``


@dataclass(frozen=True)
class Claim:
    better: str
    worse: str
    source: str  # where the paper says it
    metric: str = ""  # a test metric of the experiment's ``also``; "" is its main metric


@dataclass(frozen=True)
class Experiment:
    id: str
    paper: str  # results page: qrnn, rcrn, cas-lstm, metagross, carnn, translation
    title: str
    task: str
    metric: str  # reported on the test split
    higher_is_better: bool
    arms: tuple[Arm, ...]
    claims: tuple[Claim, ...]
    quick: dict[str, Any]
    full: dict[str, Any]
    task_args: dict[str, Any] = field(default_factory=dict)
    seeds_quick: int = 2
    seeds_full: int = 3
    paper_metric: str = ""  # what the paper's numbers are (dataset, metric)
    note: str = ""
    also: tuple[str, ...] = ()  # further test metrics the paper reports, shown beside the main
    chance: float | None = None  # the main metric's chance level, as stored (0.1: 10 classes)
    #: the main metric's usefulness level, as stored (default: from ``chance``, or BLEU 1)
    useful: float | None = None
    #: whether our setting is the paper's (task and size), so the paper's baseline numbers are
    #: a level the baseline must reach for a verdict (:mod:`ctrlrnn.reproduce.verdicts`)
    paper_comparable: bool = False
    #: the search every arm gets before its final seeds, per mode (None: no tuning)
    tuning_full: Tuning | None = None
    tuning_quick: Tuning | None = None
    #: the validation metric that selects: it drives early stopping, the best checkpoint (where
    #: the test split is scored) and the tuning choice ("": ``metric``, the one reported). A
    #: noisy test metric (BLEU on a few hundred sentences) is better selected by the loss.
    select: str = ""

    def tuning(self, mode: str) -> Tuning | None:
        return self.tuning_quick if mode == "quick" else self.tuning_full

    @property
    def selected(self) -> str:
        """The name of the validation metric that selects (:attr:`select`, else ``metric``)."""
        return self.select or self.metric

    @property
    def selected_higher_is_better(self) -> bool:
        return higher_is_better(self.selected, self.metric, self.higher_is_better)

    def seeds(self, mode: str) -> list[int]:
        return list(range(self.seeds_quick if mode == "quick" else self.seeds_full))

    def overrides(self, mode: str) -> dict[str, Any]:
        """The mode's configuration overrides; with :attr:`select`, its ``monitor`` too (part
        of the setting, so runs selected by another metric never count as this one's)."""
        out = dict(self.quick if mode == "quick" else self.full)
        if self.select:
            out["monitor"] = self.select
        return out


PAGES: dict[str, str] = {
    "qrnn": "Quasi-Recurrent Neural Networks (Bradbury et al., 2017)",
    "rcrn": "Recurrently Controlled Recurrent Networks (Tay et al., 2018)",
    "cas-lstm": "Cell-aware Stacked LSTMs (Choi et al., 2019)",
    "metagross": "METAGROSS (Tay et al.)",
    "carnn": "Context-dependent Additive RNN (Tran et al.)",
    "translation": "Translation experiments of QRNN, METAGROSS and CAS-LSTM",
}
