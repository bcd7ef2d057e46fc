"""Fused gated cells: LSTM, GRU, CAS-LSTM (layers l > 1) and nCARNN.

Haste's recipe: the caller computes everything that does not depend on the recurrent state for
all time steps at once (the input projections ``x_proj = x @ W_ih^T + b``, the nCARNN context
projection, the CAS-LSTM lower cell sequence); the op runs only the recurrence, per step one GEMM
``h_{t-1} @ weight_hh^T`` plus one fused pointwise function, and backward through time written
the same way (``csrc/cells.cpp``).

Public functions (all batch-first, all returning full sequences and final states):

* :func:`lstm_sequence` - CAS-LSTM paper eq 1-6 (RCRN eq 1-6, 10-14); equals torch.nn.LSTM.
* :func:`gru_sequence` - the torch.nn.GRU formulation; equals torch.nn.GRU.
* :func:`cas_lstm_sequence` - CAS-LSTM eq 7-13 with lambda, and the peephole variant eq 17-18.
* :func:`ncarnn_sequence` - CARNN eq 3.
* :func:`metagross_state_sequence` - the METAGROSS unit as printed (section 2, gates reading
  ``h_{t-1}``): one tree of ``2^L - 1`` units per step.

Variable lengths: ``lengths`` (B,) integer; for ``t >= lengths[b]`` row ``b`` keeps its state
and its outputs are zero, so the final states are those at each row's last valid step and
nothing (values or gradients) depends on the padding.

Dispatch: CPU tensors run the compiled extension ``cells`` (:func:`_use_compiled`) through
``torch.library`` custom ops ``ctrlrnn::*_cell_fwd`` / ``*_cell_bwd`` (so they trace under
``torch.compile``); CUDA tensors run the Triton kernels of :mod:`ctrlrnn.ops.gpu.cells_triton`
(:func:`_gpu_cells`; all five cells, forward and backward, custom ops ``ctrlrnn::gpu_*``). The
readable references of :mod:`ctrlrnn.ops.cells_ref` run when the extension cannot be built, on
CUDA without Triton (warned once), under ``CTRLRNN_BACKEND=reference`` and inside ``torch.func``
transforms. float16/bfloat16 inputs are computed in float32 and the outputs cast back.
"""

# No `from __future__ import annotations`: torch 2.4's custom_op reads the annotations of the
# functions it registers as written, and cannot parse them as strings.

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ctrlrnn.ops import cells_ref, scan_export
from ctrlrnn.ops.backend import functorch_active, gpu_kernels, has_kernel, kernel_for
from ctrlrnn.ops.double_backward import forbid_double_backward
from ctrlrnn.ops.validation import check_lengths

__all__ = [
    "cas_lstm_sequence",
    "gru_sequence",
    "lstm_sequence",
    "metagross_state_sequence",
    "ncarnn_sequence",
]

_HALF = (torch.float16, torch.bfloat16)


# ------------------------------------------------------------------------------------------------
# Dispatch and argument checks
# ------------------------------------------------------------------------------------------------


def _gpu_cells(x: Tensor) -> Any:
    """The Triton cells for CUDA tensors, or None (reference; also inside ``torch.func``
    transforms, which the custom ops do not support)."""
    return None if functorch_active() else gpu_kernels("cells", x.device)


def _use_compiled(x: Tensor) -> bool:
    """True when the compiled CPU kernels run for tensors like ``x``; the single dispatch point.

    CPU: the ``cells`` extension (built on first use; if the build fails the loader warns once,
    or raises under ``CTRLRNN_REQUIRE_COMPILED=1``). CUDA tensors are answered False here and
    take the Triton kernels through :func:`_gpu_cells` instead.
    """
    return has_kernel("cells", x.device)


def _ext() -> Any:
    ext = kernel_for("cells", torch.device("cpu"))
    if ext is None:
        raise RuntimeError(
            "ctrlrnn: the compiled 'cells' extension is not available, but this call was traced "
            "(torch.compile / torch.export) while it was; after changing CTRLRNN_BACKEND, call "
            "torch._dynamo.reset() (or trace again)"
        )
    return ext


