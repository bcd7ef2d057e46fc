"""cached_linear: ``torch.nn.functional.linear`` whose output comes from the compiled kernels'
output cache (ops/cached_linear.py)."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.ops.backend import cpu_extension
from ctrlrnn.ops.cached_linear import _cached_linear_op, cached_linear


@pytest.fixture
def scan_ext():
    ext = cpu_extension("scan")
    assert ext is not None
    return ext


def test_matches_linear_and_gradchecks():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)
    for fn in (cached_linear, _cached_linear_op):  # the op itself too: small calls skip it
        torch.testing.assert_close(fn(x, w, b), torch.nn.functional.linear(x, w, b))
        assert torch.autograd.gradcheck(fn, (x, w, b))
        assert torch.autograd.gradcheck(lambda x, w, fn=fn: fn(x, w, None), (x, w))
    torch.library.opcheck(_cached_linear_op, (x, w, b))


@pytest.mark.parametrize(("rows", "d", "n", "takes_op"), [
    (2 * 128, 64, 194, False),  # 3.2M multiply-adds, 194 KiB out: F.linear
    (256, 1024, 128, True),  # 33.5M multiply-adds, over SMALL_MACS, 128 KiB out: the op
    (4096, 1, 256, True),  # 1M multiply-adds but a 4 MiB output, the cache's: the op
])
def test_small_products_take_f_linear_in_eager_mode(monkeypatch, scan_ext, rows, d, n, takes_op):
    """Under SMALL_MACS with an output under the cache's 1 MiB, the custom op's own cost is
    more than its GEMM path saves: eager calls take F.linear (same values)."""
    from ctrlrnn.ops import cached_linear as module

    calls = []

    def spy(*args):
        calls.append(args)
        return _cached_linear_op(*args)

    monkeypatch.setattr(module, "_cached_linear_op", spy)
    x, w = torch.randn(rows, d), torch.randn(n, d)
    # the two routes sum a 1024-long product in different orders (GEMM path and blocking
    # differ by CPU): compare against float64 at float32's accumulated rounding
    expected = (x.double() @ w.double().t()).float()
    torch.testing.assert_close(cached_linear(x, w), expected, rtol=1e-5, atol=2e-6 * d)
    assert len(calls) == int(takes_op)


@pytest.mark.usefixtures("tuned_runtime")  # the output cache is the tuned runtime's
def test_output_comes_from_the_cache(scan_ext):
    x = torch.randn(64, 128, 64)
    w = torch.randn(256, 64)  # output (64, 128, 256) fp32 = 8 MiB
    first = cached_linear(x, w)
    expected = first.clone()
    del first
    _held, _limit, _fresh, reused0 = scan_ext.output_cache_stats()
    second = cached_linear(x, w)
    assert scan_ext.output_cache_stats()[3] == reused0 + 1
    torch.testing.assert_close(second, expected, rtol=0, atol=0)


@pytest.mark.usefixtures("tuned_runtime")  # the GEMM paths are the tuned runtime's
@pytest.mark.parametrize("as_parameter", [False, True])
def test_backward_products_take_the_chosen_gemm_path(scan_ext, as_parameter):
    """Both backward products (``dx = g W``, ``dW = g^T x``) run on the GEMM path chosen for
    their shape, also when the weight is an ``nn.Parameter`` (as in every layer): they went to
    torch's ``mm`` before, slower where oneDNN is the faster path."""
    from ctrlrnn.ops import gemm_path

    x = torch.randn(3, 7, 5, requires_grad=True)
    w = torch.randn(6, 5)
    w = torch.nn.Parameter(w) if as_parameter else w.requires_grad_()
    out = _cached_linear_op(x, w, None)  # the op itself: cached_linear takes F.linear this small
    g = torch.randn_like(out)
    gemm_path.uses(clear=True)
    out.backward(g)
    calls = sum(n for key, (_path, n) in gemm_path.uses().items() if key.startswith("bulk "))
    assert calls == 2, gemm_path.uses()
    torch.testing.assert_close(x.grad, g @ w.detach())
    torch.testing.assert_close(w.grad, g.reshape(21, 6).t() @ x.detach().reshape(21, 5))


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("with_bias", [True, False])
def test_grouped_is_linear_split_by_group_and_gradchecks(groups, with_bias):
    """``(K, ..., N / K)``: block k of the output features, each contiguous; gradients of x, W
    and b against F.linear's in float64; the op's registration (fake, autograd) checked."""
    from ctrlrnn.ops.cached_linear import _cached_linear_grouped_op, cached_linear_grouped

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True) if with_bias else None
    out = cached_linear_grouped(x, w, b, groups)
    ref = torch.nn.functional.linear(x, w, b)
    assert out.shape == (groups, 2, 3, 6 // groups) and out.is_contiguous()
    for k in range(groups):
        torch.testing.assert_close(out[k], ref[..., k * 6 // groups: (k + 1) * 6 // groups])
    inputs = (x, w) if b is None else (x, w, b)
    assert torch.autograd.gradcheck(
        lambda *a: cached_linear_grouped(a[0], a[1], a[2] if len(a) > 2 else None, groups),
        inputs)
    torch.library.opcheck(_cached_linear_grouped_op, (x, w, b, groups))


@pytest.mark.usefixtures("tuned_runtime")  # the output cache is the tuned runtime's
def test_grouped_output_comes_from_the_cache_and_bad_groups_are_named(scan_ext):
    from ctrlrnn.ops.cached_linear import cached_linear_grouped

    x = torch.randn(64, 32, 64)
    w = torch.randn(9 * 64, 64)  # output (9, 64, 32, 64) fp32 = 4.5 MiB
    first = cached_linear_grouped(x, w, None, 9)
    expected = first.clone()
    del first
    reused0 = scan_ext.output_cache_stats()[3]
    second = cached_linear_grouped(x, w, None, 9)
    assert scan_ext.output_cache_stats()[3] == reused0 + 1
    torch.testing.assert_close(second, expected, rtol=0, atol=0)
    torch.testing.assert_close(second.movedim(0, -2).flatten(-2), x @ w.t())
    for bad in (0, 5, -1):
        with pytest.raises(ValueError, match="groups"):
            cached_linear_grouped(x, w, None, bad)


@pytest.mark.parametrize(("inputs", "readers"), [(1, 3), (2, 3), (4, 1)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_stacked_is_each_readers_linear_and_gradchecks(inputs, readers, with_bias):
    """``out[r] = x[r // readers] W_r^T + b_r``; gradients of x (summed over its readers), of
    each W_r and b_r against F.linear's in float64; the op's registration checked."""
    from ctrlrnn.ops.cached_linear import _cached_linear_stacked_op, cached_linear_stacked

    g = torch.Generator().manual_seed(2)
    R = inputs * readers
    x = torch.randn(inputs, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(R, 6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = (torch.randn(R, 6, dtype=torch.float64, generator=g, requires_grad=True) if with_bias
         else None)
    out = cached_linear_stacked(x, w, b)
    assert out.shape == (R, 4, 6)
    for r in range(R):
        want = torch.nn.functional.linear(x[r // readers], w[r], None if b is None else b[r])
        torch.testing.assert_close(out[r], want)
    args = (x, w) if b is None else (x, w, b)
    assert torch.autograd.gradcheck(
        lambda *a: cached_linear_stacked(a[0], a[1], a[2] if len(a) > 2 else None), args)
    assert torch.autograd.gradcheck(
        lambda *a: _cached_linear_stacked_op(a[0], a[1], a[2] if len(a) > 2 else None), args)
    torch.library.opcheck(_cached_linear_stacked_op, (x, w, b))


@pytest.mark.usefixtures("tuned_runtime")  # the output cache is the tuned runtime's
def test_stacked_runs_the_op_on_large_products_and_names_bad_shapes(scan_ext):
    from ctrlrnn.ops.cached_linear import cached_linear_stacked

    x = torch.randn(2, 4096, 64)
    w = torch.randn(6, 256, 64)  # each reader's output 4 MiB: the cached op
    b = torch.randn(6, 256)
    fresh0 = sum(scan_ext.output_cache_stats()[2:])
    out = cached_linear_stacked(x, w, b)
    assert sum(scan_ext.output_cache_stats()[2:]) == fresh0 + 1  # one block from the cache
    for r in range(6):
        torch.testing.assert_close(out[r], x[r // 3] @ w[r].t() + b[r], rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="multiple"):
        cached_linear_stacked(torch.randn(4, 3, 64), w, b)
    with pytest.raises(ValueError, match="bias"):
        cached_linear_stacked(x, w, torch.randn(6, 255))
    with pytest.raises(ValueError, match="x, weight"):
        cached_linear_stacked(x[0], w, b)


@pytest.mark.parametrize("with_bias", [True, False])
def test_each_is_every_inputs_linear_in_one_block(monkeypatch, scan_ext, with_bias):
    """cached_linear_each: each input's own projection, as consecutive slices of one block that
    the cells' stacked calls take whole (stack_or_base, no copy); gradients in float64; the
    inputs, when slices of one tensor already, are not stacked again. (Small products, taken
    by F.linear one each, are let through the op here.)"""
    from ctrlrnn.ops import cached_linear as module
    from ctrlrnn.ops.cached_linear import cached_linear_each
    from ctrlrnn.ops.cells.shell import stack_or_base

    monkeypatch.setattr(module, "_small", lambda x, w: False)

    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
          for _ in range(2)]
    ws = [torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
          for _ in range(2)]
    bs = [torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True) if with_bias
          else None for _ in range(2)]
    outs = cached_linear_each(xs, ws, bs)
    for x, w, b, o in zip(xs, ws, bs, outs, strict=True):
        torch.testing.assert_close(o, torch.nn.functional.linear(x, w, b))
    whole = stack_or_base(outs)
    assert whole.data_ptr() == outs[0].data_ptr() and whole.shape == (2, 3, 4, 6)
    leaves = [*xs, *ws, *(b for b in bs if b is not None)]

    def run(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        bias = [a[4], a[5]] if with_bias else [None, None]
        return tuple(cached_linear_each([a[0], a[1]], [a[2], a[3]], bias))

    assert torch.autograd.gradcheck(run, tuple(leaves))
    # inputs already consecutive slices of one tensor: read in place
    big = torch.randn(2, 64, 128, 64)
    w, b = torch.randn(256, 64), torch.randn(256)
    outs = cached_linear_each(list(big.unbind(0)), [w, w], [b, b])
    torch.testing.assert_close(outs[1], big[1] @ w.t() + b, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="biases"):
        cached_linear_each(list(big.unbind(0)), [w, w], [b, None])
    with pytest.raises(ValueError, match="one of each"):
        cached_linear_each(list(big.unbind(0)), [w], [b, b])
