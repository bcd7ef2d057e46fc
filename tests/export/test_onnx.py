"""ONNX export of every layer (docs/onnx.md): exported with dynamic batch and time axes, run in
onnxruntime on other batch sizes and lengths than the example's, equal to PyTorch within 1e-5.

The export-time path of the ops (one scan over time, ``ctrlrnn/ops/scan_export.py``) is checked
eagerly against the readable references first; then each export covers several layers or
options at once (one export costs seconds: tracing is the slow part, not onnxruntime).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnxruntime as ort  # the test extra installs onnx, onnxscript, onnxruntime
import onnxscript  # noqa: F401 - torch's exporter needs it: missing, these tests fail
import pytest
import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_leaves

import ctrlrnn
from ctrlrnn.ops import cells_ref, scan_export
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref
from ctrlrnn.ops.metagross_level import metagross_level, metagross_level_reference
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling_ref

ATOL = 1e-5  # fp32, absolute
D, H = 4, 6  # input and hidden sizes of the layers below


def _lengths(batch: int, steps: int, seed: int) -> Tensor:
    """A full-length row first, a length-1 row, the rest random in [1, steps]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, steps + 1, (batch,), generator=g)
    lengths[0] = steps
    if batch > 1:
        lengths[1] = 1
    return lengths


# ------------------------------------------------------------------ the export-time path, eagerly


def _assert_same(got: Sequence[Tensor], want: Sequence[Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_path_linear_scan_equals_reference(reverse: bool) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(4, 6, 3, generator=g), torch.randn(4, 6, 3, generator=g)
    h0 = torch.randn(4, 3, generator=g)
    lengths = torch.tensor([6, 0, 3, 1])  # a zero-length row keeps h0 and outputs zeros
    for lens in (None, lengths):
        want = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lens, return_last=True)
        with scan_export.scan_mode(), torch.no_grad():
            got = ctrlrnn.linear_scan(a, b, h0, reverse=reverse, lengths=lens, return_last=True)
        _assert_same(got, want)


@pytest.mark.parametrize("pooling", ["f", "fo", "ifo"])
def test_scan_path_qrnn_pooling_equals_reference(pooling: str) -> None:
    g = torch.Generator().manual_seed(1)
    width = {"f": 2, "fo": 3, "ifo": 4}[pooling]
    gates = torch.randn(3, 5, width * H, generator=g)
    c0 = torch.randn(3, H, generator=g)
    keep = torch.bernoulli(torch.full((3, 5, H), 0.7), generator=g)
    lengths = torch.tensor([5, 2, 4])
    for kw in ({}, {"keep_scale": 0.7, "lengths": lengths}, {"keep": keep, "lengths": lengths}):
        want = qrnn_pooling_ref(gates, c0, pooling=pooling, **kw)
        with scan_export.scan_mode(), torch.no_grad():
            got = ctrlrnn.qrnn_pooling(gates, c0, pooling=pooling, **kw)
        _assert_same(got, want)


def _cell_inputs(cell: str) -> tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]:
    """(public op, reference, keyword inputs) for one fused cell."""
    from ctrlrnn.ops import fused_cells

    g = torch.Generator().manual_seed(2)
    B, T = 3, 5

    def rnd(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g) * 0.5

    h0, c0 = rnd(B, H), rnd(B, H)
    if cell == "lstm":
        kw = dict(x_proj=rnd(B, T, 4 * H), weight_hh=rnd(4 * H, H), h0=h0, c0=c0)
        return fused_cells.lstm_sequence, cells_ref.lstm_sequence_ref, kw
    if cell == "gru":
        kw = dict(x_proj=rnd(B, T, 3 * H), weight_hh=rnd(3 * H, H), bias_hh=rnd(3 * H), h0=h0)
        return fused_cells.gru_sequence, cells_ref.gru_sequence_ref, kw
    if cell == "ncarnn":
        kw = dict(x_proj=rnd(B, T, 3 * H), weight_hh=rnd(2 * H, H), context_proj=rnd(B, 2 * H),
                  h0=h0)  # fmt: skip
        return fused_cells.ncarnn_sequence, cells_ref.ncarnn_sequence_ref, kw
    peephole = cell == "cas_peephole"
    kw = dict(x_proj=rnd(B, T, 5 * H), weight_hh=rnd((4 if peephole else 5) * H, H),
              lower_c=rnd(B, T, H), h0=h0, c0=c0)  # fmt: skip
    lam = rnd(H).sigmoid()
    pp = rnd(2, H) if peephole else None

    def op(lengths: Tensor | None = None, **k: Any) -> Any:
        lambda_ = None if peephole else lam
        return fused_cells.cas_lstm_sequence(lengths=lengths, lambda_=lambda_, peephole=pp, **k)

    def ref(lengths: Tensor | None = None, **k: Any) -> Any:
        scale_g = torch.ones(H) if peephole else lam
        scale_f = scale_g if peephole else 1 - lam
        return cells_ref.cas_lstm_sequence_ref(
            k["x_proj"], k["weight_hh"], k["lower_c"], k["h0"], k["c0"], scale_f, scale_g, pp,
            lengths,
        )  # fmt: skip

    return op, ref, kw


