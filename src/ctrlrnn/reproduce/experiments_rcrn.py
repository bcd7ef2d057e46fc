"""The RCRN paper's experiments at our scale: sentiment classifiers and the entailment model."""

from __future__ import annotations

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce import paper_settings as paper
from ctrlrnn.reproduce.experiment_builders import (
    CLASSIFIER_CHANGED,
    epochs_search,
    logic_runs,
)
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment

#: the RCRN paper's classifiers (section 4.2): 200-d RCRN cells over pre-trained vectors, here
#: GloVe 6B 50d (the one GloVe that reaches this machine), frozen as the paper's are
_RCRN_CLASSIFIER = {"glove": "cache"}


def _arms(bilstm: float | None = None, deep: float | None = None,
          rcrn: float | None = None) -> tuple[Arm, ...]:
    """The RCRN paper's three models in every experiment, with the paper's figures if it
    prints them: the BiLSTM, the 3-layer BiLSTM and the bidirectional RCRN."""
    return (
        Arm("BiLSTM", "lstm", {"bidirectional": True}, paper=bilstm),
        Arm("3L-BiLSTM", "lstm", {"bidirectional": True, "num_layers": 3}, paper=deep),
        Arm("RCRN", "rcrn", {"bidirectional": True}, paper=rcrn),
    )


def _claims(where: str) -> tuple[Claim, ...]:
    """The paper's claims: the RCRN beats both baselines (in its tables ``where``)."""
    return Claim("RCRN", "BiLSTM", where), Claim("RCRN", "3L-BiLSTM", where)


RCRN_EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="rcrn-mr",
        paper="rcrn",
        title="MR-like sentence sentiment with GloVe 50d: RCRN vs BiLSTM vs 3-layer BiLSTM",
        task="mr",
        task_args=_RCRN_CLASSIFIER,
        metric="accuracy",
        higher_is_better=True,
        arms=_arms(),
        claims=_claims("tables 1-5"),
        quick={"max_steps": 150, "epochs": 2, "model.hidden_size": 64, "eval_batches": 10},
        full={"epochs": 12, "model.hidden_size": 200, "patience": 3},
        tuning_full=epochs_search("task.dropout", 2, 317),
        note=notes.RCRN_CLASSIFIER_NOTE
        + notes.budget_note(634, "BiLSTM, 1,585 steps", kept="2 whole epochs")
        + CLASSIFIER_CHANGED,
        paper_metric="accuracy on 16 Amazon review sets, SST, IMDb, TREC (not available here)",
        paper_setting=paper.RCRN_MR,
        paper_scale=scale.RCRN_MR,
        stand_in="Rotten Tomatoes snippets (MR-like) for Liu et al.'s MR sentences",
    ),
    Experiment(
        id="rcrn-sst5",
        paper="rcrn",
        title="SST-5-like graded sentiment with GloVe 50d: RCRN vs BiLSTM vs 3-layer BiLSTM",
        task="sst5",
        task_args=_RCRN_CLASSIFIER,
        metric="accuracy",
        higher_is_better=True,
        arms=_arms(51.3, 52.6, 54.3),
        claims=_claims("table 2"),
        quick={"max_steps": 150, "epochs": 2, "model.hidden_size": 64, "eval_batches": 10},
        full={"epochs": 12, "model.hidden_size": 200, "patience": 3},
        tuning_full=epochs_search("task.dropout", 2, 264),
        note=notes.RCRN_CLASSIFIER_NOTE
        + notes.budget_note(528, "3L-BiLSTM, 1,056 steps", kept="2 whole epochs")
        + CLASSIFIER_CHANGED + notes.RCRN_SST5_STALL_NOTE,
        probe_files=("rcrn-sst5.json",),
        paper_metric="SST-5 test accuracy (%)",
        paper_setting=paper.RCRN_SST5,
        paper_scale=scale.RCRN_SST5,
        stand_in="graded Rotten Tomatoes snippets binned as SST-5 for SST",
    ),
    Experiment(
        id="rcrn-entailment",
        paper="rcrn",
        title="Logical inference pairs, RCRN's entailment model: RCRN vs BiLSTM vs 3-layer "
              "BiLSTM",
        task="logic",
        task_args={"features": "rcrn"},
        metric="accuracy",
        higher_is_better=True,
        arms=_arms(),
        claims=_claims("tables 6-7"),
        **logic_runs(),
        note=("The entailment model of RCRN section 4.2: the embeddings through a two-layer "
              "highway network, max and mean pooling of each sentence, [s1, s2, s1 * s2, "
              "s1 - s2] through a two-layer highway network, softmax (`task.features=rcrn`)."
              + notes.new_budget_note(1560, "the CAS-LSTM logic experiment")),
        paper_metric="SNLI and SciTail accuracy (not available here)",
        paper_setting=paper.RCRN_ENTAILMENT,
        paper_scale=scale.RCRN_SNLI,
        stand_in=notes.NLI_STAND_IN.replace("SNLI and MultiNLI", "SNLI and SciTail"),
    ),
)
