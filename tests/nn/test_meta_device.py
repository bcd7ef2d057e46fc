"""Every layer, cell and op on the ``meta`` device (shapes only), as :class:`torch.nn.LSTM` runs
there: built with ``device="meta"`` or moved with ``.to("meta")``, its forward gives meta
outputs and states of the shapes and dtypes the same module gives on the CPU, and its backward
gives meta gradients of the CPU gradients' shapes.

The layers are every registered unit (:data:`ctrlrnn.nn.registry.UNITS`) built with its
registered defaults, so a unit added to the registry is checked here without an edit, and every
configuration of :data:`contract.LAYERS` (bidirectional, multi-layer, each gates mode). Each runs
time-major, batch-first, unbatched, with ``lengths``, with a
:class:`~torch.nn.utils.rnn.PackedSequence` and with its own final states as ``hx``.

A meta tensor holds no values, so ``lengths`` stay on the CPU, as
:func:`torch.nn.utils.rnn.pack_padded_sequence` requires of them; a packed input is a meta batch
packed with CPU lengths (its ``batch_sizes`` on the CPU, its sorting indices on meta), as for
``nn.LSTM``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import Any

import pytest
import torch
from contract import FFN, NAMES, D, H, context, make, run
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import ctrlrnn
from ctrlrnn.nn.registry import UNITS, Unit
from ctrlrnn.ops import fused_cells
from ctrlrnn.ops.conv_windows import shifted_windows
from ctrlrnn.ops.metagross_level import metagross_level
from ctrlrnn.ops.qrnn_pooling import GATES_PER_MODE
from ctrlrnn.ops.rcrn_listener import rcrn_listener

pytestmark = [
    pytest.mark.not_plain("checks shapes, dtypes and devices on meta, not a kernel's values; the "
                          "ops suites run the kernels on the plain runtime"),
    # the layers are tiny: one thread runs torch's ops inline instead of waking a second one
    pytest.mark.usefixtures("one_thread"),
]

META, CPU = torch.device("meta"), torch.device("cpu")
T, B = 4, 3
#: true lengths of the batch, unsorted (a packed batch then carries its sorting indices)
LENGTHS = torch.tensor([3, 4, 1])


def _registered(unit: Unit, **overrides: Any) -> nn.Module:
    """``unit``'s layer at input :data:`D`, hidden :data:`H`, with the defaults of its
    registered options (what ``ctrlrnn train --model NAME`` builds)."""
    defaults = {key: default for key, (_, default) in unit.options.items()}
    return unit.cls(D, H, **{**defaults, **overrides})


#: every layer this file runs: each registered unit with its defaults, each contract configuration
BUILD: dict[str, Callable[..., nn.Module]] = {
    **{f"{name}-registered": partial(_registered, unit) for name, unit in UNITS.items()},
    **{name: partial(make, name) for name in NAMES},
}
CASES = ("time-major", "batch-first", "unbatched", "lengths", "packed", "hx")


def _layout(tree: Any) -> Any:
    """``tree`` with every tensor as its ``(shape, dtype)``; a packed sequence as its data's,
    its (CPU) batch sizes and its sorting indices' (as ``nn.LSTM`` returns them)."""
    if isinstance(tree, PackedSequence):
        return ("packed", _layout(tree.data), tree.batch_sizes.tolist(),
                _layout(tree.sorted_indices), _layout(tree.unsorted_indices))  # fmt: skip
    if isinstance(tree, Tensor):
        return tuple(tree.shape), tree.dtype
    if isinstance(tree, (tuple, list)):
        return [_layout(t) for t in tree]
    return tree


def _devices(tree: Any) -> set[str]:
    """The device types of the floating tensors in ``tree`` (a packed sequence's data)."""
    if isinstance(tree, PackedSequence):
        return _devices(tree.data)
    if isinstance(tree, Tensor):
        return {tree.device.type} if tree.is_floating_point() else set()
    if isinstance(tree, (tuple, list)):
        return set().union(*(_devices(t) for t in tree))
    return set()


