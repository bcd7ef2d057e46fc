"""The fused steps' backward ops (ops/cell_step_grads) against the autograd of the steps'
readable references, and the steps that record a graph, which take them, through float64
``gradcheck``."""

from __future__ import annotations

import os

os.environ["CTRLRNN_REQUIRE_COMPILED"] = "1"  # a broken build must fail, not fall back

import pytest  # noqa: E402
import torch  # noqa: E402

from ctrlrnn.ops import backend, cell_step_grads  # noqa: E402
from ctrlrnn.ops.cell_step_grads.reference import (  # noqa: E402
    carnn_step_backward_ref,
    caslstm_step_backward_ref,
    metagross_step_backward_ref,
    qrnn_step_backward_ref,
    rcrn_cell_step_backward_ref,
)
from ctrlrnn.ops.cell_steps import reference  # noqa: E402

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def _ext():
    ext = backend.kernel_for("scan", torch.device("cpu"))
    if ext is None:
        pytest.skip("the compiled kernels are not available here")
    return ext


def _rnd(g: torch.Generator, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype) * 0.5


def _rcrn_operands(g, dtype, batch, D, H, bias):
    x = _rnd(g, dtype, batch, D)
    states = [_rnd(g, dtype, batch, H) for _ in range(7)]
    weights = [_rnd(g, dtype, 4 * H, D if j % 2 == 0 else H) for j in range(6)]
    biases = [_rnd(g, dtype, 4 * H) if bias else None for _ in range(6)]
    return x, states, weights, biases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sigmoid_gate", [True, False])
@pytest.mark.parametrize("batch,bias,D,H", [(1, True, 6, 5), (3, False, 6, 5), (4, True, 17, 9),
                                            (0, True, 3, 2), (2, True, 1, 1)])
