"""CUDA graphs of the fused cells' step loops (``ctrlrnn.ops.gpu.step_graphs``), on the CPU.

A stand-in backend replays a "graph" by running the captured loop again on the graph's static
inputs and writing the results into the outputs it returned at capture: what a CUDA graph does
to its memory. That checks what the module itself adds (the capture on a signature's second
call, copying each call's inputs in, cloning the outputs out, one graph per signature, the
bound on graphs kept, the eager cases) on the Triton host's real loops in the interpreter,
against the loops run without graphs. Whether CUDA captures them is ``scripts/gpu-check``'s.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import Tensor

from ctrlrnn.ops.gpu import step_graphs
from ctrlrnn.ops.gpu.step_graphs import StepGraphs


class ReplayByRerun:
    """A graph backend on any device: replay = run the loop again into the captured outputs."""

    def __init__(self) -> None:
        self.captured = 0

    def applies(self, tensors: list[Tensor]) -> bool:
        return bool(tensors)

    def capture(self, run):
        self.captured += 1
        outputs = run()

        def replay() -> None:
            for out, new in zip(outputs, run(), strict=True):
                if isinstance(out, Tensor):
                    out.copy_(new)

        return replay, outputs


def _body(calls: list[int]):
    def body(a: SimpleNamespace) -> tuple[Tensor, Tensor]:
        calls.append(1)
        return a.x * a.w + (0 if a.b is None else a.b), a.x.sum(0)

    return body


def _args(seed: int, n: int = 4) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(x=torch.randn(n, 3, generator=g), w=torch.randn(3, generator=g),
                           b=None, flag=True)


def test_off_runs_eagerly_every_time():
    graphs, calls = StepGraphs(ReplayByRerun(), force=False), []
    for seed in range(3):
        graphs.run("t", _args(seed), _body(calls))
    assert len(calls) == 3 and graphs.captures == 0 and len(graphs) == 0


def test_second_call_captures_then_replays_with_each_calls_inputs():
    backend, calls = ReplayByRerun(), []
    graphs = StepGraphs(backend, force=True)
    results = []
    for seed in range(4):
        a = _args(seed)
        results.append((a, graphs.run("t", a, _body(calls))))
        assert graphs.captures == (0 if seed == 0 else 1)
    assert graphs.replays == 3 and backend.captured == 1
    for a, (y, s) in results:  # each call's own inputs, outputs not overwritten by later calls
        torch.testing.assert_close(y, a.x * a.w, rtol=0, atol=0)
        torch.testing.assert_close(s, a.x.sum(0), rtol=0, atol=0)


def test_inputs_that_require_grad_leave_no_history():
    """The cell op's inputs may be parameters: the static copies and the replayed outputs
    carry no autograd history (the op's own backward is the loops' gradient)."""
    graphs, calls = StepGraphs(ReplayByRerun(), force=True), []
    for seed in range(3):
        a = _args(seed)
        a.w.requires_grad_()
        y, s = graphs.run("t", a, _body(calls))
        if seed:  # captured and replayed (the first call runs the body as it is)
            assert not y.requires_grad and y.grad_fn is None
        torch.testing.assert_close(y.detach(), (a.x * a.w).detach(), rtol=0, atol=0)
    assert graphs.captures == 1
    assert all(not v.requires_grad for g in graphs._graphs.values() for v in g.inputs.values())


def test_a_graph_per_signature_and_a_bound_on_graphs():
    graphs = StepGraphs(ReplayByRerun(), max_graphs=2, force=True)
    calls: list[int] = []
    for n in (2, 3, 4):
        for _ in range(2):
            graphs.run("t", _args(0, n), _body(calls))
    assert graphs.captures == 3 and len(graphs) == 2  # the least recently used went out
    graphs.run("t", _args(1, 2), _body(calls))  # n = 2 was dropped: seen again, not captured
    assert graphs.captures == 3
    # an optional input present, a flag, another tag, a dtype: each a different graph
    variants = [SimpleNamespace(**{**vars(_args(0)), "b": torch.ones(3)}),
                SimpleNamespace(**{**vars(_args(0)), "flag": False}),
                SimpleNamespace(**{**vars(_args(0)), "x": torch.randn(4, 3).double()})]
    keys = {step_graphs.signature(v) for v in [_args(0), *variants]}
    assert len(keys) == 4
    assert ("u", step_graphs.signature(_args(0))) != ("t", step_graphs.signature(_args(0)))


def test_churning_signatures_stop_new_captures_and_keep_the_graphs_held():
    """A stream of shapes (each seen twice, never again) evicts graph after graph: once more
    than ``max_graphs`` went out with graphs replayed only by the call that captured them, new
    signatures run eagerly, and a graph still held keeps replaying."""
    graphs = StepGraphs(ReplayByRerun(), max_graphs=2, force=True)
    calls: list[int] = []
    for n in range(2, 7):
        for _ in range(2):
            graphs.run("t", _args(0, n), _body(calls))
    assert graphs.captures == 5 and graphs.evictions == 3 and graphs.churning()
    assert graphs.replays == 5  # each graph once, by the call that captured it
    for _ in range(3):
        graphs.run("t", _args(0, 9), _body(calls))
    assert graphs.captures == 5  # a new signature: eager from now on
    replays = graphs.replays
    y, _ = graphs.run("t", _args(1, 6), _body(calls))  # n = 6 is still held
    assert graphs.replays == replays + 1
    torch.testing.assert_close(y, _args(1, 6).x * _args(1, 6).w, rtol=0, atol=0)
    graphs.clear()
    assert not graphs.churning() and graphs.captures == graphs.evictions == 0


def test_calls_seen_once_are_forgotten_in_order():
    graphs = StepGraphs(ReplayByRerun(), max_seen=2, force=True)
    calls: list[int] = []
    for n in (2, 3, 4):
        graphs.run("t", _args(0, n), _body(calls))
    graphs.run("t", _args(0, 2), _body(calls))  # forgotten: seen once more, still eager
    assert graphs.captures == 0
    graphs.run("t", _args(0, 4), _body(calls))
    assert graphs.captures == 1


def test_eager_where_the_backend_does_not_apply():
    graphs, calls = StepGraphs(step_graphs.CudaGraphs(), force=True), []
    for seed in range(3):  # CPU tensors: never captured
        graphs.run("t", _args(seed), _body(calls))
    assert graphs.captures == 0 and len(calls) == 3


def test_the_environment_variable(monkeypatch):
    for value, want in (("1", True), ("on", True), ("0", False), ("off", False), ("", True)):
        monkeypatch.setenv(step_graphs.ENV, value)
        assert step_graphs.enabled() is want
    monkeypatch.delenv(step_graphs.ENV)
    assert step_graphs.enabled() is True  # the default: measured faster (docs/gpu.md)
    monkeypatch.setenv(step_graphs.ENV, "maybe")
    with pytest.raises(ValueError, match="CTRLRNN_CUDA_GRAPHS='maybe'"):
        step_graphs.enabled()


def test_signature_refuses_what_it_cannot_key():
    with pytest.raises(TypeError, match="list"):
        step_graphs.signature(SimpleNamespace(x=[1, 2]))


# ------------------------------------------------------------------------------------------------
# the Triton host's loops (interpreter) through the stand-in graphs
# ------------------------------------------------------------------------------------------------

#: two steps already make a loop to capture (the lengths: a full row, an empty and a partial one)
B, T, H = 3, 2, 8


def _lstm_inputs(seed: int, stack: int | None) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    lead = () if stack is None else (stack,)
    return [torch.randn(*lead, B, T, 4 * H, generator=g),
            0.3 * torch.randn(*lead, 4 * H, H, generator=g),
            torch.randn(*lead, B, H, generator=g), torch.randn(*lead, B, H, generator=g)]


def _three_lstm_calls(stack: int | None) -> list[tuple[tuple[Tensor, ...], tuple[Tensor, ...]]]:
    """Forward and backward of the Triton host's LSTM loops on three new inputs (the first
    call runs eagerly, the second captures, the third replays where graphs are on)."""
    from ctrlrnn.ops.cells import triton_host

    lengths = torch.tensor([T, 0, 1])
    calls = []
    for seed in range(3):
        torch.manual_seed(seed)
        args = _lstm_inputs(seed, stack)
        out = triton_host.lstm_forward(*args, lengths, True)
        grads = [torch.randn_like(out[0]), None, torch.randn_like(out[2]), None]
        saved = [args[1], args[2], args[3], out[0], out[1], out[4]]
        calls.append((out, triton_host.lstm_backward(*grads, *saved, lengths)))
    return calls


@pytest.mark.parametrize("stack", [None, 2])
def test_triton_host_loops_replayed_equal_the_eager_loops(stack, monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed (pip install 'ctrlrnn[gpu]')")
    eager = _three_lstm_calls(stack)
    graphs = StepGraphs(ReplayByRerun(), force=True)
    monkeypatch.setattr(step_graphs, "GRAPHS", graphs)
    got = _three_lstm_calls(stack)
    assert graphs.captures == 2 and graphs.replays == 4  # forward and backward, calls 2 and 3
    for (out, back), (want_out, want_back) in zip(got, eager, strict=True):
        for x, y in zip((*out, *back), (*want_out, *want_back), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_backend_info_says_whether_graphs_are_on(monkeypatch):
    from ctrlrnn.ops.backend import backend_info

    monkeypatch.setenv(step_graphs.ENV, "1")
    assert backend_info()["cuda"]["step_graphs"].startswith("on:")
    monkeypatch.setenv(step_graphs.ENV, "0")
    assert backend_info()["cuda"]["step_graphs"].startswith("off:")
    monkeypatch.setenv(step_graphs.ENV, "sometimes")
    assert "CTRLRNN_CUDA_GRAPHS='sometimes'" in backend_info()["cuda"]["step_graphs"]
