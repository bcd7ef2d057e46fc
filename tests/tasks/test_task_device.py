"""Batches reach the model's device: :func:`ctrlrnn.tasks.base.move_to` moves every tensor of a
batch (the ``meta`` device stands in for a GPU on this machine), and the tasks that need no data
files train and evaluate with every model input passed through ``Task.to_device``
(:func:`task_helpers.check_device_routing`; the tasks with data files are checked the same
way by ``test_task_runs.py``)."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from task_helpers import train_task

from ctrlrnn.data.batching import PaddedBatch
from ctrlrnn.tasks.base import move_to

META = torch.device("meta")


def test_move_to_moves_every_tensor_and_keeps_the_rest():
    Pair = namedtuple("Pair", "tokens count")
    padded = PaddedBatch(torch.ones(2, 3, dtype=torch.long), torch.tensor([3, 1]),
                         torch.ones(2, 3, dtype=torch.bool))
    batch = {"src": torch.zeros(2, 3), "ntokens": 7, "name": "x",
             "nested": [torch.ones(1), (torch.ones(2), 5)], "pair": Pair(torch.ones(3), 4),
             "padded": padded, "none": None}
    out = move_to(batch, META)
    assert out["src"].device == META and out["src"].shape == (2, 3)
    assert out["ntokens"] == 7 and out["name"] == "x" and out["none"] is None
    assert out["nested"][0].device == META and out["nested"][1][0].device == META
    assert isinstance(out["nested"][1], tuple) and out["nested"][1][1] == 5
    assert isinstance(out["pair"], Pair) and out["pair"].tokens.device == META
    assert out["pair"].count == 4
    assert isinstance(out["padded"], PaddedBatch)
    assert all(t.device == META for t in (out["padded"].tokens, out["padded"].lengths,
                                          out["padded"].mask))
    assert out["padded"].tokens.dtype == torch.long
    assert batch["src"].device.type == "cpu"  # the input is left as it was
    same = torch.ones(2)
    assert move_to(same, torch.device("cpu")) is same  # already there: no copy


@pytest.mark.parametrize(("task", "model", "options"), [
    ("addition", "qrnn", {"train_size": 64, "valid_size": 16, "test_size": 16, "digits": 2,
                          "embedding_size": 8}),
    ("addition", "lstm", {"train_size": 64, "valid_size": 16, "test_size": 16, "digits": 2,
                          "embedding_size": 8, "beam": 2}),
    ("copy", "caslstm", {"train_size": 64, "valid_size": 16, "test_size": 16}),
    ("sort", "metagross", {"train_size": 64, "valid_size": 16, "test_size": 16}),
    ("tree-traversal", "rcrn", {"train_size": 64, "valid_size": 16, "test_size": 16}),
    ("carnn-dialog", "carnn", {"train_size": 32, "valid_size": 8, "test_size": 8}),
])
def test_tasks_without_data_files_route_every_batch_through_to_device(
        tmp_path, task, model, options):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = train_task(task, model, tmp_path / "run", options, {"hidden_size": 8},
                         batch_size=16, max_steps=4, epochs=1)
    finally:
        torch.set_num_threads(before)
    assert run["task"].device == torch.device("cpu")
