"""The METAGROSS paper's experiments at our scale: table 1's sorting and tree traversal,
table 2's logical inference, table 7's chorales and table 3's pixel-by-pixel images."""

from __future__ import annotations

from typing import Any

from ctrlrnn.reproduce import experiment_notes as notes
from ctrlrnn.reproduce import paper_scales as scale
from ctrlrnn.reproduce import paper_settings as paper
from ctrlrnn.reproduce import pixel_notes, tree_notes
from ctrlrnn.reproduce.experiment_builders import (
    LOGIC_EPOCHS,
    SMALL,
    epochs_search,
    equal_search,
    seq2seq,
)
from ctrlrnn.reproduce.experiment_spec import Arm, Claim, Experiment, PaperSetting

#: METAGROSS paper table 1 and section 3.1 ("S-BiLSTMs are always better than LSTMs on this task"):
#: table 9's unit for sorting and tree traversal (depth 2, recurrent base) in both readings of
#: section 2 (docs/metagross.md): gates from x_t (the authors' code) and as printed
_MG_RNN = "METAGROSS (LSTM base)"
_MG_PRINTED = "METAGROSS as printed (LSTM base)"
#: METAGROSS paper table 2: accuracy (%) at 7..12 operators, Bowman et al.'s LSTM and METAGROSS
_TABLE2_COUNTS = (7, 8, 9, 10, 11, 12)
_TABLE2_LSTM = (88.0, 85.0, 80.0, 78.0, 71.0, 69.0)
_TABLE2_MG = (97.0, 95.0, 93.0, 92.0, 90.0, 88.0)
_MG_LOGIC = "METAGROSS (depth 3)"
_MG_LOGIC_PRINTED = "METAGROSS as printed (depth 3)"

def _per_count(row: tuple[float, ...]) -> dict[str, float]:
    """A table 2 row as the logic task's test metrics name them (``accuracy_ops7``...)."""
    return {f"accuracy_ops{n}": v for n, v in zip(_TABLE2_COUNTS, row, strict=True)}

_TABLE1_CLAIMS = (
    Claim(_MG_RNN, "BiLSTM", "table 1"),
    Claim(_MG_RNN, "S-BiLSTM", "table 1"),
    Claim(_MG_PRINTED, "BiLSTM", "table 1"),
    Claim(_MG_PRINTED, "S-BiLSTM", "table 1"),
    Claim("S-BiLSTM", "BiLSTM", "table 1 and 3.1: always better"),
)

#: the pixel-by-pixel recipe of every arm: every forget gate starts 3 higher
#: (``task.forget_bias``: nn.LSTM's forget gates, METAGROSS's F maps 3 lower,
#: :mod:`ctrlrnn.tasks.forget_bias`), so that a gradient reaches the digit across the blank rows
#: that end the image (the probe on the METAGROSS page), and every unit writes as much less as
#: it keeps more (``task.couple_gates``: nn.LSTM's input gates 3 lower; METAGROSS's write weight
#: is its keep weight's complement already), so that the LSTM's gradient does not explode (the
#: second probe there); gradients clipped to norm 1; and a learning-rate range below the
#: 0.0042 at which an LSTM seed diverged
PIXEL_RECIPE: dict[str, Any] = {"task.forget_bias": 3.0, "task.couple_gates": True,
                                "clip_norm": 1.0}
PIXEL_LR = (1e-4, 3e-3)
#: METAGROSS's own part of the pixel recipe: its output gates, which multiply the state it
#: carries, start 5 higher (pixel_notes.METAGROSS_OUTPUT_NOTE has the probe that chose 5)
METAGROSS_PIXEL: dict[str, Any] = {"output_bias": 5.0}

#: the shared decoder of every table 1 arm: one LSTM layer with additive attention ("a standard
#: encoder-decoder architecture with attention (Bahdanau et al.)"; "we vary the encoder module")
_TABLE1_DECODER = {"decoder_layers": 1, "attention": "bahdanau"}


