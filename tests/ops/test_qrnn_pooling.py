"""qrnn_pooling (f-, fo- and ifo-pooling, QRNN paper eq 3-6): the compiled path against the
reference, gradients, its hand-written reference backward, the eager path
(:mod:`ctrlrnn.ops.compiled_op`), errors.

The non-finite and empty-shape cases of the op are in ``test_nonfinite.py`` and
``test_empty_shapes.py`` with those of every op; its Triton kernels in
``tests/gpu/test_triton_qrnn_pooling.py``; the QRNN layer in ``tests/nn/test_qrnn.py``.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from ctrlrnn.ops import compiled_op, kernel_op
from ctrlrnn.ops.backend import kernel_for
from ctrlrnn.ops.qrnn_pooling.reference import qrnn_pooling_ref_backward

# the module (``ctrlrnn.ops.qrnn_pooling`` the attribute is the function of the same name)
qrnn_mod = importlib.import_module("ctrlrnn.ops.qrnn_pooling")
POOLINGS = list(qrnn_mod.POOLING_MODES)


def _inputs(pooling, dtype, extras, B=3, T=6, H=5, seed=0):
    """``(gates, c0, kwargs)``; ``extras``: an initial cell, a zoneout keep mask with its scale,
    and lengths with a zero among them."""
    g = torch.Generator().manual_seed(seed)
    G = qrnn_mod.GATES_PER_MODE[pooling]
    gates = (2 * torch.randn(B, T, G * H, generator=g, dtype=dtype)).requires_grad_()
    if not extras:
        return gates, None, dict(pooling=pooling)
    c0 = torch.randn(B, H, generator=g, dtype=dtype).requires_grad_()
    keep = (torch.rand(B, T, H, generator=g) > 0.3).to(dtype)
    lengths = torch.tensor([T, 0, T // 2])[:B]
    return gates, c0, dict(pooling=pooling, keep=keep, keep_scale=0.75, lengths=lengths)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "c0-keep-lengths"])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_matches_reference(pooling, extras, dtype):
    gates, c0, kw = _inputs(pooling, dtype, extras)
    outs = qrnn_mod.qrnn_pooling(gates, c0, **kw)
    ref = qrnn_mod.qrnn_pooling_ref(gates, c0, **kw)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=1e-12)
    for x, y in zip(outs, ref, strict=True):
        assert x.dtype == dtype
        torch.testing.assert_close(x, y, **tol)
    g = torch.Generator().manual_seed(1)
    ws = [torch.randn(x.shape, generator=g, dtype=dtype) for x in outs]
    leaves = [t for t in (gates, c0) if t is not None]
    got = torch.autograd.grad(outs, leaves, ws)
    want = torch.autograd.grad(ref, leaves, ws)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, **tol)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_gradcheck(pooling):
    gates, c0, kw = _inputs(pooling, torch.float64, True, B=3, T=4, H=2)

    def f(gates, c0):
        return qrnn_mod.qrnn_pooling(gates, c0, **kw)

    assert torch.autograd.gradcheck(f, (gates, c0))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_reference_backward_equals_compiled(pooling):
    """The written-out backward of the reference path equals the compiled kernel's."""
    gates, c0, kw = _inputs(pooling, torch.float64, True)
    mode = qrnn_mod.POOLING_MODES[pooling]
    gates, c0 = gates.detach(), c0.detach()
    _h, c_seq, _last = qrnn_mod.qrnn_pooling(gates, c0, **kw)
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(s, generator=g, dtype=torch.float64) for s in ((3, 6, 5),) * 2 + ((3, 5),)]
    args = (gates, c_seq, c0, kw["keep"], kw["keep_scale"], kw["lengths"], mode)
    ext = kernel_for("scan", gates.device)
    x = ext.qrnn_pooling_backward(*grads, *args)
    y = qrnn_pooling_ref_backward(*grads, *args)
    for p, q in zip(x, y, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "c0-keep-lengths"])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_bias_added_in_the_kernel(pooling, extras, dtype):
    """``bias`` (eq 1-2's ``b``) is the pooling of ``gates + bias``: values and gradients, the
    bias's own (``dgates`` summed over batch and steps) included; gradcheck in float64; the
    written-out reference backward takes it too."""
    gates, c0, kw = _inputs(pooling, dtype, extras)
    G, H = qrnn_mod.GATES_PER_MODE[pooling], gates.shape[2] // qrnn_mod.GATES_PER_MODE[pooling]
    bias = torch.randn(G * H, generator=torch.Generator().manual_seed(3), dtype=dtype)
    bias.requires_grad_()
    outs = qrnn_mod.qrnn_pooling(gates, c0, bias=bias, **kw)
    ref = qrnn_mod.qrnn_pooling_ref(gates + bias, c0, **kw)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=1e-12)
    for x, y in zip(outs, ref, strict=True):
        torch.testing.assert_close(x, y, **tol)
    g = torch.Generator().manual_seed(1)
    ws = [torch.randn(x.shape, generator=g, dtype=dtype) for x in outs]
    leaves = [t for t in (gates, c0, bias) if t is not None]
    got = torch.autograd.grad(outs, leaves, ws)
    want = torch.autograd.grad(ref, leaves, ws)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, **tol)
    torch.testing.assert_close(got[-1], got[0].sum((0, 1)), **tol)
    if dtype == torch.float64 and extras:
        small = [t.detach()[:, :4].requires_grad_() for t in (gates,)] + [c0, bias]
        kw4 = dict(kw, keep=kw["keep"][:, :4], lengths=kw["lengths"].clamp(max=4))
        assert torch.autograd.gradcheck(
            lambda g_, c_, b_: qrnn_mod.qrnn_pooling(g_, c_, bias=b_, **kw4), tuple(small)
        )
        mode = qrnn_mod.POOLING_MODES[pooling]
        _h, c_seq, _last = qrnn_mod.qrnn_pooling(gates, c0, bias=bias, **kw)
        args = (gates.detach(), c_seq.detach(), c0.detach(), kw["keep"], kw["keep_scale"],
                kw["lengths"], mode, bias.detach())  # fmt: skip
        grads = [w.detach() for w in ws]
        x = kernel_for("scan", gates.device).qrnn_pooling_backward(*grads, *args)
        y = qrnn_pooling_ref_backward(*grads, *args)
        for p, q in zip(x, y, strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


def test_bias_bad_shape_and_opcheck():
    gates, c0, kw = _inputs("fo", torch.float32, True)
    with pytest.raises(ValueError, match="bias: expected shape"):
        qrnn_mod.qrnn_pooling(gates, c0, bias=torch.zeros(7), **kw)
    with pytest.raises(ValueError, match="bias: expected dtype"):
        qrnn_mod.qrnn_pooling(gates, c0, bias=torch.zeros(15, dtype=torch.float64), **kw)
    args = (gates, c0, kw["keep"], kw["keep_scale"], kw["lengths"], 1, torch.randn(15))
    torch.library.opcheck(torch.ops.ctrlrnn.qrnn_pooling.default, args)


def test_opcheck():
    for pooling, mode in qrnn_mod.POOLING_MODES.items():
        gates, c0, kw = _inputs(pooling, torch.float32, True)
        args = (gates, c0, kw["keep"], kw["keep_scale"], kw["lengths"], mode)
        torch.library.opcheck(torch.ops.ctrlrnn.qrnn_pooling.default, args)
    gates, _, _ = _inputs("fo", torch.float32, False)
    torch.library.opcheck(torch.ops.ctrlrnn.qrnn_pooling.default, (gates, None, None, 1.0, None, 1))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(pooling="fio"), "pooling: expected one of"),
        (dict(gates=torch.zeros(2, 5, 7)), r"gates: expected \(B, T, 3\*H\)"),
        (dict(gates=torch.zeros(10, 12)), "gates: expected"),
        (dict(c0=torch.zeros(2, 3)), "c0: expected shape"),
        (dict(c0=torch.zeros(2, 4, dtype=torch.float64)), "c0: expected shape .* and dtype"),
        (dict(keep=torch.ones(2, 4, 4)), "keep: expected shape"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(gates=torch.zeros(2, 5, 12), pooling="fo")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        qrnn_mod.qrnn_pooling(args.pop("gates"), **args)


# ------------------------------------------------------------------------------------------------
# the eager path: outside tracing the op runs the custom op's implementation and autograd formula
# through a plain autograd.Function, bit for bit the custom op's values and gradients
# ------------------------------------------------------------------------------------------------


def _spy(monkeypatch, owner, name):
    calls = []
    op = getattr(owner, name)

    def counted(*args):
        calls.append(1)
        return op(*args)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _pool_grads():
    g = torch.Generator().manual_seed(1)
    gates = torch.randn(2, 5, 4 * 4, dtype=torch.float64, generator=g).requires_grad_()
    c0 = torch.randn(2, 4, dtype=torch.float64, generator=g).requires_grad_()
    h, c, last = qrnn_mod.qrnn_pooling(gates, c0, pooling="ifo", lengths=torch.tensor([5, 2]))
    (h.sum() + c.square().sum() + last.sum()).backward()
    return h, c, last, gates.grad, c0.grad


def test_eager_path_equals_the_custom_op(monkeypatch):
    calls = _spy(monkeypatch, qrnn_mod._qrnn_pooling, "op")
    eager_run = _pool_grads()
    assert calls == []  # eager: the custom op was not called
    monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    op_run = _pool_grads()
    assert calls == [1]
    for x, y in zip(eager_run, op_run):
        assert torch.equal(x, y)


def _record_backward_grads(monkeypatch, module):
    """The arguments of each backward kernel call ``module``'s autograd formula makes (the
    implementation or the backward custom op, whichever :func:`compiled_op.backward_of` picks)."""
    seen: list[tuple] = []
    pick = module.backward_of

    def recording_pick(op, impl, *args):
        chosen = pick(op, impl, *args)

        def recording(*call_args):
            seen.append(call_args)
            return chosen(*call_args)

        return recording

    monkeypatch.setattr(module, "backward_of", recording_pick)
    return seen


@pytest.mark.parametrize("use_custom_op", [False, True], ids=["eager", "custom-op"])
def test_unused_outputs_reach_the_backward_as_none(monkeypatch, use_custom_op):
    """The backward gets None for the outputs that were not used, not tensors of zeros
    allocated for them on every call; the gradients still equal the reference's."""
    if use_custom_op:
        monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    qrnn_seen = _record_backward_grads(monkeypatch, kernel_op)
    g = torch.Generator().manual_seed(1)
    gates = torch.randn(2, 5, 6, dtype=torch.float64, generator=g).requires_grad_()
    h, _c, _last = qrnn_mod.qrnn_pooling(gates, pooling="fo")
    (dgates,) = torch.autograd.grad(h.sum(), (gates,))
    grad_h, grad_c, grad_last = qrnn_seen[-1][:3]
    assert grad_h is not None and grad_c is None and grad_last is None
    ref_gates = gates.detach().clone().requires_grad_()
    ref_h = qrnn_mod.qrnn_pooling_ref(ref_gates, pooling="fo")[0]
    torch.testing.assert_close(dgates, torch.autograd.grad(ref_h.sum(), (ref_gates,))[0])


# ------------------------------------------------------------------------------------------------
# streaming stores: from the threshold, the float kernels write h, c and the gate gradients with
# non-temporal stores (ops/csrc/runtime/streaming.h, store_row)
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def streaming_threshold(tuned_runtime):
    """Sets the scan extension's streaming threshold for a test, restored after (streaming
    stores are the tuned runtime's)."""
    ext = kernel_for("scan", torch.device("cpu"))
    if ext is None:
        pytest.skip("no compiled kernels")
    before = ext.streaming_threshold()
    yield ext.set_streaming_threshold
    ext.set_streaming_threshold(before)


# channel counts that leave unaligned heads and tails around the 8-wide vector loop; B=1 splits
# the channels into blocks over the threads
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("H", [1, 7, 13, 64])
@pytest.mark.parametrize("B", [1, 3])
def test_streaming_stores_change_no_value(streaming_threshold, pooling, H, B):
    gates, c0, kw = _inputs(pooling, torch.float32, True, B=B, T=9, H=H, seed=H)
    gy = torch.randn(B, 9, H, generator=torch.Generator().manual_seed(1))
    results = []
    for threshold in (-1, 0):  # never stream, stream everything
        streaming_threshold(threshold)
        h, c, last = qrnn_mod.qrnn_pooling(gates, c0, **kw)
        grads = torch.autograd.grad((h * gy).sum() + c.sum() + last.sum(), (gates, c0))
        results.append((h, c, last, *grads))
    for plain, streamed in zip(*results, strict=True):
        assert torch.equal(plain, streamed)
    ref = qrnn_mod.qrnn_pooling_ref(gates, c0, **kw)
    for got, want in zip(results[1][:3], ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