def _floats(tree: Any) -> list[Tensor]:
    """The floating tensors of ``tree``, a packed sequence's data among them."""
    if isinstance(tree, PackedSequence):
        return [tree.data]
    if isinstance(tree, Tensor):
        return [tree] if tree.is_floating_point() else []
    if isinstance(tree, (tuple, list)):
        return [t for part in tree for t in _floats(part)]
    return []


def _forward(layer: nn.Module, case: str, device: torch.device) -> tuple[Any, Any]:
    """``layer``'s ``(output, h_n)`` for ``case`` on inputs drawn on the CPU under one seed and
    moved to ``device`` (the lengths stay on the CPU)."""
    torch.manual_seed(0)
    batch_first = getattr(layer, "batch_first", False)
    x = torch.randn(B, T, D) if batch_first else torch.randn(T, B, D)
    ctx = context(layer, B)
    lengths = LENGTHS if case in ("lengths", "hx") else None
    if case == "unbatched":
        x, ctx = x[:, 0] if not batch_first else x[0], None if ctx is None else ctx[0]
    moved_ctx = None if ctx is None else ctx.to(device)
    if case == "packed":
        packed = pack_padded_sequence(x.to(device), LENGTHS, batch_first=batch_first,
                                      enforce_sorted=False)  # fmt: skip
        return run(layer, packed, moved_ctx)
    out, h_n = run(layer, x.to(device), moved_ctx, lengths=lengths)
    if case == "hx":
        out, h_n = run(layer, x.to(device), moved_ctx, hx=h_n, lengths=lengths)
    return out, h_n


def _both(build: Callable[..., nn.Module], how: str, **kwargs: Any) -> dict[torch.device, Any]:
    """The module built on the CPU, and on the meta device (``how``: ``"argument"``, with
    ``device="meta"``, or ``"to"``, built on the CPU and moved), each under the same seed."""
    torch.manual_seed(1)
    on_cpu = build(**kwargs)
    torch.manual_seed(1)
    on_meta = build(device="meta", **kwargs) if how == "argument" else build(**kwargs).to(META)
    assert all(p.is_meta for p in on_meta.parameters())
    return {CPU: on_cpu, META: on_meta}


@cache
def _built(name: str, batch_first: bool, backend: str) -> dict[torch.device, nn.Module]:
    """:func:`_both` of layer ``name`` built with ``device="meta"``, once per layout and backend
    for all the cases that run it (a forward or backward changes none of its weights)."""
    return _both(BUILD[name], "argument", **({"batch_first": True} if batch_first else {}))


def _grads(loss_of: Callable[[], Any], module: nn.Module | None, inputs: list[Tensor]) -> Any:
    """The layouts and devices of the gradients of the sum of ``loss_of()``'s floating outputs
    with respect to ``module``'s parameters and ``inputs`` (None for one they do not reach)."""
    wrt = [*(module.parameters() if module is not None else ()), *inputs]
    loss = sum(t.float().sum() for t in _floats(loss_of()))
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [None if g is None else (_layout(g), g.device.type) for g in grads]


# ------------------------------------------------------------------------------------------------
# layers
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(BUILD))
def test_a_layer_built_on_meta_gives_the_cpus_shapes_and_dtypes(name: str, case: str,
                                                               ctrlrnn_backend: str) -> None:
    """A packed output also carries its batch sizes and sorting indices as ``nn.LSTM``'s on
    meta carries them (the batch sizes on the CPU, the indices on meta)."""
    layers = _built(name, case == "batch-first", ctrlrnn_backend)
    got = _forward(layers[META], case, META)
    want = _forward(layers[CPU], case, CPU)
    assert _layout(got) == _layout(want)
    assert _devices(got) == {"meta"}
    if case == "packed":
        packed = pack_padded_sequence(torch.randn(T, B, D, device=META), LENGTHS,
                                      enforce_sorted=False)  # fmt: skip
        lstm, _ = nn.LSTM(D, H, device=META)(packed)
        for ours, theirs in ((got[0].batch_sizes, lstm.batch_sizes),
                             (got[0].sorted_indices, lstm.sorted_indices),
                             (got[0].unsorted_indices, lstm.unsorted_indices)):  # fmt: skip
            assert (ours.device, ours.dtype, ours.shape) == (theirs.device, theirs.dtype,
                                                             theirs.shape)  # fmt: skip
        assert torch.equal(got[0].batch_sizes, lstm.batch_sizes)


