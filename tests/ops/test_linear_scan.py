"""linear_scan: compiled path against the reference, gradients, lengths, reverse, errors; its
eager path (:mod:`ctrlrnn.ops.compiled_op`) and its streaming stores."""

from __future__ import annotations

import importlib

import pytest
import torch

from ctrlrnn import linear_scan, linear_scan_ref
from ctrlrnn.ops import compiled_op, kernel_op
from ctrlrnn.ops.backend import backend_info, cpu_extension
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref_backward as _reference_backward

# the module (``ctrlrnn.ops.linear_scan`` the attribute is the function of the same name)
scan_mod = importlib.import_module("ctrlrnn.ops.linear_scan")

CASES = [
    dict(reverse=False, lengths=None, h0=False),
    dict(reverse=True, lengths=None, h0=False),
    dict(reverse=False, lengths=[7, 3, 5], h0=True),
    dict(reverse=True, lengths=[7, 1, 5], h0=True),
    dict(reverse=False, lengths=None, h0=True),
]


def _inputs(dtype, h0, B=3, T=7, C=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(B, T, C, generator=g, dtype=dtype).requires_grad_(True)
    b = torch.randn(B, T, C, generator=g, dtype=dtype).requires_grad_(True)
    h = torch.randn(B, C, generator=g, dtype=dtype).requires_grad_(True) if h0 else None
    return a, b, h


def test_compiled_backend_active():
    fam = backend_info()["families"]["scan"]
    assert fam["cpu"] == "compiled", fam["reason"]


def test_definition_by_hand():
    a = torch.tensor([[[0.5], [2.0], [0.0]]])
    b = torch.tensor([[[1.0], [1.0], [3.0]]])
    h = linear_scan(a, b, torch.tensor([[4.0]]))
    # h1 = .5*4+1 = 3, h2 = 2*3+1 = 7, h3 = 0*7+3 = 3
    assert h.flatten().tolist() == [3.0, 7.0, 3.0]
    hr = linear_scan(a, b, torch.tensor([[4.0]]), reverse=True)
    # reverse: h3 = 0*4+3 = 3, h2 = 2*3+1 = 7, h1 = .5*7+1 = 4.5
    assert hr.flatten().tolist() == [4.5, 7.0, 3.0]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_reference(case, dtype):
    a, b, h0 = _inputs(dtype, case["h0"])
    lengths = torch.tensor(case["lengths"]) if case["lengths"] else None
    out, last = linear_scan(a, b, h0, reverse=case["reverse"], lengths=lengths, return_last=True)
    ref, ref_last = linear_scan_ref(
        a, b, h0, reverse=case["reverse"], lengths=lengths, return_last=True
    )
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=1e-12)
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(last, ref_last, **tol)
    go, gl = torch.randn_like(out), torch.randn_like(last)
    params = [p for p in (a, b, h0) if p is not None]
    g1 = torch.autograd.grad((out * go).sum() + (last * gl).sum(), params)
    g2 = torch.autograd.grad((ref * go).sum() + (ref_last * gl).sum(), params)
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y, **tol)


@pytest.mark.parametrize("case", CASES)
def test_gradcheck(case):
    a, b, h0 = _inputs(torch.float64, case["h0"], B=2, T=5, C=3)
    lengths = torch.tensor(case["lengths"][:2]).clamp(max=5) if case["lengths"] else None
    inputs = tuple(p for p in (a, b, h0) if p is not None)

    def f(*xs):
        h = xs[2] if len(xs) == 3 else None
        return linear_scan(
            xs[0], xs[1], h, reverse=case["reverse"], lengths=lengths, return_last=True
        )

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("reverse", [False, True])
def test_reference_backward_equals_compiled(reverse):
    from ctrlrnn.ops.backend import kernel_for

    a, b, h0 = _inputs(torch.float64, True)
    lengths = torch.tensor([7, 2, 4])
    out = linear_scan(a, b, h0, reverse=reverse, lengths=lengths).detach()
    g, gl = torch.randn_like(out), torch.randn(3, 5, dtype=torch.float64)
    ext = kernel_for("scan", a.device)
    x = ext.linear_scan_backward(g, gl, a.detach(), out, h0.detach(), lengths, reverse)
    y = _reference_backward(g, gl, a.detach(), out, h0.detach(), lengths, reverse)
    for p, q in zip(x, y):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


