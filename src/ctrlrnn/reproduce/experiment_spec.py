"""What an experiment is: :class:`Experiment`, its arms (:class:`Arm`) and the claims it checks
(:class:`Claim`), and the results pages they are shown on (:data:`PAGES`).

An :class:`Experiment` trains the same task model with several encoders (its *arms*: the
paper's architecture and the baselines the paper used, at equal width or equal parameters as
the paper did) over several seeds, and states the orderings the paper claims (:class:`Claim`)
so that the results page can say whether each held at our scale. ``quick`` and ``full`` are the
configuration overrides of the two modes; the paper's own numbers are kept beside each arm for
reference, never used in a verdict. The experiments themselves are
:data:`ctrlrnn.reproduce.experiments.EXPERIMENTS`.

Beside our two scales, an experiment holds the paper's own recipe, its :class:`PaperScale`
(``ctrlrnn reproduce --scale paper``): the paper's model sizes, optimiser, schedule, batch and
epochs, on the paper's data, which the user supplies where it cannot be had here
(:class:`DataNeed`). :meth:`Experiment.at_paper_scale` is the experiment as that scale trains
it; the mode :data:`PAPER` runs it, into results and run folders of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ctrlrnn.data.user_needs import DataNeed
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
    #: the label of an earlier arm whose search's chosen values this arm trains at, with no
    #: search of its own: an ablation as a paper runs it, the baseline's best configuration
    #: with one component changed ("": the arm is searched like every other)
    tuned_like: str = ""


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


#: the mode of the paper's scale: results in ``RESULTS/paper``, runs in ``RUNS/paper``
PAPER = "paper"


@dataclass(frozen=True)
class PaperScale:
    """The paper's recipe for an experiment (``ctrlrnn reproduce --scale paper``).

    ``overrides``: configuration overrides, as ``quick`` and ``full`` (model width, optimiser,
    schedule, batch, epochs, data sizes); ``task``: the task, where the paper's data needs
    another than ours; ``arms``: per arm label, overrides of that arm alone
    (``model.hidden_size`` where its width differs, as the LSTM's 650 against the QRNN's 640;
    ``paper`` and ``paper.METRIC``: the paper's numbers for the arm on its own data);
    ``only``: the arms the paper ran (default: every arm); ``extra``: arms only the paper's
    scale has; ``task_args``: the experiment's task arguments at this scale; ``needs``: the
    data the user supplies; ``parameters``: per arm, the parameter count the paper prints (the
    tests build each model and check it within 2%), counting ``counted`` parameters
    (``trainable``: the frozen embeddings left out, as the papers count them; ``all``);
    ``unstated``: what the paper leaves open and what this recipe chose, in words; ``also``:
    the test metrics this scale reports beside the main one, where its data cannot give all
    of ours (None: the experiment's), and the claims on the others are left out."""

    overrides: dict[str, Any]
    source: str  # where the paper states the recipe
    task: str = ""
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    only: tuple[str, ...] = ()
    extra: tuple[Arm, ...] = ()
    task_args: dict[str, Any] = field(default_factory=dict)
    needs: tuple[DataNeed, ...] = ()
    seeds: int = 1
    tuning: Tuning | None = None
    claims: tuple[Claim, ...] = ()
    parameters: dict[str, float] = field(default_factory=dict)
    counted: str = "all"
    unstated: str = ""
    #: whether this scale's data are the paper's, so that its baselines must reach the
    #: paper's level for a verdict (False: generated from a description, as the logic pairs)
    comparable: bool = True
    also: tuple[str, ...] | None = None


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
    #: the paper's recipe (``--scale paper``); None: none defined
    paper_scale: PaperScale | None = None
    #: the scales this experiment trains at: ours (the quick and full modes) and the paper's;
    #: an experiment whose data cannot be had here has the paper's alone
    scales: tuple[str, ...] = ("ours", PAPER)
    #: at our scale: what our data stands in for ("": the paper's own data or task)
    stand_in: str = ""
    #: the probe files of its baselines in ``docs/results/data/probes``, shown as tables under
    #: the note (:mod:`ctrlrnn.reproduce.probe_tables`)
    probe_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        earlier: dict[str, Arm] = {}
        for arm in self.arms:
            base = earlier.get(arm.tuned_like)
            if arm.tuned_like and (base is None or base.tuned_like):
                raise ValueError(f"{self.id}: arm {arm.label!r}: tuned_like must name an "
                                 f"earlier arm with a search of its own, got "
                                 f"{arm.tuned_like!r}")
            earlier[arm.label] = arm

    def values_from(self, arm: Arm, mode: str) -> str | None:
        """The label of the arm whose chosen values ``arm`` trains at in ``mode`` instead of
        a search of its own (:attr:`Arm.tuned_like`), or None: it is searched, or the mode
        searches nothing."""
        return arm.tuned_like if arm.tuned_like and self.tuning(mode) is not None else None

    def tuning(self, mode: str) -> Tuning | None:
        if mode == PAPER:
            return self._paper().tuning
        return self.tuning_quick if mode == "quick" else self.tuning_full

    def _paper(self) -> PaperScale:
        if self.paper_scale is None:
            raise ValueError(f"{self.id}: no paper scale is defined")
        return self.paper_scale

    @property
    def selected(self) -> str:
        """The name of the validation metric that selects (:attr:`select`, else ``metric``)."""
        return self.select or self.metric

    @property
    def selected_higher_is_better(self) -> bool:
        return higher_is_better(self.selected, self.metric, self.higher_is_better)

    def seeds(self, mode: str) -> list[int]:
        if mode == PAPER:
            return list(range(self._paper().seeds))
        return list(range(self.seeds_quick if mode == "quick" else self.seeds_full))

    def overrides(self, mode: str) -> dict[str, Any]:
        """The mode's configuration overrides; with :attr:`select`, its ``monitor`` too (part
        of the setting, so runs selected by another metric never count as this one's)."""
        if mode == PAPER:
            out = dict(self._paper().overrides)
        else:
            out = dict(self.quick if mode == "quick" else self.full)
        if self.select:
            out["monitor"] = self.select
        return out

    def at_paper_scale(self, data: dict[str, str] | None = None) -> Experiment:
        """The experiment as the paper's scale trains it (mode :data:`PAPER`): the paper's arms
        (:attr:`PaperScale.only`, then :attr:`PaperScale.extra`), each with its overrides of
        :attr:`PaperScale.arms` folded into its arguments, the scale's task arguments, and the
        user's files (``data``: :attr:`DataNeed.name` -> path) in the options they go to."""
        ps = self._paper()
        kept = [a for a in self.arms if not ps.only or a.label in ps.only]
        # the scale's model.* and task.* overrides hold for every arm: over the arguments of
        # ours (which set our sizes), under those of the arms only this scale has
        scale_model = {k[6:]: v for k, v in ps.overrides.items() if k.startswith("model.")}
        scale_task = {k[5:]: v for k, v in ps.overrides.items() if k.startswith("task.")}
        arms = []
        for arm in (*kept, *ps.extra):
            if arm in ps.extra:
                model_args = {**scale_model, **arm.model_args}
                task_args = {**scale_task, **arm.task_args}
            else:
                model_args = {**arm.model_args, **scale_model}
                task_args = {**arm.task_args, **scale_task}
            paper, paper_also = arm.paper, dict(arm.paper_also)
            for key, value in ps.arms.get(arm.label, {}).items():
                scope, _, name = key.partition(".")
                if scope == "model":
                    model_args[name] = value
                elif scope == "task":
                    task_args[name] = value
                elif key == "paper":
                    paper = value
                elif scope == "paper":
                    paper_also[name] = value
                else:
                    raise ValueError(f"{self.id}: paper-scale arm {arm.label!r}: {key!r} is "
                                     "not a model.*, task.* or paper key")
            # an arm whose lender this scale leaves out is searched on its own
            lender = arm.tuned_like if any(a.label == arm.tuned_like for a in kept) else ""
            arms.append(replace(arm, model_args=model_args, task_args=task_args, paper=paper,
                                paper_also=paper_also, tuned_like=lender))
        task_args = {**self.task_args, **ps.task_args, **scale_task}
        for need in ps.needs:
            if data and need.name in data:
                task_args[need.option] = need.value(data[need.name])
        labels = {a.label for a in arms}
        also = self.also if ps.also is None else ps.also
        claims = tuple(c for c in (*self.claims, *ps.claims)
                       if c.better in labels and c.worse in labels
                       and (not c.metric or c.metric in also))
        note = f"The paper's recipe ({ps.source}). {ps.unstated}".strip()
        return replace(self, arms=tuple(arms), task_args=task_args, claims=claims,
                       task=ps.task or self.task, note=note, stand_in="",
                       paper_comparable=ps.comparable, also=also)

    def missing_data(self, data: dict[str, str] | None = None) -> list[DataNeed]:
        """The paper scale's data the user has not pointed ``--data`` at."""
        return [n for n in self._paper().needs if not data or n.name not in data]


PAGES: dict[str, str] = {
    "qrnn": "Quasi-Recurrent Neural Networks (Bradbury et al., 2017)",
    "rcrn": "Recurrently Controlled Recurrent Networks (Tay et al., 2018)",
    "cas-lstm": "Cell-aware Stacked LSTMs (Choi et al., 2019)",
    "metagross": "METAGROSS (Tay et al.)",
    "carnn": "Context-dependent Additive RNN (Tran et al.)",
    "translation": "Translation experiments of QRNN, METAGROSS and CAS-LSTM",
}