@pytest.mark.parametrize("cell", ["lstm", "gru", "cas", "cas_peephole", "ncarnn"])
def test_scan_path_cells_equal_reference(cell: str) -> None:
    op, ref, kw = _cell_inputs(cell)
    for lengths in (None, torch.tensor([5, 0, 3])):
        want = ref(lengths=lengths, **kw)
        with scan_export.scan_mode(), torch.no_grad():
            got = op(lengths=lengths, **kw)
        _assert_same(got, want)


def test_scan_path_runs_only_when_asked() -> None:
    assert not scan_export.active()
    with scan_export.scan_mode():
        assert scan_export.active()
        with scan_export.scan_mode():
            assert scan_export.active()
        assert scan_export.active()
    assert not scan_export.active()


def test_scan_path_metagross_level_equals_reference() -> None:
    g = torch.Generator().manual_seed(3)
    B, T, k = 3, 5, 2
    P = torch.randn(B, T, 3, k, H, generator=g)
    child = torch.randn(B, T, k, 2, H, generator=g)
    alpha, beta = torch.rand(B, T, k, 1, generator=g), torch.rand(B, T, k, 1, generator=g)
    res = torch.randn(B, T, 1, H, generator=g)
    lengths = torch.tensor([5, 1, 3])
    for h_form in (True, False):
        out, _s, last = metagross_level_reference(P, child, alpha, beta, res, None, lengths,
                                                  h_form)  # fmt: skip
        with scan_export.scan_mode(), torch.no_grad():
            got = metagross_level(P, child, alpha, beta, res, None, lengths, h_form)
        _assert_same(got, (out, last))


# ------------------------------------------------------------------ export + onnxruntime


def _session(program: Any) -> Any:
    return ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )


def _check_graph(program: Any, scans: int) -> None:
    """The graph loops with ONNX ``Scan`` (``scans`` of them at the top level), and its first
    input has symbolic axes."""
    graph = program.model_proto.graph
    assert sum(node.op_type == "Scan" for node in graph.node) == scans
    dims = graph.input[0].type.tensor_type.shape.dim
    assert any(d.dim_param for d in dims), "no dynamic axis in the exported input"


def _run_and_compare(
    session: Any, model: nn.Module, feeds: dict[str, Tensor], call: Callable[[], Any]
) -> None:
    """onnxruntime on ``feeds`` (by input name) against ``call()`` (the PyTorch model)."""
    names = [i.name for i in session.get_inputs()]
    assert sorted(names) == sorted(feeds), (names, sorted(feeds))
    got = session.run(None, {n: feeds[n].numpy() for n in names})
    with torch.no_grad():
        want = [t for t in tree_leaves(call()) if isinstance(t, Tensor)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.from_numpy(g), w, atol=ATOL, rtol=0)


SHAPES = [(2, 7), (5, 3), (1, 4)]  # (batch, steps) other than the example's (3, 5)
#: ``optimize`` of the exports whose point is not the graph optimizer (it costs seconds each);
#: the QRNN export and the plain ``torch.onnx.export`` run it, as users do by default.
FAST = False


def _qrnn() -> nn.Module:
    return ctrlrnn.QRNN(D, H, num_layers=2, bidirectional=True, window=3, pooling="ifo",
                        zoneout=0.3)  # fmt: skip


def test_qrnn_time_major_bidirectional_with_lengths_and_state(tmp_path: Any) -> None:
    """QRNN (window 3, ifo-pooling, zoneout in eval), 2 layers, bidirectional, time-major, with
    ``hx`` and ``lengths``; written to a file and loaded from it."""
    torch.manual_seed(0)
    model = _qrnn().eval()
    x, c0 = torch.randn(5, 3, D), torch.randn(4, 3, H)
    path = tmp_path / "qrnn.onnx"
    program = ctrlrnn.export_onnx(model, (x, c0), path, kwargs={"lengths": _lengths(3, 5, 0)})
    _check_graph(program, scans=4)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["output", "c_n"]
    for i, (B, T) in enumerate(SHAPES):
        feeds = {"input": torch.randn(T, B, D), "hx": torch.randn(4, B, H),
                 "lengths": _lengths(B, T, i)}  # fmt: skip
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


