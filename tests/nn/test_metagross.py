"""METAGROSS whose gates read the input (``gates="input"``) against a recursive step-by-step loop
written from the METAGROSS paper's section 2 (:class:`metagross_loops.PaperTree`), and what is
specific to METAGROSS (bases, recurrences, depth gates, the gate backend). The printed reading is
``test_metagross_printed.py``; what every layer shares (padding, packed input, unbatched input,
dropout, half precision, ...) is checked over the configurations of ``contract.py``; the
position-wise variant (section 2.3) is ``test_metagross_ffn.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from contract import gradcheck
from metagross_loops import PaperTree, assert_chunks_chain, initial_state, layer_and_loop

from ctrlrnn import Metagross
from ctrlrnn.nn import metagross_gates
from ctrlrnn.nn.metagross import MetagrossCell
from ctrlrnn.ops import backend

D64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


# every base with every depth gate, and each of them with both recurrences (pairwise)
CASES = [
    (base, rec, gate)
    for base, recs in (("linear", "hch"), ("lstm", "chc"), ("gru", "hch"))
    for rec, gate in zip(recs, ("token", "static", "scalar"), strict=True)
]


@pytest.mark.parametrize("base,recurrence,depth_gate", CASES)
def test_matches_paper_loop(base, recurrence, depth_gate):
    torch.manual_seed(0)
    m = Metagross(3, 3, depth=3, base=base, recurrence=recurrence, depth_gate=depth_gate,
                  batch_first=True, causal=depth_gate != "static").double()  # fmt: skip
    x = torch.randn(2, 5, 3, dtype=D64)
    (out, h_n, alpha, beta), (ref, ref_state, ref_base, ra, rb) = layer_and_loop(
        m, PaperTree, x, initial_state(m, 2))
    torch.testing.assert_close(out, ref)
    if base == "linear":
        torch.testing.assert_close(h_n[0], ref_state)
    else:
        torch.testing.assert_close(h_n[0][0], ref_state)
        torch.testing.assert_close(h_n[1][0], ref_base)
    torch.testing.assert_close(alpha[0], ra)
    torch.testing.assert_close(beta[0], rb)


@pytest.mark.parametrize("residual,input_size", [(False, 3), (True, 4), (False, 4)])
@pytest.mark.parametrize("recurrence", ["h", "c"])
def test_residual_options_and_bias(residual, input_size, recurrence):
    torch.manual_seed(1)
    m = Metagross(input_size, 3, depth=2, residual=residual, recurrence=recurrence, bias=False,
                  batch_first=True).double()  # fmt: skip
    assert (m.unit(0).residual_weight is not None) == (residual and input_size != 3)
    x = torch.randn(2, 6, input_size, dtype=D64)
    out, h_n = m(x)
    ref, ref_state, *_ = PaperTree(m.unit(0)).run(x)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(h_n[0], ref_state)


def test_printed_form_is_the_scan_of_the_design_table():
    """Without residual, h_t = a_t h_{t-1} + b_t with a = o (1 - f), b = o f z (depth 1)."""
    torch.manual_seed(2)
    m = Metagross(3, 4, depth=1, residual=False, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=D64)
    out, _ = m(x)
    u = m.unit(0)
    pf, po, pz = (x @ w.T + b for w, b in zip(u.weight.chunk(3), u.bias.chunk(3)))
    f, o, z = torch.sigmoid(pf), torch.sigmoid(po), torch.tanh(pz)
    h, hs = torch.zeros(2, 4, dtype=D64), []
    for t in range(5):
        h = o[:, t] * (1 - f[:, t]) * h + o[:, t] * f[:, t] * z[:, t]
        hs.append(h)
    torch.testing.assert_close(out, torch.stack(hs, 1))


@pytest.mark.parametrize("base", ["linear", "gru"])
def test_bidirectional_multilayer_matches_paper_loop(base):
    torch.manual_seed(3)
    m = Metagross(3, 4, num_layers=2, bidirectional=True, depth=2, base=base).double()
    x = torch.randn(5, 2, 3, dtype=D64)  # (T, B, D)
    out, h_n, (alpha, _beta) = m(x, return_gates=True)
    assert alpha.shape == (4, 5, 2, 1)  # (L*D, T, B, I), time-major like the output
    layer_in, finals, alphas = x.transpose(0, 1), [], []
    for layer in range(2):
        outs = []
        for d in range(2):
            inp = layer_in if d == 0 else layer_in.flip(1)
            o, s, _, a, _ = PaperTree(m.unit(layer, d)).run(inp)
            outs.append(o if d == 0 else o.flip(1))
            finals.append(s)
            alphas.append(a if d == 0 else a.flip(1))
        layer_in = torch.cat(outs, -1)
    torch.testing.assert_close(out, layer_in.transpose(0, 1))
    tree = h_n if base == "linear" else h_n[0]
    torch.testing.assert_close(tree, torch.stack(finals))
    torch.testing.assert_close(alpha, torch.stack(alphas).transpose(1, 2))


@pytest.mark.parametrize(
    "base,recurrence,depth_gate",
    [("linear", "h", "token"), ("linear", "c", "static"), ("lstm", "h", "scalar"),
     ("gru", "c", "static")],
)  # fmt: skip
def test_gradcheck(base, recurrence, depth_gate):
    torch.manual_seed(4)
    # RNN bases carry 3 * (2^depth - 1) RNN states each: one layer direction keeps the full
    # Jacobian w.r.t. them small; the linear base runs the whole bidirectional stack.
    big = base == "linear"
    m = Metagross(2, 2, num_layers=2 if big else 1, bidirectional=big, depth=2, base=base,
                  recurrence=recurrence, depth_gate=depth_gate, causal=False,
                  batch_first=True).double()  # fmt: skip
    x = torch.randn(2, 3, 2, dtype=D64, requires_grad=True)
    hx = initial_state(m, 2)
    hx = hx.requires_grad_() if base == "linear" else tuple(h.requires_grad_() for h in hx)
    assert gradcheck(m, x, hx, lengths=torch.tensor([3, 2]))


@pytest.mark.parametrize(
    "base,recurrence,depth_gate",
    [("linear", "h", "token"), ("linear", "c", "static"), ("lstm", "c", "token"),
     ("gru", "h", "static")],
)  # fmt: skip
def test_depth_gates_of_a_padded_batch(base, recurrence, depth_gate):
    """``return_gates`` with lengths: each sequence's alpha and beta are those it has alone, and
    zero past its length."""
    torch.manual_seed(5)
    m = Metagross(3, 3, num_layers=2, bidirectional=True, depth=2, base=base,
                  recurrence=recurrence, depth_gate=depth_gate,
                  batch_first=True).double()  # fmt: skip
    lengths = torch.tensor([5, 2, 4])
    x = torch.randn(3, 5, 3, dtype=D64)
    _out, _h_n, (alpha, beta) = m(x, lengths=lengths, return_gates=True)
    for b in range(3):
        _ob, _hb, (ab, bb) = m(x[b : b + 1, : lengths[b]], return_gates=True)
        torch.testing.assert_close(alpha[:, b : b + 1, : lengths[b]], ab)
        torch.testing.assert_close(beta[:, b : b + 1, : lengths[b]], bb)
        assert alpha[:, b, lengths[b] :].abs().sum() == 0
        assert beta[:, b, lengths[b] :].abs().sum() == 0


@pytest.mark.parametrize("base,recurrence", [("linear", "h"), ("linear", "c"), ("lstm", "h")])
def test_state_carries_across_chunks(base, recurrence):
    """Two calls chained through h_n equal one call (every unit's and base RNN's state)."""
    torch.manual_seed(7)
    m = Metagross(3, 3, depth=3, base=base, recurrence=recurrence, batch_first=True).double()
    x = torch.randn(2, 8, 3, dtype=D64)
    assert_chunks_chain(m, x, 5)


@pytest.mark.parametrize("base,recurrence", [("linear", "h"), ("gru", "c")])
def test_cell_equals_layer(base, recurrence):
    torch.manual_seed(15)
    m = Metagross(3, 3, depth=2, base=base, recurrence=recurrence).double()
    x = torch.randn(6, 2, 3, dtype=D64)
    out, h_n = m(x)
    cell = m.cell(0)
    state, steps = None, []
    for t in range(6):
        h, state = cell(x[t], state)
        steps.append(h)
    torch.testing.assert_close(torch.stack(steps), out)
    if base == "linear":
        torch.testing.assert_close(state, h_n[0])
    else:
        torch.testing.assert_close(state[0], h_n[0][0])
        torch.testing.assert_close(state[1], h_n[1][0])
    h1, _ = cell(x[0, 1])  # unbatched
    torch.testing.assert_close(h1, out[0, 1])
    with pytest.raises(ValueError, match="depth_gate: 'static'"):
        MetagrossCell(3, 3, depth_gate="static")
    with pytest.raises(ValueError, match="state"):
        cell(x[0], torch.zeros(2, 5, dtype=D64))


def test_gates_are_bounded_and_unbatched_time_major():
    torch.manual_seed(8)
    m = Metagross(3, 4, num_layers=2, depth=3).double()
    x = 10 * torch.randn(6, 2, 3, dtype=D64)
    out, h_n, (alpha, beta) = m(x, return_gates=True)
    assert alpha.shape == beta.shape == (2, 6, 2, 3)
    assert 0 <= alpha.min() and alpha.max() <= 1 and 0 <= beta.min() and beta.max() <= 1
    o1, h1, (a1, _) = m(x[:, 1], return_gates=True)
    torch.testing.assert_close(o1, out[:, 1])
    torch.testing.assert_close(h1, h_n[:, 1])
    torch.testing.assert_close(a1, alpha[:, :, 1])
    one = Metagross(3, 4, depth=1).double()
    assert one.unit(0).num_internal == 0
    assert one(x, return_gates=True)[2][0].shape == (1, 6, 2, 0)


def test_static_gate_uses_the_whole_sequence():
    torch.manual_seed(9)
    m = Metagross(3, 3, depth=2, depth_gate="static", causal=False, batch_first=True).double()
    x = torch.randn(1, 6, 3, dtype=D64)
    out, _ = m(x)
    x2 = x.clone()
    x2[:, -1] += 1.0  # changing the last step changes earlier outputs: it is not causal
    out2, _ = m(x2)
    assert (out2[:, 0] - out[:, 0]).abs().max() > 1e-6
    tok = Metagross(3, 3, depth=2, batch_first=True).double()
    a, _ = tok(x)
    b, _ = tok(x2)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])  # the token gate is causal


def test_bad_arguments():
    with pytest.raises(ValueError, match="causal: depth_gate='static'"):
        Metagross(3, 4, depth_gate="static")  # unidirectional: causal by default
    with pytest.raises(ValueError, match="causal: depth_gate='static'"):
        Metagross(3, 4, depth_gate="static", causal=True)
    with pytest.raises(ValueError, match="causal"):
        Metagross(3, 4, bidirectional=True, causal=True)
    Metagross(3, 4, depth_gate="static", bidirectional=True)  # an encoder: allowed
    for kwargs, name in [
        (dict(base="rnn"), "base"),
        (dict(depth_gate="dynamic"), "depth_gate"),
        (dict(recurrence="x"), "recurrence"),
        (dict(depth=0), "depth"),
        (dict(num_layers=0), "num_layers"),
    ]:
        with pytest.raises(ValueError, match=name):
            Metagross(3, 4, **kwargs)
    m = Metagross(3, 4, num_layers=2, base="lstm", batch_first=True)
    with pytest.raises(ValueError, match="hx"):
        m(torch.randn(2, 5, 3), torch.zeros(2, 2, 12))  # needs (tree, base)
    with pytest.raises(ValueError, match=r"hx\[0\] \(tree\): expected shape \(2, 2, 12\)"):
        m(torch.randn(2, 5, 3), (torch.zeros(2, 2, 4), torch.zeros(2, 2, 72)))
    with pytest.raises(ValueError, match="input: expected feature size"):
        m(torch.randn(2, 5, 4))


def test_depth3_lstm_base_learns_delayed_copy():
    """Output t must reproduce input t-2: needs the recurrence; loss falls well below start."""
    torch.manual_seed(11)
    m = Metagross(2, 8, depth=3, base="lstm", batch_first=True)
    head = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam([*m.parameters(), *head.parameters()], lr=2e-2)

    def loss_fn(x):
        out, _ = m(x)
        return F.mse_loss(head(out[:, 2:]).squeeze(-1), x[:, :-2, 0])

    torch.manual_seed(12)
    held = torch.randn(32, 10, 2)
    start = loss_fn(held).item()
    for _ in range(120):
        loss = loss_fn(torch.randn(32, 10, 2))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        end = loss_fn(held).item()
    assert end < 0.3 * start, (start, end)


# ------------------------------------------------------------------ the level gates' backend
# The level gates are the reference composition of ctrlrnn.ops.metagross_level (used on CUDA and
# without the compiled extension); their torch.compile path equals the eager path (float32).
# These tests force that path on CPU.


@pytest.fixture
def compiled_gates(monkeypatch):
    # the composition path: no compiled level kernel (the scan keeps its kernel)
    has_kernel = backend.has_kernel
    monkeypatch.setattr(backend, "has_kernel",
                        lambda family, device: family != "metagross" and has_kernel(family, device))
    metagross_gates.set_gate_backend("compiled")
    yield
    metagross_gates.set_gate_backend("auto")


def test_gate_backend_choice_is_reported():
    assert metagross_gates.gate_backend(torch.zeros(4, dtype=torch.float64)) == "eager"
    big = torch.zeros(metagross_gates.COMPILE_MIN_NUMEL)
    assert metagross_gates.gate_backend(big).startswith(("compiled", "eager (torch.compile"))
    with pytest.raises(ValueError, match="mode"):
        metagross_gates.set_gate_backend("fast")


def test_compiled_gates_equal_eager(compiled_gates):
    torch.manual_seed(0)
    m = Metagross(8, 8, depth=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 6, 8, requires_grad=True)
    lengths = torch.tensor([6, 4, 2])

    def run():
        out, h_n, (alpha, _) = m(x, lengths=lengths, return_gates=True)
        loss = out.square().sum() + h_n.sum() + alpha.sum()
        grads = torch.autograd.grad(loss, [x, *m.parameters()])
        return out, h_n, grads

    out_c, h_c, g_c = run()
    assert metagross_gates.gate_backend(torch.zeros(1)) == "compiled"
    metagross_gates.set_gate_backend("eager")
    out_e, h_e, g_e = run()
    torch.testing.assert_close(out_c, out_e, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_c, h_e, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_c, g_e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