@pytest.mark.parametrize("name", list(BUILD))
def test_a_layer_moved_to_meta_runs_there(name: str) -> None:
    layers = _both(BUILD[name], "to")
    got = _forward(layers[META], "lengths", META)
    assert _layout(got) == _layout(_forward(layers[CPU], "lengths", CPU))
    assert _devices(got) == {"meta"}


@pytest.mark.parametrize("case", ["lengths", "packed"])
@pytest.mark.parametrize("name", list(BUILD))
def test_a_layer_on_meta_backpropagates_as_on_cpu(name: str, case: str,
                                                  ctrlrnn_backend: str) -> None:
    """``nn.LSTM`` on meta backpropagates (meta gradients); so does every layer, to the
    parameters the CPU gradients reach, with their shapes."""
    layers = _built(name, False, ctrlrnn_backend)
    got = _grads(lambda: _forward(layers[META], case, META), layers[META], [])
    want = _grads(lambda: _forward(layers[CPU], case, CPU), layers[CPU], [])
    assert [g and g[0] for g in got] == [g and g[0] for g in want]
    assert {g[1] for g in got if g is not None} == {"meta"}


# ------------------------------------------------------------------------------------------------
# cells and the other modules
# ------------------------------------------------------------------------------------------------

#: every registered unit's cell: ``(build, step)``, ``step(cell, x, state)`` one step from
#: ``state`` (None first) returning ``(output, state)`` (the CARNN cell returns its new state
#: alone, which is both)
CELLS: dict[type, tuple[Callable[..., nn.Module], Callable[..., tuple[Any, Any]]]] = {
    ctrlrnn.QRNNCell: (lambda **f: ctrlrnn.QRNNCell(D, H, window=2, pooling="ifo", **f),
                       lambda cell, x, s: cell(x, s)),
    ctrlrnn.RCRNCell: (lambda **f: ctrlrnn.RCRNCell(D, H, **f), lambda cell, x, s: cell(x, s)),
    ctrlrnn.CASLSTMCell: (lambda **f: ctrlrnn.CASLSTMCell(D, H, lambda_="trainable", **f),
                          lambda cell, x, s: cell(x, torch.zeros_like(x[:, :1]).expand(-1, H),
                                                  s)),  # fmt: skip
    ctrlrnn.CARNNCell: (lambda **f: ctrlrnn.CARNNCell(D, H, 2, variant="i", **f),
                        lambda cell, x, s: (lambda h: (h, h))(
                            cell(x, torch.ones_like(x[:, :2]), s))),  # fmt: skip
    ctrlrnn.MetagrossCell: (lambda **f: ctrlrnn.MetagrossCell(D, H, depth=2, base="gru", **f),
                            lambda cell, x, s: cell(x, s)),
}


def test_every_registered_cell_is_run() -> None:
    assert {u.cell for u in UNITS.values() if u.cell is not None} <= set(CELLS)


