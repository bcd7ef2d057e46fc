"""TorchScript: ``torch.jit.trace`` of every layer configuration and cell gives a module that
computes what the layer computes at other batch sizes, lengths and sequence lengths than the
traced ones, forward and backward, and that ``torch.jit.save`` / ``torch.jit.load`` keep;
``torch.jit.script`` is refused with an error that names what to use instead.

A trace records ops and freezes the Python around them: a branch on the lengths taken at the
traced call, or a loop over time, would be recorded for the traced shape only. So each case is
traced at one shape and lengths (all full, or some short) and run at three others, both ways
round. Without the compiled kernels (the reference backend of ``tests/nn/conftest.py``) the
scans, QRNN pooling and METAGROSS levels still trace (the custom op, which runs its reference
inside, is one node of the trace), and the fused cells are refused with a clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from contract import FFN, NAMES, context, make, run
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import ctrlrnn

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.not_plain("tests tracing, not a kernel's values; the ops suites run the kernels "
                          "on the plain runtime"),
]

#: the fused cells' layer configurations: refused under tracing without the compiled kernels
ON_CELLS = {"rcrn", "rcrn-concat", "rcrn-gru", "rcrn-gru-bi", "rcrn-gru-concat", "caslstm",
            "caslstm-trainable", "caslstm-peephole", "ncarnn", "metagross-lstm", "metagross-gru",
            "metagross-state", "metagross-state-lstm", "metagross-state-gru"}  # fmt: skip
#: how the lengths are given at the traced call: not at all, all full, some short
TRACED_LENGTHS = ("none", "full", "short")
#: (batch, steps, lengths) the traced module runs at, none of them the traced shape
SHAPES = [(5, 9, [9, 2, 5, 9, 1]), (2, 3, [3, 3]), (4, 6, [1, 6, 1, 1])]


class Call(nn.Module):
    """The layer called as :func:`contract.run` calls it, its outputs flattened to tensors
    (a trace's inputs and outputs are tensors and tuples of them)."""

    def __init__(self, layer: nn.Module, with_lengths: bool, with_context: bool) -> None:
        super().__init__()
        self.layer, self.with_lengths, self.with_context = layer, with_lengths, with_context

    def forward(self, x: Tensor, *rest: Any) -> tuple[Tensor, ...]:
        rest_ = list(rest)
        ctx = rest_.pop(0) if self.with_context else None
        lengths = rest_.pop(0) if self.with_lengths else None
        hx = rest_.pop(0) if rest_ else None
        out, h_n = run(self.layer, x, ctx, hx, lengths=lengths)
        return (out, *_flat(h_n))


def _flat(state: Any) -> list[Tensor]:
    """The tensors of a final state, nested tuples (METAGROSS's ``(tree, base)``) flattened."""
    if isinstance(state, Tensor):
        return [state]
    return [t for s in state for t in _flat(s)]


def _inputs(layer: nn.Module, batch: int, steps: int, lengths: list[int] | None,
            generator: torch.Generator) -> tuple[Tensor, ...]:  # fmt: skip
    x = torch.randn(batch, steps, 4, generator=generator, dtype=torch.float64)
    ctx = context(layer, batch, torch.float64, generator)
    return (x, *(() if ctx is None else (ctx,)),
            *(() if lengths is None else (torch.tensor(lengths),)))  # fmt: skip


def _trace(module: nn.Module, inputs: tuple[Tensor, ...]) -> torch.jit.ScriptModule:
    """``torch.jit.trace`` as a user calls it (its check that a second trace records the same
    graph included), without torch's warning that tracing is deprecated."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        return torch.jit.trace(module, inputs)


def _assert_equal(got: tuple[Tensor, ...], want: tuple[Tensor, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def _refused_without_kernels(name: str, ctrlrnn_backend: str) -> bool:
    if ctrlrnn_backend == "reference" and name in ON_CELLS:
        layer = make(name, batch_first=True).double()
        with pytest.raises(RuntimeError, match=r"torch\.jit\.trace of the fused .* cell .* "
                                               r"needs the compiled 'cells' kernels"):
            _trace(Call(layer, False, context(layer, 1) is not None),
                   _inputs(layer, 3, 7, None, torch.Generator()))
        return True
    return False


def _backend_cases(names: list[str], options: tuple[str, ...], cells_at_all: bool) -> list[Any]:
    """The cases ``(backend, name, option)`` of a test over configurations ``names``.

    A configuration that the reference backend traces takes each option once: one of them (in
    turn) on the reference backend, the others on the compiled kernels. A fused cell's
    configuration is refused on the reference backend whatever the option (one case checks
    that); on the compiled kernels it takes every option (``cells_at_all``), or the first and
    one of the others in turn. Each backend thus takes every option, and every configuration it
    can trace.

    Not every option on both: the Python that a trace freezes (where the lengths are read,
    where the gradient mode is) is the same on both backends, and what differs lies inside the
    custom ops, each one node of the trace either way. Where the lengths are read is code that
    the layers share or that each kind of layer has, which the configurations of a kind take
    at every option together."""
    traced_on_reference = [name for name in names if name not in ON_CELLS]
    cells = [name for name in names if name in ON_CELLS]
    cases = []
    for name in names:
        if name in ON_CELLS:
            on_reference = options[0]
            on_compiled = options if cells_at_all else \
                (options[0], options[1 + cells.index(name) % (len(options) - 1)])  # fmt: skip
        else:
            on_reference = options[traced_on_reference.index(name) % len(options)]
            on_compiled = tuple(option for option in options if option != on_reference)
        cases += [pytest.param("compiled", name, option, id=f"compiled-{name}-{option}")
                  for option in on_compiled]  # fmt: skip
        cases.append(pytest.param("reference", name, on_reference,
                                  id=f"reference-{name}-{on_reference}"))  # fmt: skip
    return cases


@pytest.mark.parametrize(("ctrlrnn_backend", "name", "traced_lengths"),
                         _backend_cases(NAMES, TRACED_LENGTHS, False),
                         indirect=["ctrlrnn_backend"])  # fmt: skip
def test_a_trace_computes_the_layer_at_other_shapes_and_lengths(
    name: str, traced_lengths: str, ctrlrnn_backend: str
) -> None:
    if _refused_without_kernels(name, ctrlrnn_backend):
        return
    torch.manual_seed(0)
    layer = make(name, batch_first=True).double().eval()
    with_context = context(layer, 1) is not None
    with_lengths = traced_lengths != "none"
    call = Call(layer, with_lengths, with_context)
    g = torch.Generator().manual_seed(1)
    at = {"none": None, "full": [7, 7, 7], "short": [7, 4, 1]}[traced_lengths]
    traced = _trace(call, _inputs(layer, 3, 7, at, g))
    for batch, steps, lengths in SHAPES:
        inputs = _inputs(layer, batch, steps, lengths if with_lengths else None, g)
        _assert_equal(traced(*inputs), call(*inputs))
        if with_lengths:  # every length full, where the trace saw short ones (and the reverse)
            inputs = (*inputs[:-1], torch.full((batch,), steps))
            _assert_equal(traced(*inputs), call(*inputs))


@pytest.mark.parametrize("name", ["qrnn", "rcrn-gru-bi", "caslstm", "icarnn", "metagross",
                                  "metagross-state"])
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning:torch.nn.utils.rnn")  # torch's own
def test_a_trace_packs_inside_at_any_lengths(name: str, ctrlrnn_backend: str) -> None:
    """The usual pattern of a model written for ``nn.LSTM``: ``pack_padded_sequence`` inside
    the traced forward, the layer on the packed sequence, ``pad_packed_sequence`` after it."""
    if _refused_without_kernels(name, ctrlrnn_backend):
        return
    torch.manual_seed(0)
    layer = make(name, batch_first=True).double().eval()
    with_context = context(layer, 1) is not None

    class Packing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Tensor, *rest: Tensor) -> Tensor:
            ctx, lengths = (rest[0], rest[1]) if with_context else (None, rest[0])
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = run(self.layer, packed, ctx)
            return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    g = torch.Generator().manual_seed(1)
    packing = Packing()
    traced = _trace(packing, _inputs(layer, 3, 7, [7, 4, 1], g))
    for batch, steps, lengths in SHAPES:
        inputs = _inputs(layer, batch, steps, lengths, g)
        _assert_equal((traced(*inputs),), (packing(*inputs),))


@pytest.mark.parametrize(("ctrlrnn_backend", "name", "traced_under"),
                         _backend_cases(["qrnn", "rcrn", "caslstm-trainable", "icarnn",
                                         "metagross", "metagross-state"],
                                        ("grad", "no_grad"), True),
                         indirect=["ctrlrnn_backend"])  # fmt: skip
def test_a_trace_takes_the_initial_state_and_gives_the_gradients(
    name: str, traced_under: str, ctrlrnn_backend: str
) -> None:
    """Also when traced without gradients (``torch.no_grad()``): the trace must not keep the
    fused cells' choice to skip saving what their backward reads."""
    if _refused_without_kernels(name, ctrlrnn_backend):
        return
    torch.manual_seed(0)
    layer = make(name, batch_first=True).double()
    with_context = context(layer, 1) is not None
    call = Call(layer, True, with_context)
    g = torch.Generator().manual_seed(1)

    def initial(batch: int, steps: int) -> Any:  # the layer's own final state, as its hx
        with torch.no_grad():
            _, h_n = run(layer, *_inputs(layer, batch, steps, None, g)[:1],
                         context(layer, batch, torch.float64, g))  # fmt: skip
        return h_n

    with torch.set_grad_enabled(traced_under == "grad"):
        traced = _trace(call, (*_inputs(layer, 3, 7, [7, 4, 1], g), initial(3, 7)))
    for batch, steps, lengths in SHAPES:
        inputs = [t.requires_grad_(t.is_floating_point())
                  for t in _inputs(layer, batch, steps, lengths, g)]  # fmt: skip
        hx = initial(batch, steps)
        grads = []
        for module in (traced, call):
            outs = module(*inputs, hx)
            loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
                       for o in outs)  # fmt: skip
            wrt = [t for t in inputs if t.requires_grad] + list(layer.parameters())
            grads.append((outs, torch.autograd.grad(loss, wrt)))
        _assert_equal(grads[0][0], grads[1][0])
        _assert_equal(grads[0][1], grads[1][1])


