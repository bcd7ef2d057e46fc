"""The fused gated cells (compiled CPU kernels) against their paper references and torch.nn."""

from __future__ import annotations

import os

os.environ["CTRLRNN_REQUIRE_COMPILED"] = "1"  # a broken build must fail, not fall back

from collections.abc import Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from ctrlrnn.ops import backend, cells_ref, fused_cells  # noqa: E402

CELLS = ["lstm", "gru", "cas", "cas_peephole", "cas_nolambda", "ncarnn"]
TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def _lengths(batch: int, steps: int) -> Tensor:
    """Mixed lengths including a full row, a zero-length row and a partial row."""
    base = torch.tensor([steps, 0, max(1, steps // 2), steps - 1, 1, steps], dtype=torch.int64)
    return base[:batch]


def _make(
    cell: str, batch: int, steps: int, hidden: int, dtype: torch.dtype, seed: int = 0
) -> tuple[dict[str, Tensor], Callable[..., tuple[Tensor, ...]], Callable[..., tuple[Tensor, ...]]]:
    """Random inputs (leaves requiring grad) plus the fused and reference callables for a cell.

    Both callables take the inputs as keyword arguments and ``lengths``.
    """
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 0.5) -> Tensor:
        return (torch.randn(*shape, generator=g, dtype=dtype) * scale).requires_grad_()

    B, T, H = batch, steps, hidden
    if cell == "lstm":
        a = dict(x_proj=rnd(B, T, 4 * H), weight_hh=rnd(4 * H, H), h0=rnd(B, H), c0=rnd(B, H))
        return a, fused_cells.lstm_sequence, cells_ref.lstm_sequence_ref
    if cell == "gru":
        a = dict(x_proj=rnd(B, T, 3 * H), weight_hh=rnd(3 * H, H), bias_hh=rnd(3 * H), h0=rnd(B, H))
        return a, fused_cells.gru_sequence, cells_ref.gru_sequence_ref
    if cell == "ncarnn":
        a = dict(
            x_proj=rnd(B, T, 3 * H), weight_hh=rnd(2 * H, H), context_proj=rnd(B, 2 * H),
            h0=rnd(B, H),
        )  # fmt: skip
        return a, fused_cells.ncarnn_sequence, cells_ref.ncarnn_sequence_ref
    peep = cell == "cas_peephole"
    a = dict(
        x_proj=rnd(B, T, 5 * H), weight_hh=rnd((4 if peep else 5) * H, H),
        lower_c=rnd(B, T, H, scale=1.0), h0=rnd(B, H), c0=rnd(B, H),
    )  # fmt: skip
    if cell != "cas_nolambda":
        # trainable lambda in (0, 1), one per channel (section 3.2)
        a["lam"] = torch.rand(H, generator=g, dtype=dtype).requires_grad_()
    if peep:
        a["peephole"] = rnd(2, H)

    def fused(lam: Tensor | None = None, **kw: Tensor) -> tuple[Tensor, ...]:
        return fused_cells.cas_lstm_sequence(lambda_=lam, **kw)

    def ref(
        x_proj: Tensor, weight_hh: Tensor, lower_c: Tensor, h0: Tensor, c0: Tensor,
        lam: Tensor | None = None, peephole: Tensor | None = None, lengths: Tensor | None = None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        ones = torch.ones(H, dtype=dtype)
        sf, sg = (ones, ones) if lam is None else (1 - lam, lam)
        return cells_ref.cas_lstm_sequence_ref(
            x_proj, weight_hh, lower_c, h0, c0, sf, sg, peephole, lengths
        )

    return a, fused, ref


def _outputs_and_grads(
    fn: Callable[..., tuple[Tensor, ...]],
    args: dict[str, Tensor],
    lengths: Tensor | None,
    seed: int = 1,
    steps: int | None = None,
) -> tuple[tuple[Tensor, ...], dict[str, Tensor]]:
    """Forward, then backward of a random weighting of *every* output (incl. final states).

    ``steps`` crops the sequence outputs to their first ``steps`` steps before the weighting.
    """
    for v in args.values():
        v.grad = None
    outs = fn(**args, lengths=lengths)
    g = torch.Generator().manual_seed(seed)
    cropped = [o[:, :steps] if steps is not None and o.dim() == 3 else o for o in outs]
    loss = sum((o * torch.randn(o.shape, generator=g).to(o.dtype)).sum() for o in cropped)
    loss.backward()
    grads = {k: v.grad.clone() for k, v in args.items()}
    return tuple(o.detach() for o in outs), grads


def test_compiled_extension_is_used() -> None:
    cpu = torch.device("cpu")
    assert backend.path("cells", cpu) == backend.KERNEL
    ext = backend.kernel_for("cells", cpu)
    assert ext.num_threads() >= 1
    assert isinstance(ext.mkl_packed_gemm(), bool)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_fused_matches_reference(cell: str, dtype: torch.dtype, with_lengths: bool) -> None:
    B, T, H = 5, 7, 8
    args, fused, ref = _make(cell, B, T, H, dtype)
    lengths = _lengths(B, T) if with_lengths else None
    out_f, grad_f = _outputs_and_grads(fused, args, lengths)
    out_r, grad_r = _outputs_and_grads(ref, args, lengths)
    assert len(out_f) == len(out_r)
    for a, b in zip(out_f, out_r, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a, b, **TOL[dtype])
    for k in args:
        torch.testing.assert_close(
            grad_f[k], grad_r[k], **TOL[dtype], msg=lambda m, k=k: f"{k}: {m}"
        )
        assert grad_f[k].abs().sum() > 0, k
    if with_lengths:
        # padded steps: zero outputs, zero input gradient, final state = state at the true length
        for o in (o for o in out_f if o.dim() == 3):
            for b, n in enumerate(lengths.tolist()):
                assert torch.all(o[b, n:] == 0)
        for b, n in enumerate(lengths.tolist()):
            assert torch.all(grad_f["x_proj"][b, n:] == 0)
        zero_row = 1  # length 0: final state is h0, its gradient passes straight through
        torch.testing.assert_close(out_f[len(out_f) // 2][zero_row], args["h0"][zero_row].detach())


@pytest.mark.parametrize("cell", CELLS)
def test_batch_split_across_threads(cell: str) -> None:
    """With 2+ threads a batch of 10 runs as per-thread slices; it must equal the reference."""
    B, T, H = 10, 6, 5
    args, fused, ref = _make(cell, B, T, H, torch.float64, seed=9)
    lengths = torch.tensor([6, 0, 3, 6, 1, 2, 6, 5, 0, 4])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        out_f, grad_f = _outputs_and_grads(fused, args, lengths)
    finally:
        torch.set_num_threads(threads)
    out_r, grad_r = _outputs_and_grads(ref, args, lengths)
    for a, b in zip(out_f, out_r, strict=True):
        torch.testing.assert_close(a, b, **TOL[torch.float64])
    for k in args:
        torch.testing.assert_close(grad_f[k], grad_r[k], **TOL[torch.float64])


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("with_lengths", [False, True])
def test_gradcheck(cell: str, with_lengths: bool) -> None:
    B, T, H = 3, 4, 3
    args, fused, _ = _make(cell, B, T, H, torch.float64, seed=3)
    lengths = torch.tensor([4, 0, 2]) if with_lengths else None
    names = list(args)

    def f(*tensors: Tensor) -> tuple[Tensor, ...]:
        return fused(**dict(zip(names, tensors, strict=True)), lengths=lengths)

    assert torch.autograd.gradcheck(f, tuple(args[k] for k in names), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lstm_equals_torch_lstm(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    B, T, I, H = 4, 9, 5, 7
    ref = torch.nn.LSTM(I, H, batch_first=True).to(dtype)
    x = torch.randn(B, T, I, dtype=dtype)
    h0, c0 = torch.randn(1, B, H, dtype=dtype), torch.randn(1, B, H, dtype=dtype)
    params = [ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0, ref.bias_hh_l0]

    y, (hn, cn) = ref(x, (h0, c0))
    (y.square().sum() + hn.sum() + 2 * cn.sum()).backward()
    want = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None

    w_ih, w_hh, b_ih, b_hh = params
    x_proj = x @ w_ih.t() + b_ih + b_hh
    hs, _, hl, cl = fused_cells.lstm_sequence(x_proj, w_hh, h0[0], c0[0])
    (hs.square().sum() + hl.sum() + 2 * cl.sum()).backward()
    tol = TOL[dtype]
    torch.testing.assert_close(hs, y, **tol)
    torch.testing.assert_close(hl, hn[0], **tol)
    torch.testing.assert_close(cl, cn[0], **tol)
    for p, w in zip(params, want, strict=True):
        torch.testing.assert_close(p.grad, w, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gru_equals_torch_gru(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    B, T, I, H = 4, 9, 5, 7
    ref = torch.nn.GRU(I, H, batch_first=True).to(dtype)
    x = torch.randn(B, T, I, dtype=dtype)
    h0 = torch.randn(1, B, H, dtype=dtype)
    params = [ref.weight_ih_l0, ref.weight_hh_l0, ref.bias_ih_l0, ref.bias_hh_l0]

    y, hn = ref(x, h0)
    (y.square().sum() + 3 * hn.sum()).backward()
    want = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None

    w_ih, w_hh, b_ih, b_hh = params
    hs, hl = fused_cells.gru_sequence(x @ w_ih.t() + b_ih, w_hh, b_hh, h0[0])
    (hs.square().sum() + 3 * hl.sum()).backward()
    tol = TOL[dtype]
    torch.testing.assert_close(hs, y, **tol)
    torch.testing.assert_close(hl, hn[0], **tol)
    for p, w in zip(params, want, strict=True):
        torch.testing.assert_close(p.grad, w, **tol)


@pytest.mark.parametrize("cell", ["lstm", "gru", "cas", "ncarnn"])
def test_padding_values_are_ignored(cell: str) -> None:
    """Garbage in padded steps, or extra padding, changes nothing (values or gradients)."""
    B, T, H = 4, 6, 5
    args, fused, _ = _make(cell, B, T, H, torch.float32, seed=7)
    lengths = torch.tensor([6, 3, 0, 5])
    out_a, grad_a = _outputs_and_grads(fused, args, lengths)

    noisy = {k: v.detach().clone() for k, v in args.items()}
    for key in ("x_proj", "lower_c"):
        if key in noisy:
            for b, n in enumerate(lengths.tolist()):
                noisy[key][b, n:] = 1e3 * torch.randn_like(noisy[key][b, n:])
    extra = {k: v.clone() for k, v in noisy.items()}
    for key in ("x_proj", "lower_c"):  # 4 more padded steps
        if key in extra:
            v = extra[key]
            extra[key] = torch.cat([v, torch.full_like(v[:, :4], float("nan"))], dim=1)
    for variant in (noisy, extra):
        leaves = {k: v.requires_grad_() for k, v in variant.items()}
        out_b, grad_b = _outputs_and_grads(fused, leaves, lengths, steps=T)
        for a, b in zip(out_a, out_b, strict=True):
            torch.testing.assert_close(a, b[:, :T] if b.dim() == 3 else b)
            if b.dim() == 3:
                assert torch.all(b[:, T:] == 0)
        for k in args:
            gb = grad_b[k][:, :T] if k in ("x_proj", "lower_c") else grad_b[k]
            torch.testing.assert_close(grad_a[k], gb)
        assert torch.all(grad_b["x_proj"][:, T:] == 0)


@pytest.mark.parametrize("cell", ["lstm", "gru", "cas_peephole", "ncarnn"])
def test_torch_compile(cell: str) -> None:
    torch._dynamo.reset()
    B, T, H = 3, 5, 4
    args, fused, _ = _make(cell, B, T, H, torch.float32, seed=11)
    lengths = torch.tensor([5, 2, 4])
    out_e, grad_e = _outputs_and_grads(fused, args, lengths)
    compiled = torch.compile(fused, backend="aot_eager", fullgraph=True)
    out_c, grad_c = _outputs_and_grads(compiled, args, lengths)
    for a, b in zip(out_e, out_c, strict=True):
        torch.testing.assert_close(a, b)
    for k in args:
        torch.testing.assert_close(grad_e[k], grad_c[k])


def test_custom_ops_pass_opcheck() -> None:
    B, T, H = 2, 3, 4
    xp, w = torch.randn(B, T, 4 * H), torch.randn(4 * H, H)
    h0, c0 = torch.randn(B, H), torch.randn(B, H)
    for lengths in (None, torch.tensor([3, 1])):
        for save in (True, False):
            args = (xp, w, h0, c0, lengths, save)
            torch.library.opcheck(torch.ops.ctrlrnn.lstm_cell_fwd.default, args)
    xp3, w3 = torch.randn(B, T, 3 * H, requires_grad=True), torch.randn(3 * H, H)
    b3 = torch.randn(3 * H)
    torch.library.opcheck(torch.ops.ctrlrnn.gru_cell_fwd.default, (xp3, w3, b3, h0, None, True))


@pytest.mark.parametrize("cell", CELLS)
def test_inference_forward_matches_training_forward(cell: str) -> None:
    """Under no_grad the op skips saving activations; the outputs must not change."""
    args, fused, _ = _make(cell, 4, 6, 5, torch.float32, seed=4)
    lengths = torch.tensor([6, 0, 3, 5])
    train = fused(**args, lengths=lengths)
    with torch.no_grad():
        infer = fused(**args, lengths=lengths)
    for a, b in zip(train, infer, strict=True):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_compute_in_float32(dtype: torch.dtype) -> None:
    args, fused, _ = _make("lstm", 3, 5, 8, torch.float32, seed=5)
    low = {k: v.detach().to(dtype).requires_grad_() for k, v in args.items()}
    out_h, grad_h = _outputs_and_grads(fused, low, None)
    hi = {k: v.detach().to(dtype).float().requires_grad_() for k, v in args.items()}
    out_f, grad_f = _outputs_and_grads(fused, hi, None)
    for a, b in zip(out_h, out_f, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b.to(dtype).float())
    for k in args:
        assert grad_h[k].dtype == dtype
        torch.testing.assert_close(grad_h[k].float(), grad_f[k], atol=2e-2, rtol=2e-2)


def test_cas_lstm_lambda_forms_agree() -> None:
    """lambda_ as a float, a scalar tensor and an (H,) tensor give the same eq 12."""
    args, fused, _ = _make("cas", 2, 4, 3, torch.float64, seed=2)
    kw = {k: v.detach() for k, v in args.items() if k != "lam"}
    a = fused_cells.cas_lstm_sequence(lambda_=0.25, **kw)
    b = fused_cells.cas_lstm_sequence(lambda_=torch.tensor(0.25, dtype=torch.float64), **kw)
    c = fused_cells.cas_lstm_sequence(lambda_=torch.full((3,), 0.25, dtype=torch.float64), **kw)
    for x, y, z in zip(a, b, c, strict=True):
        torch.testing.assert_close(x, y)
        torch.testing.assert_close(x, z)
    # lambda = 0 with the g-gate rows irrelevant reduces to a plain LSTM on the first 4H gates
    h0, c0 = kw["h0"], kw["c0"]
    lstm = fused_cells.lstm_sequence(kw["x_proj"][..., :12], kw["weight_hh"][:12], h0, c0)
    cas = fused_cells.cas_lstm_sequence(lambda_=0.0, **kw)
    for x, y in zip(lstm, cas, strict=True):
        torch.testing.assert_close(x, y)


def test_bad_arguments_raise_value_error() -> None:
    B, T, H = 2, 3, 4
    xp, w = torch.randn(B, T, 4 * H), torch.randn(4 * H, H)
    with pytest.raises(ValueError, match="x_proj"):
        fused_cells.lstm_sequence(torch.randn(B, T, 4 * H + 1), w)
    with pytest.raises(ValueError, match="weight_hh"):
        fused_cells.lstm_sequence(xp, torch.randn(3 * H, H))
    with pytest.raises(ValueError, match="h0"):
        fused_cells.lstm_sequence(xp, w, h0=torch.randn(B + 1, H))
    with pytest.raises(ValueError, match="c0"):
        fused_cells.lstm_sequence(xp, w, c0=torch.randn(B, H, dtype=torch.float64))
    with pytest.raises(ValueError, match="lengths"):
        fused_cells.lstm_sequence(xp, w, lengths=torch.tensor([1, T + 1]))
    with pytest.raises(ValueError, match="lengths"):
        fused_cells.lstm_sequence(xp, w, lengths=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="lower_c"):
        fused_cells.cas_lstm_sequence(torch.randn(B, T, 5 * H), torch.randn(5 * H, H),
                                      torch.randn(B, T + 1, H))  # fmt: skip
    with pytest.raises(ValueError, match="weight_hh"):  # the peephole variant has no U_g
        fused_cells.cas_lstm_sequence(torch.randn(B, T, 5 * H), torch.randn(5 * H, H),
                                      torch.randn(B, T, H), peephole=torch.randn(2, H))  # fmt: skip
    with pytest.raises(ValueError, match="context_proj"):
        fused_cells.ncarnn_sequence(torch.randn(B, T, 3 * H), torch.randn(2 * H, H),
                                    torch.randn(B, H))  # fmt: skip


def test_empty_sequence_keeps_initial_state() -> None:
    args, fused, _ = _make("lstm", 2, 0, 3, torch.float64)
    hs, cs, hl, cl = fused(**args)
    assert hs.shape == (2, 0, 3) and cs.shape == (2, 0, 3)
    torch.testing.assert_close(hl, args["h0"].detach())
    (hl.sum() + cl.sum()).backward()
    torch.testing.assert_close(args["h0"].grad, torch.ones(2, 3, dtype=torch.float64))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch,steps", [(3, 4), (0, 4), (3, 0)])
def test_backward_without_saved_activations_raises(
    cell: str, batch: int, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forward run with save=False keeps no activations: a backward through it must raise
    (the kernel would read the empty ``acts`` and crash the process), empty shapes included;
    with save=True the same empty shapes differentiate."""
    from ctrlrnn.ops.cells import shell

    args, fused, _ = _make(cell, batch, steps, 3, torch.float64, seed=6)
    out = fused(**args, lengths=None)
    sum(o.sum() for o in out).backward()  # save=True: the empty shapes differentiate too
    monkeypatch.setattr(shell, "needs_grad", lambda *tensors: False)
    out = fused(**args, lengths=None)
    with pytest.raises(RuntimeError, match=r"_cell_fwd: backward .* save=False"):
        sum(o.sum() for o in out).backward()
