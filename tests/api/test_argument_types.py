"""Every argument of the wrong type or value, to every layer's constructor and forward, raises a
ValueError whose message starts with the argument's name."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import ctrlrnn

# layer -> (the arguments that build it, what its forward needs besides the input)
LAYERS: dict[str, tuple[type, dict[str, Any]]] = {
    "QRNN": (ctrlrnn.QRNN, {"input_size": 4, "hidden_size": 5}),
    "RCRN": (ctrlrnn.RCRN, {"input_size": 4, "hidden_size": 5}),
    "CASLSTM": (ctrlrnn.CASLSTM, {"input_size": 4, "hidden_size": 5, "num_layers": 2}),
    "CARNN": (ctrlrnn.CARNN, {"input_size": 4, "hidden_size": 5, "context_size": 3}),
    "Metagross": (ctrlrnn.Metagross, {"input_size": 4, "hidden_size": 5}),
    "MetagrossFFN": (ctrlrnn.MetagrossFFN, {"d_model": 4}),
}

POSITIVE_INT = ["3", 2.5, True, None, 0, -1, float("nan")]
RATE = ["x", None, -0.1, 1.5, True, float("nan"), [0.1]]
FLAG = ["yes", 2, None, 0.5, [True]]
WORD = [3, None, "bogus", ["fo"]]

COMMON = {"input_size": POSITIVE_INT, "hidden_size": POSITIVE_INT, "num_layers": POSITIVE_INT,
          "bias": FLAG, "batch_first": FLAG, "dropout": RATE, "bidirectional": FLAG}
SPECIFIC: dict[str, dict[str, list[Any]]] = {
    "QRNN": {"window": POSITIVE_INT, "pooling": WORD, "zoneout": RATE, "zoneout_eval": WORD,
             "dense": FLAG, "encoder_state_size": ["3", 2.5, True, 0], "weight_drop": RATE},
    "RCRN": {"cell": WORD, "output_gate": WORD, "listener": WORD, "weight_drop": RATE},
    "CASLSTM": {"lambda_": ["x", True, [0.5], float("nan")], "peephole": FLAG,
                "weight_drop": RATE},
    "CARNN": {"context_size": ["3", 2.5, True, 0], "variant": WORD, "weight_drop": RATE},
    "Metagross": {"depth": POSITIVE_INT, "base": WORD, "depth_gate": WORD, "residual": FLAG,
                  "recurrence": WORD, "causal": ["yes", 2, 0.5], "weight_drop": RATE},
}
FFN = {"d_model": POSITIVE_INT, "depth": POSITIVE_INT, "depth_gate": WORD, "residual": FLAG,
       "bias": FLAG, "dropout": RATE}


def _cases() -> list[tuple[str, str, Any]]:
    out = []
    for layer in LAYERS:
        args = FFN if layer == "MetagrossFFN" else {**COMMON, **SPECIFIC[layer]}
        for name, bad_values in args.items():
            out += [(layer, name, value) for value in bad_values]
    return out


def _label(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return repr(value)


@pytest.mark.parametrize(("layer", "name", "value"), _cases(),
                         ids=[f"{a}-{b}-{_label(c)}" for a, b, c in _cases()])
def test_constructor_argument(layer: str, name: str, value: Any) -> None:
    cls, kwargs = LAYERS[layer]
    with pytest.raises(ValueError, match=rf"^{name}: "):
        cls(**{**kwargs, name: value})


def _layer(layer: str) -> torch.nn.Module:
    cls, kwargs = LAYERS[layer]
    return cls(**kwargs)


def _forward(model: torch.nn.Module, x: Any, **kw: Any) -> Any:
    if isinstance(model, ctrlrnn.CARNN) and "context" not in kw:
        kw["context"] = torch.randn(2, 3)
    return model(x, **kw)


RECURRENT = [name for name in LAYERS if name != "MetagrossFFN"]
BAD_LENGTHS = {
    "float-list": [2.5, 2.5],
    "bool-list": [True, True],
    "string": "33",
    "float-tensor": torch.tensor([3.0, 2.0]),
    "bool-tensor": torch.tensor([True, True]),
    "2-d": torch.tensor([[3, 2]]),
    "meta": torch.empty(2, dtype=torch.int64, device="meta"),
    "float-array": np.array([3.0, 2.0]),
    "too-long": [4, 2],
    "zero": [3, 0],
    "count": [3, 2, 1],
    "none-inside": [3, None],
}


@pytest.mark.parametrize("bad", list(BAD_LENGTHS))
@pytest.mark.parametrize("layer", RECURRENT)
def test_forward_lengths(layer: str, bad: str) -> None:
    model = _layer(layer)
    with pytest.raises(ValueError, match=r"^lengths: "):
        _forward(model, torch.randn(3, 2, 4), lengths=BAD_LENGTHS[bad])


BAD_HX = {"string": "h0", "number": 3.0, "list-of-strings": ["a"], "array": np.zeros((1, 2, 5)),
          "wrong-shape": torch.zeros(2, 2, 5), "int-tensor": torch.zeros(1, 2, 5,
                                                                          dtype=torch.int64)}


@pytest.mark.parametrize("bad", list(BAD_HX))
@pytest.mark.parametrize("layer", RECURRENT)
def test_forward_hx(layer: str, bad: str) -> None:
    model = _layer(layer)
    with pytest.raises(ValueError, match=r"^hx"):
        _forward(model, torch.randn(3, 2, 4), hx=BAD_HX[bad])


@pytest.mark.parametrize("bad", [[[0.0] * 4] * 3, np.zeros((3, 2, 4)), "x",
                                 torch.zeros(3, 2, 4, dtype=torch.int64), torch.zeros(3, 2, 7)])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_forward_input(layer: str, bad: Any) -> None:
    model = _layer(layer)
    with pytest.raises(ValueError, match=r"^(input|x): "):
        _forward(model, bad)


@pytest.mark.parametrize("bad", ["ctx", [[0.0] * 3] * 2, np.zeros((2, 3)), torch.zeros(2, 4),
                                 torch.zeros(2, 3, dtype=torch.int64)])
def test_carnn_context(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^context: "):
        _layer("CARNN")(torch.randn(3, 2, 4), context=bad)


@pytest.mark.parametrize("bad", ["yes", 2, None])
def test_metagross_return_gates(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^return_gates: "):
        _layer("Metagross")(torch.randn(3, 2, 4), return_gates=bad)
    with pytest.raises(ValueError, match=r"^return_gates: "):
        _layer("MetagrossFFN")(torch.randn(3, 2, 4), return_gates=bad)
