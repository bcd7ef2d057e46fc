"""Every layer and cell with a parametrization on each of its parameters
(:func:`torch.nn.utils.parametrize.register_parametrization`, the mechanism of orthogonal,
spectral norm and weight norm) equals the same module holding the parametrized tensors as plain
parameters: on the fused step paths (a short call or a cell step without a graph), the
whole-sequence path, and with a graph."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from ctrlrnn import (
    CARNN,
    CASLSTM,
    QRNN,
    RCRN,
    CARNNCell,
    CASLSTMCell,
    Metagross,
    MetagrossCell,
    QRNNCell,
    RCRNCell,
)

D64 = torch.float64
D, H, C = 5, 6, 3


class Scaled(nn.Module):
    """A parametrization: the stored tensor times a constant (nonzero biases stay nonzero)."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * 0.75


def _context(B: int) -> torch.Tensor:
    return torch.randn(B, C, dtype=D64)


#: name: (factory, call(module, x (B, T, D) batch first)).
Case = tuple[Callable[[], nn.Module], Callable[[nn.Module, torch.Tensor, Any], Any]]


def _layer(m: nn.Module, x: torch.Tensor, extra: Any) -> Any:
    return m(x) if extra is None else m(x, extra)


def _cell_steps(m: nn.Module, x: torch.Tensor, extra: Any) -> Any:
    state, outs = None, []
    for t in range(x.shape[1]):
        if isinstance(m, CARNNCell):
            state = m(x[:, t], extra, state)
            outs.append(state)
            continue
        if isinstance(m, CASLSTMCell):
            h, state = m(x[:, t], extra, state)
        elif isinstance(m, QRNNCell) and m.encoder_weight is not None:
            h, state = m(x[:, t], state, extra)
        else:
            h, state = m(x[:, t], state)
        outs.append(h)
    return outs, state


CASES: dict[str, Case] = {
    "QRNN": (lambda: QRNN(D, H, num_layers=2, batch_first=True), _layer),
    "QRNN ifo bidirectional": (lambda: QRNN(D, H, window=3, pooling="ifo", bidirectional=True,
                                            batch_first=True), _layer),
    "nCARNN": (lambda: CARNN(D, H, C, "n", batch_first=True), _layer),
    "iCARNN": (lambda: CARNN(D, H, C, "i", num_layers=2, batch_first=True), _layer),
    "sCARNN": (lambda: CARNN(D, D, C, "s", batch_first=True), _layer),
    "Metagross": (lambda: Metagross(D, H, batch_first=True, residual=False), _layer),
    "Metagross projected residual": (lambda: Metagross(D, H, depth=3, batch_first=True),
                                     _layer),
    "Metagross as printed": (lambda: Metagross(D, H, gates="state", batch_first=True), _layer),
    "RCRN": (lambda: RCRN(D, H, batch_first=True), _layer),
    "RCRN gru": (lambda: RCRN(D, H, cell="gru", batch_first=True), _layer),
    "CASLSTM": (lambda: CASLSTM(D, H, num_layers=2, batch_first=True), _layer),
    "QRNNCell": (lambda: QRNNCell(D, H, window=2, pooling="ifo"), _cell_steps),
    "QRNNCell eq 7": (lambda: QRNNCell(D, H, encoder_state_size=C), _cell_steps),
    "CARNNCell n": (lambda: CARNNCell(D, H, C, "n"), _cell_steps),
    "CARNNCell i": (lambda: CARNNCell(D, H, C, "i"), _cell_steps),
    "MetagrossCell": (lambda: MetagrossCell(D, H, depth=2), _cell_steps),
    "RCRNCell": (lambda: RCRNCell(D, H), _cell_steps),
    "CASLSTMCell": (lambda: CASLSTMCell(D, H), _cell_steps),
}  # fmt: skip


def _extra(name: str, B: int) -> Any:
    if "CARNN" in name or "eq 7" in name:
        return _context(B)
    if name == "CASLSTMCell":
        return torch.randn(B, H, dtype=D64)  # the lower layer's cell
    return None


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if out is None:
        return []
    return [t for o in out for t in _tensors(o)]


def _parametrized_and_plain(name: str) -> tuple[nn.Module, nn.Module, int]:
    torch.manual_seed(11)
    plain = CASES[name][0]().to(D64)
    with torch.no_grad():
        for p in plain.parameters():  # biases away from 0 so that dropping one shows
            p.add_(torch.rand_like(p) * 0.2 + 0.1)
    made = copy.deepcopy(plain)
    count = 0
    for module in list(made.modules()):
        for pname, _ in list(module.named_parameters(recurse=False)):
            parametrize.register_parametrization(module, pname, Scaled())
            count += 1
    with torch.no_grad():
        for p in plain.parameters():
            p.mul_(0.75)
    return made, plain, count


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("B,T,grad", [(1, 1, False), (2, 3, False), (2, 12, False),
                                      (2, 4, True)])
def test_parametrized_weights_are_the_weights_used(name, B, T, grad) -> None:
    made, plain, count = _parametrized_and_plain(name)
    assert count == len(list(plain.parameters())) > 0
    call = CASES[name][1]
    x = torch.randn(B, T, D, dtype=D64)
    extra = _extra(name, B)
    with torch.set_grad_enabled(grad):
        got, want = _tensors(call(made, x, extra)), _tensors(call(plain, x, extra))
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    if grad:  # the gradient reaches the parametrization's original tensor
        sum(t.sum() for t in got).backward()
        originals = [p for n, p in made.named_parameters() if n.endswith(".original")]
        assert len(originals) == count
        assert all(p.grad is not None for p in originals)