@pytest.mark.parametrize("build", [
    lambda: make(FFN), lambda: ctrlrnn.PositionEncoder(), lambda: ctrlrnn.HistorySummary(),
], ids=["MetagrossFFN", "PositionEncoder", "HistorySummary"])  # fmt: skip
def test_the_position_wise_modules_trace(build: Any) -> None:
    torch.manual_seed(0)
    module = build().double().eval()

    def inputs(batch: int, steps: int) -> tuple[Tensor, ...]:
        x = torch.randn(batch, steps, 4, dtype=torch.float64)
        lengths = torch.randint(1, steps + 1, (batch,))
        if isinstance(module, ctrlrnn.PositionEncoder):
            return (x, lengths)
        if isinstance(module, ctrlrnn.HistorySummary):
            return (x, torch.randn_like(x), torch.randn(batch, 4, dtype=x.dtype), lengths)
        return (x,)

    traced = _trace(module, inputs(3, 7))
    for batch, steps, _ in SHAPES:
        given = inputs(batch, steps)
        _assert_equal(tuple(_flat(traced(*given))), tuple(_flat(module(*given))))


#: a cell of every registered unit and one step's inputs after the input (None: omitted)
CELLS: dict[str, Any] = {
    "QRNNCell": (lambda: ctrlrnn.QRNNCell(4, 5, window=2, pooling="ifo"), lambda b: ()),
    "RCRNCell": (lambda: ctrlrnn.RCRNCell(4, 5), lambda b: ()),
    "CASLSTMCell": (lambda: ctrlrnn.CASLSTMCell(4, 5, lambda_="trainable"),
                    lambda b: (torch.randn(b, 5, dtype=torch.float64),)),
    "CARNNCell": (lambda: ctrlrnn.CARNNCell(4, 5, 3, variant="i"),
                  lambda b: (torch.randn(b, 3, dtype=torch.float64),)),
    "MetagrossCell": (lambda: ctrlrnn.MetagrossCell(4, 5, depth=3, base="gru"), lambda b: ()),
}