@pytest.mark.parametrize("given", ["all", "h4 only", "states only", "none"])
def test_rcrn_cell_step_backward_equals_its_reference(dtype, sigmoid_gate, batch, bias, D, H,
                                                      given) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(batch + 10 * H)
    x, states, weights, biases = _rcrn_operands(g, dtype, batch, D, H, bias)
    out = ext.rcrn_cell_step(x, states, weights, biases, sigmoid_gate, True)
    plain = ext.rcrn_cell_step(x, states, weights, biases, sigmoid_gate)
    assert len(out) == 9 and len(plain) == 8 and out[8].shape == (batch, 3, 4 * H)
    for a, b in zip(out[:8], plain, strict=True):  # saving changes no result
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    wanted = {"all": range(8), "h4 only": [0], "states only": range(1, 8), "none": []}[given]
    grads = [_rnd(g, dtype, batch, H) if i in wanted else None for i in range(8)]
    got = ext.rcrn_cell_step_backward(grads, x, states, weights, out[1:8], out[8], sigmoid_gate)
    want = rcrn_cell_step_backward_ref(grads, x, states, weights, biases, sigmoid_gate)
    assert len(got) == len(want) == 17
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("sigmoid_gate", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_rcrn_step_that_records_a_graph_passes_gradcheck(sigmoid_gate, bias) -> None:
    _ext()
    g = torch.Generator().manual_seed(7)
    x, states, weights, biases = _rcrn_operands(g, torch.float64, 2, 3, 4, bias)
    given = [b for b in biases if b is not None]
    leaves = [t.requires_grad_() for t in (x, *states, *weights, *given)]
    ext = cell_step_grads.kernels(x, *states, *weights, *biases)
    assert ext is not None

    def run(x, *rest):
        bs = list(rest[13:]) if bias else [None] * 6
        return tuple(cell_step_grads.rcrn_cell_step_train(ext, x, rest[:7], rest[7:13], bs,
                                                          sigmoid_gate))  # fmt: skip

    assert torch.autograd.gradcheck(run, tuple(leaves))
    got = run(*leaves)
    want = reference.rcrn_cell_step_ref(x, states, weights, biases, sigmoid_gate)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_steps_that_record_a_graph_refuse_what_the_step_ops_refuse() -> None:
    _ext()
    x = torch.randn(2, 3)
    assert cell_step_grads.kernels(x) is not None  # grad enabled is no reason to refuse
    assert cell_step_grads.kernels(x.half()) is None
    assert cell_step_grads.kernels(torch.randn(3, 2).t()) is None  # not contiguous
    assert cell_step_grads.kernels(torch.randn(9, 3)) is None  # past the batch limit
    with torch.autograd.forward_ad.dual_level():
        assert cell_step_grads.kernels(x) is None


def _metagross_operands(g, dtype, batch, D, H, depth, printed, bias):
    N, I = 2**depth - 1, 2 ** (depth - 1) - 1
    return dict(
        x=_rnd(g, dtype, batch, D), state=_rnd(g, dtype, batch, H if printed else N * H),
        weight=_rnd(g, dtype, 3 * N * H, D), bias=_rnd(g, dtype, 3 * N * H) if bias else None,
        weight_hh=_rnd(g, dtype, 3 * N * H, H) if printed else None,
        depth_weight=_rnd(g, dtype, 2 * I, D) if I else None,
        depth_bias=_rnd(g, dtype, 2 * I) if I and bias else None)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("form", ["h", "c", "printed"])
@pytest.mark.parametrize("residual,bias,batch", [(True, True, 1), (False, False, 3),
                                                 (True, False, 4), (False, True, 0)])
@pytest.mark.parametrize("given", ["both", "h only", "last only"])
def test_metagross_step_backward_equals_its_reference(dtype, depth, form, residual, bias, batch,
                                                      given) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(depth + 7 * batch)
    printed, H = form == "printed", 9
    if printed and given == "last only":
        pytest.skip("as printed the step's state is its output h")
    ops = _metagross_operands(g, dtype, batch, H, H, depth, printed, bias)
    N, I, h_form = 2**depth - 1, 2 ** (depth - 1) - 1, form == "h"
    saved = torch.full((batch, 3 * N * H + 2 * I + N * H), float("nan"), dtype=dtype)
    if printed:
        h = ext.metagross_printed_step(*ops.values(), depth, residual, saved)
        assert torch.equal(h, ext.metagross_printed_step(*ops.values(), depth, residual))
    else:
        args = [v for k, v in ops.items() if k != "weight_hh"]
        h, last = ext.metagross_cell_step(*args, depth, h_form, residual, saved)
        plain = ext.metagross_cell_step(*args, depth, h_form, residual)
        assert torch.equal(h, plain[0]) and torch.equal(last, plain[1])
    assert not saved.isnan().any()  # every value written
    grad_h = _rnd(g, dtype, batch, H) if given != "last only" else None
    grad_last = _rnd(g, dtype, batch, N * H) if given != "h only" and not printed else None
    got = ext.metagross_step_backward(grad_h, grad_last, ops["x"], ops["state"], ops["weight"],
                                      ops["bias"], ops["weight_hh"], ops["depth_weight"], saved,
                                      depth, h_form, residual)  # fmt: skip
    want = metagross_step_backward_ref(grad_h, grad_last, *ops.values(), depth, h_form, residual)
    assert len(got) == len(want) == 7
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("printed", [False, True])
def test_metagross_step_that_records_a_graph_passes_gradcheck(printed) -> None:
    _ext()
    g = torch.Generator().manual_seed(8)
    ops = _metagross_operands(g, torch.float64, 2, 4, 4, 2, printed, True)
    names = [k for k, v in ops.items() if v is not None]
    ext = cell_step_grads.kernels(ops["x"], *ops.values())

    def run(*tensors):
        given = {**ops, **dict(zip(names, tensors, strict=True))}
        return tuple(cell_step_grads.metagross_step_train(ext, *given.values(), 2, not printed,
                                                          True))  # fmt: skip

    leaves = tuple(ops[k].requires_grad_() for k in names)
    assert torch.autograd.gradcheck(run, leaves)


def test_metagross_steps_refuse_a_saved_buffer_of_the_wrong_shape() -> None:
    ext, g = _ext(), torch.Generator().manual_seed(9)
    ops = _metagross_operands(g, torch.float32, 2, 4, 4, 2, False, True)
    args = [v for k, v in ops.items() if k != "weight_hh"]
    with pytest.raises(RuntimeError, match=r"saved: expected \(2, 50\)"):
        ext.metagross_cell_step(*args, 2, True, True, torch.empty(2, 49))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("vertical,mode,peephole", [(False, 0, False), (True, 0, False),
                                                    (True, 1, False), (True, 2, False),
                                                    (True, 0, True), (True, 2, True)])
@pytest.mark.parametrize("batch,bias", [(1, True), (3, False), (0, True)])
@pytest.mark.parametrize("given", ["both", "h only", "c only"])
def test_caslstm_step_backward_equals_its_reference(dtype, vertical, mode, peephole, batch,
                                                    bias, given) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(mode + 3 * batch)
    D, H = 7, 9
    G, G_hh = (5 if vertical else 4), (4 if peephole else (5 if vertical else 4))
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H), _rnd(g, dtype, batch, H),
            _rnd(g, dtype, batch, H) if vertical else None, _rnd(g, dtype, G * H, D),
            _rnd(g, dtype, G_hh * H, H), _rnd(g, dtype, G * H) if bias else None,
            torch.rand(H, generator=g, dtype=dtype) if mode == 2 else None,
            0.3 if mode == 1 else 0.0, mode, _rnd(g, dtype, 2, H) if peephole else None)
    saved = torch.full((batch, G * H), float("nan"), dtype=dtype)
    h_new, c_new = ext.caslstm_cell_step(*args, saved)
    plain = ext.caslstm_cell_step(*args)
    assert torch.equal(h_new, plain[0]) and torch.equal(c_new, plain[1])
    assert not saved.isnan().any()
    grad_h = _rnd(g, dtype, batch, H) if given != "c only" else None
    grad_c = _rnd(g, dtype, batch, H) if given != "h only" else None
    no_bias = tuple(a for k, a in enumerate(args) if k != 6)
    got = ext.caslstm_step_backward(grad_h, grad_c, *no_bias, c_new, saved)
    want = caslstm_step_backward_ref(grad_h, grad_c, *args)
    assert len(got) == len(want) == 9
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", ["n", "i", "s"])
@pytest.mark.parametrize("context,bias,batch", [(True, True, 1), (False, False, 3),
                                                (True, False, 4), (True, True, 0)])