def _check_x_proj(x_proj: Tensor, gates: int, weight_hh: Tensor, gates_h: int) -> tuple[int, ...]:
    if not isinstance(x_proj, Tensor) or x_proj.dim() != 3:
        raise ValueError(
            f"x_proj: expected a 3-D tensor (batch, time, {gates}*hidden), got "
            f"{tuple(x_proj.shape) if isinstance(x_proj, Tensor) else type(x_proj).__name__}"
        )
    if not x_proj.is_floating_point():
        raise ValueError(f"x_proj: expected a floating-point tensor, got {x_proj.dtype}")
    if not isinstance(weight_hh, Tensor) or weight_hh.dim() != 2:
        raise ValueError(f"weight_hh: expected a 2-D tensor ({gates_h}*hidden, hidden)")
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    if weight_hh.shape[0] != gates_h * hidden:
        raise ValueError(
            f"weight_hh: expected shape ({gates_h}*hidden, hidden) = ({gates_h * hidden}, "
            f"{hidden}), got {tuple(weight_hh.shape)}"
        )
    if width != gates * hidden:
        raise ValueError(
            f"x_proj: last dimension must be {gates}*hidden = {gates * hidden} (hidden = "
            f"weight_hh.shape[1] = {hidden}), got {width}"
        )
    return batch, steps, hidden


