"""docs/from-nn-lstm.md: every Python block of the migration page runs as written, and the
drop-in details it states hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import ctrlrnn

PAGE = Path(__file__).resolve().parents[2] / "docs" / "from-nn-lstm.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int) -> None:
    torch.manual_seed(index)
    exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), {"__name__": "example"})


@pytest.mark.parametrize("layer", [ctrlrnn.QRNN(4, 5), ctrlrnn.RCRN(4, 5), ctrlrnn.CASLSTM(4, 5),
                                   ctrlrnn.CARNN(4, 5, context_size=3), ctrlrnn.Metagross(4, 5)])
def test_flatten_parameters_is_a_no_op(layer: torch.nn.Module) -> None:
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    assert layer.flatten_parameters() is None
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())


def test_an_lstm_state_pair_gets_a_clear_error() -> None:
    pair = (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))
    with pytest.raises(ValueError, match=r"^hx: QRNN carries 1 state.*nn.LSTM's \(h0, c0\)"):
        ctrlrnn.QRNN(4, 5)(torch.randn(3, 2, 4), pair)


def test_carnn_context_given_an_initial_state_says_so() -> None:
    carnn = ctrlrnn.CARNN(4, 5, context_size=3)
    with pytest.raises(ValueError, match=r"^context: got a 3-D tensor .* hx=h0"):
        carnn(torch.randn(3, 2, 4), torch.zeros(1, 2, 5))
