"""The translation experiments at our scale: the QRNN paper's character-level model, the
METAGROSS Transformer block and the CAS-LSTM seq2seq model."""

from __future__ import annotations

from typing import Any

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce import paper_settings as paper
from ctrlrnn.reproduce.experiment_builders import (
    TRANSLATION_CHANGED,
    epochs_search,
    equal_search,
)
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment

#: the translation experiments in full mode: whole-epoch evaluations (beam 4 on 100 validation
#: verses), stopped after 4 epochs without improvement, at 30 epochs at most (the
#: character-level experiment raises the cap: see its note)
_TRANSLATION_FULL: dict[str, Any] = {
    "epochs": 30, "model.hidden_size": 128, "patience": 4, "task.valid_size": 100,
    "task.test_size": 300, "task.beam": 4}
_WORD_TRANSLATION_FULL: dict[str, Any] = {
    **_TRANSLATION_FULL, "task.train_size": 12000, "task.vocab_size": 8000}
#: the character-level translation: 10,000 verses, and a 50-epoch cap (raised from 30 after
#: one of the LSTM's first two seeds reached 30 epochs with its best validation loss at 29)
_CHAR_TRANSLATION_FULL: dict[str, Any] = {
    **_TRANSLATION_FULL, "task.train_size": 10000, "epochs": 50}
#: the CAS-LSTM translation: the word-level setting with a 100-epoch cap (raised from 30 to 50
#: when the LSTM's first seed still gained 0.05 nats a word an epoch at 18, then to 100 when that
#: seed reached 50 with its best validation loss at epoch 48)
_CAS_TRANSLATION_FULL: dict[str, Any] = {**_WORD_TRANSLATION_FULL, "epochs": 100}
_WORD_TRANSLATION_NOTE = notes.TRANSLATION_NOTE.format(
    cap=_TRANSLATION_FULL["epochs"], data=notes.WORD_TRANSLATION_DATA,
    whole=notes.WORD_TRANSLATION_WHOLE)

_CAS_TRANSLATION_NOTE = notes.TRANSLATION_NOTE.format(
    cap=_CAS_TRANSLATION_FULL["epochs"], data=notes.WORD_TRANSLATION_DATA,
    whole=notes.WORD_TRANSLATION_WHOLE + " The cap was raised from 30 to 50 epochs after the "
    "LSTM's first seed still gained 0.05 nats a word an epoch at epoch 18, and to 100 after "
    "that seed reached 50 with its best validation loss (2.065) at epoch 48.")
#: the QRNN encoder of the QRNN paper's section 3.3, at our depth: width 6 in the first encoder
#: layer and 2 in the other, unmasked ("the encoder convolutions were not masked"); the
#: decoder's convolutions stay masked, width 2 (table 3: "k = 2 for all layers other than the
#: first encoder layer")
_CHAR_TRANSLATION_QRNN: dict[str, Any] = {"num_layers": 2, "window": [6, 2], "causal": False}
#: the LSTM baseline whose encoder reads the source both ways, as the QRNN's centred first
#: convolution does around each character (the paper's LSTM is "an equal-sized four-layer
#: encoder-decoder LSTM with attention", its direction unstated): a stronger baseline, which
#: the page's probe measured to fit far better than the one-way arm, mostly through its
#: extra parameters
_CHAR_BIDIRECTIONAL = "LSTM (bidirectional encoder)"


