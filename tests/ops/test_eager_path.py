"""The eager path of the compiled ops (ops/compiled_op.py): outside tracing the public ops run the
custom op's implementation and autograd formula through a plain autograd.Function; they give
bit-for-bit the custom op's values and gradients, and tracing or tensor subclasses keep the
custom op."""

from __future__ import annotations

import importlib

import pytest
import torch

from ctrlrnn.ops import compiled_op, kernel_op

scan_mod = importlib.import_module("ctrlrnn.ops.linear_scan")
qrnn_mod = importlib.import_module("ctrlrnn.ops.qrnn_pooling")


class _Sub(torch.Tensor):
    pass


def test_eager_ok_only_for_plain_tensors_outside_tracing(monkeypatch):
    x = torch.zeros(2)
    assert compiled_op.eager_ok(x, None, 3, torch.nn.Parameter(torch.zeros(1)))
    assert not compiled_op.eager_ok(x, x.as_subclass(_Sub))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not compiled_op.eager_ok(x)


def _spy(monkeypatch, owner, name):
    calls = []
    op = getattr(owner, name)

    def counted(*args):
        calls.append(1)
        return op(*args)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _scan_grads(lengths):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 6, 4, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.randn(3, 6, 4, dtype=torch.float64, generator=g).requires_grad_()
    h0 = torch.randn(3, 4, dtype=torch.float64, generator=g).requires_grad_()
    out, last = scan_mod.linear_scan(a, b, h0, reverse=True, lengths=lengths, return_last=True)
    (out.sin().sum() + last.cos().sum()).backward()
    return out, last, a.grad, b.grad, h0.grad


@pytest.mark.parametrize("lengths", [None, torch.tensor([6, 0, 3])])
def test_scan_eager_path_equals_the_custom_op(monkeypatch, lengths):
    calls = _spy(monkeypatch, scan_mod._linear_scan, "op")
    eager_run = _scan_grads(lengths)
    assert calls == []  # eager: the custom op was not called
    monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    op_run = _scan_grads(lengths)
    assert calls == [1]
    for x, y in zip(eager_run, op_run):
        assert torch.equal(x, y)


def _pool_grads():
    g = torch.Generator().manual_seed(1)
    gates = torch.randn(2, 5, 4 * 4, dtype=torch.float64, generator=g).requires_grad_()
    c0 = torch.randn(2, 4, dtype=torch.float64, generator=g).requires_grad_()
    h, c, last = qrnn_mod.qrnn_pooling(gates, c0, pooling="ifo", lengths=torch.tensor([5, 2]))
    (h.sum() + c.square().sum() + last.sum()).backward()
    return h, c, last, gates.grad, c0.grad


def test_qrnn_pooling_eager_path_equals_the_custom_op(monkeypatch):
    calls = _spy(monkeypatch, qrnn_mod._qrnn_pooling, "op")
    eager_run = _pool_grads()
    assert calls == []
    monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    op_run = _pool_grads()
    assert calls == [1]
    for x, y in zip(eager_run, op_run):
        assert torch.equal(x, y)


def test_eager_path_gradcheck_and_double_backward_error():
    g = torch.Generator().manual_seed(2)
    a = torch.rand(2, 4, 3, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.randn(2, 4, 3, dtype=torch.float64, generator=g).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: scan_mod.linear_scan(a, b), (a, b))
    (ga,) = torch.autograd.grad(scan_mod.linear_scan(a, b).sum(), a, create_graph=True)
    with pytest.raises(RuntimeError, match=r"double backward through the compiled op "
                                           r"ctrlrnn::linear_scan"):  # fmt: skip
        ga.sum().backward()


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
    """The scan's and the QRNN pooling's backward get None for an output that was not used,
    not a tensor of zeros allocated for it on every call (it cost ~0.4 ms of CPU per call on
    a GPU machine); their gradients still equal the reference's."""
    if use_custom_op:
        monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    scan_seen = _record_backward_grads(monkeypatch, kernel_op)
    g = torch.Generator().manual_seed(1)
    a = torch.rand(2, 5, 3, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.randn(2, 5, 3, dtype=torch.float64, generator=g).requires_grad_()
    out, last = scan_mod.linear_scan(a, b, return_last=True)
    da, db = torch.autograd.grad(out.sin().sum(), (a, b))
    grad_out, grad_last = scan_seen[-1][:2]
    assert grad_out is not None and grad_last is None
    ra, rb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    ref = importlib.import_module("ctrlrnn.ops.linear_scan_ref").linear_scan_ref(ra, rb)
    ref_da, ref_db = torch.autograd.grad(ref.sin().sum(), (ra, rb))
    torch.testing.assert_close((da, db), (ref_da, ref_db))
    _, last = scan_mod.linear_scan(a, b, return_last=True)
    torch.autograd.grad(last.sum(), (a, b))
    assert scan_seen[-1][0] is None and scan_seen[-1][1] is not None

    qrnn_seen = _record_backward_grads(monkeypatch, kernel_op)
    gates = torch.randn(2, 5, 6, dtype=torch.float64, generator=g).requires_grad_()
    h, _c, _last = qrnn_mod.qrnn_pooling(gates, pooling="fo")
    (dgates,) = torch.autograd.grad(h.sum(), (gates,))
    grad_h, grad_c, grad_last = qrnn_seen[-1][:3]
    assert grad_h is not None and grad_c is None and grad_last is None
    ref_gates = gates.detach().clone().requires_grad_()
    ref_h = qrnn_mod.qrnn_pooling_ref(ref_gates, pooling="fo")[0]
    torch.testing.assert_close(dgates, torch.autograd.grad(ref_h.sum(), (ref_gates,))[0])