def test_every_registered_cell_is_traced() -> None:
    from ctrlrnn.nn.registry import UNITS

    assert {u.cell.__name__ for u in UNITS.values() if u.cell is not None} <= set(CELLS)


@pytest.mark.parametrize("name", list(CELLS))
def test_a_traced_cell_steps_as_the_cell_at_another_batch_size(name: str, ctrlrnn_backend: str
                                                               ) -> None:  # fmt: skip
    build, extra = CELLS[name]
    torch.manual_seed(0)
    cell = build().double()
    if name == "MetagrossCell" and ctrlrnn_backend == "reference":  # its GRU base: a fused cell
        with pytest.raises(RuntimeError, match="needs the compiled 'cells' kernels"):
            _trace(cell, (torch.randn(3, 4, dtype=torch.float64),))
        return

    class Steps(nn.Module):  # three steps, each feeding its state to the next
        def __init__(self) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, x: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
            state, outs = None, []
            for t in range(x.shape[1]):
                out = self.cell(x[:, t], *rest, state) if rest else self.cell(x[:, t], state)
                h, state = out if isinstance(out, tuple) else (out, out)
                outs.append(h)
            return (torch.stack(outs, 1),)

    steps = Steps()
    traced = _trace(steps, (torch.randn(3, 3, 4, dtype=torch.float64), *extra(3)))
    inputs = (torch.randn(6, 3, 4, dtype=torch.float64), *extra(6))
    _assert_equal(traced(*inputs), steps(*inputs))