TRANSLATION_EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="translation-char-qrnn",
        paper="translation",
        title="Character-level En-Es verses: QRNN vs LSTM encoder-decoder (QRNN paper, table 3)",
        task="translate-char",
        metric="bleu",
        higher_is_better=True,
        arms=(Arm("LSTM", "lstm", {"num_layers": 2}),
              Arm("QRNN", "qrnn", _CHAR_TRANSLATION_QRNN),
              Arm(_CHAR_BIDIRECTIONAL, "lstm", {"num_layers": 2, "bidirectional": True})),
        claims=(Claim("QRNN", "LSTM", "QRNN paper, table 3"),
                Claim("QRNN", _CHAR_BIDIRECTIONAL,
                      "QRNN paper, table 3, against an encoder that reads both ways")),
        quick={"max_steps": 150, "epochs": 1, "model.hidden_size": 64, "eval_batches": 2,
               "task.train_size": 3000, "task.valid_size": 64, "task.test_size": 64,
               "task.beam": 4},
        full=_CHAR_TRANSLATION_FULL,
        tuning_full=epochs_search("model.dropout", 10, 625),
        select="loss",
        paper_metric="IWSLT De-En character-level BLEU (not available here)",
        seeds_quick=1,
        paper_setting=paper.CHAR_TRANSLATION,
        paper_scale=scale.CHAR_IWSLT,
        stand_in="English-Spanish verses for IWSLT German-English",
        note=notes.TRANSLATION_NOTE.format(
            cap=_CHAR_TRANSLATION_FULL["epochs"],
            data="10,000 of the 25,478 training verses, characters, batch 16 (625 steps an "
                 "epoch)",
            whole="On the whole set (1,581 steps an epoch) every epoch would cost 2.5 times "
                  "the steps; the speed section below times a step of each arm. (The "
                  "cap was 30 epochs until one of the LSTM's first two seeds reached it with "
                  "its best validation loss at epoch 29.)")
        + notes.BY_LOSS_NOTE + notes.CHAR_TRANSLATION_QRNN_NOTE
        + notes.CHAR_TRANSLATION_LEVEL_NOTE
        + notes.budget_note(6250, "LSTM, 18,125 steps", kept="10 whole epochs")
        + TRANSLATION_CHANGED,
        probe_files=("translation-char-lstm.json", "translation-char-lstm-6250.json"),
    ),
    Experiment(
        id="translation-transformer-metagross",
        paper="translation",
        title="Word-level En-Es verses: Transformer vs Transformer + METAGROSS FFN",
        task="translate-word",
        metric="bleu",
        higher_is_better=True,
        arms=(
            Arm("Transformer", "lstm", {}, {"arch": "transformer", "ffn": "relu"}, paper=34.68),
            Arm("Transformer + METAGROSS", "lstm", {},
                {"arch": "transformer", "ffn": "metagross", "ffn_depth": 3}, paper=35.15),
        ),
        claims=(Claim("Transformer + METAGROSS", "Transformer", "METAGROSS paper, table 5"),),
        quick={"max_steps": 150, "epochs": 1, "model.hidden_size": 64, "eval_batches": 2,
               "task.train_size": 3000, "task.valid_size": 64, "task.test_size": 64,
               "task.beam": 4},
        full=_WORD_TRANSLATION_FULL,
        tuning_full=equal_search("model.dropout", {"epochs": 3, "patience": 3}),
        paper_metric="IWSLT14 De-En BLEU, Transformer small",
        seeds_quick=1,
        paper_setting=paper.WORD_TRANSFORMER,
        paper_scale=scale.TRANSFORMER_S,
        stand_in="English-Spanish verses for IWSLT 2014 German-English",
        note=_WORD_TRANSLATION_NOTE
        + " The METAGROSS feed-forward block has table 9's depth for machine translation "
        "(N = 3) and linear bases (section 3.4); the two arms differ in nothing else."
        + notes.budget_note(1125, "Transformer, 3,375 steps")
        + " Changed since the previous verdict (runs of 2026-11-24): the METAGROSS block had "
        "depth 2, and both arms' searches were the same 4 random points of 2 epochs.",
    ),
    Experiment(
        id="translation-cas",
        paper="translation",
        title="Word-level En-Es verses: LSTM vs CAS-LSTM attentional seq2seq",
        task="translate-word",
        metric="bleu",
        higher_is_better=True,
        arms=(
            Arm("LSTM", "lstm", {"num_layers": 2}, {"arch": "cas"}, paper=28.1),
            Arm("CAS-LSTM", "caslstm", {"num_layers": 2}, {"arch": "cas"}, paper=28.8),
        ),
        claims=(Claim("CAS-LSTM", "LSTM", "CAS-LSTM paper, table 5"),),
        quick={"max_steps": 150, "epochs": 1, "model.hidden_size": 64, "eval_batches": 2,
               "task.train_size": 3000, "task.valid_size": 64, "task.test_size": 64,
               "task.beam": 4},
        full=_CAS_TRANSLATION_FULL,
        tuning_full=epochs_search("model.dropout", 16, 375),
        select="loss",
        paper_metric="IWSLT14 De-En BLEU, 256D",
        seeds_quick=1,
        paper_setting=paper.CAS_TRANSLATION,
        paper_scale=scale.CAS_IWSLT,
        stand_in="English-Spanish verses for IWSLT 2014 German-English",
        note=_CAS_TRANSLATION_NOTE + notes.BY_LOSS_NOTE
        + notes.budget_note(6000, "LSTM, 18,000 steps") + TRANSLATION_CHANGED,
    ),
)
