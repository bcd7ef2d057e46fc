"""The compiled kernels' sigmoid and tanh against torch's over the whole float range.

The tuned kernels compute exp by a clamped polynomial (``runtime/vector_math.h``:
``exp_saturating``) whose two ends saturate through the clamp alone (the scale 2^n becomes +Inf
at the top, FLT_MIN at the bottom) and whose NaN is restored by a final select; the plain
runtime calls ``std::exp`` and ``std::tanh``, held to the same. These tests read the activations
through a METAGROSS level at one step, where the output is one gate alone: with the other two
gates saturated at 1 the printed form's ``o f z`` is ``f`` or ``z``. The values sweep the range
densely around the clamp's bounds (about +-87.3 and +-88.7, where a wrong scale would give
NaN or a negative infinity), the signed zeros, large finite values, +-Inf and NaN; every
element must equal torch's activation to float32 rounding, NaN where torch gives NaN.
"""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.ops import _extension
from ctrlrnn.ops.metagross_level import metagross_level

pytestmark = pytest.mark.skipif(
    _extension.load("metagross") is None, reason="the compiled METAGROSS kernels are not built"
)


def _sweep() -> torch.Tensor:
    dense = torch.linspace(-100.0, 100.0, 20001)
    edges = torch.cat(
        [
            c + torch.linspace(-0.5, 0.5, 1001)
            for c in (-88.72, -88.38, -87.34, -44.36, 43.67, 44.36, 87.34, 88.38, 88.72)
        ]
    )
    inf, nan = float("inf"), float("nan")
    special = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e4, -1e4, 3e38, -3e38, inf, -inf, nan])
    # an odd count, so that the kernels' vector loops and their remainders both see values
    return torch.cat([dense, edges, special])


def _through_level(gate: int, values: torch.Tensor) -> torch.Tensor:
    """The level's output at one step with P's gate ``gate`` (0 F, 1 O, 2 Z) set to ``values``
    and the other two at +30 (sigmoid and tanh of 30 are 1 in float32)."""
    n = values.numel()
    P = torch.full((1, 1, 3, 1, n), 30.0)
    P[0, 0, gate, 0] = values
    out, _ = metagross_level(P, None, None, None, None, None, None, True)
    return out.reshape(n)


@pytest.mark.parametrize(
    "gate, act",
    [(0, torch.sigmoid), (1, torch.sigmoid), (2, torch.tanh)],
    ids=["sigmoid-f", "sigmoid-o", "tanh-z"],
)
def test_activations_match_torch_over_the_float_range(gate, act):
    x = _sweep()
    got = _through_level(gate, x)
    want = act(x.double()).float()  # the exactly rounded activation
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert not torch.isinf(got[ok]).any()
    # a few ulp of the value, and absolutely at most a float32 ulp of 1 (where sigmoid's
    # subnormal tails are flushed to 0)
    torch.testing.assert_close(got[ok], want[ok], rtol=4e-7, atol=1.2e-7)
    # the saturated ends exactly: sigmoid reaches 0 and 1, tanh -1 and 1
    lo, hi = (0.0, 1.0) if act is torch.sigmoid else (-1.0, 1.0)
    assert (got[x < -100] == lo).all() and (got[x > 100] == hi).all()