@pytest.mark.parametrize("build", [
    lambda: make("qrnn"), lambda: make("icarnn"), lambda: make("metagross-state"),
    lambda: make(FFN), CELLS["RCRNCell"][0], CELLS["CASLSTMCell"][0],
])  # fmt: skip
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_script_is_refused_with_what_to_use_instead(build: Any) -> None:
    module = build()

    class Model(nn.Module):  # a user's model holding the layer
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

    for target in (module, Model()):
        with pytest.raises(RuntimeError, match=rf"{type(module).__name__}: torch\.jit\.script "
                                               r".*torch\.jit\.trace"):
            torch.jit.script(target)


def test_the_tracer_warns_of_the_callers_code_and_not_of_ctrlrnns_checks() -> None:
    """While a trace is taken, the tracer's warnings about the sizes and lengths ctrlrnn's own
    code reads are silenced (ctrlrnn.nn.torchscript), and no others."""
    layer = make("metagross", batch_first=True).eval()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
            steps = int(lengths.max())  # the caller's own conversion: the tracer warns of it
            return self.layer(x[:, :steps], lengths=lengths)[0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.jit.trace(Model(), (torch.randn(3, 7, 4), torch.tensor([7, 4, 6])))
    tracer = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert tracer  # the trace and torch's check of it: the caller's line, each time
    assert {Path(w.filename).name for w in tracer} == {Path(__file__).name}


def test_every_public_module_is_traceable() -> None:
    from ctrlrnn.nn.torchscript import Traceable

    modules = [getattr(ctrlrnn, n) for n in ctrlrnn.__all__]
    modules = [m for m in modules if isinstance(m, type) and issubclass(m, nn.Module)]
    assert len(modules) >= 14
    for module in modules:
        assert issubclass(module, Traceable), module.__name__
        assert module._slow_forward is Traceable._slow_forward, module.__name__


#: the saved traces the new process loads: a fused cell's layer on the compiled kernels alone
SAVED = {"reference": ("qrnn", "metagross"), "compiled": ("qrnn", "metagross", "caslstm")}
NEW_PROCESS = """
import json, os, sys, traceback, warnings
import torch
import ctrlrnn  # registers the custom ops the traces hold
from ctrlrnn.ops import _extension

folder, saved = sys.argv[1], json.loads(sys.argv[2])
outcome = {"saved": "ok", "first": "ok"}


def part(name, body):
    if outcome[name] == "ok":
        try:
            body()
        except Exception:
            outcome[name] = traceback.format_exc()[-3000:]


def use(backend):
    if backend == "reference":
        os.environ["CTRLRNN_BACKEND"] = "reference"
    else:
        os.environ.pop("CTRLRNN_BACKEND", None)


modules = {}


def load():
    for backend, keys in saved.items():
        for key in keys:
            modules[backend, key] = torch.jit.load(f"{folder}/{backend}-{key}.pt")


def run_saved(backend):
    use(backend)
    for key in saved[backend]:
        expected = torch.load(f"{folder}/{backend}-{key}.expected", weights_only=True)
        got = modules[backend, key](expected["x"], expected["lengths"])
        for g, w in zip(got, expected["want"], strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def trace_first():
    use("compiled")
    assert not _extension.loaded_modules(), f"loaded before: {list(_extension.loaded_modules())}"
    torch.manual_seed(0)
    layers = {"rcrn": ctrlrnn.RCRN(5, 6, batch_first=True),
              "qrnn": ctrlrnn.QRNN(5, 6, batch_first=True),
              "caslstm": ctrlrnn.CASLSTM(5, 6, num_layers=2, batch_first=True),
              "metagross": ctrlrnn.Metagross(6, 6, batch_first=True)}
    for name, layer in layers.items():
        layer = layer.double().eval()
        D = 6 if name == "metagross" else 5
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            traced = torch.jit.trace(layer, (torch.randn(3, 7, D, dtype=torch.float64),))
        x = torch.randn(2, 4, D, dtype=torch.float64)
        torch.testing.assert_close(traced(x)[0], layer(x)[0], rtol=1e-12, atol=1e-12)


part("saved", load)
part("saved", lambda: run_saved("reference"))
part("first", trace_first)
part("saved", lambda: run_saved("compiled"))
print(json.dumps(outcome))
"""


@pytest.fixture(scope="module")
def new_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One new process, started with the compiled kernels, for the two tests below (each
    start of Python, torch and ctrlrnn costs seconds): right after ``import ctrlrnn`` it loads
    the traces of :data:`SAVED`, saved here on each backend, and runs those of the reference
    backend, which load no kernel; then it traces four layers as its first calls that load
    the kernels, and last runs the saved traces of the compiled kernels. Each part's outcome:
    ``"ok"`` or its traceback."""
    folder = tmp_path_factory.mktemp("traces")
    x, lengths = torch.randn(5, 9, 4), torch.tensor([9, 1, 4, 9, 3])
    for backend, keys in SAVED.items():
        with pytest.MonkeyPatch.context() as patch:
            if backend == "reference":
                patch.setenv("CTRLRNN_BACKEND", "reference")
            else:
                patch.delenv("CTRLRNN_BACKEND", raising=False)
            torch.manual_seed(0)
            for key in keys:
                call = Call(make(key, batch_first=True).eval(), True, False)
                traced = _trace(call, (torch.randn(3, 7, 4), torch.tensor([7, 2, 5])))
                traced.save(str(folder / f"{backend}-{key}.pt"))
                torch.save({"x": x, "lengths": lengths, "want": list(call(x, lengths))},
                           folder / f"{backend}-{key}.expected")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "CTRLRNN_BACKEND"}
    done = subprocess.run([sys.executable, "-c", NEW_PROCESS, str(folder), json.dumps(SAVED)],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.compares_backends  # (one new process loads the traces of both)
def test_a_saved_trace_loads_in_a_new_process_after_import_ctrlrnn(
    new_process: dict[str, str]
) -> None:
    """The trace holds ctrlrnn's custom ops (``ctrlrnn::...``), which ``import ctrlrnn``
    registers: a new process that imports it loads the saved files, traced on either backend,
    and runs each on the backend it was traced on."""
    assert new_process["saved"] == "ok", new_process["saved"]


@pytest.mark.compares_backends  # (the child process loads the compiled kernels: runs once)
def test_a_trace_as_the_first_call_of_a_process_loads_the_kernels_untraced(
    new_process: dict[str, str]
) -> None:
    """A model traced before any eager call loads the compiled kernels inside
    ``torch.jit.trace``: their set-up (settings handed to C++, thread counts) runs with the
    tracer paused, so the trace neither fails on those calls nor records them (its check that a
    second trace records the same graph passes), and it computes what the layer computes."""
    assert new_process["first"] == "ok", new_process["first"]


@pytest.mark.parametrize("kwargs", [dict(input_size=6), dict(input_size=5, residual=False),
                                    dict(input_size=6, recurrence="c", depth=3)])  # fmt: skip
def test_a_trace_of_metagross_with_its_fused_tree_records_the_level_ops(kwargs, ctrlrnn_backend):
    """The fused tree (gates from x_t, linear base, no projected residual) is an autograd
    ``Function`` in eager mode; a trace takes the per-level custom ops instead, so it records
    no opaque Python op, its check (a second trace, without grad) records the same graph, and
    it computes the layer at other batches and lengths."""
    torch.manual_seed(0)
    layer = ctrlrnn.Metagross(hidden_size=6, batch_first=True, **kwargs).double().eval()
    D = kwargs["input_size"]
    traced = _trace(layer, (torch.randn(3, 7, D, dtype=torch.float64),))
    assert "prim::PythonOp" not in str(traced.inlined_graph)
    for B, T in ((1, 1), (4, 11)):
        x = torch.randn(B, T, D, dtype=torch.float64)
        _assert_equal(tuple(traced(x)[:1]), tuple(layer(x)[:1]))
