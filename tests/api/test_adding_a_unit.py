"""docs/adding-a-unit.md: the example unit, registered as the page writes it, trains through
``ctrlrnn train``; and everything that lists the units reads the one registry."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import ctrlrnn
from ctrlrnn.bench.case_registry import REGISTRY, Point
from ctrlrnn.bench.cases_units import unit_workload
from ctrlrnn.cli import main
from ctrlrnn.models.encoders import ENCODERS
from ctrlrnn.nn.registry import UNITS, register_unit, unregister_unit
from ctrlrnn.train.config import model_help

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-unit.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.fixture
def mingru() -> Iterator[type]:
    """The page's example, registered as ``mingru`` for the test, removed after it."""
    assert len(BLOCKS) == 1
    namespace: dict = {"__name__": "adding_a_unit_example"}
    exec(compile(BLOCKS[0], PAGE.name, "exec"), namespace)
    try:
        yield namespace["MinGRU"]
    finally:
        unregister_unit("mingru")


def test_the_example_trains_through_ctrlrnn_train(mingru: type, tmp_path: Path, capsys) -> None:
    assert ENCODERS["mingru"].cls() is mingru and "mingru" in model_help()
    out = tmp_path / "run"
    code = main(["train", "--task", "copy", "--model", "mingru", "--max-steps", "6",
                 "--out", str(out), "--no-progress", "model.hidden_size=16",
                 "model.keep_bias=1.0", "task.embedding_size=8", "task.train_size=64",
                 "task.valid_size=8", "task.test_size=8", "batch_size=8", "eval_every=3",
                 "log_every=1"])
    assert code == 0, capsys.readouterr().err
    assert (out / "checkpoint.safetensors").is_file() and (out / "best.safetensors").is_file()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r.get("split") == "train"]
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)
    config = json.loads((out / "result.json").read_text())
    assert config["step"] == 6
    assert main(["eval", "--checkpoint", str(out / "best.safetensors"), "--split", "valid"]) == 0


def test_the_example_follows_the_layer_contract(mingru: type) -> None:
    torch.manual_seed(0)
    layer = mingru(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 6, 5)
    lengths = torch.tensor([6, 4, 1])
    out, h_n = layer(x, lengths=lengths)
    assert out.shape == (3, 6, 14) and h_n.shape == (4, 3, 7)
    assert (out[1, 4:] == 0).all() and (out[2, 1:] == 0).all()
    alone, _ = layer(x[1:2, :4])
    torch.testing.assert_close(out[1:2, :4], alone)  # padding changes nothing
    # reset_parameters() (from RecurrentBase) draws the constructor's weights under its seed
    torch.manual_seed(1)
    fresh = mingru(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    torch.manual_seed(1)
    layer.reset_parameters()
    for (name, ours), theirs in zip(layer.named_parameters(), fresh.parameters(), strict=True):
        assert torch.equal(ours, theirs), name


def test_the_example_traces_for_any_length(mingru: type) -> None:
    torch.manual_seed(0)
    layer = mingru(4, 6, num_layers=2, bidirectional=True, batch_first=True).eval()

    class Call(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return self.layer(x, lengths=lengths)[0]

    call = Call()

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        traced = torch.jit.trace(call, (torch.randn(3, 5, 4), torch.tensor([5, 2, 4])))
    x, lengths = torch.randn(2, 9, 4), torch.tensor([9, 3])
    torch.testing.assert_close(traced(x, lengths), call(x, lengths))
    with pytest.raises(RuntimeError, match=r"^MinGRU: torch\.jit\.script"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.jit.script(layer)


def test_the_example_has_a_bench_row(mingru: type) -> None:
    unit = UNITS["mingru"]
    w = unit_workload(unit, unit.bench[0], Point(2, 8, 8), torch.float32)
    assert w.fn().shape == (2, 8, 8)
    assert w.flops.fwd == 2 * 2 * 8 * 8 * 16  # one (B*T, C) @ (C, 2C) GEMM
    assert w.bytes.fwd == 2 * 8 * 8 * 4 * 3


def test_a_name_is_registered_once(mingru: type) -> None:
    with pytest.raises(ValueError, match="'mingru' is already registered"):
        register_unit("mingru", description="again")(mingru)


def test_the_listings_read_the_registry() -> None:
    names = list(UNITS)
    assert names == ["qrnn", "rcrn", "caslstm", "carnn", "metagross"]
    assert list(ENCODERS) == ["lstm", "gru", *names]
    assert model_help() == "encoder name: " + ", ".join(["lstm", "gru", *names])
    for unit in UNITS.values():
        assert ENCODERS[unit.name].cls() is unit.cls
        assert dict(ENCODERS[unit.name].options) == dict(unit.options)
        for name in unit.exports:
            assert name in ctrlrnn.__all__ and name in ctrlrnn.nn.__all__
            assert getattr(ctrlrnn, name) is getattr(ctrlrnn.nn, name)
        for row in unit.bench:
            assert REGISTRY[row.name].description == row.description
