"""``torch.compile(layer, fullgraph=True)`` as the very first use of every layer in a fresh
process (tracing must never reach the kernel loader's locks or files), with ``lengths``, forward
and backward; and ``PackedSequence`` input under ``torch.compile`` (graph breaks allowed)."""

from __future__ import annotations

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

FIRST_CALL = """
import torch, ctrlrnn
torch.manual_seed(0)
m = {layer}
x = torch.randn(5, 3, 4)
lengths = torch.tensor([5, 3, 1])
if isinstance(m, ctrlrnn.MetagrossFFN):
    args, kwargs = (x,), {{}}
elif isinstance(m, ctrlrnn.CARNN):
    args, kwargs = (x, torch.randn(3, 3)), {{"lengths": lengths}}
else:
    args, kwargs = (x,), {{"lengths": lengths}}
compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
out = compiled(*args, **kwargs)                       # the process's first use of ctrlrnn
out = out[0] if isinstance(out, tuple) else out
grads = torch.autograd.grad(out.square().sum(), list(m.parameters()))
want = m(*args, **kwargs)
want = want[0] if isinstance(want, tuple) else want
torch.testing.assert_close(out, want)
for g, w in zip(grads, torch.autograd.grad(want.square().sum(), list(m.parameters()))):
    torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
if not isinstance(m, ctrlrnn.MetagrossFFN):  # PackedSequence under compile
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    got = torch.compile(m, backend="aot_eager")(packed, *args[1:])[0]
    torch.testing.assert_close(pad_packed_sequence(got)[0], pad_packed_sequence(m(packed,
                               *args[1:])[0])[0])
print("ok")
"""


def _run(layer: str) -> subprocess.CompletedProcess:
    code = FIRST_CALL.format(layer=LAYERS[layer])
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ),
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def results() -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=2) as pool:  # one fresh process per layer
        return dict(zip(LAYERS, pool.map(_run, LAYERS)))


@pytest.mark.parametrize("layer", list(LAYERS))
def test_compile_as_first_call(layer: str, results: dict[str, subprocess.CompletedProcess]) -> None:
    proc = results[layer]
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-4000:]