def test_qrnn_unmasked_convolution_with_a_width_per_layer_and_lengths() -> None:
    """The unmasked (centred) convolution of an encoder (``causal=False``) with one width per
    layer, an even one wider than some sequences, bidirectional, batch-first, with lengths:
    exported with symbolic batch and time, the taps past each length read zeros there too."""
    torch.manual_seed(7)
    model = ctrlrnn.QRNN(D, H, num_layers=2, bidirectional=True, window=(6, 3), causal=False,
                         pooling="fo", batch_first=True).eval()  # fmt: skip
    x = torch.randn(3, 5, D)
    program = ctrlrnn.export_onnx(model, (x,), kwargs={"lengths": _lengths(3, 5, 0)},
                                  optimize=FAST)  # fmt: skip
    _check_graph(program, scans=4)
    session = _session(program)
    for i, (B, T) in enumerate(SHAPES):
        feeds = {"input": torch.randn(B, T, D), "lengths": _lengths(B, T, i)}
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


class _RCRNAndCAS(nn.Module):
    """RCRN as in the paper (LSTM cells, one bidirectional layer) and a 2-layer bidirectional
    CAS-LSTM, batch-first, on one input."""

    def __init__(self) -> None:
        super().__init__()
        self.rcrn = ctrlrnn.RCRN(D, H, bidirectional=True, batch_first=True)
        self.cas = ctrlrnn.CASLSTM(D, H, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x: Tensor, lengths: Tensor) -> list[Any]:
        return [self.rcrn(x, lengths=lengths), self.cas(x, lengths=lengths)]


def test_rcrn_and_cas_lstm_bidirectional_with_lengths() -> None:
    torch.manual_seed(1)
    model = _RCRNAndCAS().eval()
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    program = ctrlrnn.export_onnx(
        model, (torch.randn(3, 5, D), _lengths(3, 5, 0)), optimize=FAST,
        dynamic_shapes={"x": {0: batch, 1: time}, "lengths": {0: batch}},
    )  # fmt: skip
    _check_graph(program, scans=8 + 4)
    session = _session(program)
    for i, (B, T) in enumerate(SHAPES):
        feeds = {"x": torch.randn(B, T, D), "lengths": _lengths(B, T, i)}
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


class _CARNNs(nn.Module):
    """nCARNN (bidirectional), iCARNN and sCARNN on one input and context."""

    def __init__(self) -> None:
        super().__init__()
        self.n = ctrlrnn.CARNN(D, H, context_size=3, variant="n", bidirectional=True)
        self.i = ctrlrnn.CARNN(D, H, context_size=3, variant="i")
        self.s = ctrlrnn.CARNN(D, D, context_size=3, variant="s")

    def forward(self, x: Tensor, context: Tensor, lengths: Tensor) -> list[Any]:
        return [m(x, context, lengths=lengths) for m in (self.n, self.i, self.s)]


def test_carnn_variants_with_context_and_lengths_on_the_reference_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module of several layers (``dynamic_shapes`` given by hand, docs/onnx.md), exported
    under ``CTRLRNN_BACKEND=reference``, whose ops are Python loops: the graph is the same scan,
    not a recording of one length."""
    monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = _CARNNs().eval()
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    program = ctrlrnn.export_onnx(
        model, (torch.randn(5, 3, D), torch.randn(3, 3), _lengths(3, 5, 0)),
        dynamic_shapes={"x": {0: time, 1: batch}, "context": {0: batch}, "lengths": {0: batch}},
        optimize=FAST,
    )  # fmt: skip
    _check_graph(program, scans=4)
    session = _session(program)
    for i, (B, T) in enumerate(SHAPES):
        feeds = {"x": torch.randn(T, B, D), "context": torch.randn(B, 3),
                 "lengths": _lengths(B, T, i)}  # fmt: skip
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


class _Metagrosses(nn.Module):
    """METAGROSS with a linear base (depth 2), an LSTM base ("c" recurrence) and as printed
    (gates reading h_{t-1}: one scan of the whole tree); the GRU base is exported without
    lengths below."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = ctrlrnn.Metagross(D, H, depth=2, batch_first=True)
        self.lstm = ctrlrnn.Metagross(D, H, depth=1, base="lstm", recurrence="c",
                                      batch_first=True)  # fmt: skip
        self.state = ctrlrnn.Metagross(D, H, depth=2, gates="state", batch_first=True)

    def forward(self, x: Tensor, lengths: Tensor) -> list[Any]:
        return [m(x, lengths=lengths) for m in (self.linear, self.lstm, self.state)]


def test_metagross_bases_with_lengths() -> None:
    torch.manual_seed(4)
    model = _Metagrosses().eval()
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    program = ctrlrnn.export_onnx(
        model, (torch.randn(3, 5, D), _lengths(3, 5, 0)),
        dynamic_shapes={"x": {0: batch, 1: time}, "lengths": {0: batch}},
        optimize=FAST,
    )  # fmt: skip
    _check_graph(program, scans=2 + 4 + 1)
    session = _session(program)
    for i, (B, T) in enumerate(SHAPES):
        feeds = {"x": torch.randn(B, T, D), "lengths": _lengths(B, T, i)}
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


