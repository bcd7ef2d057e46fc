"""The QRNN paper's experiments at our scale: the PTB language model and the appendix's copy
and addition tasks."""

from __future__ import annotations

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce import paper_settings as paper
from ctrlrnn.reproduce.experiment_builders import (
    SEQ2SEQ_CHANGED,
    SMALL,
    epochs_search,
    equal_search,
    seq2seq,
)
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment

#: the QRNN appendix's addition task: n_train = 100,000 for 5 digits, and the size at which it
#: says the LSTM converges (2 layers of 128; the QRNN needs more than 3 of 256)
_ADDITION_TRAIN = 100_000
_ADDITION_SIZE = {"hidden_size": 128, "num_layers": 2}


QRNN_EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="qrnn-ptb-lm",
        paper="qrnn",
        title="PTB word-level language model: QRNN vs LSTM at equal width and epochs",
        task="ptb-lm",
        metric="perplexity",
        higher_is_better=False,
        arms=(
            Arm("LSTM", "lstm", {"num_layers": 2}, paper=82.0),
            Arm("QRNN", "qrnn", {"num_layers": 2, "window": 2}, paper=79.9),
            # section 4 trains both QRNNs in one setup, zoneout added (an ablation)
            Arm("QRNN + zoneout 0.1", "qrnn", {"num_layers": 2, "window": 2, "zoneout": 0.1},
                paper=78.3, tuned_like="QRNN"),
        ),
        claims=(Claim("QRNN", "LSTM", "table 2"),
                Claim("QRNN + zoneout 0.1", "LSTM", "table 2"),
                Claim("QRNN + zoneout 0.1", "QRNN", "table 2: 78.3 vs 79.9")),
        quick={"max_steps": 200, "epochs": 1, "model.hidden_size": 128, "eval_batches": 20},
        full={"epochs": 12, "model.hidden_size": 256, "eval_every": 332, "patience": 6,
              "eval_batches": 0},
        tuning_full=equal_search("model.dropout", {"max_steps": 4316}),
        paper_metric="PTB test perplexity, 2 layers of 640 (LSTM 650), 72 epochs",
        paper_scale=scale.PTB_LM,
        note=notes.PTB_LM_NOTE + notes.PTB_LM_WIDTH_NOTE + notes.PTB_ZONEOUT_NOTE
        + notes.budget_note(4316, "QRNN + zoneout 0.1, 12,948 steps")
        + notes.search_changed("2026-11-24", "4 points of one epoch (1,328 steps), 3 drawn at "
                               "random"),
        paper_setting=paper.PTB_LM,
    ),
    seq2seq(
        "copy", "qrnn-copy", "Copy task, 5 digits (appendix)",
        (Arm("LSTM", "lstm", SMALL), Arm("QRNN", "qrnn", SMALL)),
        (Claim("LSTM", "QRNN", "appendix: the LSTM converges with smaller models"),),
        {"digits": 5}, "converges (>99% validation character accuracy) or not", page="qrnn",
        tuning=epochs_search("model.dropout", 6, 156, dropout=(0.0, 0.3)),
        note=notes.budget_note(936, "QRNN, 2,184 steps", kept="6 epochs, the earlier trials' "
                               "length") + SEQ2SEQ_CHANGED,
        also=("token_accuracy",), paper_setting=paper.COPY,
        paper_scale=scale.COPY,
    ),
    seq2seq(
        "addition", "qrnn-addition", "Addition task, 5 digits (appendix)",
        (Arm("LSTM", "lstm", _ADDITION_SIZE), Arm("QRNN", "qrnn", _ADDITION_SIZE)),
        (Claim("LSTM", "QRNN", "appendix: LSTMs need 2x128, QRNNs > 3x256"),),
        {"digits": 5}, "converges (>99% validation character accuracy) or not", page="qrnn",
        tuning=epochs_search("model.dropout", 2, 1562, dropout=(0.0, 0.3)),
        full={"task.train_size": _ADDITION_TRAIN},
        note=notes.ADDITION_NOTE + notes.ADDITION_PATIENCE_NOTE
        + notes.budget_note(3124, "LSTM, 5,304 steps", kept="2 whole epochs of the 100,000 "
                            "examples")
        + SEQ2SEQ_CHANGED,
        also=("token_accuracy",), paper_setting=paper.ADDITION,
        paper_scale=scale.ADDITION, probe_files=("qrnn-addition.json",),
    ),
)
