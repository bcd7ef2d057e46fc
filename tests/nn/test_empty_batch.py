"""Every layer with a batch of size 0 behaves as :class:`torch.nn.LSTM` does: an empty output
and empty final states, an empty input gradient and no parameter gradient, on the compiled
kernels and on the reference path; a sequence of 0 steps stays a ``ValueError`` naming
``input``. The ops' side of the contract is ``tests/ops/test_empty_shapes.py``.

A crash must fail a test, not kill pytest (a batch of size 0 used to stop the process with
SIGFPE in the kernels' work splitting): the cases run in a subprocess (:mod:`isolated_cases`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from backend_parity import both_paths, flat
from contract import FFN, NAMES, context, make, run
from isolated_cases import IsolatedCases
from torch import Tensor

pytestmark = pytest.mark.compares_backends

CASES = IsolatedCases(__file__)
D, HID = 4, 4


def _lstm_like_batch0(module: torch.nn.Module, call: Callable[..., Any]) -> None:
    """Output ``(0, T, out)`` and every final state ``(L*D, 0, S)``, as torch.nn.LSTM gives;
    backward gives the input an empty gradient and every parameter a zero (or no) gradient."""
    steps = 3
    x = torch.randn(0, steps, D, requires_grad=True)
    out, h_n = call(x)
    lstm = torch.nn.LSTM(D, HID, batch_first=True, num_layers=module.num_layers,
                         bidirectional=module.bidirectional)  # fmt: skip
    lstm_out, (lstm_h, _) = lstm(torch.randn(0, steps, D))
    assert out.shape == (0, steps, module.output_size) and out.dtype == x.dtype
    assert lstm_out.shape[:2] == out.shape[:2]
    for k, s in enumerate([h_n] if isinstance(h_n, Tensor) else list(h_n)):
        assert s.shape == (lstm_h.shape[0], 0, module.state_size(k)), (k, s.shape)
        assert lstm_h.shape[1] == 0
    (out.sum() + sum(s.sum() for s in flat(h_n))).backward()
    assert x.grad is not None and x.grad.shape == x.shape
    for name, p in module.named_parameters():
        assert p.grad is None or not p.grad.any(), name


@CASES.case("layers", *NAMES)
def case_layer_batch0(name: str) -> None:
    for reference in (False, True):
        if reference:
            os.environ["CTRLRNN_BACKEND"] = "reference"
        try:
            torch.manual_seed(0)
            module = make(name, D, HID, batch_first=True)

            def call(x, hx=None, lengths=None, module=module):
                return run(module, x, context(module, 0), hx, lengths)

            _lstm_like_batch0(module, call)
            # with initial states and lengths of a batch of 0 as well
            x = torch.randn(0, 3, D)
            _, h_n = call(x)
            out, h_again = call(x, h_n, torch.zeros(0, dtype=torch.long))
            assert out.shape == (0, 3, module.output_size)
            assert [s.shape for s in flat(h_again)] == [s.shape for s in flat(h_n)]
        finally:
            os.environ.pop("CTRLRNN_BACKEND", None)


@CASES.case("layers", *NAMES)
def case_layer_no_steps_refused(name: str) -> None:
    """Zero time steps stay a ValueError naming ``input`` (the layers' policy)."""
    torch.manual_seed(0)
    module = make(name, D, HID, batch_first=True)
    for batch in (0, 2):
        try:
            run(module, torch.randn(batch, 0, D), context(module, batch))
        except ValueError as exc:
            assert "input" in str(exc), exc
        else:
            raise AssertionError("a sequence of 0 steps was accepted")


@CASES.case("layers", "B0", "size1")
def case_metagross_ffn(shape: str) -> None:
    torch.manual_seed(0)
    ffn = make(FFN, D)
    lead = (0, 3) if shape == "B0" else (1, 1)
    outs = both_paths(lambda x: ffn(x), [torch.randn(*lead, D)])
    assert outs[0].shape == (*lead, D)


@pytest.mark.parametrize("name", CASES.names())
def test_case(name: str) -> None:
    CASES.check(name)
