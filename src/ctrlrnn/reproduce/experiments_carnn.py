"""The CARNN paper's experiments at our scale: the contextual language model and dialog
response selection."""

from __future__ import annotations

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce import paper_settings as paper
from ctrlrnn.reproduce.experiment_builders import (
    epochs_search,
    equal_search,
)
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment

CARNN_EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="carnn-lm",
        paper="carnn",
        title="Contextual LM on PTB sentences, previous sentence as context (table 2 protocol)",
        task="carnn-lm",
        metric="perplexity",
        higher_is_better=False,
        arms=(
            Arm("LSTM LM (no context)", "lstm", {}, paper=117.8),
            Arm("nCARNN", "carnn", {"variant": "n"}, paper=96.95),
            Arm("iCARNN", "carnn", {"variant": "i"}, paper=94.72),
            Arm("sCARNN", "carnn", {"variant": "s"}, paper=87.39),
        ),
        claims=(Claim("nCARNN", "LSTM LM (no context)", "table 2"),
                Claim("iCARNN", "LSTM LM (no context)", "table 2"),
                Claim("sCARNN", "LSTM LM (no context)", "table 2"),
                Claim("sCARNN", "iCARNN", "table 2 and 5.2: sCARNN best on PDTB"),
                Claim("sCARNN", "nCARNN", "table 2 and 5.2: sCARNN best on PDTB"),
                Claim("iCARNN", "nCARNN", "table 2: 94.72 vs 96.95 on PDTB")),
        quick={"max_steps": 150, "epochs": 1, "model.hidden_size": 128, "eval_batches": 10,
               "task.train_size": 3000, "task.valid_size": 300, "task.test_size": 300},
        full={"epochs": 30, "model.hidden_size": 128, "eval_every": 150, "patience": 5,
              "task.train_size": 10000, "task.valid_size": 0, "task.test_size": 0},
        tuning_full=equal_search("model.dropout", {"max_steps": 2250}),
        paper_metric="Penn Discourse Treebank test perplexity (w/o latent; RNNLM: Ji et al. "
                     "2016b)",
        note=notes.CARNN_LM_NOTE + notes.CARNN_LM_SPLITS_NOTE + notes.CARNN_LM_DATA_NOTE,
        probe_files=("carnn-lm-data.json",),
        paper_setting=paper.CARNN_LM,
        paper_scale=scale.CARNN_LM,
        stand_in="PTB's sentences for the Penn Discourse Treebank's (no discourse labels)",
    ),
    Experiment(
        id="carnn-dialog",
        paper="carnn",
        title="Dialog response selection on bAbI-like dialogs: CARNN vs a context-free LSTM "
              "(table 1 protocol)",
        task="carnn-dialog",
        metric="accuracy",
        higher_is_better=True,
        arms=(Arm("LSTM (no context)", "lstm", {}),
              Arm("nCARNN", "carnn", {"variant": "n"}),
              Arm("iCARNN", "carnn", {"variant": "i"}),
              Arm("sCARNN", "carnn", {"variant": "s"})),
        claims=(*(Claim(f"{v}CARNN", "LSTM (no context)", "table 1: every CARNN above the "
                        "end-to-end baselines")
                  for v in "nis"),
                Claim("iCARNN", "sCARNN", "table 1: 52.0 vs 50.9 on bAbI task 6"),
                Claim("iCARNN", "nCARNN", "table 1: 52.0 vs 51.3 on bAbI task 6"),
                Claim("iCARNN", "LSTM (no context)", "5.1 and Figure 5: CARNNs do better where "
                      "the response needs information from long ago in the dialog",
                      metric="proposal_accuracy")),
        also=("dialog_accuracy", "proposal_accuracy", "information_accuracy"),
        quick={"max_steps": 150, "epochs": 5, "model.hidden_size": 64,
               "task.train_size": 500, "task.valid_size": 50, "task.test_size": 50},
        full={"epochs": 30, "model.hidden_size": 128, "patience": 4,
              "task.train_size": 2000, "task.valid_size": 200, "task.test_size": 200},
        task_args={"dialogs": "full"},
        tuning_full=epochs_search("model.dropout", 5, 793),
        note=("The model of CARNN section 4.1: Position-Encoded utterances, the CARNN over the "
              "history with the current user utterance as its context, eq 8's residual and "
              "attention, and eq 10's choice among every response of the data. The "
              "context-free LSTM keeps eq 8 (the utterance is still its attention query); the "
              "paper's own baselines (QRN, GMN, memory networks) are not built."
              + notes.CARNN_DIALOG_NOTE
              + " The search's trial budget is five epochs of these dialogs (3,965 steps); "
              "the first rung of its successive halving trains two, the last fifteen."),
        paper_metric="bAbI dialog task 6 per-response accuracy (%)",
        paper_setting=paper.DIALOG,
        paper_scale=scale.DIALOG,
        stand_in="restaurant-booking dialogs generated in the form of bAbI dialog task 5 (tasks "
                 "1-4 in one dialog) for the real "
                 "bAbI task 6 (DSTC2) dialogs",
    ),
)
