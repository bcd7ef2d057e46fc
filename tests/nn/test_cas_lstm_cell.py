"""CASLSTMCell: stepping a stack's cells gives CASLSTM's outputs and final states."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import CASLSTM, CASLSTMCell

D64 = torch.float64

SETTINGS = [
    {"lambda_": 0.25},
    {"lambda_": [0.1, 0.9, 0.3, 0.5, 0.7]},
    {"lambda_": "trainable"},
    {"peephole": True},  # "auto": None, eq 18 as printed
    {"lambda_": None},
]


def _step_stack(m: CASLSTM, x: torch.Tensor, direction: int, hx=None):
    """The direction's stack stepped cell by cell, time-major over (time, layer): the top
    layer's outputs ``(B, T, H)`` and each layer's final ``(h, c)``."""
    L, D = m.num_layers, m.num_directions
    cells = [m.cell(layer, direction) for layer in range(L)]
    states = [None if hx is None else (hx[0][k * D + direction], hx[1][k * D + direction])
              for k in range(L)]
    outs = []
    for t in range(x.shape[1]):
        below, lower_c = x[:, t], None
        for k, cell in enumerate(cells):
            below, states[k] = cell(below, lower_c, states[k])
            lower_c = states[k][1]
        outs.append(below)
    return torch.stack(outs, 1), states


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_cells_step_as_the_layer_runs(setting) -> None:
    torch.manual_seed(3)
    m = CASLSTM(4, 5, num_layers=3, batch_first=True, **setting).double()
    if m.lambda_ == "trainable":
        with torch.no_grad():
            for layer in range(1, 3):
                m.layer(layer).lambda_logit.uniform_(-2, 2)
    x = torch.randn(2, 6, 4, dtype=D64)
    hx = (torch.randn(3, 2, 5, dtype=D64), torch.randn(3, 2, 5, dtype=D64))
    out, (h_n, c_n) = m(x, hx)
    steps, finals = _step_stack(m, x, 0, hx)
    torch.testing.assert_close(steps, out)
    for k, (h, c) in enumerate(finals):
        torch.testing.assert_close(h, h_n[k])
        torch.testing.assert_close(c, c_n[k])


def test_one_step_of_the_layer() -> None:
    """A one-step sequence through a 2-layer CASLSTM is one step of each layer's cell."""
    torch.manual_seed(4)
    m = CASLSTM(3, 4, num_layers=2).double()
    x = torch.randn(1, 2, 3, dtype=D64)  # (T=1, B, D)
    hx = (torch.randn(2, 2, 4, dtype=D64), torch.randn(2, 2, 4, dtype=D64))
    out, (h_n, c_n) = m(x, hx)
    h1, (_, c1) = m.cell(0)(x[0], None, (hx[0][0], hx[1][0]))
    h2, (_, c2) = m.cell(1)(h1, c1, (hx[0][1], hx[1][1]))
    torch.testing.assert_close(h2, out[0])
    torch.testing.assert_close(torch.stack([c1, c2]), c_n)
    # unbatched
    h, (_, c) = m.cell(1)(h1[0], c1[0], (hx[0][1][0], hx[1][1][0]))
    torch.testing.assert_close(h, h2[0])


def test_backward_direction_and_gradients() -> None:
    torch.manual_seed(5)
    m = CASLSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=D64, requires_grad=True)
    out, _ = m(x)
    steps, _ = _step_stack(m, x.flip(1), 1)
    torch.testing.assert_close(steps.flip(1), out[..., 4:])
    steps.sum().backward()
    assert m.layer(1, 1).weight_hh.grad is not None  # the cell shares the layer's weights


def test_a_cell_of_its_own_and_its_checks() -> None:
    torch.manual_seed(6)
    cell = CASLSTMCell(4, 5)
    assert cell.vertical and cell.lambda_value() == 0.5
    assert dict(cell.named_parameters()).keys() == {"weights.weight_ih", "weights.weight_hh",
                                                     "weights.bias"}
    h, (h2, c) = cell(torch.randn(2, 4), torch.randn(2, 5))
    assert h.shape == c.shape == (2, 5) and h is h2
    with pytest.raises(ValueError, match="lower_c: a layer above the first"):
        cell(torch.randn(2, 4))
    with pytest.raises(ValueError, match="lower_c: the first layer's cell"):
        CASLSTMCell(4, 5, vertical=False)(torch.randn(2, 4), torch.randn(2, 5))
    with pytest.raises(ValueError, match="state: expected h of shape"):
        cell(torch.randn(2, 4), torch.randn(2, 5), (torch.zeros(3, 5), torch.zeros(2, 5)))
    with pytest.raises(ValueError, match="input: expected input_size=4"):
        cell(torch.randn(2, 3), torch.randn(2, 5))
    peep = CASLSTMCell(4, 5, peephole=True)
    assert peep.lambda_value() is None and peep.weights.weight_hh.shape == (20, 5)
