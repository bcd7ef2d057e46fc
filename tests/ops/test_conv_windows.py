"""shifted_windows (the QRNN convolution's windows, QRNN paper eq 1): the compiled copy and its
adjoint against the torch-op reference, gradients (float64 gradcheck and gradgradcheck), every
offset pattern the QRNN uses and the edges (taps past both ends, empty batch, empty sequence),
which path a call takes, and the QRNN's windows against their definition."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn.nn.qrnn_windows import causal_windows, centred_windows
from ctrlrnn.ops import backend, conv_windows
from ctrlrnn.ops.backend import cpu_extension

pytestmark = pytest.mark.skipif(cpu_extension("scan") is None, reason="no compiled kernels")

# (B, S, D, offsets, steps): causal windows of 2 and 3, centred, a stream's history (steps < S),
# taps that never land, a single tap, an empty batch, an empty sequence
CASES = [
    (3, 7, 5, [-1, 0], 7),
    (2, 9, 4, [-2, -1, 0], 9),
    (2, 6, 3, [-1, 0, 1, 2], 6),
    (2, 9, 3, [0, 1, 2], 7),
    (1, 3, 2, [-5, 0, 4], 3),
    (2, 4, 6, [0], 4),
    (0, 4, 3, [-1, 0], 4),
    (2, 0, 3, [-1, 0], 0),
]


@pytest.fixture
def kernel_always(monkeypatch):
    """Every call takes the compiled copy, however small."""
    monkeypatch.setattr(conv_windows, "KERNEL_MIN_BYTES", 0)


def _windows(x, offsets, steps):
    """The windows by their definition: block j of step t is x[:, t + offsets[j]] or zeros."""
    B, S, D = x.shape
    out = x.new_zeros(B, steps, len(offsets) * D)
    for t in range(steps):
        for j, o in enumerate(offsets):
            if 0 <= t + o < S:
                out[:, t, j * D : (j + 1) * D] = x[:, t + o]
    return out


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_kernel_matches_definition_and_reference(kernel_always, case, dtype):
    B, S, D, offsets, steps = case
    g = torch.Generator().manual_seed(S * 10 + D)
    x = torch.randn(B, S, D, generator=g).to(dtype).requires_grad_()
    assert conv_windows._uses_kernel(x, offsets, steps)
    out = conv_windows.shifted_windows(x, offsets, steps)
    ref = conv_windows.shifted_windows_ref(x, offsets, steps)
    assert torch.equal(out, _windows(x.detach(), offsets, steps))
    assert torch.equal(out, ref)
    gy = torch.randn(out.shape, generator=g).to(dtype)
    (dx,) = torch.autograd.grad(out, x, gy)
    (dx_ref,) = torch.autograd.grad(ref, x, gy)
    # the kernel sums a step's taps in float, in tap order, and rounds once: within half a unit
    # in the last place of the exact sum; the reference rounds after each addition
    exact = conv_windows.shifted_windows_adjoint_ref(gy.double(), offsets, S)
    ulp = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}.get(dtype)
    if ulp is None:
        torch.testing.assert_close(dx, dx_ref)
        torch.testing.assert_close(dx.double(), exact)
    else:
        torch.testing.assert_close(dx.double(), exact, rtol=ulp, atol=1e-30)


def test_kernel_is_taken_for_large_inputs_only():
    offsets = [-1, 0]
    small = torch.randn(2, 8, 4)
    large = torch.randn(8, 128, 256)  # 2 MiB of windows
    assert not conv_windows._uses_kernel(small, offsets, 8)
    assert conv_windows._uses_kernel(large, offsets, 128)
    assert not conv_windows._uses_kernel(large.double()[:0], offsets, 128)


def test_reference_backend_takes_the_torch_ops(monkeypatch):
    monkeypatch.setattr(backend, "path", lambda family, device: backend.REFERENCE)
    assert not conv_windows._uses_kernel(torch.randn(8, 128, 256), [-1, 0], 128)


@pytest.mark.parametrize("offsets", [[-1, 0], [-2, 0, 1], [0, 3]])
def test_gradcheck_and_gradgradcheck(kernel_always, offsets):
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: conv_windows.shifted_windows(v, offsets, 5), (x,))
    assert torch.autograd.gradgradcheck(
        lambda v: conv_windows.shifted_windows(v, offsets, 5), (x,)
    )


def test_custom_op_under_opcheck(kernel_always):
    x = torch.randn(2, 6, 4, requires_grad=True)
    torch.library.opcheck(conv_windows._windows_op, (x, [-2, 0, 1], 6))
    g = torch.randn(2, 6, 12, requires_grad=True)
    torch.library.opcheck(conv_windows._adjoint_op, (g, [-2, 0, 1], 6))


@pytest.mark.parametrize("window", [1, 2, 3, 6])
def test_causal_windows_large_input(window):
    """At a size that takes the compiled copy: eq 1's masked windows, forward and backward."""
    x = torch.randn(4, 70, 1100, dtype=torch.float64, requires_grad=True)
    out = causal_windows(x, window)
    want = _windows(x.detach(), [j - (window - 1) for j in range(window)], 70)
    assert torch.equal(out, want)
    if window > 1:
        gy = torch.randn_like(out)
        (dx,) = torch.autograd.grad(out, x, gy)
        D = x.shape[2]
        dx_want = sum(
            torch.nn.functional.pad(gy[:, window - 1 - j :, j * D : (j + 1) * D],
                                    (0, 0, 0, window - 1 - j))
            for j in range(window)
        )
        torch.testing.assert_close(dx, dx_want, rtol=1e-12, atol=1e-12)


def test_causal_windows_with_history(kernel_always):
    x = torch.randn(3, 5, 4)
    history = torch.randn(3, 2, 4)
    out = causal_windows(x, 3, history)
    full = torch.cat([history, x], dim=1)
    for t in range(5):
        torch.testing.assert_close(out[:, t], full[:, t : t + 3].reshape(3, 12), rtol=0, atol=0)


@pytest.mark.parametrize("window", [2, 3, 4])
def test_centred_windows_reads_zeros_past_each_length(kernel_always, window):
    x = torch.randn(3, 6, 2)
    lengths = torch.tensor([6, 2, 0])
    out = centred_windows(x, window, lengths)
    before = (window - 1) // 2
    for b, n in enumerate(lengths.tolist()):
        xb = x[b : b + 1, :n]
        alone = _windows(xb, [j - before for j in range(window)], n)
        torch.testing.assert_close(out[b : b + 1, :n], alone, rtol=0, atol=0)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="offsets"):
        conv_windows.shifted_windows(torch.randn(2, 3, 4), [], 3)