def _table1(task: str, exp_id: str, title: str, exact: tuple[float, float, float],
            ppl: tuple[float, float, float], task_args: dict[str, Any],
            setting: str, trial_steps: int, measured: str, paper_setting: PaperSetting,
            ordered: bool = True, setting_note: str = "", like: str = "",
            probe_files: tuple[str, ...] = ()) -> Experiment:
    """A METAGROSS paper table 1 task: BiLSTM, S-BiLSTM and table 9's METAGROSS in both
    readings, with the paper's exact match and perplexity of BiLSTM, S-BiLSTM and METAGROSS,
    one shared decoder, and the equal search of ``trial_steps`` steps a trial (156 steps an
    epoch at batch 64). ``ordered=False``: the paper's numbers tie (every model solves the
    task), so no ordering is claimed and the table shows each arm's level. ``setting_note`` is
    appended to the page's note (what is known of the setting's limits). ``like``: an
    experiment without a full run yet, whose trials take the budget of that one's; its claims
    are the orderings the paper's numbers print strictly."""
    bi = {**SMALL, "bidirectional": True}
    table9 = {**bi, "base": "lstm"}
    arms = (
        Arm("BiLSTM", "lstm", bi, paper=exact[0], paper_also={"perplexity": ppl[0]}),
        Arm("S-BiLSTM", "lstm", {**bi, "num_layers": 3}, paper=exact[1],
            paper_also={"perplexity": ppl[1]}),
        Arm(_MG_RNN, "metagross", table9, paper=exact[2], paper_also={"perplexity": ppl[2]}),
        Arm(_MG_PRINTED, "metagross", {**table9, "gates": "state"}, paper=exact[2],
            paper_also={"perplexity": ppl[2]}),
    )
    where = f"table 1: {ppl[2]} vs {ppl[0]}"
    claims = (*_TABLE1_CLAIMS, Claim(_MG_RNN, "BiLSTM", where, "perplexity"),
              Claim(_MG_PRINTED, "BiLSTM", where, "perplexity"))
    note = notes.TABLE1_NOTE + ("" if like else notes.TABLE1_CHANGED)
    if like:  # the orderings this table's numbers print strictly
        index = {"BiLSTM": 0, "S-BiLSTM": 1, _MG_RNN: 2, _MG_PRINTED: 2}
        claims = tuple(
            c for c in claims
            if (exact[index[c.better]] > exact[index[c.worse]] if not c.metric
                else ppl[index[c.better]] < ppl[index[c.worse]]))
    if not ordered:
        claims = ()
        note += (" The paper reports every model at the same level here (section 3.1: \"All "
                 "models solve the task with n = 3\"), so no ordering is claimed.")
    epochs = -(-trial_steps // 156)
    note += (notes.new_budget_note(epochs * 156, like) if like
             else notes.budget_note(epochs * 156, measured))
    if setting_note:
        note += " " + setting_note
    search = equal_search("model.dropout", {"epochs": epochs, "patience": epochs},
                           dropout=(0.0, 0.3))
    return seq2seq(task, exp_id, title, arms, claims, {**task_args, **_TABLE1_DECODER},
                    f"exact match (%) and perplexity on {setting}", also=("perplexity",),
                    note=note, paper_comparable=True, tuning=search,
                    paper_setting=paper_setting, paper_scale=scale.TABLE1,
                    probe_files=probe_files)


METAGROSS_EXPERIMENTS: tuple[Experiment, ...] = (
    _table1("sort", "metagross-sort5", "Sorting, n = 5 (table 1)", (79.9, 83.4, 92.2),
            (1.2, 1.2, 1.1), {"max_length": 5}, "sorting, n = 5", 1092,
            "S-BiLSTM, 3,276 steps", paper.SORT5),
    _table1("sort", "metagross-sort", "Sorting, n = 10 (table 1)", (78.9, 88.0, 90.6),
            (1.2, 1.1, 1.1), {"max_length": 10}, "sorting, n = 10", 1404,
            "S-BiLSTM, 4,212 steps", paper.SORT10),
    _table1("tree-traversal", "metagross-tree3", "Tree traversal, n = 3 (table 1)",
            (100.0, 100.0, 100.0), (1.0, 1.0, 1.0), {"max_depth": 3},
            "tree traversal, n = 3", 1248, "S-BiLSTM, 3,744 steps", paper.TREE3,
            ordered=False),
    _table1("tree-traversal", "metagross-tree", "Tree traversal, n = 4 (table 1)",
            (96.9, 98.0, 98.4), (2.4, 1.0, 1.0), {"max_depth": 4}, "tree traversal, n = 4",
            2236, "S-BiLSTM, 6,708 steps", paper.TREE4,
            setting_note=notes.TREE4_NOTE + tree_notes.TREE4_PROBE_NOTE,
            probe_files=("metagross-tree.json", "metagross-tree-by-length.json")),
    *(_table1("tree-traversal", f"metagross-tree{n}", f"Tree traversal, n = {n} (table 1)",
              exact, ppl, {"max_depth": n}, f"tree traversal, n = {n}", 2236, "",
              getattr(paper, f"TREE{n}"), like="tree traversal n = 4", setting_note=note,
              probe_files=probes)
      for n, exact, ppl, note, probes in (
          (5, (60.3, 63.4, 63.4), (2.4, 2.5, 1.8), tree_notes.TREE5_PROBE_NOTE,
           ("metagross-tree5.json", "metagross-tree5-by-length.json",
            "metagross-tree-by-length.json")),
          (8, (5.6, 5.9, 5.6), (30.6, 99.9, 20.4), tree_notes.TREE_DEEP_COST_NOTE, ()),
          (10, (2.2, 2.8, 2.8), (132.0, 225.0, 119.0), tree_notes.TREE_DEEP_COST_NOTE,
           ()))),
    Experiment(
        id="metagross-logic",
        paper="metagross",
        title="Logical inference: train on <= 6 operators, test on 7-12 (table 2)",
        task="logic",
        metric="accuracy",
        higher_is_better=True,
        arms=(
            Arm("LSTM", "lstm", {}, paper_also=_per_count(_TABLE2_LSTM)),
            Arm(_MG_LOGIC, "metagross", {"depth": 3}, paper_also=_per_count(_TABLE2_MG)),
            Arm(_MG_LOGIC_PRINTED, "metagross", {"depth": 3, "gates": "state"},
                paper_also=_per_count(_TABLE2_MG)),
        ),
        also=tuple(_per_count(_TABLE2_MG)),
        claims=tuple(Claim(arm, "LSTM", f"table 2, {n} operators", f"accuracy_ops{n}")
                     for arm in (_MG_LOGIC, _MG_LOGIC_PRINTED) for n in _TABLE2_COUNTS),
        note=("Both METAGROSS arms have the depth table 9 reports best for this task (N = 3) "
              "and the linear base, in the two readings of section 2: gates from x_t "
              "(`METAGROSS (depth 3)`, the authors' code) and every gate and child reading "
              "h_{t-1} (`METAGROSS as printed (depth 3)`, docs/metagross.md). Every arm has "
              "the same pair classifier and the same tuned dropout (`task.dropout`, on its "
              "features). Table 9's unit also has the recurrent base: at depth 3 that is 21 "
              "LSTMs (3 base functions for each of the 7 units) per direction, which took "
              "2.2 s per training step on this 2-core machine (250 steps in 557 s, alone on "
              "it: 11.6 minutes an epoch), so a search of 8 trials of 1,560 steps would take "
              "7.6 hours and its three seeds about 7 hours more at the 12 epochs the linear "
              "unit trained for, per reading; it was not run at this budget."
              + notes.budget_note(1560, "LSTM, 4,368 steps")
              + " Changed since the previous verdict (runs of 2026-11-23): its arms were the "
              "depth-2 and depth-3 units in the input reading only, and every arm's search was "
              "the same 6 random points of 2 epochs." + notes.LOGIC_PER_COUNT_NOTE),
        quick={"max_steps": 200, "epochs": 3, "model.hidden_size": 64, "eval_batches": 10,
               "task.train_size": 5000, "task.valid_size": 500, "task.test_per_count": 200},
        full={"epochs": LOGIC_EPOCHS, "model.hidden_size": 128, "patience": 3},
        tuning_full=equal_search("task.dropout", {"epochs": 5, "patience": 5}),
        paper_metric=("accuracy (%) at each operator count, 7 to 12 (table 2); the main column "
                      "is their mean, which the paper does not print"),
        paper_setting=paper.LOGIC,
        paper_scale=scale.LOGIC,
    ),
    Experiment(
        id="metagross-chorales",
        paper="metagross",
        title="Bach chorales, NLL per time step (table 7 protocol)",
        task="chorales",
        metric="nll",
        higher_is_better=False,
        arms=(
            Arm("LSTM", "lstm", {}, paper=8.61),
            Arm("GRU", "gru", {}, paper=8.54),
            Arm("METAGROSS", "metagross", {"depth": 2}, paper=8.12),
            Arm("METAGROSS (depth 3)", "metagross", {"depth": 3}, paper=8.12),
        ),
        claims=(Claim("METAGROSS", "LSTM", "table 7"), Claim("METAGROSS", "GRU", "table 7"),
                Claim("METAGROSS (depth 3)", "LSTM", "table 7 with table 9's depth"),
                Claim("METAGROSS (depth 3)", "GRU", "table 7 with table 9's depth")),
        note=("`METAGROSS` has depth 2 and the linear base; `METAGROSS (depth 3)` is table 9's "
              "unit for this task (depth 3, linear base). The cap was 60 epochs until 5 of the "
              "9 tuned runs stopped at it."
              + notes.budget_note(378, "METAGROSS, 1,134 steps")
              + notes.search_changed("2026-11-23", "the same 4 points of 10 epochs (patience 3), "
                                     "3 drawn at random")),
        quick={"max_steps": 150, "epochs": 10, "model.hidden_size": 64},
        full={"epochs": 200, "model.hidden_size": 128, "patience": 8},
        tuning_full=epochs_search("task.dropout", 21, 18),
        paper_metric="JSB Chorales test NLL",
        paper_setting=paper.CHORALES,
        paper_scale=scale.replace(scale.MUSIC, needs=scale.needs("jsb")),
        stand_in="music21's Bach chorales for the JSB Chorales files",
    ),
    Experiment(
        id="metagross-mnist",
        paper="metagross",
        title="Pixel-by-pixel MNIST-5k (table 3 protocol)",
        task="mnist-5k",
        metric="accuracy",
        higher_is_better=True,
        arms=(
            Arm("LSTM", "lstm", {}),
            Arm("METAGROSS", "metagross", {"depth": 2}, METAGROSS_PIXEL, paper=99.04),
        ),
        claims=(Claim("METAGROSS", "LSTM", "table 3 (against published recurrent models)"),),
        quick={"max_steps": 60, "epochs": 1, "model.hidden_size": 32, "batch_size": 64,
               "eval_batches": 4, **PIXEL_RECIPE},
        full={"epochs": 100, "model.hidden_size": 128, "batch_size": 64, "patience": 10,
              **PIXEL_RECIPE},
        tuning_full=epochs_search("task.dropout", 10, 62, lr=PIXEL_LR),
        paper_metric="pixel MNIST test accuracy (%)",
        paper_setting=paper.MNIST,
        paper_scale=scale.replace(scale.PIXEL, task="mnist", needs=scale.needs("mnist")),
        stand_in="MNIST's 5,000-digit subset for the whole MNIST",
        note=notes.PIXEL_NOTE + pixel_notes.PIXEL_RECIPE_NOTE + notes.MNIST_BUDGET_NOTE
        + pixel_notes.MNIST_PROBE_NOTE.format(trained=pixel_notes.MNIST_PROBE_TRAINED)
        + pixel_notes.MNIST_CAUSE_NOTE.format(coupled=pixel_notes.MNIST_CAUSE_TRAINED)
        + pixel_notes.MNIST_RECIPE_RUN_NOTE + pixel_notes.METAGROSS_OUTPUT_NOTE
        + notes.search_changed("2026-11-23", "4 points of 10 epochs (patience 5), 3 drawn at "
                               "random"),
        chance=0.1,
    ),
    Experiment(
        id="metagross-fashion",
        paper="metagross",
        title="Pixel-by-pixel Fashion-MNIST (table 3 protocol)",
        task="fashion-mnist",
        metric="accuracy",
        higher_is_better=True,
        arms=(Arm("LSTM", "lstm", {}),
              Arm("METAGROSS", "metagross", {"depth": 2}, METAGROSS_PIXEL)),
        claims=(Claim("METAGROSS", "LSTM", "table 3 (on MNIST/CIFAR)"),),
        quick={"max_steps": 60, "epochs": 1, "model.hidden_size": 32, "batch_size": 64,
               "eval_batches": 4, **PIXEL_RECIPE},
        full={"epochs": 100, "model.hidden_size": 128, "batch_size": 64, "patience": 5,
              "task.train_size": 10000, **PIXEL_RECIPE},
        tuning_full=epochs_search("task.dropout", 13, 156, lr=PIXEL_LR),
        paper_metric="no Fashion-MNIST result in the paper",
        paper_setting=paper.FASHION,
        paper_scale=scale.replace(scale.PIXEL, task="cifar10", needs=scale.needs("cifar10"),
                                  arms={"METAGROSS": {"model.base": "lstm", "paper": 73.01,
                                                      "task.output_bias": 0.0}}),
        stand_in="Fashion-MNIST for CIFAR-10, a harder image set than MNIST",
        note=notes.PIXEL_NOTE + pixel_notes.PIXEL_RECIPE_NOTE + notes.FASHION_NOTE
        + pixel_notes.FASHION_PROBE_NOTE + pixel_notes.METAGROSS_OUTPUT_NOTE
        + notes.budget_note(2028, "METAGROSS, 5,928 steps", kept="13 whole epochs")
        + notes.search_changed("2026-11-23", "4 points of 3 epochs, 3 drawn at random"),
        chance=0.1,
    ),
)
