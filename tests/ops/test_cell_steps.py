"""The fused cell-step ops (ops/cell_steps) against their readable references, and the cells'
no-grad steps, which take them, against the cells' written-out steps."""

from __future__ import annotations

import contextlib
import itertools
import os

os.environ["CTRLRNN_REQUIRE_COMPILED"] = "1"  # a broken build must fail, not fall back

import pytest  # noqa: E402
import torch  # noqa: E402

import ctrlrnn  # noqa: E402
from ctrlrnn.ops import backend, cell_steps, scan_export  # noqa: E402
from ctrlrnn.ops.cell_steps import reference  # noqa: E402

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}
CPU = torch.device("cpu")


def _ext():
    ext = backend.kernel_for("scan", CPU)
    if ext is None:
        pytest.skip("the compiled kernels are not available here")
    return ext


def _rnd(g: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype) * 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("window,batch,bias", [(1, 1, True), (2, 1, True), (3, 3, False)])
def test_qrnn_cell_step_equals_its_reference(dtype, mode, window, batch, bias) -> None:
    ext, g = _ext(), torch.Generator().manual_seed(mode + 3 * window)
    D, H, G = 5, 7, mode + 2
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H),
            _rnd(g, dtype, batch, window - 1, D), _rnd(g, dtype, G * H, window * D),
            _rnd(g, dtype, G * H) if bias else None, mode)
    for got, want in zip(ext.qrnn_cell_step(*args), reference.qrnn_cell_step_ref(*args)):
        torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("D,H", [(1, 1), (3, 2), (4, 4), (7, 3), (8, 8), (9, 5), (16, 12),
                                 (17, 13), (33, 20)])
def test_step_products_at_every_block_boundary(dtype, D, H) -> None:
    """The steps' matrix-vector products take rows in blocks of a vector's lanes (4 or 8) and
    columns likewise, with remainders: sizes below, at and past each boundary."""
    ext, g = _ext(), torch.Generator().manual_seed(D * 100 + H)
    for window in (1, 2):
        args = (_rnd(g, dtype, 2, D), _rnd(g, dtype, 2, H), _rnd(g, dtype, 2, window - 1, D),
                _rnd(g, dtype, 4 * H, window * D), _rnd(g, dtype, 4 * H), 2)
        for got, want in zip(ext.qrnn_cell_step(*args), reference.qrnn_cell_step_ref(*args)):
            torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sigmoid_gate", [True, False])
