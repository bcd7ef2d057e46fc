"""Greedy and beam decoding of the translation model at batch 1 are unchanged by the
no-graph path of the compiled ops (:class:`ctrlrnn.ops.kernel_op.KernelOp` runs its kernel table
without an autograd ``Function`` where no graph can be recorded) and by the one-step windows of
the QRNN layers: the same tokens as through the ``Function`` twin and the general windows."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.models.seq2seq import Seq2Seq
from ctrlrnn.nn import qrnn_windows
from ctrlrnn.ops import kernel_op


def _model(layers: int) -> Seq2Seq:
    torch.manual_seed(5)
    m = Seq2Seq(30, 25, encoder="qrnn", encoder_args={"hidden_size": 16, "num_layers": layers},
                embedding_size=8).eval()
    torch.nn.init.normal_(m.out.weight, std=1.0)  # varied tokens from an untrained model
    return m


@pytest.mark.parametrize("layers", [1, 2])
def test_greedy_and_beam_at_batch_one_equal_the_function_path(monkeypatch, layers):
    model = _model(layers)
    g = torch.Generator().manual_seed(2)
    src, lengths = torch.randint(4, 30, (1, 7), generator=g), torch.tensor([7])
    fast = model.greedy(src, lengths, 12), model.beam_search(src, lengths, beam=3, max_len=12)
    monkeypatch.setattr(kernel_op, "_records_graph", lambda args: True)  # the Function twin
    monkeypatch.setattr(qrnn_windows, "eager_ok", lambda *args: False)  # the general windows
    before = model.greedy(src, lengths, 12), model.beam_search(src, lengths, beam=3, max_len=12)
    assert fast == before
    assert len(fast[0][0]) > 1
