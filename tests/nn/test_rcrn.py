"""RCRN against a step-by-step loop written from the paper's equations, and what is specific to
it (cells, listeners, output gates, parameter counts, the controllers on torch's LSTM/GRU). What
every layer shares (padding, packed input, unbatched input, dropout, half precision,
torch.compile, training) is checked over the configurations of ``contract.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from contract import gradcheck

from ctrlrnn import RCRN, RCRNCell
from ctrlrnn.ops import scan_export
from ctrlrnn.ops.backend import reference_forced

D64 = torch.float64
CELL_STATES = {"lstm": 2, "gru": 1}

# tiny shapes: the compiled kernels run inline, where a second thread would only be waited for
# (conftest.py); the tests that time the engines' rule set their thread counts themselves
pytestmark = pytest.mark.usefixtures("one_thread")


def paper_lstm(x, rnn, h, c):
    """Eq 1-6 (and 10-14), one step at a time; weight rows in the order (i, f, c~, o)."""
    H = rnn.weight_hh.shape[1]
    b = 0 if rnn.bias_ih is None else rnn.bias_ih + rnn.bias_hh
    hs = []
    for t in range(x.shape[1]):
        pre = x[:, t] @ rnn.weight_ih.T + h @ rnn.weight_hh.T + b
        i = torch.sigmoid(pre[:, :H])  # eq 1
        f = torch.sigmoid(pre[:, H : 2 * H])  # eq 2
        o = torch.sigmoid(pre[:, 3 * H :])  # eq 3
        c = f * c + i * torch.tanh(pre[:, 2 * H : 3 * H])  # eq 4-5
        h = o * torch.tanh(c)  # eq 6
        hs.append(h)
    return torch.stack(hs, 1), [h, c]


def paper_gru(x, rnn, h):
    """The GRU of the paper's variant (section 3.3) in torch.nn.GRU's formulation."""
    H = rnn.weight_hh.shape[1]
    hs = []
    for t in range(x.shape[1]):
        gx = x[:, t] @ rnn.weight_ih.T + (0 if rnn.bias_ih is None else rnn.bias_ih)
        gh = h @ rnn.weight_hh.T + (0 if rnn.bias_hh is None else rnn.bias_hh)
        r = torch.sigmoid(gx[:, :H] + gh[:, :H])
        z = torch.sigmoid(gx[:, H : 2 * H] + gh[:, H : 2 * H])
        n = torch.tanh(gx[:, 2 * H :] + r * gh[:, 2 * H :])
        h = (1 - z) * n + z * h
        hs.append(h)
    return torch.stack(hs, 1), [h]


def paper_rcrn_layer(x, cells, cell, output_gate, listener, state=None):
    """One RCRN layer from the RCRN paper eq 1-16, all in forward time (independent of the layer).

    ``cells``: one RCRNCell per direction; ``state``: list of (D, B, H) tensors in the order
    (h1, c1, h2, c2, h3, c3, c4) / (h1, h2, h3, c4). Returns (h4, final states).
    """
    B, T, _ = x.shape
    H = cells[0].hidden_size
    D = len(cells)
    k = CELL_STATES[cell]
    n = 3 * k + 1
    st = state or [torch.zeros(D, B, H, dtype=x.dtype) for _ in range(n)]
    hs = [[], [], []]  # h^1, h^2, h^3, each direction brought to forward time (eq 7-9)
    finals = [[] for _ in range(D)]
    for d in range(D):
        xd = x if d == 0 else x.flip(1)  # eq 8: the backward RNNs read t = M..1
        for j, rnn in enumerate((cells[d].controller1, cells[d].controller2, cells[d].listener)):
            s = [st[j * k + i][d] for i in range(k)]
            seq, fin = paper_lstm(xd, rnn, *s) if cell == "lstm" else paper_gru(xd, rnn, *s)
            hs[j].append(seq if d == 0 else seq.flip(1))
            finals[d].extend(fin)
    h1, h2, h3 = (torch.cat(h, -1) for h in hs)  # eq 9
    c4_0 = torch.cat([st[-1][d] for d in range(D)], -1)
    c4 = torch.zeros(B, T, D * H, dtype=x.dtype)
    # eq 15, channel by channel in its own time order
    if listener == "concat_forward" or D == 1:
        orders = [(slice(0, D * H), range(T))]
    else:
        orders = [(slice(0, H), range(T)), (slice(H, 2 * H), range(T - 1, -1, -1))]
    c_last = []
    for ch, times in orders:
        c = c4_0[:, ch]
        for t in times:
            f = torch.sigmoid(h1[:, t, ch])
            c = f * c + (1 - f) * h3[:, t, ch]
            c4[:, t, ch] = c
        c_last.append(c)
    c_last = torch.cat(c_last, -1)
    gate = torch.sigmoid(h2) if output_gate == "sigmoid" else h2
    h4 = gate * c4  # eq 16
    for d in range(D):
        finals[d].append(c_last[:, d * H : (d + 1) * H])
    return h4, [torch.stack([finals[d][i] for d in range(D)]) for i in range(n)]


def _random_state(m, B, gen_seed=0):
    g = torch.Generator().manual_seed(gen_seed)
    shape = (m.num_layers * m.num_directions, B, m.hidden_size)
    return tuple(torch.randn(shape, generator=g, dtype=D64) for _ in m.state_names)


@pytest.mark.parametrize("listener", ["per_direction", "concat_forward"])
@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_matches_paper_loop(cell, output_gate, listener):
    torch.manual_seed(0)
    m = RCRN(3, 4, bidirectional=True, batch_first=True, cell=cell, output_gate=output_gate,
             listener=listener).double()  # fmt: skip
    x = torch.randn(2, 5, 3, dtype=D64)
    hx = _random_state(m, 2)
    out, h_n = m(x, hx)
    ref, ref_n = paper_rcrn_layer(x, [m.cell(0, 0), m.cell(0, 1)], cell, output_gate, listener,
                                  list(hx))  # fmt: skip
    torch.testing.assert_close(out, ref)
    assert len(h_n) == len(m.state_names) == 3 * CELL_STATES[cell] + 1
    for a, b in zip(h_n, ref_n):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_without_bias_matches_paper_loop(cell):
    torch.manual_seed(12)
    m = RCRN(3, 4, bidirectional=True, batch_first=True, bias=False, cell=cell).double()
    assert all(p.dim() == 2 for p in m.parameters())
    x = torch.randn(2, 5, 3, dtype=D64)
    out, h_n = m(x)
    ref, ref_n = paper_rcrn_layer(x, [m.cell(0, 0), m.cell(0, 1)], cell, "sigmoid",
                                  "per_direction")  # fmt: skip
    torch.testing.assert_close(out, ref)
    for a, b in zip(h_n, ref_n):
        torch.testing.assert_close(a, b)


def test_listener_modes_and_output_gates_differ():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 3, dtype=D64)
    outs = []
    for listener in ("per_direction", "concat_forward"):
        for gate in ("sigmoid", "identity"):
            torch.manual_seed(2)
            m = RCRN(3, 4, bidirectional=True, batch_first=True, listener=listener,
                     output_gate=gate).double()  # fmt: skip
            outs.append(m(x)[0])
    for i in range(4):
        for j in range(i):
            assert not torch.allclose(outs[i], outs[j])
    # forward channels are the same in both listener modes (they are scanned forward in both)
    torch.testing.assert_close(outs[0][..., :4], outs[2][..., :4])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_multilayer_matches_paper_loop(bidirectional):
    torch.manual_seed(3)
    m = RCRN(3, 4, num_layers=2, bidirectional=bidirectional, listener="concat_forward").double()
    x = torch.randn(6, 2, 3, dtype=D64)  # (T, B, D)
    out, h_n = m(x)
    D = m.num_directions
    layer_in, finals = x.transpose(0, 1), []
    for layer in range(2):
        cells = [m.cell(layer, d) for d in range(D)]
        layer_in, fin = paper_rcrn_layer(layer_in, cells, "lstm", "sigmoid", "concat_forward")
        finals.append(fin)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    for i, s in enumerate(h_n):
        torch.testing.assert_close(s, torch.cat([f[i] for f in finals]))
    assert m.cell(1, 0).controller1.weight_ih.shape[1] == 4 * D


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sub_rnns_use_the_torch_layout(cell):
    torch.manual_seed(4)
    m = RCRN(3, 4, batch_first=True, cell=cell).double()
    ref = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(3, 4, batch_first=True).double()
    rnn = m.cell(0).listener
    ref.load_state_dict({f"{n}_l0": p for n, p in rnn.named_parameters()})
    x = torch.randn(2, 5, 3, dtype=D64)
    h_seq, fin = rnn.sequence(x, None, None)
    r_out, r_state = ref(x)
    torch.testing.assert_close(h_seq, r_out)
    r_state = r_state if cell == "lstm" else (r_state,)
    for a, b in zip(fin, r_state):
        torch.testing.assert_close(a, b[0])


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("output_gate", ["sigmoid", "identity"])
def test_cell_equals_layer(cell, output_gate):
    torch.manual_seed(5)
    m = RCRN(3, 4, batch_first=True, cell=cell, output_gate=output_gate).double()
    x = torch.randn(2, 6, 3, dtype=D64)
    hx = _random_state(m, 2)
    out, h_n = m(x, hx)
    c: RCRNCell = m.cell(0)
    state = tuple(s[0] for s in hx)
    steps = []
    for t in range(6):
        h, state = c(x[:, t], state)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps, 1), out)
    for a, b in zip(state, h_n):
        torch.testing.assert_close(a, b[0])
    h_u, state_u = c(x[0, 0])  # unbatched
    torch.testing.assert_close(h_u, c(x[:1, 0])[0][0])
    assert state_u[0].shape == (4,)


@pytest.mark.parametrize(
    "cell,listener,output_gate,layers",
    [
        ("lstm", "per_direction", "sigmoid", 1),
        ("lstm", "concat_forward", "identity", 1),
        ("gru", "per_direction", "identity", 1),
        ("gru", "concat_forward", "sigmoid", 2),
    ],
)
def test_gradcheck(cell, listener, output_gate, layers):
    torch.manual_seed(6)
    m = RCRN(2, 2, num_layers=layers, bidirectional=True, batch_first=True, cell=cell,
             listener=listener, output_gate=output_gate).double()  # fmt: skip
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    hx = tuple(s.requires_grad_(True) for s in _random_state(m, 2))
    assert gradcheck(m, x, hx, torch.tensor([3, 2]))


def _count(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("d,h", [(200, 200), (300, 75), (10, 7)])
def test_parameter_counts_of_section_3_3(cell, d, h):
    rnn = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
    # "RCRN ... approximately three times larger than BiLSTM": exactly three BiRNNs
    assert _count(RCRN(d, h, bidirectional=True, cell=cell)) == 3 * _count(
        rnn(d, h, bidirectional=True)
    )
    # "3L-BiLSTM has equal parameters to RCRN": exactly when the stack's first layer reads as
    # wide an input as its upper layers (input_size = 2 * hidden_size)
    assert _count(RCRN(2 * h, h, bidirectional=True, cell=cell)) == _count(
        rnn(2 * h, h, num_layers=3, bidirectional=True)
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(cell="rnn"), "cell"),
        (dict(output_gate="tanh"), "output_gate"),
        (dict(listener="concat_backward"), "listener"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(num_layers=0), "num_layers"),
        (dict(dropout=-0.1), "dropout"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = dict(input_size=3, hidden_size=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        RCRN(**args)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m: m(torch.randn(2, 5, 7)), "input: expected feature size input_size=3"),
        (lambda m: m(torch.randn(2, 5, 3, dtype=D64)), "input: expected dtype"),
        (lambda m: m(torch.randn(2, 5, 3), lengths=torch.tensor([0, 1])), "lengths"),
        (lambda m: m(torch.randn(2, 5, 3), (torch.zeros(2, 2, 4),) * 2),
         r"hx: RCRN carries 7 state\(s\), expected a tuple of 7 Tensors \(h1, c1, h2, c2, h3, c3, "
         r"c4\)"),
        (lambda m: m(torch.randn(2, 5, 3), (torch.zeros(2, 2, 4),) * 6 + (torch.zeros(2, 2, 8),)),
         r"hx\[6\] \(c4\): expected shape \(2, 2, 4\)"),
        (lambda m: m(torch.randn(2, 0, 3)), "input: expected at least one time step"),
    ],
)
def test_bad_inputs(call, match):
    m = RCRN(3, 4, bidirectional=True, batch_first=True)
    with pytest.raises(ValueError, match=match):
        call(m)


def test_cell_bad_inputs():
    c = RCRNCell(3, 4)
    with pytest.raises(ValueError, match="input: expected input_size=3"):
        c(torch.randn(2, 5))
    with pytest.raises(ValueError, match="state: expected a tuple of 7"):
        c(torch.randn(2, 3), (torch.zeros(2, 4),))
    with pytest.raises(ValueError, match=r"state: expected c4 of shape \(2, 4\)"):
        c(torch.randn(2, 3), (torch.zeros(2, 4),) * 6 + (torch.zeros(2, 5),))


# ------------------------------------------------------------------ controllers="native"
# RCRN's controllers on torch's own LSTM/GRU (controllers="native") against the fused-cell engine
# ("fused"): the same outputs, final states and gradients, for every option that changes how the
# layer is run, and the cases where the native engine must step aside.


def _pair(**kw):
    torch.manual_seed(3)
    native = RCRN(6, 5, batch_first=True, controllers="native", **kw).double()
    fused = RCRN(6, 5, batch_first=True, controllers="fused", **kw).double()
    fused.load_state_dict(native.state_dict())
    return native, fused


def _everything(m, x, hx, lengths):
    out, h_n = m(x, hx, lengths=lengths)
    loss = (out * torch.linspace(-1, 1, out.shape[-1], dtype=D64)).sum()
    loss = loss + sum((s * (i + 1)).sum() for i, s in enumerate(h_n))
    grads = torch.autograd.grad(loss, [x, *m.parameters()])
    return [out, *h_n, *grads]


_LENGTHS = {"none": None, "varied": [7, 3, 5, 1], "equal": [7, 7, 7, 7]}


def _native_case(cell: str, listener: str, bidirectional: bool, num_layers: int, lengths: str,
                 with_state: bool) -> Any:  # fmt: skip
    name = (f"{cell}-{listener}-{'bi' if bidirectional else 'uni'}-{num_layers}layer-"
            f"{lengths}-{'state' if with_state else 'nostate'}")  # fmt: skip
    return pytest.param(cell, listener, bidirectional, num_layers, _LENGTHS[lengths], with_state,
                        id=name)  # fmt: skip


# cell, listener, direction, depth, lengths (none, varied, all full) and an initial state cross
# pairwise: each value of one meets each value of another in some case; and every cell and
# listener runs bidirectional, with varied lengths too
NATIVE_CASES = [
    _native_case("lstm", "per_direction", False, 1, "equal", False),
    _native_case("lstm", "per_direction", True, 1, "none", True),
    _native_case("lstm", "concat_forward", False, 2, "varied", True),
    _native_case("lstm", "concat_forward", True, 2, "varied", True),
    _native_case("gru", "per_direction", False, 2, "equal", True),
    _native_case("gru", "per_direction", True, 1, "varied", False),
    _native_case("gru", "concat_forward", False, 2, "none", False),
    _native_case("gru", "concat_forward", True, 1, "equal", False),
]


@pytest.mark.parametrize(
    "cell,listener,bidirectional,num_layers,lengths,with_state", NATIVE_CASES)
def test_native_equals_fused(cell, listener, bidirectional, num_layers, lengths, with_state,
                             ctrlrnn_backend):
    if ctrlrnn_backend == "reference":
        pytest.skip("a forced reference backend runs the controllers on the reference cells")
    native, fused = _pair(cell=cell, listener=listener, bidirectional=bidirectional,
                          num_layers=num_layers)
    x = torch.randn(4, 7, 6, dtype=D64, requires_grad=True)
    lens = None if lengths is None else torch.tensor(lengths)
    D = 2 if bidirectional else 1
    hx = None
    if with_state:
        hx = tuple(torch.randn(num_layers * D, 4, 5, dtype=D64) for _ in native.state_names)
    assert native.native_applies(x, lens) and not fused.native_applies(x, lens)
    for a, b in zip(_everything(native, x, hx, lens), _everything(fused, x, hx, lens)):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)


def test_native_equals_fused_float32_no_bias_weight_drop_eval():
    native, fused = _pair(bidirectional=True, bias=False, weight_drop=0.3)
    native.float().eval()
    fused.float().eval()
    x = torch.randn(3, 9, 6)
    for a, b in zip(native(x), fused(x)):
        if isinstance(a, tuple):
            for u, v in zip(a, b):
                torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_weight_drop_draws_the_same_masks_on_both_engines():
    native, fused = _pair(bidirectional=True, weight_drop=0.5)
    x = torch.randn(2, 5, 6, dtype=D64)
    torch.manual_seed(11)
    a, _ = native(x)
    torch.manual_seed(11)
    b, _ = fused(x)
    torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
    torch.manual_seed(12)
    c, _ = native(x)
    assert not torch.allclose(a, c)  # a fresh mask per call: the check above could fail


def test_gradcheck_native_with_lengths(ctrlrnn_backend):
    if ctrlrnn_backend == "reference":
        pytest.skip("a forced reference backend runs the controllers on the reference cells")
    torch.manual_seed(0)
    m = RCRN(3, 2, bidirectional=True, batch_first=True, controllers="native").double()
    x = torch.randn(2, 3, 3, dtype=D64, requires_grad=True)
    lens = torch.tensor([3, 2])
    assert m.native_applies(x, lens)
    assert torch.autograd.gradcheck(lambda x: m(x, lengths=lens)[0], (x,))


@pytest.mark.parametrize("why", ["empty_batch", "fused", "reference", "export"])
def test_falls_back_where_native_does_not_apply(why, monkeypatch):
    native, fused = _pair(bidirectional=True)
    x = torch.randn(3, 5, 6, dtype=D64)
    lens = None
    if why == "empty_batch":
        x = x[:0]
    elif why == "reference":
        monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    m = fused if why == "fused" else native
    if why == "export":
        with scan_export.scan_mode():
            assert not m.native_applies(x, lens)
        return
    assert not m.native_applies(x, lens)
    out, _ = m(x, lengths=lens)
    ref, _ = fused(x, lengths=lens)
    torch.testing.assert_close(out, ref)


def test_controllers_is_checked_and_shown():
    with pytest.raises(ValueError, match="controllers"):
        RCRN(4, 4, controllers="cudnn")
    assert "controllers='fused'" in repr(RCRN(4, 4, controllers="fused"))
    assert "controllers='native'" in repr(RCRN(4, 4, controllers="native"))
    assert "controllers" not in repr(RCRN(4, 4))


@pytest.fixture(scope="module")
def auto_and_fused() -> Callable[[int], tuple[RCRN, RCRN]]:
    """``hidden -> (controllers="auto", controllers="fused")`` of the same weights, built once
    per width for the module (the tests only run them forward)."""
    built: dict[int, tuple[RCRN, RCRN]] = {}

    def get(hidden: int) -> tuple[RCRN, RCRN]:
        if hidden not in built:
            torch.manual_seed(0)
            auto = RCRN(3, hidden, bidirectional=True, batch_first=True).double()
            fused = RCRN(3, hidden, bidirectional=True, batch_first=True,
                         controllers="fused").double()  # fmt: skip
            fused.load_state_dict(auto.state_dict())
            built[hidden] = auto, fused
        return built[hidden]

    return get


@pytest.mark.compares_backends
@pytest.mark.parametrize(("hidden", "batch"),
                         [(8, 2), (64, 2), (65, 2), (128, 2), (129, 2), (200, 2), (129, 16),
                          (256, 16), (257, 16)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("varied", [True, False])
def test_auto_controllers_take_the_engine_measured_faster(hidden, batch, threads, training,
                                                          varied, auto_and_fused, monkeypatch):
    """controllers="auto" (the default) on CPU follows fused_controllers_faster (the fused
    engine where it measured faster, torch's kernels elsewhere); the same numbers either way.
    A forced reference backend never takes torch's kernels (its run is then the fused engine's
    reference, the very computation of controllers="fused")."""
    from ctrlrnn.nn.rcrn import fused_controllers_faster

    auto, fused = auto_and_fused(hidden)
    x = torch.randn(batch, 3, 3, dtype=D64)
    lens = torch.tensor([3, 2 if varied else 3] * (batch // 2))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.set_grad_enabled(training):
            native = auto.native_applies(x, lens)
            out = auto(x, lengths=lens)[0]
            monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
            assert reference_forced() and not auto.native_applies(x, lens)
            monkeypatch.delenv("CTRLRNN_BACKEND")
    finally:
        torch.set_num_threads(before)
    assert native == (not fused_controllers_faster(hidden, batch, training, threads, varied))
    torch.testing.assert_close(out, fused(x, lengths=lens)[0], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("triton", [True, False])
def test_auto_controllers_on_cuda_take_the_triton_fused_engine(triton, monkeypatch):
    """On CUDA, controllers="auto" runs the fused engine wherever its Triton kernels run (the
    GPU check measured it faster than cuDNN at every shape: docs/gpu.md), cuDNN otherwise;
    "native" stays on cuDNN either way."""
    import ctrlrnn.nn.rcrn as rcrn_module

    class CudaInput:  # what native_applies reads of an input, on a CUDA device
        device, dtype, shape, requires_grad = torch.device("cuda"), torch.float32, (2, 5, 3), True

    asked: list[torch.device] = []
    monkeypatch.setattr(rcrn_module, "has_kernel",
                        lambda family, device: asked.append(device) or triton)  # fmt: skip
    x = CudaInput()
    if reference_forced():  # CTRLRNN_BACKEND=reference: the fused engine's reference always
        assert not RCRN(3, 8, controllers="native").native_applies(x, None)  # type: ignore
        return
    assert RCRN(3, 8).native_applies(x, None) is (not triton)  # type: ignore[arg-type]
    assert asked == [torch.device("cuda")]
    assert RCRN(3, 8, controllers="native").native_applies(x, None)  # type: ignore[arg-type]
    assert not RCRN(3, 8, controllers="fused").native_applies(x, None)  # type: ignore[arg-type]


def test_auto_controllers_rule():
    """The measured rule (docs/rcrn.md): training on 2+ threads, fused up to width 128 at any
    batch and up to width 256 from batch 16; otherwise batches up to 8, up to width 128 on 2+
    threads and 64 on one."""
    from ctrlrnn.nn.rcrn import fused_controllers_faster as faster

    assert faster(128, 512, training=True, threads=2) and not faster(129, 15, True, 2)
    assert faster(129, 16, training=True, threads=2) and faster(256, 512, True, 2)
    assert not faster(257, 512, training=True, threads=2) and not faster(200, 32, True, 1)
    assert faster(128, 8, training=False, threads=2) and not faster(128, 9, False, 2)
    assert not faster(129, 1, training=False, threads=4)
    assert faster(64, 8, training=True, threads=1) and not faster(64, 9, True, 1)
    assert not faster(65, 1, training=False, threads=1)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_layers_projections_are_one_batched_gemm_equal_to_each_rnns(cell, bias):
    """:func:`project_all` (the fused path's 3 * D input projections, eq 1-6 / 10-14, in one
    batched GEMM) equals each RNN's own projection over its own input, biases folded as each
    cell folds them (both LSTM biases; the GRU's ``b_ih`` only), and so do its gradients."""
    from ctrlrnn.nn.rcrn import project_all

    torch.manual_seed(3)
    m = RCRN(5, 4, bidirectional=True, batch_first=True, cell=cell, bias=bias).double()
    x = torch.randn(3, 7, 5, dtype=D64, requires_grad=True)
    xr = x.flip(1)
    rnns = [r for d in range(2) for r in m.cell(0, d).rnns()]
    xs = [x, x, x, xr, xr, xr]
    got = project_all(rnns, xs)
    assert got.shape == (6, 3, 7, (4 if cell == "lstm" else 3) * 4)
    want = torch.stack([torch.nn.functional.linear(xi, r.weight_ih, r._input_bias())
                        for r, xi in zip(rnns, xs, strict=True)])
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    g = torch.randn_like(got)
    leaves = [x, *(p for r in rnns for p in r.parameters())]
    for a, b in zip(torch.autograd.grad(got, leaves, g, allow_unused=True),
                    torch.autograd.grad(want, leaves, g, allow_unused=True), strict=True):
        if b is None:
            assert a is None or not a.abs().any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_varied_lengths_in_training_take_the_fused_engine_up_to_width_256():
    """torch's packed backward zero-fills the whole input projection at every step, so with
    varied lengths in training the fused engine runs up to width 256 whatever the batch and
    threads; equal lengths and inference keep the rule measured without packing."""
    from ctrlrnn.nn.rcrn import fused_controllers_faster

    for threads in (1, 2, 8):
        for batch in (1, 32, 256):
            assert fused_controllers_faster(200, batch, True, threads, varied_lengths=True)
            assert fused_controllers_faster(256, batch, True, threads, varied_lengths=True)
            assert not fused_controllers_faster(512, batch, True, threads, varied_lengths=True)
            assert fused_controllers_faster(200, batch, False, threads, True) == (
                fused_controllers_faster(200, batch, False, threads))
    assert not fused_controllers_faster(200, 32, True, 1)  # one thread, equal lengths