@pytest.mark.parametrize("batch,bias", [(1, True), (3, False)])
def test_rcrn_cell_step_equals_its_reference(dtype, sigmoid_gate, batch, bias) -> None:
    ext, g = _ext(), torch.Generator().manual_seed(batch)
    D, H = 6, 5
    states = [_rnd(g, dtype, batch, H) for _ in range(7)]
    weights = [_rnd(g, dtype, 4 * H, D if j % 2 == 0 else H) for j in range(6)]
    biases = [_rnd(g, dtype, 4 * H) if bias else None for _ in range(6)]
    x = _rnd(g, dtype, batch, D)
    got = ext.rcrn_cell_step(x, states, weights, biases, sigmoid_gate)
    want = reference.rcrn_cell_step_ref(x, states, weights, biases, sigmoid_gate)
    assert len(got) == len(want) == 8
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", ["n", "i", "s"])
@pytest.mark.parametrize("context,bias,batch", [(True, True, 1), (False, False, 2)])
def test_carnn_cell_step_equals_its_reference(dtype, variant, context, bias, batch) -> None:
    ext, g = _ext(), torch.Generator().manual_seed(batch)
    H, C = 6, 4
    D = H if variant == "s" else 5
    G = 2 if variant == "s" else 3
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H), _rnd(g, dtype, G * H, D),
            _rnd(g, dtype, G * H) if bias else None, _rnd(g, dtype, batch, C) if context else None,
            _rnd(g, dtype, 2 * H, C) if context else None,
            _rnd(g, dtype, 2 * H, H) if variant == "n" else None)
    torch.testing.assert_close(ext.carnn_cell_step(*args), reference.carnn_cell_step_ref(*args),
                               **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("depth,h_form,residual,bias", [
    (1, True, True, True), (2, True, True, True), (2, False, False, False), (3, False, True, True)])
def test_metagross_cell_step_equals_its_reference(dtype, depth, h_form, residual, bias) -> None:
    ext, g = _ext(), torch.Generator().manual_seed(depth)
    B, H, N, I = 2, 5, 2**depth - 1, 2 ** (depth - 1) - 1
    args = (_rnd(g, dtype, B, H), _rnd(g, dtype, B, N * H), _rnd(g, dtype, 3 * N * H, H),
            _rnd(g, dtype, 3 * N * H) if bias else None, _rnd(g, dtype, 2 * I, H) if I else None,
            _rnd(g, dtype, 2 * I) if I and bias else None, depth, h_form, residual)
    for got, want in zip(ext.metagross_cell_step(*args), reference.metagross_cell_step_ref(*args)):
        torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("depth,residual,bias,batch", [
    (1, True, True, 1), (2, True, True, 2), (2, False, False, 1), (3, False, True, 3),
    (3, True, False, 4)])
def test_metagross_printed_step_equals_its_reference(dtype, depth, residual, bias,
                                                     batch) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(10 + depth)
    H, N, I = 5, 2**depth - 1, 2 ** (depth - 1) - 1
    D = H if residual else 3
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H), _rnd(g, dtype, 3 * N * H, D),
            _rnd(g, dtype, 3 * N * H) if bias else None, _rnd(g, dtype, 3 * N * H, H),
            _rnd(g, dtype, 2 * I, D) if I else None, _rnd(g, dtype, 2 * I) if I and bias else None,
            depth, residual)
    got, want = ext.metagross_printed_step(*args), reference.metagross_printed_step_ref(*args)
    torch.testing.assert_close(got, want, **TOL[dtype])
    assert got.shape == (batch, H)


def test_the_ops_fail_loudly_on_what_they_do_not_serve() -> None:
    ext = _ext()
    x, c = torch.randn(1, 4), torch.randn(1, 3)
    with pytest.raises(RuntimeError, match="contiguous"):
        ext.qrnn_cell_step(x, c, torch.randn(1, 1, 4), torch.randn(12, 8).t().contiguous().t(),
                           None, 1)
    with pytest.raises(RuntimeError, match="dtype"):
        ext.carnn_cell_step(x, c.double(), torch.randn(9, 4), None, None, None, None)
    w_ih, w_hh = torch.randn(12, 4), torch.randn(12, 3)
    with pytest.raises(RuntimeError, match="shapes disagree"):  # peepholes on the first layer
        ext.caslstm_cell_step(x, c, c, None, w_ih, w_hh, None, None, 0.0, 0, torch.randn(2, 3))
    with pytest.raises(RuntimeError, match="lambda_mode"):
        ext.caslstm_cell_step(x, c, c, None, w_ih, w_hh, None, None, 0.0, 3, None)
    h = torch.randn(1, 4)  # METAGROSS as printed, depth 1: U must be (3H, H)
    with pytest.raises(RuntimeError, match="shapes disagree"):
        ext.metagross_printed_step(x, h, torch.randn(12, 4), None, torch.randn(12, 3), None, None,
                                   1, True)
    with pytest.raises(RuntimeError, match="weight_hh: expected a contiguous"):
        ext.metagross_printed_step(x, h, torch.randn(12, 4), None, torch.randn(4, 12).t(), None,
                                   None, 1, True)


def _close(got, want, dtype: torch.dtype, msg: str) -> None:
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    assert len(got) == len(want), msg
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=msg)


