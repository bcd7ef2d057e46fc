"""Short calls that record a graph by one autograd node per step
(:mod:`ctrlrnn.ops.cell_step_grads`): RCRN's and METAGROSS's layer calls of a few steps at a
small batch, and ``RCRNCell`` and ``MetagrossCell`` with grad, equal the whole-sequence path
and the written-out step in values and in every gradient; the limits of the step path
(:func:`ctrlrnn.nn.base.graph_steps_fit`); float64 ``gradcheck``; and the clear error of a
double backward."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import (
    RCRN,
    CARNNCell,
    CASLSTMCell,
    Metagross,
    MetagrossCell,
    QRNNCell,
    RCRNCell,
)
from ctrlrnn.nn import base, metagross_unit
from ctrlrnn.nn import carnn as carnn_module
from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.ops.backend import reference_forced

# the layers are tiny: one thread runs torch's ops inline instead of waking a second one
pytestmark = pytest.mark.usefixtures("one_thread")

D64 = torch.float64


def _call(layer: RecurrentBase, x: torch.Tensor, hx: object, steps: bool
          ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], list[bool]]:  # fmt: skip
    """``layer(x, hx)`` with grad, by steps where they apply (``steps``) or on the whole-sequence
    path, and for each layer whether the step path served it."""
    taken: list[bool] = []
    original = RecurrentBase._layer_by_steps

    def spy(self, *args, **kwargs):
        got = original(self, *args, **kwargs)
        taken.append(got is not None)
        return got

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RecurrentBase, "_layer_by_steps", spy)
        if not steps:
            patch.setattr(base, "graph_steps_fit", lambda module, x: False)
        out, h_n = layer(x, hx)
    return out, h_n, taken


def _gradients(layer: RecurrentBase, x: torch.Tensor, hx: object,
               steps: bool) -> tuple[list[torch.Tensor], list[bool]]:  # fmt: skip
    """The outputs and the gradients of a random weighting of them w.r.t. the input, the
    initial states and every parameter."""
    out, h_n, taken = _call(layer, x, hx, steps)
    gen = torch.Generator().manual_seed(1)
    h_n = (h_n,) if isinstance(h_n, torch.Tensor) else h_n
    hx = (hx,) if isinstance(hx, torch.Tensor) else hx
    results = [out, *h_n]
    loss = sum((r * torch.randn(r.shape, generator=gen, dtype=r.dtype)).sum() for r in results)
    wrt = [x, *(hx or ()), *layer.parameters()]
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [*results, *(torch.zeros_like(w) if g is None else g
                        for w, g in zip(wrt, grads, strict=True))], taken  # fmt: skip


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("output_gate,bias", [("sigmoid", True), ("identity", False)])
@pytest.mark.parametrize("T,B,with_state", [(1, 1, True), (4, 3, False), (2, 4, True)])
def test_rcrn_short_calls_with_grad_by_steps_equal_the_whole_sequence(
        bidirectional, num_layers, output_gate, bias, T, B, with_state):  # fmt: skip
    torch.manual_seed(11)
    layer = RCRN(5, 6, num_layers=num_layers, bidirectional=bidirectional,
                 output_gate=output_gate, bias=bias).to(D64)  # fmt: skip
    x = torch.randn(T, B, 5, dtype=D64, requires_grad=True)
    n = num_layers * layer.num_directions
    hx = tuple(torch.randn(n, B, 6, dtype=D64, requires_grad=True)
               for _ in layer.state_names) if with_state else None  # fmt: skip
    got, taken = _gradients(layer, x, hx, steps=True)
    assert taken == [not reference_forced()] * num_layers
    want, whole = _gradients(layer, x, hx, steps=False)
    assert whole == [False] * num_layers
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert got[0].grad_fn is not None


@pytest.mark.parametrize("why", ["long", "wide", "lengths", "gru", "weight_drop"])
def test_rcrn_calls_with_grad_take_the_whole_sequence_path_past_the_step_limits(why):
    torch.manual_seed(12)
    H = 300 if why == "wide" else 6  # 3 * 4H(H + D + 2) weights: over the work limit
    layer = RCRN(H, H, cell="gru" if why == "gru" else "lstm",
                 weight_drop=0.3 if why == "weight_drop" else 0.0).to(D64)  # fmt: skip
    T = RCRN.graph_steps[0] + 1 if why == "long" else 2
    x = torch.randn(T, 2, H, dtype=D64, requires_grad=True)
    if why == "lengths":
        out, _ = layer(x, lengths=torch.tensor([2, 1]))
    else:
        out, _, taken = _call(layer, x, None, steps=True)
        assert taken == [False]
    out.sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batched", [True, False])
def test_rcrn_cell_with_grad_equals_the_written_out_step(output_gate, bias, batched):
    torch.manual_seed(13)
    cell = RCRNCell(5, 7, output_gate=output_gate, bias=bias).to(D64)
    shape = (3, 5) if batched else (5,)
    xs = [torch.randn(shape, dtype=D64, requires_grad=True) for _ in range(3)]
    state = tuple(torch.randn(shape[:-1] + (7,), dtype=D64, requires_grad=True)
                  for _ in cell.state_names)  # fmt: skip
    outs, st = [], state
    for x in xs:
        h, st = cell(x, st)
        outs.append(h)
    assert outs[0].grad_fn is not None
    assert type(outs[0].grad_fn).__name__ != "MulBackward0" or reference_forced()
    want, sw = [], [s.unsqueeze(0) if not batched else s for s in state]
    for x in xs:
        h, sw = cell._step(x if batched else x.unsqueeze(0), sw)
        want.append(h if batched else h[0])
    got_all, want_all = [*outs, *st], [*want, *(s if batched else s[0] for s in sw)]
    for a, b in zip(got_all, want_all, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wrt = [*xs, *state, *cell.parameters()]
    loss_got = sum((t * (i + 1)).sum() for i, t in enumerate(got_all))
    loss_want = sum((t * (i + 1)).sum() for i, t in enumerate(want_all))
    for a, b in zip(torch.autograd.grad(loss_got, wrt), torch.autograd.grad(loss_want, wrt),
                    strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_rcrn_steps_with_grad_pass_gradcheck():
    torch.manual_seed(14)
    layer = RCRN(3, 4, bidirectional=True).to(D64)
    x = torch.randn(2, 2, 3, dtype=D64, requires_grad=True)
    h0 = torch.randn(2, 2, 4, dtype=D64, requires_grad=True)
    c4 = torch.randn(2, 2, 4, dtype=D64, requires_grad=True)
    zeros = [torch.zeros(2, 2, 4, dtype=D64) for _ in range(5)]

    def run(x, h0, c4):
        out, h_n, taken = _call(layer, x, (h0, *zeros, c4), steps=True)
        assert taken == [not reference_forced()]
        return out, *h_n

    assert torch.autograd.gradcheck(run, (x, h0, c4))


def test_a_double_backward_through_rcrn_steps_names_the_op_and_the_way_out():
    if reference_forced():
        pytest.skip("the reference path differentiates any number of times")
    layer = RCRN(3, 4).to(D64)
    x = torch.randn(1, 1, 3, dtype=D64, requires_grad=True)
    out, _, taken = _call(layer, x, None, steps=True)
    assert taken == [True]
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"rcrn_cell_step_backward .*CTRLRNN_BACKEND=reference"):
        gx.sum().backward()


def test_rcrn_steps_refuse_a_backward_after_an_in_place_change():
    layer = RCRN(3, 4)
    x = torch.randn(1, 1, 3, requires_grad=True)
    hx = tuple(torch.randn(1, 1, 4, requires_grad=True) for _ in layer.state_names)
    out, _ = layer(x, hx)  # (the states require grad: both paths keep weight_hh for theirs)
    with torch.no_grad():
        layer.cell(0).controller1.weight_hh.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("kind", ["h", "c", "printed", "depth 1", "depth 3 printed",
                                  "no residual", "no bias"])
@pytest.mark.parametrize("bidirectional,num_layers", [(False, 1), (True, 2)])
@pytest.mark.parametrize("T,B,with_state", [(1, 1, True), (2, 4, False), (2, 3, True)])
def test_metagross_short_calls_with_grad_by_steps_equal_the_whole_sequence(
        kind, bidirectional, num_layers, T, B, with_state):  # fmt: skip
    torch.manual_seed(15)
    kw = {"h": {}, "c": dict(recurrence="c"), "printed": dict(gates="state"),
          "depth 1": dict(depth=1), "depth 3 printed": dict(depth=3, gates="state"),
          "no residual": dict(residual=False), "no bias": dict(bias=False)}[kind]
    layer = Metagross(6, 6, num_layers=num_layers, bidirectional=bidirectional,
                      **kw).to(D64)  # fmt: skip
    x = torch.randn(T, B, 6, dtype=D64, requires_grad=True)
    n = num_layers * layer.num_directions
    width = layer.unit(0).tree_state_size
    hx = torch.randn(n, B, width, dtype=D64, requires_grad=True) if with_state else None
    got, taken = _gradients(layer, x, hx, steps=True)
    # (a layer above a bidirectional one reads 12 features: its residual is a projection, which
    # the step op does not take)
    projected = [layer.unit(k).residual_weight is not None for k in range(num_layers)]
    assert taken == [not (reference_forced() or p) for p in projected]
    want, whole = _gradients(layer, x, hx, steps=False)
    assert whole == [False] * num_layers
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_metagross_calls_with_grad_past_the_step_limits_take_the_whole_sequence_path():
    layer = Metagross(6, 6).to(D64)
    x = torch.randn(Metagross.graph_steps[0] + 1, 1, 6, dtype=D64, requires_grad=True)
    _, _, taken = _call(layer, x, None, steps=True)
    assert taken == [False]


@pytest.mark.parametrize("gates,recurrence,depth", [("input", "h", 2), ("input", "c", 3),
                                                    ("state", "h", 2), ("input", "h", 1)])
@pytest.mark.parametrize("batched", [True, False])
def test_metagross_cell_with_grad_equals_the_written_out_pass(gates, recurrence, depth,
                                                              batched):  # fmt: skip
    torch.manual_seed(16)
    cell = MetagrossCell(5, 5, depth=depth, gates=gates, recurrence=recurrence).to(D64)
    shape = (3, 5) if batched else (5,)
    xs = [torch.randn(shape, dtype=D64, requires_grad=True) for _ in range(3)]
    size = cell.unit.tree_state_size
    state = torch.randn(shape[:-1] + (size,), dtype=D64, requires_grad=True)

    def run():
        outs, st = [], state
        for x in xs:
            h, st = cell(x, st)
            outs.append(h)
        return [*outs, st]

    got = run()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metagross_unit, "fused_tree_step", lambda *args: None)
        want = run()
    wrt = [*xs, state, *cell.parameters()]
    loss = [sum((t * (i + 1)).sum() for i, t in enumerate(r)) for r in (got, want)]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(loss[0], wrt), torch.autograd.grad(loss[1], wrt),
                    strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("grad", [False, True])
def test_rcrn_cell_steps_read_strided_weights(grad):
    """The fused op makes its weights contiguous itself (the step checks only their type)."""
    torch.manual_seed(17)
    cell = RCRNCell(5, 4).to(D64)
    for rnn in cell.rnns():
        for name in ("weight_ih", "weight_hh"):
            w = getattr(rnn, name)
            w.data = w.data.t().contiguous().t()  # the same values, column-major
            assert not w.is_contiguous()
    x = torch.randn(2, 5, dtype=D64, requires_grad=grad)
    state = tuple(torch.randn(2, 4, dtype=D64) for _ in cell.state_names)
    with torch.set_grad_enabled(grad):
        h, new = cell(x, state)
        want_h, want_new = cell._step(x, list(state))
    for a, b in zip((h, *new), (want_h, *want_new), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    if grad:
        wrt = [x, *cell.parameters()]
        got = torch.autograd.grad(h.sum() + new[-1].sum(), wrt)
        want = torch.autograd.grad(want_h.sum() + want_new[-1].sum(), wrt)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_rcrn_cell_steps_name_a_weight_of_another_dtype():
    cell = RCRNCell(3, 4)
    cell.listener.weight_hh.data = cell.listener.weight_hh.data.double()
    with torch.no_grad(), pytest.raises(RuntimeError, match="dtype"):
        cell(torch.randn(1, 3))


CAS_CELLS = {
    "first layer": dict(vertical=False),
    "plain sum": dict(lambda_=None),
    "constant lambda": dict(lambda_=0.3),
    "vector lambda": dict(lambda_=[0.1, 0.5, 0.7, 0.9]),
    "trainable lambda": dict(lambda_="trainable"),
    "peepholes": dict(peephole=True),
    "peepholes, trainable lambda": dict(peephole=True, lambda_="trainable"),
}


@pytest.mark.parametrize("kind", sorted(CAS_CELLS))
@pytest.mark.parametrize("batched", [True, False])
def test_cas_lstm_cell_with_grad_equals_the_written_out_step(kind, batched):
    torch.manual_seed(18)
    cell = CASLSTMCell(5, 4, **CAS_CELLS[kind]).to(D64)
    shape = (3,) if batched else ()
    xs = [torch.randn(*shape, 5, dtype=D64, requires_grad=True) for _ in range(3)]
    lows = [torch.randn(*shape, 4, dtype=D64, requires_grad=True) for _ in range(3)]
    state = tuple(torch.randn(*shape, 4, dtype=D64, requires_grad=True) for _ in range(2))
    vertical = cell.weights.vertical

    def run(written: bool):
        outs, st = [], state
        for x, low in zip(xs, lows, strict=True):
            if written:
                xb, sb = (x, st) if batched else (x[None], tuple(s[None] for s in st))
                lb = (low if batched else low[None]) if vertical else None
                lam = cell.lambda_value() if vertical else None
                h, c = cell._written_out_step(xb, *sb, lb, lam)
                h, c = (h, c) if batched else (h[0], c[0])
                st = (h, c)
            else:
                h, st = cell(x, low if vertical else None, st)
            outs.append(h)
        return [*outs, *st]

    got = run(written=False)
    assert got[0].grad_fn is not None
    if batched and not reference_forced():  # (unbatched, the output is a view of the node's)
        assert type(got[0].grad_fn).__name__ == "_CASLSTMStepBackward"
    want = run(written=True)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wrt = [*xs, *state, *cell.parameters()] + (lows if vertical else [])
    loss = [sum((t * (i + 1)).sum() for i, t in enumerate(r)) for r in (got, want)]
    for a, b in zip(torch.autograd.grad(loss[0], wrt), torch.autograd.grad(loss[1], wrt),
                    strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["n", "i", "s"])
@pytest.mark.parametrize("context", [True, False])
@pytest.mark.parametrize("batched", [True, False])
def test_carnn_cell_with_grad_equals_the_written_out_step(variant, context, batched):
    torch.manual_seed(19)
    cell = CARNNCell(5 if variant != "s" else 4, 4, 3 if context else None, variant).to(D64)
    shape = (3,) if batched else ()
    xs = [torch.randn(*shape, cell.input_size, dtype=D64, requires_grad=True) for _ in range(3)]
    ctx = torch.randn(*shape, 3, dtype=D64, requires_grad=True) if context else None
    h0 = torch.randn(*shape, 4, dtype=D64, requires_grad=True)

    def run():
        outs, h = [], h0
        for x in xs:
            h = cell(x, ctx, h)
            outs.append(h)
        return outs

    got = run()
    if batched and not reference_forced():
        assert type(got[0].grad_fn).__name__ == "_CARNNStepBackward"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(carnn_module.cell_steps, "kernels", lambda *a, **k: None)
        want = run()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wrt = [*xs, h0, *cell.parameters()] + ([ctx] if context else [])
    loss = [sum((t * (i + 1)).sum() for i, t in enumerate(r)) for r in (got, want)]
    for a, b in zip(torch.autograd.grad(loss[0], wrt), torch.autograd.grad(loss[1], wrt),
                    strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
def test_qrnn_cell_with_grad_equals_the_written_out_step(pooling, window, batched):
    torch.manual_seed(20)
    cell = QRNNCell(5, 4, window=window, pooling=pooling).to(D64)
    shape = (3,) if batched else ()
    xs = [torch.randn(*shape, 5, dtype=D64, requires_grad=True) for _ in range(4)]
    c0 = torch.randn(*shape, 4, dtype=D64, requires_grad=True)
    hist0 = torch.randn(*shape, window - 1, 5, dtype=D64, requires_grad=True)

    def run():
        outs, st = [], (c0, hist0)
        for x in xs:
            h, st = cell(x, st)
            outs.append(h)
        return [*outs, *st]

    got = run()
    if batched and not reference_forced():
        assert type(got[0].grad_fn).__name__ == "_QRNNStepBackward"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(QRNNCell, "_fused_step", lambda *args: None)
        want = run()
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wrt = [*xs, c0, hist0, *cell.parameters()]
    loss = [sum((t * (i + 1)).sum() for i, t in enumerate(r)) for r in (got, want)]
    for a, b in zip(torch.autograd.grad(loss[0], wrt, allow_unused=True),
                    torch.autograd.grad(loss[1], wrt, allow_unused=True), strict=True):  # fmt: skip
        if a is None or b is None:
            assert a is None or b is None  # (window 1: no history to differentiate)
            continue
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
