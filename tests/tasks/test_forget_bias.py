"""``task.forget_bias``: the forget gates of nn.LSTM and of METAGROSS start the given amount
more open, the same seed's other weights untouched, and a unit it does not map is refused."""

from __future__ import annotations

import pytest
import torch
from task_helpers import write_pixel_dir

from ctrlrnn.models.encoders import SequenceEncoder
from ctrlrnn.ops.metagross_level.layout import base_index
from ctrlrnn.tasks import task_class
from ctrlrnn.tasks.forget_bias import offset_forget_bias, offset_output_bias


def _pixel_model(tmp_path, encoder: str, forget_bias: float, couple: bool = False,
                 output_bias: float = 0.0, **model_args):
    source = write_pixel_dir(tmp_path, {"train": 8, "valid": 4, "test": 4})
    task = task_class("mnist-5k")({**{k: v for k, (_, v) in task_class("mnist-5k")
                                      .options.items()},
                                   "source": str(source), "forget_bias": forget_bias,
                                   "couple_gates": couple, "output_bias": output_bias}, 0)
    task.setup()
    torch.manual_seed(0)
    return task.build_model(encoder, {"hidden_size": 8, "num_layers": 2, "dropout": 0.0,
                                      "bidirectional": False, **model_args})


def test_lstm_forget_gate_starts_one_higher_and_nothing_else_moves(tmp_path):
    plain = _pixel_model(tmp_path / "a", "lstm", 0.0)
    opened = _pixel_model(tmp_path / "b", "lstm", 1.0)
    moved = {name for (name, a), (_, b) in zip(plain.named_parameters(),
                                                opened.named_parameters(), strict=True)
             if not torch.equal(a, b)}
    assert moved == {"encoder.rnn.bias_ih_l0", "encoder.rnn.bias_ih_l1"}
    for layer in (0, 1):
        before = getattr(plain.encoder.rnn, f"bias_ih_l{layer}")
        after = getattr(opened.encoder.rnn, f"bias_ih_l{layer}")
        delta = after - before
        assert torch.allclose(delta[8:16], torch.ones(8))  # gate order i, f, g, o
        assert torch.count_nonzero(delta[:8]) == torch.count_nonzero(delta[16:]) == 0


def test_coupled_lstm_input_gate_starts_as_much_lower(tmp_path):
    """``task.couple_gates``: the LSTM writes sigmoid(-B) as it keeps sigmoid(B), as METAGROSS
    does; its cell gate and output gate stay as they were."""
    plain = _pixel_model(tmp_path / "a", "lstm", 0.0)
    coupled = _pixel_model(tmp_path / "b", "lstm", 3.0, couple=True)
    for layer in (0, 1):
        delta = (getattr(coupled.encoder.rnn, f"bias_ih_l{layer}")
                 - getattr(plain.encoder.rnn, f"bias_ih_l{layer}"))
        assert torch.allclose(delta[:8], -3 * torch.ones(8))  # input gate
        assert torch.allclose(delta[8:16], 3 * torch.ones(8))  # forget gate
        assert torch.count_nonzero(delta[16:]) == 0
    # METAGROSS's write weight is its keep weight's complement already: nothing more moves
    mg = _pixel_model(tmp_path / "c", "metagross", 3.0, depth=2)
    mg_coupled = _pixel_model(tmp_path / "d", "metagross", 3.0, couple=True, depth=2)
    for a, b in zip(mg.parameters(), mg_coupled.parameters(), strict=True):
        assert torch.equal(a, b)


def test_metagross_keeps_more_of_its_state(tmp_path):
    plain = _pixel_model(tmp_path / "a", "metagross", 0.0, depth=2)
    opened = _pixel_model(tmp_path / "b", "metagross", 1.0, depth=2)
    for unit_a, unit_b in zip(plain.encoder.rnn.units, opened.encoder.rnn.units, strict=True):
        delta = unit_b.bias - unit_a.bias
        f_rows = torch.zeros_like(delta, dtype=torch.bool)
        for node in range(unit_a.num_nodes):
            f_rows[base_index(0, node) * 8 : (base_index(0, node) + 1) * 8] = True
        # the unit keeps 1 - f of its state: its F maps start one lower
        assert torch.allclose(delta[f_rows], -torch.ones(int(f_rows.sum())))
        assert torch.count_nonzero(delta[~f_rows]) == 0
        assert torch.equal(unit_a.weight, unit_b.weight)


def test_unmapped_units_are_refused():
    with pytest.raises(ValueError, match="task.forget_bias"):
        offset_forget_bias(SequenceEncoder("gru", 1, {"hidden_size": 4}), 1.0)
    with pytest.raises(ValueError, match="linear base"):
        offset_forget_bias(SequenceEncoder("metagross", 1, {"hidden_size": 4, "base": "lstm"}),
                           1.0)
    offset_forget_bias(SequenceEncoder("gru", 1, {"hidden_size": 4}), 0.0)  # 0: nothing to do


def _rows(unit, gate: int) -> torch.Tensor:
    """The bias rows of base map ``gate`` (0 F, 1 O, 2 Z) of every node of ``unit``."""
    rows = torch.zeros_like(unit.bias, dtype=torch.bool)
    hidden = unit.hidden_size
    for node in range(unit.num_nodes):
        rows[base_index(gate, node) * hidden : (base_index(gate, node) + 1) * hidden] = True
    return rows


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_metagross_output_gates_start_higher_and_nothing_else_moves(tmp_path, depth):
    """``task.output_bias``: every node's O map starts B higher, beside the forget rule's F
    maps; the weights, the Z maps and the depth gates stay as the seed drew them."""
    plain = _pixel_model(tmp_path / "a", "metagross", 3.0, depth=depth)
    opened = _pixel_model(tmp_path / "b", "metagross", 3.0, output_bias=5.0, depth=depth)
    moved = {name for (name, a), (_, b) in zip(plain.named_parameters(),
                                                opened.named_parameters(), strict=True)
             if not torch.equal(a, b)}
    assert moved == {f"encoder.rnn.units.{k}.bias" for k in range(2)}
    for unit_a, unit_b in zip(plain.encoder.rnn.units, opened.encoder.rnn.units, strict=True):
        delta = unit_b.bias - unit_a.bias
        o_rows = _rows(unit_a, 1)
        assert int(o_rows.sum()) == unit_a.num_nodes * 8
        assert torch.allclose(delta[o_rows], 5 * torch.ones(int(o_rows.sum())))
        assert torch.count_nonzero(delta[~o_rows]) == 0


def test_output_bias_maps_metagross_alone():
    lstm = SequenceEncoder("lstm", 1, {"hidden_size": 4})
    before = [p.clone() for p in lstm.parameters()]
    offset_output_bias(lstm, 0.0)  # 0: nothing to do, on any encoder
    assert all(torch.equal(a, b) for a, b in zip(before, lstm.parameters(), strict=True))
    with pytest.raises(ValueError, match="task.output_bias: the encoder has no METAGROSS"):
        offset_output_bias(lstm, 5.0)
    with pytest.raises(ValueError, match="task.output_bias: defined for METAGROSS with the "
                                         "linear base"):
        offset_output_bias(SequenceEncoder("metagross", 1, {"hidden_size": 4, "base": "lstm"}),
                           5.0)