def _check_tensor(name: str, t: Tensor, shape: Sequence[int], like: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"{name}: expected a tensor of shape {tuple(shape)}, got {type(t)}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.device != like.device:
        raise ValueError(f"{name}: expected device {like.device} (as x_proj), got {t.device}")
    ok = t.dtype == like.dtype or (like.dtype in _HALF and t.dtype in (*_HALF, torch.float32))
    if not ok:
        raise ValueError(f"{name}: expected dtype {like.dtype} (as x_proj), got {t.dtype}")


def _check_lengths(lengths: Tensor | None, batch: int, steps: int, like: Tensor) -> Tensor | None:
    """Validated lengths in [0, T] (the shared check), on the device the kernels read them."""
    if lengths is None:
        return None
    if not isinstance(lengths, Tensor):
        raise ValueError(f"lengths: expected an integer tensor of shape ({batch},)")
    checked = check_lengths(lengths, batch, steps, allow_zero=True)
    return checked if like.device.type == "cpu" else checked.to(like.device)


def _state(name: str, s: Tensor | None, batch: int, hidden: int, like: Tensor) -> Tensor:
    if s is None:
        return like.new_zeros(batch, hidden)
    _check_tensor(name, s, (batch, hidden), like)
    return s


def _needs_grad(*tensors: Tensor | None) -> bool:
    """Whether autograd will need the saved gate activations (else the op skips storing them)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _fake_acts(x_proj: Tensor, save: bool, width: int) -> Tensor:
    batch, steps, _ = x_proj.shape
    return x_proj.new_empty(batch, steps, width) if save else x_proj.new_empty(0)


def _compute_dtype(x_proj: Tensor) -> torch.dtype:
    return torch.float32 if x_proj.dtype in _HALF else x_proj.dtype


def _cast(tensors: Sequence[Tensor | None], dtype: torch.dtype) -> list[Any]:
    return [t.to(dtype) if t is not None and t.dtype != dtype else t for t in tensors]


def _uncast(outs: Sequence[Tensor], dtype: torch.dtype) -> tuple[Tensor, ...]:
    return tuple(o.to(dtype) if o.dtype != dtype else o for o in outs)


# ------------------------------------------------------------------------------------------------
# LSTM
# ------------------------------------------------------------------------------------------------


@torch.library.custom_op("ctrlrnn::lstm_cell_fwd", mutates_args=())
def _lstm_fwd(
    x_proj: Tensor, weight_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None, save: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Compiled LSTM forward -> (h_seq, c_seq, h_last, c_last, activated gates if ``save``)."""
    h_seq, c_seq, h, c, acts = _ext().lstm_forward(x_proj, weight_hh, h0, c0, lengths, save)
    return h_seq, c_seq, h, c, acts


@_lstm_fwd.register_fake
def _(x_proj: Tensor, weight_hh: Tensor, h0: Tensor, c0: Tensor, lengths: Tensor | None,
      save: bool):  # fmt: skip
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    seq = (batch, steps, hidden)
    return (
        x_proj.new_empty(seq),
        x_proj.new_empty(seq),
        h0.new_empty(batch, hidden),
        c0.new_empty(batch, hidden),
        _fake_acts(x_proj, save, width),
    )


@torch.library.custom_op("ctrlrnn::lstm_cell_bwd", mutates_args=())
def _lstm_bwd(
    grad_h_seq: Tensor | None,
    grad_c_seq: Tensor | None,
    grad_h_last: Tensor | None,
    grad_c_last: Tensor | None,
    weight_hh: Tensor,
    h0: Tensor,
    c0: Tensor,
    h_seq: Tensor,
    c_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Compiled LSTM backward through time -> (dx_proj, dweight_hh, dh0, dc0)."""
    dx, dw, dh0, dc0 = _ext().lstm_backward(
        grad_h_seq, grad_c_seq, grad_h_last, grad_c_last,
        weight_hh, h0, c0, h_seq, c_seq, acts, lengths,
    )  # fmt: skip
    return dx, dw, dh0, dc0


@_lstm_bwd.register_fake
def _(grad_h_seq, grad_c_seq, grad_h_last, grad_c_last, weight_hh, h0, c0, h_seq, c_seq, acts,
      lengths):  # fmt: skip
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
    )


def _lstm_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, h0, c0, lengths, _ = inputs
    h_seq, c_seq, _, _, acts = output
    ctx.save_for_backward(weight_hh, h0, c0, h_seq, c_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _lstm_backward(ctx: Any, gh: Tensor | None, gc: Tensor | None, ghl: Tensor | None,
                   gcl: Tensor | None, _gacts: Tensor | None) -> tuple[Any, ...]:  # fmt: skip
    weight_hh, h0, c0, h_seq, c_seq, acts, lengths = ctx.saved_tensors
    dx, dw, dh0, dc0 = _lstm_bwd(gh, gc, ghl, gcl, weight_hh, h0, c0, h_seq, c_seq, acts, lengths)
    return dx, dw, dh0, dc0, None, None


_lstm_fwd.register_autograd(_lstm_backward, setup_context=_lstm_setup)
forbid_double_backward(_lstm_bwd, "lstm_cell_fwd", "RCRN, CASLSTM (layer 1), METAGROSS's "
                       "LSTM base")


def lstm_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run an LSTM (CAS-LSTM paper eq 1-6; torch.nn.LSTM's cell) over a batch-first sequence.

    Args:
        x_proj: (B, T, 4H) input projections ``x_t @ W_ih^T + b_ih + b_hh`` for all steps, gates
            in torch.nn.LSTM order (i, f, g=c~, o).
        weight_hh: (4H, H) recurrent matrix U (torch.nn.LSTM's ``weight_hh_l0``).
        h0, c0: (B, H) initial states; zeros when None.
        lengths: optional (B,) integer lengths in [0, T] (see module docstring).

    Returns:
        ``(h_seq, c_seq, h_last, c_last)``: (B, T, H) hidden and cell sequences (zero at padded
        steps) and the (B, H) final states.
    """
    batch, steps, hidden = _check_x_proj(x_proj, 4, weight_hh, 4)
    _check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    h0 = _state("h0", h0, batch, hidden, x_proj)
    c0 = _state("c0", c0, batch, hidden, x_proj)
    lengths = _check_lengths(lengths, batch, steps, x_proj)
    dtype = _compute_dtype(x_proj)
    xp, w, h, c = _cast((x_proj, weight_hh, h0, c0), dtype)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out = scan_export.lstm_sequence(xp, w, h, c, lengths)
    elif _use_compiled(x_proj):
        out = _lstm_fwd(xp, w, h, c, lengths, _needs_grad(xp, w, h, c))[:4]
    elif (gpu := _gpu_cells(x_proj)) is not None:
        out = gpu.lstm_sequence(xp, w, h, c, lengths)
    else:
        out = cells_ref.lstm_sequence_ref(xp, w, h, c, lengths)
    return _uncast(out, x_proj.dtype)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# GRU (torch.nn.GRU formulation)
# ------------------------------------------------------------------------------------------------


@torch.library.custom_op("ctrlrnn::gru_cell_fwd", mutates_args=())
def _gru_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor,
    h0: Tensor,
    lengths: Tensor | None,
    save: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compiled GRU forward -> (h_seq, h_last, r, z, n and U_n h + b_hn if ``save``)."""
    h_seq, h, acts = _ext().gru_forward(x_proj, weight_hh, bias_hh, h0, lengths, save)
    return h_seq, h, acts


@_gru_fwd.register_fake
def _(x_proj: Tensor, weight_hh: Tensor, bias_hh: Tensor, h0: Tensor, lengths: Tensor | None,
      save: bool):  # fmt: skip
    batch, steps, _ = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        _fake_acts(x_proj, save, 4 * hidden),
    )


@torch.library.custom_op("ctrlrnn::gru_cell_bwd", mutates_args=())
def _gru_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    weight_hh: Tensor,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Compiled GRU backward -> (dx_proj, dweight_hh, dbias_hh, dh0)."""
    dx, dw, db, dh0 = _ext().gru_backward(
        grad_h_seq, grad_h_last, weight_hh, h0, h_seq, acts, lengths
    )
    return dx, dw, db, dh0


@_gru_bwd.register_fake
def _(grad_h_seq, grad_h_last, weight_hh, h0, h_seq, acts, lengths):
    batch, steps, hidden = h_seq.shape
    return (
        h_seq.new_empty(batch, steps, 3 * hidden),
        weight_hh.new_empty(weight_hh.shape),
        weight_hh.new_empty(3 * hidden),
        h0.new_empty(h0.shape),
    )


def _gru_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, _, h0, lengths, _ = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(weight_hh, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _gru_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    weight_hh, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, db, dh0 = _gru_bwd(gh, ghl, weight_hh, h0, h_seq, acts, lengths)
    return dx, dw, db, dh0, None, None


_gru_fwd.register_autograd(_gru_backward, setup_context=_gru_setup)
forbid_double_backward(_gru_bwd, "gru_cell_fwd", "RCRN(cell='gru'), METAGROSS's GRU base")


def gru_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    bias_hh: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run a GRU in torch.nn.GRU's formulation over a batch-first sequence.

    ``r = sig(x_r + U_r h + b_hr)``, ``z = sig(x_z + U_z h + b_hz)``,
    ``n = tanh(x_n + r * (U_n h + b_hn))``, ``h' = (1 - z) n + z h``.

    Args:
        x_proj: (B, T, 3H) input projections ``x_t @ W_ih^T + b_ih`` (gate order r, z, n),
            *without* the recurrent bias.
        weight_hh: (3H, H) recurrent matrix (torch.nn.GRU's ``weight_hh_l0``).
        bias_hh: (3H,) recurrent bias (torch.nn.GRU's ``bias_hh_l0``); zeros when None. Its
            n-part must stay inside the reset product, hence a separate argument.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    batch, steps, hidden = _check_x_proj(x_proj, 3, weight_hh, 3)
    _check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    if bias_hh is None:
        bias_hh = x_proj.new_zeros(3 * hidden)
    _check_tensor("bias_hh", bias_hh, (3 * hidden,), x_proj)
    h0 = _state("h0", h0, batch, hidden, x_proj)
    lengths = _check_lengths(lengths, batch, steps, x_proj)
    dtype = _compute_dtype(x_proj)
    xp, w, b, h = _cast((x_proj, weight_hh, bias_hh, h0), dtype)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out = scan_export.gru_sequence(xp, w, b, h, lengths)
    elif _use_compiled(x_proj):
        out = _gru_fwd(xp, w, b, h, lengths, _needs_grad(xp, w, b, h))[:2]
    elif (gpu := _gpu_cells(x_proj)) is not None:
        out = gpu.gru_sequence(xp, w, b, h, lengths)
    else:
        out = cells_ref.gru_sequence_ref(xp, w, b, h, lengths)
    return _uncast(out, x_proj.dtype)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# CAS-LSTM, layers l > 1
# ------------------------------------------------------------------------------------------------


@torch.library.custom_op("ctrlrnn::cas_lstm_cell_fwd", mutates_args=())
def _cas_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    lengths: Tensor | None,
    save: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Compiled CAS-LSTM forward -> (h_seq, c_seq, h_last, c_last, gates i,f,c~,o,g if saved)."""
    h_seq, c_seq, h, c, acts = _ext().cas_lstm_forward(
        x_proj, weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, lengths, save
    )
    return h_seq, c_seq, h, c, acts


@_cas_fwd.register_fake
def _(x_proj, weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, lengths, save):
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    seq = (batch, steps, hidden)
    return (
        x_proj.new_empty(seq),
        x_proj.new_empty(seq),
        h0.new_empty(batch, hidden),
        c0.new_empty(batch, hidden),
        _fake_acts(x_proj, save, width),
    )


@torch.library.custom_op("ctrlrnn::cas_lstm_cell_bwd", mutates_args=())
def _cas_bwd(
    grad_h_seq: Tensor | None,
    grad_c_seq: Tensor | None,
    grad_h_last: Tensor | None,
    grad_c_last: Tensor | None,
    weight_hh: Tensor,
    lower_c: Tensor,
    scale_f: Tensor,
    scale_g: Tensor,
    peephole: Tensor | None,
    h0: Tensor,
    c0: Tensor,
    h_seq: Tensor,
    c_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Compiled CAS-LSTM backward.

    Returns (dx_proj, dweight_hh, dlower_c, dscale_f, dscale_g, dpeephole, dh0, dc0);
    dpeephole is (2, H) zeros when there is no peephole.
    """
    grads = _ext().cas_lstm_backward(
        grad_h_seq, grad_c_seq, grad_h_last, grad_c_last,
        weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths,
    )  # fmt: skip
    return tuple(grads)


@_cas_bwd.register_fake
def _(grad_h_seq, grad_c_seq, grad_h_last, grad_c_last, weight_hh, lower_c, scale_f, scale_g,
      peephole, h0, c0, h_seq, c_seq, acts, lengths):  # fmt: skip
    hidden = h_seq.shape[2]
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        lower_c.new_empty(lower_c.shape),
        scale_f.new_empty(scale_f.shape),
        scale_g.new_empty(scale_g.shape),
        h_seq.new_empty(2, hidden),
        h0.new_empty(h0.shape),
        c0.new_empty(c0.shape),
    )


def _cas_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, lengths, _ = inputs
    h_seq, c_seq, _, _, acts = output
    ctx.save_for_backward(
        weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths
    )
    ctx.set_materialize_grads(False)


def _cas_backward(ctx: Any, gh: Tensor | None, gc: Tensor | None, ghl: Tensor | None,
                  gcl: Tensor | None, _gacts: Tensor | None) -> tuple[Any, ...]:  # fmt: skip
    weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths = (
        ctx.saved_tensors
    )
    dx, dw, dlow, dsf, dsg, dpp, dh0, dc0 = _cas_bwd(
        gh, gc, ghl, gcl,
        weight_hh, lower_c, scale_f, scale_g, peephole, h0, c0, h_seq, c_seq, acts, lengths,
    )  # fmt: skip
    dpp = dpp if peephole is not None else None
    return dx, dw, dlow, dsf, dsg, dpp, dh0, dc0, None, None


_cas_fwd.register_autograd(_cas_backward, setup_context=_cas_setup)
forbid_double_backward(_cas_bwd, "cas_lstm_cell_fwd", "CASLSTM")


def cas_lstm_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    lower_c: Tensor,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    lengths: Tensor | None = None,
    lambda_: float | Tensor | None = 0.5,
    peephole: Tensor | tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run a CAS-LSTM layer l > 1 (CAS-LSTM paper eq 7-13, section 3.2) over a sequence.

    ``c_t = i c~ + (1 - lambda) f c_{t-1} + lambda g c^{l-1}_t`` (eq 12), ``h_t = o tanh(c_t)``,
    with the vertical forget gate ``g = sig(W_g h^{l-1}_t + U_g h_{t-1} + b_g)`` (eq 9).

    Args:
        x_proj: (B, T, 5H) input projections ``h^{l-1}_t @ W^T + b`` for the gates in the order
            (i, f, c~, o, g): the first 4H as torch.nn.LSTM, the vertical gate g last.
        weight_hh: (5H, H) recurrent matrix (U_i, U_f, U_c, U_o, U_g); (4H, H) without U_g in
            the peephole variant.
        lower_c: (B, T, H) the lower layer's cell states c^{l-1}_t (d_l = d_{l-1}).
        h0, c0: (B, H) initial states; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].
        lambda_: the mixing weight of eq 12: a float constant (paper default 0.5), a tensor of
            shape (H,) or () (e.g. ``sigmoid`` of a parameter for the trainable variant; gradients
            flow to it), or None for the plain sum ``f c_{t-1} + g c^{l-1}_t`` (variant (ii),
            and eq 18).
        peephole: variant (iii): ``(p_g1, p_g2)`` or a stacked (2, H) tensor; then
            ``g = sig(x_g + p_g1 c_{t-1} + p_g2 c^{l-1}_t)`` (eq 17) with no U_g, so ``weight_hh``
            is (4H, H). Use ``lambda_=None`` to get eq 18 exactly.

    Returns:
        ``(h_seq, c_seq, h_last, c_last)`` as in :func:`lstm_sequence`.
    """
    gates_h = 4 if peephole is not None else 5
    batch, steps, hidden = _check_x_proj(x_proj, 5, weight_hh, gates_h)
    _check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    _check_tensor("lower_c", lower_c, (batch, steps, hidden), x_proj)
    h0 = _state("h0", h0, batch, hidden, x_proj)
    c0 = _state("c0", c0, batch, hidden, x_proj)
    lengths = _check_lengths(lengths, batch, steps, x_proj)
    dtype = _compute_dtype(x_proj)

    if lambda_ is None:
        scale_g = x_proj.new_ones(hidden, dtype=dtype)
        scale_f = scale_g
    elif isinstance(lambda_, Tensor):
        if lambda_.dim() > 1 or (lambda_.dim() == 1 and lambda_.shape[0] != hidden):
            raise ValueError(f"lambda_: expected shape () or ({hidden},), got {lambda_.shape}")
        if lambda_.device != x_proj.device:
            raise ValueError(f"lambda_: expected device {x_proj.device}, got {lambda_.device}")
        scale_g = lambda_.to(dtype).expand(hidden)
        scale_f = 1 - scale_g
    else:
        scale_g = x_proj.new_full((hidden,), float(lambda_), dtype=dtype)
        scale_f = 1 - scale_g

    pp: Tensor | None = None
    if peephole is not None:
        pp = torch.stack(tuple(peephole)) if isinstance(peephole, (tuple, list)) else peephole
        _check_tensor("peephole", pp, (2, hidden), x_proj)

    xp, w, low, p, h, c = _cast((x_proj, weight_hh, lower_c, pp, h0, c0), dtype)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out = scan_export.cas_lstm_sequence(xp, w, low, h, c, scale_f, scale_g, p, lengths)
    elif _use_compiled(x_proj):
        save = _needs_grad(xp, w, low, scale_f, scale_g, p, h, c)
        out = _cas_fwd(xp, w, low, scale_f, scale_g, p, h, c, lengths, save)[:4]
    elif (gpu := _gpu_cells(x_proj)) is not None:
        out = gpu.cas_lstm_sequence(xp, w, low, h, c, scale_f, scale_g, p, lengths)
    else:
        out = cells_ref.cas_lstm_sequence_ref(xp, w, low, h, c, scale_f, scale_g, p, lengths)
    return _uncast(out, x_proj.dtype)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# nCARNN
# ------------------------------------------------------------------------------------------------


@torch.library.custom_op("ctrlrnn::ncarnn_cell_fwd", mutates_args=())
def _ncarnn_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor,
    lengths: Tensor | None,
    save: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compiled nCARNN forward -> (h_seq, h_last, gates g^u, g^f if ``save``)."""
    h_seq, h, acts = _ext().ncarnn_forward(x_proj, weight_hh, context_proj, h0, lengths, save)
    return h_seq, h, acts


@_ncarnn_fwd.register_fake
def _(x_proj, weight_hh, context_proj, h0, lengths, save):
    batch, steps, _ = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        _fake_acts(x_proj, save, 2 * hidden),
    )


@torch.library.custom_op("ctrlrnn::ncarnn_cell_bwd", mutates_args=())
def _ncarnn_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    x_proj: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Compiled nCARNN backward -> (dx_proj, dweight_hh, dcontext_proj, dh0)."""
    dx, dw, dctx, dh0 = _ext().ncarnn_backward(
        grad_h_seq, grad_h_last, x_proj, weight_hh, h0, h_seq, acts, lengths
    )
    return dx, dw, dctx, dh0


@_ncarnn_bwd.register_fake
def _(grad_h_seq, grad_h_last, x_proj, weight_hh, h0, h_seq, acts, lengths):
    batch, _, hidden = h_seq.shape
    return (
        x_proj.new_empty(x_proj.shape),
        weight_hh.new_empty(weight_hh.shape),
        h0.new_empty(batch, 2 * hidden),
        h0.new_empty(h0.shape),
    )


def _ncarnn_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    x_proj, weight_hh, _, h0, lengths, _ = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(x_proj, weight_hh, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _ncarnn_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    x_proj, weight_hh, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, dctx, dh0 = _ncarnn_bwd(gh, ghl, x_proj, weight_hh, h0, h_seq, acts, lengths)
    return dx, dw, dctx, dh0, None, None


_ncarnn_fwd.register_autograd(_ncarnn_backward, setup_context=_ncarnn_setup)
forbid_double_backward(_ncarnn_bwd, "ncarnn_cell_fwd", "CARNN(variant='n')")


def ncarnn_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    context_proj: Tensor,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run an nCARNN (CARNN paper eq 3) over a batch-first sequence.

    ``g^u = sig(W^c_u c + W^h_u h_{m-1} + W^e_u e_m + b_u)``, likewise ``g^f``;
    ``h_m = g^u (g^f ebar_m) + (1 - g^u) h_{m-1}`` with ``ebar_m = W_e e_m + b_e``.

    Args:
        x_proj: (B, T, 3H) per-step projections of the input e_m, in the order
            (W^e_u e_m + b_u, W^e_f e_m + b_f, W_e e_m + b_e).
        weight_hh: (2H, H) the recurrent matrices (W^h_u; W^h_f).
        context_proj: (B, 2H) the context projection (W^c_u c, W^c_f c), computed once per
            sequence and broadcast over time inside the op.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    batch, steps, hidden = _check_x_proj(x_proj, 3, weight_hh, 2)
    _check_tensor("weight_hh", weight_hh, weight_hh.shape, x_proj)
    _check_tensor("context_proj", context_proj, (batch, 2 * hidden), x_proj)
    h0 = _state("h0", h0, batch, hidden, x_proj)
    lengths = _check_lengths(lengths, batch, steps, x_proj)
    dtype = _compute_dtype(x_proj)
    xp, w, ctx, h = _cast((x_proj, weight_hh, context_proj, h0), dtype)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out = scan_export.ncarnn_sequence(xp, w, ctx, h, lengths)
    elif _use_compiled(x_proj):
        out = _ncarnn_fwd(xp, w, ctx, h, lengths, _needs_grad(xp, w, ctx, h))[:2]
    elif (gpu := _gpu_cells(x_proj)) is not None:
        out = gpu.ncarnn_sequence(xp, w, ctx, h, lengths)
    else:
        out = cells_ref.ncarnn_sequence_ref(xp, w, ctx, h, lengths)
    return _uncast(out, x_proj.dtype)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------
# METAGROSS as printed (section 2: every base map reads (x_t, h_{t-1}))
# ------------------------------------------------------------------------------------------------


@torch.library.custom_op("ctrlrnn::metagross_state_cell_fwd", mutates_args=())
def _metagross_state_fwd(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    lengths: Tensor | None,
    save: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Compiled METAGROSS (as printed) forward -> (h_seq, h_last, pre-activations if ``save``)."""
    h_seq, h, acts = _ext().metagross_state_forward(
        x_proj, weight_hh, alpha, beta, res, h0, lengths, save
    )
    return h_seq, h, acts


@_metagross_state_fwd.register_fake
def _(x_proj: Tensor, weight_hh: Tensor, alpha: Tensor, beta: Tensor, res: Tensor | None,
      h0: Tensor, lengths: Tensor | None, save: bool):  # fmt: skip
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    return (
        x_proj.new_empty(batch, steps, hidden),
        h0.new_empty(batch, hidden),
        _fake_acts(x_proj, save, width),
    )


@torch.library.custom_op("ctrlrnn::metagross_state_cell_bwd", mutates_args=())
def _metagross_state_bwd(
    grad_h_seq: Tensor | None,
    grad_h_last: Tensor | None,
    weight_hh: Tensor,
    alpha: Tensor,
    beta: Tensor,
    res: Tensor | None,
    h0: Tensor,
    h_seq: Tensor,
    acts: Tensor,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Compiled METAGROSS (as printed) backward -> (dx_proj, dweight_hh, dalpha, dbeta, dres
    (empty without ``res``), dh0)."""
    dx, dw, da, db, dr, dh0 = _ext().metagross_state_backward(
        grad_h_seq, grad_h_last, weight_hh, alpha, beta, res, h0, h_seq, acts, lengths
    )
    return dx, dw, da, db, dr, dh0


@_metagross_state_bwd.register_fake
def _(grad_h_seq, grad_h_last, weight_hh, alpha, beta, res, h0, h_seq, acts, lengths):
    return (
        acts.new_empty(acts.shape),
        weight_hh.new_empty(weight_hh.shape),
        alpha.new_empty(alpha.shape),
        beta.new_empty(beta.shape),
        h_seq.new_empty(h_seq.shape) if res is not None else h_seq.new_empty(0),
        h0.new_empty(h0.shape),
    )


def _metagross_state_setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, weight_hh, alpha, beta, res, h0, lengths, _ = inputs
    h_seq, _, acts = output
    ctx.save_for_backward(weight_hh, alpha, beta, res, h0, h_seq, acts, lengths)
    ctx.set_materialize_grads(False)


def _metagross_state_backward(
    ctx: Any, gh: Tensor | None, ghl: Tensor | None, _gacts: Tensor | None
) -> tuple[Any, ...]:
    weight_hh, alpha, beta, res, h0, h_seq, acts, lengths = ctx.saved_tensors
    dx, dw, da, db, dr, dh0 = _metagross_state_bwd(
        gh, ghl, weight_hh, alpha, beta, res, h0, h_seq, acts, lengths
    )
    return dx, dw, da, db, (dr if res is not None else None), dh0, None, None


_metagross_state_fwd.register_autograd(_metagross_state_backward,
                                       setup_context=_metagross_state_setup)  # fmt: skip
forbid_double_backward(_metagross_state_bwd, "metagross_state_cell_fwd",
                       "Metagross(gates='state')")  # fmt: skip


def metagross_tree_size(width: int, hidden: int) -> tuple[int, int]:
    """``(N, I)``: units and internal units of a METAGROSS tree whose base maps are ``width =
    3*N*hidden`` wide (``N = 2^L - 1``); ValueError naming ``x_proj`` otherwise."""
    nodes = width // (3 * hidden) if hidden > 0 else 0
    if hidden <= 0 or nodes * 3 * hidden != width or nodes < 1 or (nodes + 1) & nodes:
        raise ValueError(
            f"x_proj: last dimension must be 3*N*hidden with N = 2^depth - 1 units (hidden = "
            f"weight_hh.shape[1] = {hidden}), got {width}"
        )
    return nodes, (nodes - 1) // 2


def metagross_state_sequence(
    x_proj: Tensor,
    weight_hh: Tensor,
    alpha: Tensor | None = None,
    beta: Tensor | None = None,
    res: Tensor | None = None,
    h0: Tensor | None = None,
    lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run the METAGROSS unit as printed (METAGROSS paper section 2) over a batch-first sequence.

    Per step, for the ``N = 2^L - 1`` units of one tree (heap order; unit ``k``'s gate children
    ``2k+1``, ``2k+2``), all reading the root's previous output ``h_{t-1}``::

        P      = x_proj[:, t] + h_{t-1} @ weight_hh^T          F^*_k(x_t, h_{t-1}), all k
        f_k    = sig(P^F_k + alpha_k (h_{2k+1} - P^F_k))      (2-1)
        o_k    = sig(P^O_k + beta_k  (h_{2k+2} - P^O_k))      (2-2)
        z_k    = tanh(P^Z_k)                                  (2-3)
        h_k    = o_k ((1 - f_k) h_{t-1} + f_k z_k) (+ res_t)  (2-4..2-6)

    (leaves: ``f = sig(P^F)``, ``o = sig(P^O)``); the root's ``h_0`` is the new state.

    Args:
        x_proj: (B, T, 3NH) the input part of every base map with its bias, level-major (the
            layout of ``ctrlrnn.nn.metagross.base_index``).
        weight_hh: (3NH, H) the recurrent part of every base map, same row order.
        alpha, beta: (B, T, I) depth gates of the ``I = (N-1)/2`` internal units in heap order
            (None when ``N == 1``).
        res: (B, T, H) residual term added to every unit's output (eq 2-6), or None.
        h0: (B, H) initial state; zeros when None.
        lengths: optional (B,) integer lengths in [0, T].

    Returns:
        ``(h_seq, h_last)``: (B, T, H) outputs (zero at padded steps) and the (B, H) final state.
    """
    if not isinstance(x_proj, Tensor) or x_proj.dim() != 3 or not x_proj.is_floating_point():
        raise ValueError("x_proj: expected a 3-D floating-point tensor (batch, time, 3*N*hidden)")
    if not isinstance(weight_hh, Tensor) or weight_hh.dim() != 2:
        raise ValueError("weight_hh: expected a 2-D tensor (3*N*hidden, hidden)")
    batch, steps, width = x_proj.shape
    hidden = weight_hh.shape[1]
    _, internal = metagross_tree_size(width, hidden)
    _check_tensor("weight_hh", weight_hh, (width, hidden), x_proj)
    if alpha is None or beta is None:
        if internal:
            raise ValueError(f"alpha: expected (B, T, {internal}) depth gates, got None")
        alpha = beta = x_proj.new_zeros(batch, steps, 0)
    _check_tensor("alpha", alpha, (batch, steps, internal), x_proj)
    _check_tensor("beta", beta, (batch, steps, internal), x_proj)
    if res is not None:
        _check_tensor("res", res, (batch, steps, hidden), x_proj)
    h0 = _state("h0", h0, batch, hidden, x_proj)
    lengths = _check_lengths(lengths, batch, steps, x_proj)
    dtype = _compute_dtype(x_proj)
    xp, w, a, b, r, h = _cast((x_proj, weight_hh, alpha, beta, res, h0), dtype)
    if scan_export.active():  # ONNX export: one scan of symbolic length (ops/scan_export.py)
        out = scan_export.metagross_state_sequence(xp, w, a, b, r, h, lengths)
    elif _use_compiled(x_proj):
        save = _needs_grad(xp, w, a, b, r, h)
        out = _metagross_state_fwd(xp, w, a, b, r, h, lengths, save)[:2]
    elif (gpu := _gpu_cells(x_proj)) is not None:
        out = gpu.metagross_state_sequence(xp, w, a, b, r, h, lengths)
    else:
        out = cells_ref.metagross_state_sequence_ref(xp, w, a, b, r, h, lengths)
    return _uncast(out, x_proj.dtype)  # type: ignore[return-value]