#: Widths past the kernels' 16 accumulator lanes, so that their vector loop and its tail both run.
WIDE_D, WIDE_H, WIDE_C = 37, 19, 17


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_op_equals_its_reference_at_every_batch_up_to_max_batch(dtype) -> None:
    """Every option each op claims, batch 1..MAX_BATCH, widths past the vector lanes."""
    ext, g = _ext(), torch.Generator().manual_seed(11)
    D, H, C = WIDE_D, WIDE_H, WIDE_C
    r = lambda *shape: _rnd(g, dtype, *shape)  # noqa: E731
    for B in range(1, cell_steps.MAX_BATCH + 1):
        for mode, window, bias in itertools.product(range(3), (1, 2, 4), (True, False)):
            G = mode + 2
            args = (r(B, D), r(B, H), r(B, window - 1, D), r(G * H, window * D),
                    r(G * H) if bias else None, mode)
            _close(ext.qrnn_cell_step(*args), reference.qrnn_cell_step_ref(*args), dtype,
                   f"qrnn mode={mode} window={window} bias={bias} B={B}")
        for sigmoid_gate, bias in itertools.product((True, False), (True, False)):
            x, states = r(B, D), [r(B, H) for _ in range(7)]
            weights = [r(4 * H, D if j % 2 == 0 else H) for j in range(6)]
            biases = [r(4 * H) if bias else None for _ in range(6)]
            _close(ext.rcrn_cell_step(x, states, weights, biases, sigmoid_gate),
                   reference.rcrn_cell_step_ref(x, states, weights, biases, sigmoid_gate),
                   dtype, f"rcrn sigmoid_gate={sigmoid_gate} bias={bias} B={B}")
        for variant, context, bias in itertools.product("nis", (True, False), (True, False)):
            Dv, G = (H, 2) if variant == "s" else (D, 3)
            args = (r(B, Dv), r(B, H), r(G * H, Dv), r(G * H) if bias else None,
                    r(B, C) if context else None, r(2 * H, C) if context else None,
                    r(2 * H, H) if variant == "n" else None)
            _close(ext.carnn_cell_step(*args), reference.carnn_cell_step_ref(*args), dtype,
                   f"carnn variant={variant} context={context} bias={bias} B={B}")
        for depth, h_form, residual, bias in itertools.product((1, 2, 3), (True, False),
                                                               (True, False), (True, False)):
            N, I = 2**depth - 1, 2 ** (depth - 1) - 1
            Dm = H if residual else D
            args = (r(B, Dm), r(B, N * H), r(3 * N * H, Dm), r(3 * N * H) if bias else None,
                    r(2 * I, Dm) if I else None, r(2 * I) if I and bias else None, depth,
                    h_form, residual)
            _close(ext.metagross_cell_step(*args), reference.metagross_cell_step_ref(*args),
                   dtype, f"metagross depth={depth} h_form={h_form} residual={residual} "
                          f"bias={bias} B={B}")
        for vertical, peephole, mode, bias in itertools.product(
                (False, True), (False, True), (0, 1, 2), (True, False)):
            if not vertical and (peephole or mode):
                continue
            G = 5 if vertical else 4
            args = (r(B, D), r(B, H), r(B, H), r(B, H) if vertical else None, r(G * H, D),
                    r((4 if peephole else G) * H, H), r(G * H) if bias else None,
                    torch.rand(H, generator=g, dtype=dtype) if mode == 2 else None, 0.3, mode,
                    r(2, H) if peephole else None)
            _close(ext.caslstm_cell_step(*args), reference.caslstm_cell_step_ref(*args), dtype,
                   f"caslstm vertical={vertical} peephole={peephole} lambda_mode={mode} "
                   f"bias={bias} B={B}")


