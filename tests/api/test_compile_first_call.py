"""``torch.compile(layer, fullgraph=True)`` as the first use of the compiled kernels in a fresh
process (tracing must never reach the kernel loader's locks or files), for every layer, with
``lengths``, forward and backward; and ``PackedSequence`` input under ``torch.compile`` (graph
breaks allowed).

What is loaded on first use is a kernel family (one compiled extension: ``scan``, ``cells`` or
``metagross``). A process costs seconds before its first layer runs (torch, then dynamo), so
the layers share a few processes (:data:`PROCESSES`), placed so that each layer's compiled call
is the first use of a family in its process; the script checks that, and that no family is
first used outside ``torch.compile``. Dynamo is reset between layers, as in a fresh process, so
that no layer is traced with what an earlier one left (cached frames, sizes marked dynamic).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

LAYERS = {
    "QRNN": "ctrlrnn.QRNN(4, 6, num_layers=2, bidirectional=True)",
    "RCRN": "ctrlrnn.RCRN(4, 6, bidirectional=True)",
    "CASLSTM": "ctrlrnn.CASLSTM(4, 6, num_layers=2, bidirectional=True)",
    "CARNN-n": "ctrlrnn.CARNN(4, 6, context_size=3, variant='n')",
    "CARNN-i": "ctrlrnn.CARNN(4, 6, context_size=3, variant='i', bidirectional=True)",
    "Metagross": "ctrlrnn.Metagross(4, 6, depth=2, bidirectional=True)",
    "Metagross-lstm": "ctrlrnn.Metagross(4, 6, depth=2, base='lstm')",
    "Metagross-state": "ctrlrnn.Metagross(4, 6, depth=2, gates='state', bidirectional=True)",
    "MetagrossFFN": "ctrlrnn.MetagrossFFN(4, depth=2)",
}

#: The layers of each process, in order. Every layer uses ``scan``; RCRN, CAS-LSTM, nCARNN and
#: METAGROSS with state gates add ``cells``, METAGROSS adds ``metagross`` (and ``cells`` with an
#: LSTM base). So a process opens with a layer of ``scan`` alone, or of ``scan`` and ``cells``,
#: and then holds at most one layer per family not yet used there.
PROCESSES = [
    ["QRNN", "RCRN"],
    ["CARNN-i", "CASLSTM", "Metagross-lstm"],
    ["MetagrossFFN", "CARNN-n"],
    ["Metagross-state", "Metagross"],
]

FIRST_CALLS = """
import json, sys, traceback
import torch, ctrlrnn
from ctrlrnn.ops import _extension

def loaded():
    return set(_extension.loaded_modules())

def first_call(source):
    torch.manual_seed(0)
    m = eval(source)
    x = torch.randn(5, 3, 4)
    lengths = torch.tensor([5, 3, 1])
    if isinstance(m, ctrlrnn.MetagrossFFN):
        args, kwargs = (x,), {}
    elif isinstance(m, ctrlrnn.CARNN):
        args, kwargs = (x, torch.randn(3, 3)), {"lengths": lengths}
    else:
        args, kwargs = (x,), {"lengths": lengths}
    before = loaded()
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    out = compiled(*args, **kwargs)                   # the first use of a family here
    out = out[0] if isinstance(out, tuple) else out
    grads = torch.autograd.grad(out.square().sum(), list(m.parameters()))
    families = loaded()
    assert families - before, (
        f"the compiled call used no kernel family that was not loaded already ({sorted(before)}):"
        f" regroup the layers of tests/api/test_compile_first_call.py")
    want = m(*args, **kwargs)
    want = want[0] if isinstance(want, tuple) else want
    torch.testing.assert_close(out, want)
    for g, w in zip(grads, torch.autograd.grad(want.square().sum(), list(m.parameters()))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert loaded() == families, f"first used outside torch.compile: {loaded() - families}"
    if not isinstance(m, ctrlrnn.MetagrossFFN):  # PackedSequence under compile
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        got = torch.compile(m, backend="aot_eager")(packed, *args[1:])[0]
        torch.testing.assert_close(pad_packed_sequence(got)[0], pad_packed_sequence(m(packed,
                                   *args[1:])[0])[0])

for name, source in json.loads(sys.argv[1]):
    torch._dynamo.reset()
    try:
        first_call(source)
    except Exception:
        print(f"--- {name}", file=sys.stderr)
        traceback.print_exc()
        print("failed", name, flush=True)
    else:
        print("ok", name, flush=True)
"""


def _run(names: list[str]) -> subprocess.CompletedProcess:
    layers = json.dumps([[name, LAYERS[name]] for name in names])
    return subprocess.run([sys.executable, "-c", FIRST_CALLS, layers], env=dict(os.environ),
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def results() -> dict[str, subprocess.CompletedProcess]:
    assert sorted(sum(PROCESSES, [])) == sorted(LAYERS)  # every layer, once
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(map(tuple, PROCESSES), pool.map(_run, PROCESSES)))
    return {name: proc for names, proc in done.items() for name in names}


@pytest.mark.parametrize("layer", list(LAYERS))
def test_compile_as_first_call(layer: str, results: dict[str, subprocess.CompletedProcess]) -> None:
    proc = results[layer]
    assert proc.returncode == 0 and f"ok {layer}" in proc.stdout.splitlines(), \
        proc.stderr[-4000:]