@pytest.mark.parametrize("given", [True, False])
def test_carnn_step_backward_equals_its_reference(dtype, variant, context, bias, batch,
                                                  given) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(batch + 5 * len(variant))
    H, C = 6, 5
    D = H if variant == "s" else 7
    G = 2 if variant == "s" else 3
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H), _rnd(g, dtype, G * H, D),
            _rnd(g, dtype, G * H) if bias else None, _rnd(g, dtype, batch, C) if context else None,
            _rnd(g, dtype, 2 * H, C) if context else None,
            _rnd(g, dtype, 2 * H, H) if variant == "n" else None)
    saved = torch.full((batch, G * H), float("nan"), dtype=dtype)
    h_new = ext.carnn_cell_step(*args, saved)
    assert torch.equal(h_new, ext.carnn_cell_step(*args)) and not saved.isnan().any()
    grad_h = _rnd(g, dtype, batch, H) if given else None
    no_bias = tuple(a for k, a in enumerate(args) if k != 3)
    got = ext.carnn_step_backward(grad_h, *no_bias, saved)
    want = carnn_step_backward_ref(grad_h, *args)
    assert len(got) == len(want) == 7
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("window,batch,bias", [(1, 1, True), (2, 3, False), (3, 4, True),
                                               (2, 0, True)])
@pytest.mark.parametrize("given", ["all", "h only", "c and history"])
def test_qrnn_step_backward_equals_its_reference(dtype, mode, window, batch, bias,
                                                 given) -> None:  # fmt: skip
    ext, g = _ext(), torch.Generator().manual_seed(mode + 4 * window + batch)
    D, H, G = 5, 7, mode + 2
    args = (_rnd(g, dtype, batch, D), _rnd(g, dtype, batch, H),
            _rnd(g, dtype, batch, window - 1, D), _rnd(g, dtype, G * H, window * D),
            _rnd(g, dtype, G * H) if bias else None, mode)
    saved = torch.full((batch, G * H), float("nan"), dtype=dtype)
    h, c_new, history = ext.qrnn_cell_step(*args, saved)
    for a, b in zip((h, c_new, history), ext.qrnn_cell_step(*args), strict=True):
        assert torch.equal(a, b)
    assert not saved.isnan().any()
    grads = [_rnd(g, dtype, *t.shape) if given == "all" or (given == "h only" and k == 0)
             or (given == "c and history" and k > 0) else None
             for k, t in enumerate((h, c_new, history))]  # fmt: skip
    x, c, hist, weight, b, _ = args
    got = ext.qrnn_step_backward(*grads, x, c, hist, weight, mode, c_new, saved)
    want = qrnn_step_backward_ref(*grads, x, c, hist, weight, b, mode)
    assert len(got) == len(want) == 5
    for a, b_ in zip(got, want, strict=True):
        assert a.shape == b_.shape
        torch.testing.assert_close(a, b_, **TOL[dtype])