def _cells(dtype: torch.dtype, D: int, H: int, C: int) -> list[tuple[str, torch.nn.Module, int]]:
    """(name, cell, context width or 0) for each cell configuration with a fused step."""
    torch.manual_seed(0)
    cells = [("qrnn fo", ctrlrnn.QRNNCell(D, H), 0),
             ("qrnn ifo 3", ctrlrnn.QRNNCell(D, H, window=3, pooling="ifo", bias=False), 0),
             ("qrnn f 1", ctrlrnn.QRNNCell(D, H, window=1, pooling="f"), 0),
             ("rcrn", ctrlrnn.RCRNCell(D, H), 0),
             ("rcrn identity", ctrlrnn.RCRNCell(D, H, output_gate="identity", bias=False), 0),
             ("ncarnn", ctrlrnn.CARNNCell(D, H, C, "n"), C),
             ("icarnn", ctrlrnn.CARNNCell(D, H, C, "i", bias=False), C),
             ("icarnn no context", ctrlrnn.CARNNCell(D, H, None, "i"), 0),
             ("scarnn", ctrlrnn.CARNNCell(H, H, None, "s"), 0),
             ("metagross", ctrlrnn.MetagrossCell(H, H), 0),
             ("metagross c", ctrlrnn.MetagrossCell(H, H, recurrence="c"), 0),
             ("metagross c 3", ctrlrnn.MetagrossCell(D, H, depth=3, recurrence="c",
                                                     residual=False, bias=False), 0),
             ("metagross 1", ctrlrnn.MetagrossCell(H, H, depth=1), 0),
             ("metagross as printed", ctrlrnn.MetagrossCell(H, H, gates="state"), 0),
             ("metagross as printed 3", ctrlrnn.MetagrossCell(D, H, depth=3, gates="state",
                                                              residual=False, bias=False), 0),
             ("caslstm first", ctrlrnn.CASLSTMCell(D, H, vertical=False), 0),
             ("caslstm", ctrlrnn.CASLSTMCell(D, H), 0),
             ("caslstm lambda 0.3", ctrlrnn.CASLSTMCell(D, H, lambda_=0.3, bias=False), 0),
             ("caslstm trainable", ctrlrnn.CASLSTMCell(D, H, lambda_="trainable"), 0),
             ("caslstm peephole", ctrlrnn.CASLSTMCell(D, H, peephole=True), 0)]
    return [(n, m.to(dtype), c) for n, m, c in cells]


def _input_size(cell: torch.nn.Module) -> int:
    return cell.unit.input_size if isinstance(cell, ctrlrnn.MetagrossCell) else cell.input_size


