"""NaN and +-Inf parity of every layer with the reference path: the same input (NaN, +-Inf and
+-1e4 at a few positions), or weights that are all NaN, give on the compiled kernels the NaN,
+Inf and -Inf masks of the reference path (``CTRLRNN_BACKEND=reference``) in every output, final
state and gradient (of the input, the context and every parameter), and close finite values
(:mod:`backend_parity`). The ops' side of the contract is ``tests/ops/test_nonfinite.py``."""

from __future__ import annotations

import pytest
import torch
from backend_parity import INF, NAN, Poke, compare_nonfinite, poke
from contract import FFN, NAMES, make, takes_context
from torch import Tensor

pytestmark = pytest.mark.compares_backends

B, T, D = 3, 5, 4  # input size = hidden size, as sCARNN needs
LAYER_POKES: list[Poke] = [
    ((0, 1, 0), NAN),
    ((1, 2, 1), INF),
    ((1, 3, 2), -INF),
    ((2, 0, 3), 1e4),
    ((2, 4, 0), -1e4),
]

LAYER_PARAMS = [
    pytest.param(name, dtype, nan_weights, id=f"{name}-{str(dtype)[6:]}{'-nanw' * nan_weights}")
    for name in [*NAMES, FFN]
    for dtype, nan_weights in ((torch.float32, False), (torch.float64, False),
                               (torch.float32, True))  # fmt: skip
]


@pytest.mark.parametrize(("name", "dtype", "nan_weights"), LAYER_PARAMS)
def test_layer(monkeypatch, name, dtype, nan_weights):
    torch.manual_seed(8)
    module = make(name, D, D, **({} if name == FFN else dict(batch_first=True))).to(dtype)
    if nan_weights:
        with torch.no_grad():
            for p in module.parameters():
                p.fill_(NAN)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    if not nan_weights:
        x = poke(x, LAYER_POKES)
    inputs: list[Tensor | None] = [x]
    if takes_context(module):
        ctx = torch.randn(B, module.context_size, generator=g, dtype=dtype)
        inputs.append(poke(ctx, [((2, 1), 1e4)]))

    def fn(x, context=None):
        if context is not None:
            return module(x, context)
        return module(x)

    params = list(module.parameters())
    compare_nonfinite(monkeypatch, fn, inputs, params=params, expect_finite=not nan_weights)