class _NoLengths(nn.Module):
    """Layers without ``lengths``: QRNN (f-pooling, window 1), CAS-LSTM (2 layers, peepholes),
    CARNN (nCARNN without context), METAGROSS (GRU base, input size = hidden size: the residual
    is ``x`` itself), MetagrossFFN (with its gates)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([
            ctrlrnn.QRNN(D, H, window=1, pooling="f", batch_first=True),
            ctrlrnn.CASLSTM(D, H, num_layers=2, peephole=True, batch_first=True),
            ctrlrnn.CARNN(D, H, context_size=None, batch_first=True),
            ctrlrnn.Metagross(D, D, depth=1, base="gru", batch_first=True),
        ])  # fmt: skip
        self.ffn = ctrlrnn.MetagrossFFN(D, depth=3, depth_gate="scalar")

    def forward(self, x: Tensor) -> list[Any]:
        return [*(m(x) for m in self.layers), self.ffn(x, return_gates=True)]


def test_every_layer_without_lengths_through_plain_torch_onnx_export() -> None:
    """``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)`` itself, no ctrlrnn helper:
    the ops switch to their scan path while torch's exporter runs."""
    torch.manual_seed(5)
    model = _NoLengths().eval()
    batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
    program = torch.onnx.export(model, (torch.randn(3, 5, D),), dynamo=True, verbose=False,
                                dynamic_shapes={"x": {0: batch, 1: time}})  # fmt: skip
    _check_graph(program, scans=1 + 2 + 1 + 4)
    session = _session(program)
    for B, T in SHAPES:
        feeds = {"x": torch.randn(B, T, D)}
        _run_and_compare(session, model, feeds, lambda f=feeds: model(**f))


# ------------------------------------------------------------------ refusals and messages


def test_torchscript_exporter_is_refused_with_the_exporter_to_use(tmp_path: Any) -> None:
    model = ctrlrnn.QRNN(D, H, batch_first=True).eval()
    with pytest.raises(RuntimeError, match="dynamo=True"):
        torch.onnx.export(model, (torch.randn(2, 5, D),), str(tmp_path / "m.onnx"),
                          dynamo=False)  # fmt: skip
    assert not scan_export.active()  # the exporter's flag is down again


def test_missing_onnx_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxscript" else real(name, *a))
    model = ctrlrnn.QRNN(D, H).eval()
    with pytest.raises(ImportError, match=r"pip install 'ctrlrnn\[onnx\]'"):
        ctrlrnn.export_onnx(model, (torch.randn(5, 2, D),))


def test_dynamic_shapes_for_layers_and_refusals() -> None:
    from torch.nn.utils.rnn import pack_padded_sequence

    from ctrlrnn.onnx_export import dynamic_shapes_for, output_names_for

    lstm_like = ctrlrnn.CASLSTM(D, H, num_layers=2)
    x, hx = torch.randn(5, 3, D), (torch.randn(2, 3, H), torch.randn(2, 3, H))
    spec = dynamic_shapes_for(lstm_like, (x, hx), {"lengths": torch.tensor([5, 4, 3])})
    assert {k: v.__name__ for k, v in spec["input"].items()} == {0: "time", 1: "batch"}
    assert [list(s) for s in spec["hx"]] == [[1], [1]]
    assert list(spec["lengths"]) == [0]
    with pytest.raises(ValueError, match="PackedSequence"):
        dynamic_shapes_for(lstm_like, (pack_padded_sequence(x, [5, 4, 3]),))
    with pytest.raises(ValueError, match="dynamic_shapes"):
        dynamic_shapes_for(nn.LSTM(D, H), (x,))
    decoder = ctrlrnn.QRNN(D, H, encoder_state_size=2)
    with pytest.raises(ValueError, match="encoder_state: .* names it"):
        dynamic_shapes_for(decoder, (x,), {"encoder_state": torch.randn(3, 2)})
    ffn = ctrlrnn.MetagrossFFN(D)
    spec = dynamic_shapes_for(ffn, (torch.randn(3, 5, D),), {"return_gates": True})
    assert {k: v.__name__ for k, v in spec["x"].items()} == {0: "dim0", 1: "dim1"}
    assert spec["return_gates"] is None
    assert output_names_for(ffn, (x,), {"return_gates": True}) == ["output", "alpha", "beta"]
    assert output_names_for(ctrlrnn.Metagross(D, H, base="gru"), (x,)) == [
        "output", "tree_n", "base_n"
    ]  # fmt: skip