def test_lengths_freeze_state_and_zero_outputs():
    a, b, h0 = _inputs(torch.float32, True)
    lengths = torch.tensor([7, 3, 5])
    out, last = linear_scan(a, b, h0, lengths=lengths, return_last=True)
    assert out[1, 3:].abs().max() == 0 and out[2, 5:].abs().max() == 0
    torch.testing.assert_close(last[1], out[1, 2])
    torch.testing.assert_close(last[2], out[2, 4])
    # padding values do not matter
    a2, b2 = a.detach().clone(), b.detach().clone()
    a2[1, 3:] = 123.0
    b2[2, 5:] = float("nan")
    out2 = linear_scan(a2, b2, h0, lengths=lengths)
    torch.testing.assert_close(out2, out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_fp32(dtype):
    a, b, h0 = _inputs(torch.float32, True, B=2, T=64, C=9)
    ref = linear_scan_ref(a.detach(), b.detach(), h0.detach())
    out = linear_scan(a.detach().to(dtype), b.detach().to(dtype), h0.detach().to(dtype))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    a16 = a.detach().to(dtype).requires_grad_(True)
    linear_scan(a16, b.detach().to(dtype)).sum().backward()
    assert a16.grad is not None and a16.grad.dtype == dtype


def test_torch_compile():
    a, b, h0 = _inputs(torch.float32, True)

    def f(a, b, h0):
        return linear_scan(a, b, h0).square().sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    g1 = torch.autograd.grad(compiled(a, b, h0), (a, b, h0))
    g2 = torch.autograd.grad(f(a, b, h0), (a, b, h0))
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y)


def test_opcheck():
    a, b, h0 = _inputs(torch.float32, True)
    torch.library.opcheck(
        torch.ops.ctrlrnn.linear_scan.default, (a, b, h0, torch.tensor([7, 3, 5]), False)
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(b=torch.zeros(3, 7, 4)), "b: expected the shape"),
        (dict(b=torch.zeros(3, 7, 5, dtype=torch.float64)), "b: expected the dtype"),
        (dict(h0=torch.zeros(3, 4)), "h0: expected shape"),
        (dict(h0=torch.zeros(3, 5, dtype=torch.float64)), "h0: expected dtype"),
        (dict(lengths=torch.tensor([1, 2])), "lengths: expected 3 lengths"),
        (dict(lengths=torch.tensor([1, 2, 8])), "lengths: every length must be <="),
        (dict(lengths=torch.tensor([1.0, 2.0, 3.0])), "lengths: expected an integer"),
        (dict(lengths=torch.tensor([-1, 2, 3])), "lengths: every length must be >="),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(a=torch.rand(3, 7, 5), b=torch.rand(3, 7, 5))
    args.update(kwargs)
    a, b = args.pop("a"), args.pop("b")
    with pytest.raises(ValueError, match=match):
        linear_scan(a, b, **args)


def test_bad_rank():
    with pytest.raises(ValueError, match="a: expected a"):
        linear_scan(torch.rand(7, 5), torch.rand(7, 5))


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


def _scan_grads(lengths):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 6, 4, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.randn(3, 6, 4, dtype=torch.float64, generator=g).requires_grad_()
    h0 = torch.randn(3, 4, dtype=torch.float64, generator=g).requires_grad_()
    out, last = scan_mod.linear_scan(a, b, h0, reverse=True, lengths=lengths, return_last=True)
    (out.sin().sum() + last.cos().sum()).backward()
    return out, last, a.grad, b.grad, h0.grad


