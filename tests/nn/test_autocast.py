"""Every layer under ``torch.autocast("cpu", dtype=torch.bfloat16)``: gate GEMMs and outputs in
bfloat16 (as ``torch.nn.LSTM`` under autocast), the recurrent state accumulated in float32
inside the kernels, float32 gradients for the float32 parameters; within bfloat16's precision of
the float32 result (tolerance: 3e-2 relative to the largest value, bfloat16 keeps 8 bits)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import ctrlrnn

LAYERS: dict[str, Callable[[], torch.nn.Module]] = {
    "QRNN": lambda: ctrlrnn.QRNN(8, 16, num_layers=2, bidirectional=True, window=2),
    "QRNN-ifo-zoneout": lambda: ctrlrnn.QRNN(8, 16, pooling="ifo", zoneout=0.2).eval(),
    "RCRN": lambda: ctrlrnn.RCRN(8, 16, bidirectional=True),
    "RCRN-gru": lambda: ctrlrnn.RCRN(8, 16, cell="gru"),
    "CASLSTM": lambda: ctrlrnn.CASLSTM(8, 16, num_layers=2, bidirectional=True),
    "CARNN-n": lambda: ctrlrnn.CARNN(8, 16, context_size=4, variant="n"),
    "CARNN-i": lambda: ctrlrnn.CARNN(8, 16, context_size=4, variant="i"),
    "CARNN-s": lambda: ctrlrnn.CARNN(8, 8, context_size=4, variant="s"),
    "Metagross": lambda: ctrlrnn.Metagross(8, 16, depth=2, bidirectional=True),
    "Metagross-c-static": lambda: ctrlrnn.Metagross(8, 16, depth=2, recurrence="c",
                                                    depth_gate="static", causal=False),
    "Metagross-lstm": lambda: ctrlrnn.Metagross(8, 16, depth=2, base="lstm"),
    "Metagross-state": lambda: ctrlrnn.Metagross(8, 16, depth=2, gates="state",
                                                 bidirectional=True),
    "MetagrossFFN": lambda: ctrlrnn.MetagrossFFN(8, depth=2),
}


def _states(h_n) -> list[torch.Tensor]:
    return list(h_n) if isinstance(h_n, tuple) else [h_n]


def _run(model: torch.nn.Module, x: torch.Tensor, ctx: torch.Tensor, lengths: torch.Tensor):
    if isinstance(model, ctrlrnn.MetagrossFFN):
        out, states = model(x), []
    else:
        extra = (ctx,) if isinstance(model, ctrlrnn.CARNN) else ()
        out, h_n = model(x, *extra, lengths=lengths)
        states = _states(h_n)
    loss = out.float().square().mean() + sum(s.float().square().mean() for s in states)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return out, states, grads


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    scale = want.abs().max().clamp(min=1e-3)
    err = (got.float() - want).abs().max()
    assert err <= 3e-2 * scale, f"max error {err:.3g} against scale {scale:.3g}"


@pytest.mark.parametrize("name", list(LAYERS))
def test_bfloat16_autocast(name: str) -> None:
    torch.manual_seed(0)
    model = LAYERS[name]()
    x = torch.randn(7, 3, 8)
    ctx, lengths = torch.randn(3, 4), torch.tensor([7, 5, 2])
    want_out, want_states, want_grads = _run(model, x, ctx, lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, states, grads = _run(model, x, ctx, lengths)
    assert out.dtype == torch.bfloat16
    assert all(s.dtype == torch.bfloat16 for s in states)
    _close(out, want_out)
    for s, w in zip(states, want_states):
        _close(s, w)
    for g, w in zip(grads, want_grads):
        assert g.dtype == torch.float32
        _close(g, w)


@pytest.mark.parametrize("name", ["QRNN", "CASLSTM", "Metagross", "MetagrossFFN"])
def test_bfloat16_input_under_autocast(name: str) -> None:
    """Under autocast a layer of float32 parameters also takes input already in bfloat16."""
    torch.manual_seed(1)
    model = LAYERS[name]()
    x = torch.randn(7, 3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x)
        got = model(x.to(torch.bfloat16))
    want = want[0] if isinstance(want, tuple) else want
    got = got[0] if isinstance(got, tuple) else got
    assert got.dtype == torch.bfloat16
    _close(got, want.float())
    with pytest.raises(ValueError, match="^(input|x): expected dtype"):
        model(x.to(torch.bfloat16))  # outside autocast the dtypes must match