@pytest.mark.parametrize("how", ["argument", "to"])
@pytest.mark.parametrize("cls", list(CELLS), ids=lambda c: c.__name__)
def test_a_cell_on_meta_steps_as_on_cpu(cls: type, how: str) -> None:
    build, step = CELLS[cls]
    cells = _both(build, how)
    xs = torch.randn(2, B, D)

    def two_steps(device: torch.device) -> Any:
        out, state = step(cells[device], xs[0].to(device), None)
        return step(cells[device], xs[1].to(device), state)

    got = two_steps(META)
    assert _layout(got) == _layout(two_steps(CPU))
    assert _devices(got) == {"meta"}
    got_grads = _grads(lambda: two_steps(META), cells[META], [])
    assert [g and g[0] for g in got_grads] == [
        g and g[0] for g in _grads(lambda: two_steps(CPU), cells[CPU], [])]


#: the other exported modules: ``(build, call)``, ``call(module, device)`` their forward on
#: inputs drawn on the CPU and moved to ``device`` (lengths on the CPU); the parameter-free ones
#: are built, then moved
TOKENS, PREVIOUS = torch.arange(B * T).view(B, T) % 20, torch.arange(B * (T - 1)).view(B, -1)
H_E_C = torch.ones(B, T, H), torch.ones(B, T, H), torch.ones(B, H)
OTHER: dict[str, tuple[Callable[..., nn.Module], Callable[[Any, torch.device], Any]]] = {
    "ContextualCARNNLM": (
        lambda **f: ctrlrnn.ContextualCARNNLM(20, D, H, "i", num_latent_labels=3, **f),
        lambda lm, d: lm(TOKENS.to(d), PREVIOUS.to(d), lengths=LENGTHS,
                         prev_lengths=LENGTHS.clamp(max=T - 1))),
    "MetagrossFFN": (partial(make, FFN),
                     lambda ffn, d: ffn(H_E_C[0][..., :D].to(d), return_gates=True)),
    "HistorySummary": (lambda **f: ctrlrnn.HistorySummary().to(**f),
                       lambda summary, d: summary(*(t.to(d) for t in H_E_C), lengths=LENGTHS)),
    "PositionEncoder": (lambda **f: ctrlrnn.PositionEncoder().to(**f),
                        lambda encoder, d: encoder(H_E_C[0].to(d), lengths=LENGTHS)),
}


@pytest.mark.parametrize("how", ["argument", "to"])
@pytest.mark.parametrize("name", list(OTHER))
def test_the_other_modules_on_meta(name: str, how: str) -> None:
    build, call = OTHER[name]
    modules = _both(build, how)
    got = call(modules[META], META)
    assert _layout(got) == _layout(call(modules[CPU], CPU))
    assert _devices(got) == {"meta"}
    if not list(modules[CPU].parameters()):
        return  # nothing of its own to backpropagate to
    got_grads = _grads(lambda: call(modules[META], META), modules[META], [])
    assert [g and g[0] for g in got_grads] == [
        g and g[0] for g in _grads(lambda: call(modules[CPU], CPU), modules[CPU], [])]
    assert {g[1] for g in got_grads if g is not None} == {"meta"}


# ------------------------------------------------------------------------------------------------
# ops
# ------------------------------------------------------------------------------------------------


def _mg_level(P: Tensor, child: Tensor, alpha: Tensor, beta: Tensor, res: Tensor, s0: Tensor,
              *, h_form: bool) -> tuple[Tensor, Tensor]:  # fmt: skip
    """:func:`metagross_level` of a level of two units with children, a residual and a start."""
    return metagross_level(P, child, alpha, beta, res, s0, LENGTHS, h_form)