@pytest.mark.parametrize("lengths", [None, torch.tensor([6, 0, 3])])
def test_eager_path_equals_the_custom_op(monkeypatch, lengths):
    calls = _spy(monkeypatch, scan_mod._linear_scan, "op")
    eager_run = _scan_grads(lengths)
    assert calls == []  # eager: the custom op was not called
    monkeypatch.setattr(compiled_op, "eager_ok", lambda *args: False)
    op_run = _scan_grads(lengths)
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
def test_unused_output_reaches_the_backward_as_none(monkeypatch, use_custom_op):
    """The backward gets None for an output that was not used, not a tensor of zeros allocated
    for it on every call; the gradients still equal the reference's."""
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
    ref = linear_scan_ref(ra, rb)
    ref_da, ref_db = torch.autograd.grad(ref.sin().sum(), (ra, rb))
    torch.testing.assert_close((da, db), (ref_da, ref_db))
    _, last = scan_mod.linear_scan(a, b, return_last=True)
    torch.autograd.grad(last.sum(), (a, b))
    assert scan_seen[-1][0] is None and scan_seen[-1][1] is not None


# ------------------------------------------------------------------------------------------------
# streaming stores: the compiled scan writes large outputs with non-temporal stores
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def streaming_everywhere(tuned_runtime):
    """Every scan call streams its outputs, however small (streaming stores are the tuned
    runtime's)."""
    scan_ext = cpu_extension("scan")
    assert scan_ext is not None
    before = scan_ext.streaming_threshold()
    scan_ext.set_streaming_threshold(0)
    yield
    scan_ext.set_streaming_threshold(before)


# channel counts that leave unaligned heads and tails around the 8-wide vector loop
@pytest.mark.parametrize("C", [1, 7, 8, 13, 64])
@pytest.mark.parametrize("reverse", [False, True])
def test_streaming_path_matches_reference(streaming_everywhere, C, reverse):
    g = torch.Generator().manual_seed(C)
    a = torch.rand(3, 9, C, generator=g, requires_grad=True)
    b = torch.randn(3, 9, C, generator=g, requires_grad=True)
    h0 = torch.randn(3, C, generator=g, requires_grad=True)
    lengths = torch.tensor([9, 4, 1])
    gy = torch.randn(3, 9, C, generator=g)
    out = linear_scan(a, b, h0, reverse=reverse, lengths=lengths)
    grads = torch.autograd.grad(out, (a, b, h0), gy)
    ref = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths)
    ref_grads = torch.autograd.grad(ref, (a, b, h0), gy)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _threshold_in_a_fresh_process(value: str | None, threads: int = 2) -> tuple[int, int, str]:
    """(threshold, the sysfs last-level cache in bytes or -1, stderr) of the scan extension in a
    fresh process with CTRLRNN_STREAMING_BYTES=value (None: unset); the threshold is None when
    the process failed."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_STREAMING_BYTES"}
    if value is not None:
        env["CTRLRNN_STREAMING_BYTES"] = value
    code = (
        "import torch, warnings\n"
        f"torch.set_num_threads({threads})\n"
        "warnings.simplefilter('always')\n"
        "from ctrlrnn.ops.backend import cpu_extension\n"
        "print(cpu_extension('scan').streaming_threshold())\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    try:
        text = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
        llc = int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        llc = -1
    got = int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    return got, llc, done.stderr


@pytest.mark.not_plain("a tuned setting read in child processes; no kernel's values")
def test_the_streaming_threshold_is_a_fair_share_of_the_cache_or_what_the_user_sets():
    """By default a quarter of the last-level cache and at most 4 MiB per thread (a virtual
    machine's sysfs reports the whole socket's cache); CTRLRNN_STREAMING_BYTES sets it, and a
    value that is not a number of bytes is an error naming the variable."""
    if cpu_extension("scan") is None:
        pytest.skip("the compiled scan is not available here")
    for threads in (1, 2):
        auto, llc, _ = _threshold_in_a_fresh_process(None, threads)
        assert auto is not None and 0 < auto <= (4 << 20) * threads
        if llc > 0:
            assert auto == min(llc // 4, (4 << 20) * threads)
    assert _threshold_in_a_fresh_process("12345")[0] == 12345
    assert _threshold_in_a_fresh_process("-1")[0] == -1
    got, _, err = _threshold_in_a_fresh_process("8MB")
    assert got is None and "SettingError: CTRLRNN_STREAMING_BYTES='8MB'" in err
