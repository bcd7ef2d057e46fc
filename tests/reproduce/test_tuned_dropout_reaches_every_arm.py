"""The tuned dropout acts on every arm of an experiment.

An experiment's search tunes one dropout key (``model.dropout`` or ``task.dropout``) for all its
arms; if that key did nothing for one arm (dropout between layers of a one-layer unit, say), the
arms would be compared under unequal regularisation. For every experiment whose task can be
built here from generated data, each arm's model is built at dropout 0.5 and its training loss
on one batch must change from one dropout draw to the next (and not at dropout 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.reproduce.experiments import EXPERIMENTS, Arm, Experiment
from ctrlrnn.tasks import task_class
from ctrlrnn.train.config import check_options

# tiny models on one batch: a second torch thread only waits for work (on a loaded machine,
# for milliseconds a call), which cost the tree tasks' long sequences most of their time
pytestmark = pytest.mark.usefixtures("one_thread")

#: tasks built from generated data (or a directory written below), with tiny sizes
TINY: dict[str, dict[str, Any]] = {
    "sort": {"train_size": 16, "valid_size": 4, "test_size": 4},
    "tree-traversal": {"train_size": 16, "valid_size": 4, "test_size": 4},
    "copy": {"train_size": 16, "valid_size": 4, "test_size": 4},
    "addition": {"train_size": 16, "valid_size": 4, "test_size": 4},
    "logic": {"train_size": 16, "valid_size": 4, "test_per_count": 2},
    "carnn-lm": {},
}


def _dropout_key(exp: Experiment) -> str | None:
    tuning = exp.tuning("full")
    if tuning is None:
        return None
    return next((p.key for p in tuning.params if p.key.endswith("dropout")), None)


CASES = [
    pytest.param(exp, arm, id=f"{exp.id}:{arm.label}")
    for exp in EXPERIMENTS
    if exp.task in TINY and _dropout_key(exp) is not None
    for arm in exp.arms
]


def _sentences(root: Path) -> Path:
    words = [f"w{i}" for i in range(20)]
    g = torch.Generator().manual_seed(0)
    for split, n in (("train", 24), ("valid", 6), ("test", 6)):
        lines = [" ".join(words[int(j)] for j in torch.randint(0, 20, (6,), generator=g))
                 for _ in range(n)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def _loss(exp: Experiment, arm: Arm, dropout: float, tmp_path: Path, draw: int) -> float:
    key = _dropout_key(exp)
    assert key is not None
    cls = task_class(exp.task)
    task_args = {**exp.task_args, **arm.task_args, **TINY[exp.task]}
    if exp.task == "carnn-lm":
        task_args["source"] = str(_sentences(tmp_path))
    model_args = {**arm.model_args, "hidden_size": 8}
    section, name = key.split(".", 1)
    (task_args if section == "task" else model_args)[name] = dropout
    task = cls(check_options("task", exp.task, task_args, cls.options), seed=0)
    task.setup()
    torch.manual_seed(0)
    model = task.build_model(arm.model, encoder_options(arm.model, model_args))
    model.train()
    batch = task.train_batches(0, 4)[0]
    torch.manual_seed(100 + draw)
    with torch.no_grad():
        return float(task.loss(model, batch))


@pytest.mark.parametrize("exp,arm", CASES)
def test_tuned_dropout_changes_every_arms_training_output(exp, arm, tmp_path):
    first, second = (_loss(exp, arm, 0.5, tmp_path, d) for d in (0, 1))
    assert first != second, f"{_dropout_key(exp)} does nothing for {arm.label} in {exp.id}"
    plain = [_loss(exp, arm, 0.0, tmp_path, d) for d in (0, 1)]
    assert plain[0] == plain[1]  # the control: without dropout the loss is deterministic


def test_the_cases_cover_the_experiments_re_run_on_equal_footing():
    ids = {exp.id for exp, _ in (c.values for c in CASES)}
    assert {"carnn-lm", "metagross-sort5", "metagross-logic"} <= ids