def _flat(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    return [t for o in out for t in _flat(o)]  # type: ignore[attr-defined]


def _detached(state: object) -> object:
    if isinstance(state, torch.Tensor):
        return state.detach()
    return tuple(_detached(s) for s in state)  # type: ignore[attr-defined]


def _run(cell: torch.nn.Module, xs: torch.Tensor, ctx: torch.Tensor | None, grad: bool,
         state: object = None) -> tuple[list[torch.Tensor], list[bool]]:
    """Every output and state of ``len(xs)`` steps from ``state``, and for each step whether a
    fused op served it (:func:`cell_steps.kernels` gave the extension); with ``grad``, the
    written-out steps (the fused steps that record a graph, ops/cell_step_grads, refused)."""
    outs, taken = [], []
    kernels = cell_steps.kernels
    seen: list[bool] = []

    def spy(*args, graph=False):
        ext = None if graph and grad else kernels(*args, graph=graph)
        seen.append(ext is not None)
        return ext

    cell_steps.kernels = spy
    try:
        for x in xs:
            seen.clear()
            with torch.set_grad_enabled(grad):
                if isinstance(cell, ctrlrnn.CARNNCell):
                    out = cell(x, ctx, h=state)
                    state = out.detach()
                elif isinstance(cell, ctrlrnn.CASLSTMCell):
                    low = _lower_cell(x, cell.hidden_size) if cell.vertical else None
                    out = cell(x, low, state)
                    state = _detached(out[1])
                else:
                    out = cell(x, state)
                    state = _detached(out[1])
            outs += _flat(out)
            taken.append(any(seen))
    finally:
        cell_steps.kernels = kernels
    return outs, taken


def _lower_cell(x: torch.Tensor, H: int) -> torch.Tensor:
    """A lower layer's cell for a CAS-LSTM step on ``x``: a function of ``x``, contiguous."""
    return torch.cos(x.sum(-1, keepdim=True) * torch.arange(1, H + 1, dtype=x.dtype))


def _inputs(cell: torch.nn.Module, C: int, batch: int | None, dtype: torch.dtype, steps: int = 3):
    lead = () if batch is None else (batch,)
    xs = torch.randn(steps, *lead, _input_size(cell), dtype=dtype)
    return xs, (torch.randn(*lead, C, dtype=dtype) if C else None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [None, 0, 1, 2, cell_steps.MAX_BATCH])
@pytest.mark.parametrize("wide", [False, True])
def test_cells_no_grad_steps_equal_their_written_out_steps(dtype, batch, wide) -> None:
    """Three steps without grad (the fused op) against the same steps with grad (the
    written-out step), from the same states; ``batch`` None is an unbatched input, 0 an empty
    batch."""
    _ext()
    D, H, C = (WIDE_D, WIDE_H, WIDE_C) if wide else (5, 6, 4)
    for name, cell, c in _cells(dtype, D, H, C):
        xs, ctx = _inputs(cell, c, batch, dtype)
        fused, taken = _run(cell, xs, ctx, grad=False)
        written, not_taken = _run(cell, xs, ctx, grad=True)
        # the fused op served every step from a state (the first, from none, may run the
        # written-out step), and none with grad
        assert all(taken[1:]) and not any(not_taken), (name, taken, not_taken)
        _close(fused, written, dtype, name)
        per_step = len(fused) // len(xs)
        for step, x in enumerate(xs):  # each step's output first: unbatched in, unbatched out
            assert fused[step * per_step].shape == (*x.shape[:-1], H), name


def _ref_backend(monkeypatch):
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    return contextlib.nullcontext()


def _autocast(monkeypatch):
    return torch.autocast("cpu", dtype=torch.bfloat16)


#: Where a no-grad step must not take the fused op: (the context it runs in, whether its
#: results equal the written-out step's in the cell's dtype).
FALLBACKS = {
    "reference backend": (_ref_backend, True),
    "forward-mode AD": (lambda mp: torch.autograd.forward_ad.dual_level(), True),
    "autocast": (_autocast, False),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_the_written_out_step_runs_where_the_op_does_not_apply(case, monkeypatch) -> None:
    _ext()
    context, exact = FALLBACKS[case]
    for name, cell, c in _cells(torch.float32, 5, 6, 4):
        xs, ctx = _inputs(cell, c, 2, torch.float32)
        written, _ = _run(cell, xs, ctx, grad=True)
        with context(monkeypatch):
            got, taken = _run(cell, xs, ctx, grad=False)
        monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
        assert not any(taken), (case, name)
        if exact:
            _close(got, written, torch.float32, f"{case}: {name}")


def test_the_written_out_step_runs_past_max_batch_and_on_strided_states() -> None:
    _ext()
    for name, cell, c in _cells(torch.float64, 5, 6, 4):
        xs, ctx = _inputs(cell, c, cell_steps.MAX_BATCH + 1, torch.float64)
        got, taken = _run(cell, xs, ctx, grad=False)
        assert not any(taken), name
        _close(got, _run(cell, xs, ctx, grad=True)[0], torch.float64, name)
    cell = ctrlrnn.QRNNCell(5, 6).double()
    xs = torch.randn(2, 1, 5, dtype=torch.float64)
    state = (torch.randn(1, 12, dtype=torch.float64)[:, ::2], torch.zeros(1, 1, 5).double())
    got, taken = _run(cell, xs, None, grad=False, state=state)
    assert taken == [False, True], taken  # the strided c refused, the step's own output taken
    _close(got, _run(cell, xs, None, grad=True, state=state)[0], torch.float64, "strided c")


def test_inference_mode_takes_the_op() -> None:
    _ext()
    for name, cell, c in _cells(torch.float32, 5, 6, 4):
        xs, ctx = _inputs(cell, c, 1, torch.float32)
        written, _ = _run(cell, xs, ctx, grad=True)
        with torch.inference_mode():
            got, taken = _run(cell, xs, ctx, grad=False)
        assert all(taken[1:]), name
        _close(got, written, torch.float32, name)


def test_cell_options_the_op_does_not_serve_run_the_written_out_step() -> None:
    """Zoneout and eq 7's encoder term (QRNN), GRU cells (RCRN), depth gates other than the
    token gates, an RNN base and a projected residual (METAGROSS)."""
    _ext()
    torch.manual_seed(1)
    D, H = 5, 6
    qz = ctrlrnn.QRNNCell(D, H, zoneout=0.2).eval()
    cells = [("qrnn zoneout", qz), ("rcrn gru", ctrlrnn.RCRNCell(D, H, cell="gru")),
             ("metagross scalar", ctrlrnn.MetagrossCell(H, H, depth_gate="scalar")),
             ("metagross lstm base", ctrlrnn.MetagrossCell(H, H, base="lstm")),
             ("metagross projected residual", ctrlrnn.MetagrossCell(D, H))]
    for name, cell in cells:
        xs, _ = _inputs(cell, 0, 2, torch.float32)
        got, taken = _run(cell, xs, None, grad=False)
        assert not any(taken), name
        _close(got, _run(cell, xs, None, grad=True)[0], torch.float32, name)
    enc = ctrlrnn.QRNNCell(D, H, encoder_state_size=3)
    with torch.no_grad():
        seen = []
        kernels = cell_steps.kernels
        cell_steps.kernels = lambda *a: seen.append(a) or kernels(*a)
        try:
            enc(torch.randn(2, D), None, torch.randn(2, 3))
        finally:
            cell_steps.kernels = kernels
    assert not seen  # eq 7's term: the op is not asked


def test_the_fused_step_is_refused_where_it_does_not_apply() -> None:
    _ext()
    x = torch.randn(1, 4)
    w = torch.randn(8, 4, requires_grad=True)
    assert cell_steps.kernels(x, w) is None  # a graph can be recorded
    with torch.no_grad():
        assert cell_steps.kernels(x, w) is not None
        assert cell_steps.kernels(x, None, w) is not None  # an absent optional operand
        assert cell_steps.kernels(torch.randn(cell_steps.MAX_BATCH + 1, 4)) is None
        assert cell_steps.kernels(x, w.double()) is None
        assert cell_steps.kernels(x.half()) is None
        assert cell_steps.kernels(x.bfloat16()) is None
        assert cell_steps.kernels(x, w.t()) is None
        assert cell_steps.kernels(torch.randn(4, 2).t()) is None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert cell_steps.kernels(x, w) is None
        with torch.autograd.forward_ad.dual_level():
            assert cell_steps.kernels(x, w) is None
        seen = []
        torch.func.vmap(lambda t: seen.append(cell_steps.kernels(t)) or t)(torch.randn(3, 1, 4))
        assert seen == [None]  # a torch.func transform
        with scan_export.scan_mode():
            assert cell_steps.kernels(x, w) is None  # an ONNX export's scan path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("steps,batch", [(0, 2), (1, 1), (3, 4), (5, 0)])
@pytest.mark.parametrize("sigmoid_gate,bias", [(True, True), (False, False)])
def test_rcrn_cell_step_over_several_steps_equals_one_call_each(
        dtype, steps, batch, sigmoid_gate, bias) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(steps + 10 * batch)
    D, H = 6, 5
    states = [_rnd(g, dtype, batch, H) for _ in range(7)]
    weights = [_rnd(g, dtype, 4 * H, D if j % 2 == 0 else H) for j in range(6)]
    biases = [_rnd(g, dtype, 4 * H) if bias else None for _ in range(6)]
    xs = _rnd(g, dtype, steps, batch, D)
    got = ext.rcrn_cell_step(xs, states, weights, biases, sigmoid_gate)
    assert got[0].shape == (steps, batch, H)
    st, hs = states, []
    for t in range(steps):
        out = ext.rcrn_cell_step(xs[t].contiguous(), st, weights, biases, sigmoid_gate)
        hs.append(out[0])
        st = out[1:]
    want_h = torch.stack(hs) if hs else xs.new_empty(0, batch, H)
    torch.testing.assert_close(got[0], want_h, rtol=0, atol=0)
    for a, b in zip(got[1:], st, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"\(T, B, D\) without save"):
        ext.rcrn_cell_step(xs, states, weights, biases, sigmoid_gate, True)
