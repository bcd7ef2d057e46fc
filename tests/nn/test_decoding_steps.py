"""The cells' short steps: an RCRN cell's three RNNs as torch's cell ops
(:mod:`ctrlrnn.nn.rcrn_step`) against the step written out from eq 1-16, values and gradients;
a METAGROSS tree where no graph is recorded (the same kernels without the autograd node)
against the step that records one, and never stale after a parameter changes; and short layer
calls without a graph (RCRN, CARNN, METAGROSS) by one fused cell op per step, against the
whole-sequence path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from ctrlrnn import CARNN, QRNN, RCRN, Metagross, MetagrossCell, RCRNCell
from ctrlrnn.nn import base, rcrn_step
from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.ops import cell_steps
from ctrlrnn.ops.backend import reference_forced

# the layers are tiny: one thread runs torch's ops inline instead of waking a second one
pytestmark = pytest.mark.usefixtures("one_thread")

D64 = torch.float64


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
@pytest.mark.parametrize("bias", [True, False])
def test_rcrn_cell_step_equals_the_written_out_step(cell, output_gate, bias):
    torch.manual_seed(3)
    c = RCRNCell(5, 7, cell=cell, output_gate=output_gate, bias=bias).to(D64)
    x = torch.randn(3, 4, 5, dtype=D64, requires_grad=True)
    st = [torch.randn(3, 7, dtype=D64) for _ in c.state_names]
    fast_st, slow_st = list(st), list(st)
    fast_out, slow_out = [], []
    for t in range(4):
        assert rcrn_step.applies(x[:, t])
        h, fast_st = rcrn_step.step(c, x[:, t], fast_st)
        fast_out.append(h)
        h, slow_st = c._step(x[:, t], slow_st)
        slow_out.append(h)
    fast, slow = torch.stack(fast_out), torch.stack(slow_out)
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    for a, b in zip(fast_st, slow_st, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert not torch.equal(fast, torch.zeros_like(fast))
    g = torch.randn_like(fast)
    params = [x, *c.parameters()]
    grads_fast = torch.autograd.grad((fast * g).sum(), params)
    grads_slow = torch.autograd.grad((slow * g).sum(), params)
    for a, b in zip(grads_fast, grads_slow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_rcrn_cell_takes_the_written_out_step_under_a_tracer(monkeypatch):
    c = RCRNCell(3, 4)
    calls = []
    written = c._step
    monkeypatch.setattr(c, "_step", lambda x, st: calls.append(1) or written(x, st))
    monkeypatch.setattr(rcrn_step, "eager_ok", lambda *args: False)
    monkeypatch.setattr(cell_steps, "eager_ok", lambda *args: False)  # (the fused op's check)
    c(torch.randn(2, 3))
    assert calls == [1]


def _steps(cell, x, state=None):
    outs = []
    for t in range(x.shape[1]):
        h, state = cell(x[:, t], state)
        outs.append(h)
    return torch.stack(outs, 1), state


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("recurrence,gates", [("h", "input"), ("c", "input"), ("h", "state")])
def test_metagross_cell_without_a_graph_equals_the_recorded_step(depth, recurrence, gates):
    torch.manual_seed(4)
    cell = MetagrossCell(6, 6, depth=depth, recurrence=recurrence, gates=gates)
    x = torch.randn(2, 5, 6)
    want, want_state = _steps(cell, x)
    assert want.grad_fn is not None  # the autograd node's path
    with torch.no_grad():
        got, got_state = _steps(cell, x)
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_state, want_state.detach(), rtol=1e-6, atol=1e-6)


def test_metagross_cell_without_a_graph_follows_its_parameters():
    """Without a graph, at a batch past the step op's (the tree's kernels on the weights as
    they are), every change of a parameter is seen: an optimizer's step, a loaded state dict, a
    parameter replaced, ``nn.init`` on one, and a write through ``.data``, which no version
    counter records."""
    torch.manual_seed(5)
    cell = MetagrossCell(4, 4, depth=2)
    x = torch.randn(cell_steps.MAX_BATCH + 2, 4, 4)

    def check():
        want, _ = _steps(cell, x)
        with torch.no_grad():
            got, _ = _steps(cell, x)
        torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
        return got

    first = check()
    opt = torch.optim.SGD(cell.parameters(), lr=0.5)
    _steps(cell, x)[0].sum().backward()
    opt.step()
    assert not torch.allclose(check(), first)
    other = MetagrossCell(4, 4, depth=2)
    cell.load_state_dict(other.state_dict())
    check()
    cell.unit.depth_weight = torch.nn.Parameter(torch.randn_like(cell.unit.depth_weight))
    check()
    torch.nn.init.normal_(cell.unit.weight)
    check()
    before = check()
    cell.unit.depth_weight.data.copy_(torch.randn_like(cell.unit.depth_weight))
    cell.unit.weight.data.mul_(0.5)
    assert not torch.allclose(check(), before)


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
@pytest.mark.parametrize("window", [1, 2, 3])
def test_qrnn_cell_without_a_graph_equals_the_recorded_step(pooling, window):
    """Where no graph can be recorded the step calls the pooling kernel without its wrapper
    (:func:`ctrlrnn.ops.qrnn_pooling.pooling_step`): the same values."""
    from ctrlrnn import QRNNCell

    torch.manual_seed(6)
    cell = QRNNCell(4, 5, window=window, pooling=pooling, encoder_state_size=3)
    x, enc = torch.randn(2, 6, 4), torch.randn(2, 3)

    def run():
        state, outs = None, []
        for t in range(x.shape[1]):
            h, state = cell(x[:, t], state, encoder_state=enc)
            outs.append(h)
        return torch.stack(outs, 1), state

    want, want_state = run()
    assert want.grad_fn is not None
    with torch.no_grad():
        got, got_state = run()
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
    for a, b in zip(got_state, want_state, strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-6)
    with torch.no_grad(), pytest.raises(ValueError, match="c0: expected"):
        cell(x[:, 0], (torch.zeros(2, 5, dtype=D64), torch.zeros(2, window - 1, 4)),
             encoder_state=enc)


@pytest.mark.parametrize("T", [1, 5])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("pooling", ["f", "ifo"])
def test_qrnn_layer_without_a_graph_equals_the_recorded_call(T, bidirectional, pooling):
    """The layer's pooling without its wrapper where no graph can be recorded (no lengths, no
    zoneout): the same outputs and final cells, with and without a carried state."""
    from ctrlrnn import QRNN

    torch.manual_seed(7)
    layer = QRNN(4, 5, num_layers=2, window=(2, 3), pooling=pooling,
                 bidirectional=bidirectional)
    D = 2 if bidirectional else 1
    x, hx = torch.randn(T, 3, 4), torch.randn(2 * D, 3, 5)
    for state in (None, hx):
        want, want_c = layer(x, state)
        assert want.grad_fn is not None
        with torch.no_grad():
            got, got_c = layer(x, state)
        torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got_c, want_c.detach(), rtol=1e-6, atol=1e-6)


def test_metagross_cell_runs_under_inference_mode():
    with torch.inference_mode():  # a METAGROSS cell built and run there
        cell = MetagrossCell(4, 4, depth=2)
        for batch in (2, cell_steps.MAX_BATCH + 1):  # the step op, and the tree's kernels
            x = torch.randn(batch, 4)
            h, state = cell(x)
            h2, _ = cell(x, state)
            assert h2.shape == (batch, 4)


#: Units whose layers run short calls without a graph by their cells' fused steps:
#: (name, factory(bidirectional, num_layers, batch_first), extra forward arguments(B)).
STEP_UNITS = {
    "rcrn": (lambda D2, L, bf, **kw: RCRN(5, 6, num_layers=L, bidirectional=D2,
                                          batch_first=bf, **kw), None),
    "icarnn": (lambda D2, L, bf, **kw: CARNN(5, 6, 3, "i", num_layers=L, bidirectional=D2,
                                             batch_first=bf, **kw), 3),
    "ncarnn": (lambda D2, L, bf, **kw: CARNN(5, 6, 3, "n", num_layers=L, bidirectional=D2,
                                             batch_first=bf, **kw), 3),
    "metagross": (lambda D2, L, bf, **kw: Metagross(5, 6, num_layers=L, bidirectional=D2,
                                                    batch_first=bf, residual=False, **kw), None),
    "qrnn": (lambda D2, L, bf, **kw: QRNN(5, 6, num_layers=L, bidirectional=D2,
                                          batch_first=bf, **kw), None),
    "qrnn ifo 3 dense": (lambda D2, L, bf, **kw: QRNN(5, 6, window=3, pooling="ifo",
                                                      dense=True, num_layers=L,
                                                      bidirectional=D2, batch_first=bf, **kw),
                         None),
    "qrnn f 2": (lambda D2, L, bf, **kw: QRNN(5, 6, window=2, pooling="f", bias=False,
                                              num_layers=L, bidirectional=D2, batch_first=bf,
                                              **kw), None),
    "metagross as printed": (lambda D2, L, bf, **kw: Metagross(5, 6, depth=3, gates="state",
                                                               num_layers=L, bidirectional=D2,
                                                               batch_first=bf, residual=False,
                                                               **kw), None),
    "metagross c 3": (lambda D2, L, bf, **kw: Metagross(5, 6, depth=3, recurrence="c",
                                                        num_layers=L, bidirectional=D2,
                                                        batch_first=bf, residual=False, **kw),
                      None),
}  # fmt: skip


@contextlib.contextmanager
def _served(owner: object, name: str) -> Iterator[list[bool]]:
    """For each call of the step path ``owner.name`` inside the block, whether it served the
    call (returned something, not None)."""
    taken: list[bool] = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        got = original(*args, **kwargs)
        taken.append(got is not None)
        return got

    setattr(owner, name, spy)
    try:
        yield taken
    finally:
        setattr(owner, name, original)


def _short_call(layer: RecurrentBase, x: object, context: torch.Tensor | None, hx: object,
                grad: bool = False) -> tuple[object, list[bool]]:  # fmt: skip
    """``layer(x, [context,] hx)``, and for each of its layers whether the step path
    (:meth:`RecurrentBase._layer_by_steps`) served it; with ``grad``, on the whole-sequence
    path (no call that records a graph runs by steps)."""
    args = (x,) if context is None else (x, context)
    with _served(RecurrentBase, "_layer_by_steps") as taken, torch.set_grad_enabled(grad), \
            pytest.MonkeyPatch.context() as patch:  # fmt: skip
        patch.setattr(base, "graph_steps_fit", lambda module, x: False)
        return layer(*args, hx=hx), taken


def _state(layer: RecurrentBase, B: int) -> object:
    L = layer.num_layers * layer.num_directions
    sizes = [layer.state_size(k) if hasattr(layer, "state_size") else layer.hidden_size
             for k in range(layer.num_states)]  # fmt: skip
    states = [torch.randn(L, B, n, dtype=D64) for n in sizes]
    return states[0] if len(states) == 1 else tuple(states)


@pytest.mark.parametrize("unit", sorted(STEP_UNITS))
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("T,B,with_state", [(1, 1, True), (3, 4, False), (8, 2, True)])
def test_short_calls_without_a_graph_take_one_step_op_per_step(
        unit, bidirectional, num_layers, batch_first, T, B, with_state):  # fmt: skip
    torch.manual_seed(5)
    make, ctx_size = STEP_UNITS[unit]
    layer = make(bidirectional, num_layers, batch_first).to(D64)
    x = torch.randn((B, T, 5) if batch_first else (T, B, 5), dtype=D64)
    context = None if ctx_size is None else torch.randn(B, ctx_size, dtype=D64)
    hx = _state(layer, B) if with_state else None
    (out, h_n), taken = _short_call(layer, x, context, hx)
    # (under CTRLRNN_BACKEND=reference no fused op exists: the whole-sequence path runs)
    assert taken == [not reference_forced()] * num_layers
    (want_out, want_h), _ = _short_call(layer, x, context, hx, grad=True)  # whole sequence
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    h_n = [h_n] if isinstance(h_n, torch.Tensor) else h_n
    want_h = [want_h] if isinstance(want_h, torch.Tensor) else want_h
    for a, b in zip(h_n, want_h, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert out.shape == want_out.shape and out.is_contiguous() == want_out.is_contiguous()


SKIPS = {"long": ("rcrn", {}), "batch": ("icarnn", {}), "gru": ("rcrn", dict(cell="gru")),
         "lengths": ("metagross", {}),
         "concat_forward": ("rcrn", dict(bidirectional=True, listener="concat_forward")),
         "weight_drop": ("ncarnn", dict(weight_drop=0.3)), "strided state": ("rcrn", {}),
         "scalar depth gates": ("metagross", dict(depth_gate="scalar")),
         "an RNN base": ("metagross", dict(base="lstm")),
         "non-causal windows": ("qrnn f 2", dict(causal=False)),
         "zoneout": ("qrnn", dict(zoneout=0.2))}  # fmt: skip


@pytest.mark.parametrize("why", sorted(SKIPS))
def test_short_calls_take_the_whole_sequence_path_where_steps_do_not_apply(why):
    torch.manual_seed(6)
    unit, kw = SKIPS[why]
    make, ctx_size = STEP_UNITS[unit]
    D2 = kw.pop("bidirectional", False)
    layer = make(D2, 1, True, **kw).to(D64)
    if why == "weight_drop":
        layer.train()
    if why == "zoneout":
        layer.eval()  # (eval's expected zoneout: deterministic, and still not the op's)
    T = 9 if why == "long" else 2
    B = 5 if why == "batch" else 2
    x = torch.randn(B, T, 5, dtype=D64)
    context = None if ctx_size is None else torch.randn(B, ctx_size, dtype=D64)
    hx = None
    if why == "strided state":
        hx = tuple(torch.randn(1, B, 12, dtype=D64)[..., ::2] for _ in range(7))
    if why == "lengths":
        x = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([2, 1]), batch_first=True)
    (out, _), taken = _short_call(layer, x, context, hx)
    assert taken == [False]
    if why != "weight_drop":  # (training draws fresh masks at every call)
        (want, _), _ = _short_call(layer, x, context, hx, grad=True)
        if why == "lengths":
            out, want = out.data, want.data
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 8])
def test_qrnn_chunks_of_a_stream_without_a_graph_carry_the_window_by_steps(T):
    """``forward_stateful`` (a decoder's chunks, the window's earlier inputs carried): chunks
    of T steps by the step path equal the whole stream in one call."""
    torch.manual_seed(7)
    layer = QRNN(5, 6, window=3, num_layers=2, batch_first=True).to(D64)
    x = torch.randn(2, 4 * T, 5, dtype=D64)
    want, _ = layer(x)
    state, outs = None, []
    with _served(RecurrentBase, "_layer_by_steps") as taken, torch.no_grad():
        for chunk in x.split(T, dim=1):
            out, state = layer.forward_stateful(chunk, state)
            outs.append(out)
    assert all(taken) == (not reference_forced()) and len(taken) == 8
    torch.testing.assert_close(torch.cat(outs, 1), want, rtol=1e-12, atol=1e-12)


CAS_OPTIONS = {"plain sum": {}, "lambda 0.3": {"lambda_": 0.3},
               "trainable": {"lambda_": "trainable"}, "peephole": {"peephole": True},
               "vector": {"lambda_": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]},
               "no bias": {"bias": False}}  # fmt: skip


def _cas_calls(layer: object, x: torch.Tensor, hx: object, grad: bool = False
               ) -> tuple[object, list[bool]]:  # fmt: skip
    from ctrlrnn.nn import cas_lstm

    with _served(cas_lstm, "stack_by_steps") as taken, torch.set_grad_enabled(grad):
        return layer(x, hx), taken


@pytest.mark.parametrize("options", sorted(CAS_OPTIONS))
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("T,B,with_state", [(1, 1, True), (3, 4, False), (8, 2, True)])
def test_cas_lstm_short_calls_without_a_graph_step_the_whole_stack(
        options, bidirectional, num_layers, T, B, with_state):  # fmt: skip
    """Every layer's step one op, the cell of the layer below at the same step as its
    ``c^{l-1}_t``: equal to the whole-sequence path, outputs and both final states."""
    from ctrlrnn import CASLSTM

    torch.manual_seed(8)
    layer = CASLSTM(6, 6, num_layers=num_layers, bidirectional=bidirectional,
                    batch_first=T != 3, **CAS_OPTIONS[options]).to(D64)  # fmt: skip
    D = 2 if bidirectional else 1
    x = torch.randn((B, T, 6) if T != 3 else (T, B, 6), dtype=D64)
    hx = tuple(torch.randn(num_layers * D, B, 6, dtype=D64) for _ in range(2)) \
        if with_state else None
    (out, (h_n, c_n)), taken = _cas_calls(layer, x, hx)
    assert taken == [not reference_forced()]
    (want, (want_h, want_c)), _ = _cas_calls(layer, x, hx, grad=True)
    for a, b in ((out, want), (h_n, want_h), (c_n, want_c)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_cas_lstm_short_calls_keep_the_whole_path_where_steps_do_not_apply():
    from ctrlrnn import CASLSTM

    torch.manual_seed(9)
    layer = CASLSTM(6, 6, num_layers=2, dropout=0.5, batch_first=True).to(D64)  # training
    x = torch.randn(2, 3, 6, dtype=D64)
    assert _cas_calls(layer, x, None)[1] == [False]  # dropout between layers to draw
    layer.eval()
    assert _cas_calls(layer, torch.randn(5, 3, 6, dtype=D64), None)[1] == [False]  # batch 5
    assert _cas_calls(layer, torch.randn(2, 9, 6, dtype=D64), None)[1] == [False]  # 9 steps
