"""The eager path of the compiled ops (ops/compiled_op.py): outside tracing the public ops run the
custom op's implementation and autograd formula through a plain autograd.Function; tracing or
tensor subclasses keep the custom op. That each op's eager path gives bit for bit the custom op's
values and gradients is tested with the op (``test_linear_scan.py``, ``test_qrnn_pooling.py``)."""

from __future__ import annotations

import torch

from ctrlrnn.ops import compiled_op


class _Sub(torch.Tensor):
    pass


def test_eager_ok_only_for_plain_tensors_outside_tracing(monkeypatch):
    x = torch.zeros(2)
    assert compiled_op.eager_ok(x, None, 3, torch.nn.Parameter(torch.zeros(1)))
    assert not compiled_op.eager_ok(x, x.as_subclass(_Sub))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not compiled_op.eager_ok(x)