#: each public op: ``(call, {argument: shape})``; the arguments are drawn on the CPU in this
#: order (values in [0, 1)) and moved, and ``call`` takes them as positional arguments
OPS: dict[str, tuple[Callable[..., Any], dict[str, tuple[int, ...]]]] = {
    "linear_scan": (
        partial(ctrlrnn.linear_scan, reverse=True, lengths=LENGTHS, return_last=True),
        {"a": (B, T, H), "b": (B, T, H), "h0": (B, H)}),
    "linear_scan_ref": (
        partial(ctrlrnn.linear_scan_ref, reverse=True, lengths=LENGTHS, return_last=True),
        {"a": (B, T, H), "b": (B, T, H), "h0": (B, H)}),
    **{f"qrnn_pooling-{mode}": (
        partial(ctrlrnn.qrnn_pooling, pooling=mode, lengths=LENGTHS),
        {"gates": (B, T, gates * H), "c0": (B, H)}) for mode, gates in GATES_PER_MODE.items()},
    **{f"qrnn_pooling_ref-{mode}": (
        partial(ctrlrnn.qrnn_pooling_ref, pooling=mode, lengths=LENGTHS),
        {"gates": (B, T, gates * H), "c0": (B, H)}) for mode, gates in GATES_PER_MODE.items()},
    "rcrn_listener": (
        partial(rcrn_listener, lengths=LENGTHS, split=H // 2),
        {"h1": (B, T, H), "h2": (B, T, H), "h3": (B, T, H), "c0": (B, H)}),
    **{f"metagross_level-{form}": (
        partial(_mg_level, h_form=form == "h"),
        {"P": (B, T, 3, 2, H), "child": (B, T, 2, 2, H), "alpha": (B, T, 2, 1),
         "beta": (B, T, 2, 1), "res": (B, T, 1, H), "s0": (B, 2 * H)}) for form in "hc"},
    "lstm_sequence": (
        partial(fused_cells.lstm_sequence, lengths=LENGTHS),
        {"x_proj": (B, T, 4 * H), "weight_hh": (4 * H, H), "h0": (B, H), "c0": (B, H)}),
    "gru_sequence": (
        partial(fused_cells.gru_sequence, lengths=LENGTHS),
        {"x_proj": (B, T, 3 * H), "weight_hh": (3 * H, H), "bias_hh": (3 * H,), "h0": (B, H)}),
    "cas_lstm_sequence": (
        lambda x, w, low, h0, c0, lam: fused_cells.cas_lstm_sequence(x, w, low, h0, c0, LENGTHS,
                                                                     lam),  # fmt: skip
        {"x_proj": (B, T, 5 * H), "weight_hh": (5 * H, H), "lower_c": (B, T, H), "h0": (B, H),
         "c0": (B, H), "lambda": (H,)}),
    "ncarnn_sequence": (
        partial(fused_cells.ncarnn_sequence, lengths=LENGTHS),
        {"x_proj": (B, T, 3 * H), "weight_hh": (2 * H, H), "context": (B, 2 * H),
         "h0": (B, H)}),
    "metagross_state_sequence": (
        partial(fused_cells.metagross_state_sequence, lengths=LENGTHS),
        {"x_proj": (B, T, 9 * H), "weight_hh": (9 * H, H), "alpha": (B, T, 1),
         "beta": (B, T, 1), "res": (B, T, H), "h0": (B, H)}),
    "shifted_windows": (lambda x: shifted_windows(x, [-1, 0, 1], T), {"x": (B, T, D)}),
}


@pytest.mark.parametrize("name", list(OPS))
def test_an_op_on_meta_gives_the_cpus_shapes_and_gradients(name: str) -> None:
    call, shapes = OPS[name]
    torch.manual_seed(2)
    drawn = [torch.rand(shape) for shape in shapes.values()]

    def outputs_and_grads(device: torch.device) -> tuple[Any, Any]:
        inputs = [t.to(device).requires_grad_() for t in drawn]
        return call(*inputs), _grads(lambda: call(*inputs), None, inputs)

    (got, got_grads), (want, want_grads) = outputs_and_grads(META), outputs_and_grads(CPU)
    assert _layout(got) == _layout(want)
    assert _devices(got) == {"meta"}
    assert [g and g[0] for g in got_grads] == [g and g[0] for g in want_grads]
    assert {g[1] for g in got_grads if g is not None} == {"meta"}
