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
class PaperSetting:
    """How the paper ran the experiment, row by row as its pages print it, for the page's
    "paper vs here" table (:mod:`ctrlrnn.reproduce.paper_vs_here`, which derives our side of
    each row from the experiment's definition). Empty values: the paper does not say.

    Values in our terms compare with ours, and a row whose values are equal *matches*:
    ``data_key`` (:data:`~ctrlrnn.reproduce.paper_vs_here.TASK_DATA`'s key, with the task's
    size parameter: ``addition-5``), ``train_size``, ``width`` (a number; words: a sweep),
    ``depth`` (one for every arm, per arm label, or words), ``architecture_key`` (the model
    around the unit, in the keys :mod:`~ctrlrnn.reproduce.paper_vs_here` derives),
    ``optimizer`` (our name: adam, sgd, rmsprop), ``batch`` (a number, or words that must equal
    ours), ``epochs`` with ``early_stopping`` (ours: the cap and whether a patience stops
    runs before it), ``seeds``, ``metric_key``
    (our metric's name; BLEU with its beam: ``bleu-beam8``). ``why`` says, per row
    (:data:`~ctrlrnn.reproduce.paper_vs_here.ROWS`), why ours differs; a test holds every
    differing row of a full-mode page to having one."""

    source: str  # where the paper states its set-up
    data: str  # the paper's data set, in words
    data_key: str = ""
    train_size: int | None = None
    train_unit: str = ""  # what ``train_size`` counts ("": our task's unit)
    embeddings: str = ""  # the paper's input vectors, in words ("": no such row)
    width: int | str | None = None
    depth: int | str | dict[str, int] | None = None
    parameters: dict[str, str] = field(default_factory=dict)  # per arm label, as printed
    architecture: str = ""  # the model around the unit, in words ("": no such row)
    architecture_key: str = ""
    optimizer: str = ""
    lr: str = ""  # the paper's learning rate and its schedule, in words
    batch: int | str | None = None
    epochs: int | None = None  # the paper's number (or cap) of epochs
    early_stopping: bool = False  # whether the paper's runs stop early, under that cap
    budget: str = ""  # the paper's training budget, in words
    seeds: int | None = None  # runs per model the paper reports over
    metric: str = ""  # the paper's metric, in words
    metric_key: str = ""
    why: dict[str, str] = field(default_factory=dict)


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
    #: how the paper ran it (the page's "paper vs here" table); None: no such table
    paper_setting: PaperSetting | None = None

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
