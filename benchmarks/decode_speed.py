"""Decoding at batch 1 and cell steps in two source trees, timed in alternation:
``python benchmarks/decode_speed.py BEFORE_SRC AFTER_SRC [--what greedy|beam|MetagrossCell|...]``.

Each tree runs in a worker process of its own (``PYTHONPATH=<tree>``, the same virtual
environment, one thread); the driver asks them in turn for one round of timings,
``--repeats`` rounds, so a load on the machine slows both alike.

* ``greedy``, ``beam``: the translation model (``--decoder qrnn``: the character-level
  translation's QRNN arm, a two-layer QRNN encoder of windows 6 and 2, unmasked, and the QRNN
  decoder; ``lstm``: its LSTM arm, two LSTM layers each side with dot attention), ``--batch``
  sources of ``--length`` tokens, decoded up to ``2 * length + 10`` tokens as the task does.
  A round times ``--calls`` decodes; the speed-up is the median over rounds of before's time /
  after's. Both workers build the model from one seed and the driver checks that their tokens
  agree.
* a cell's name: one step at batch 1 and width ``--hidden`` with the state of the previous
  step, under ``no_grad``, against ``nn.LSTMCell``'s, the two interleaved in the worker (as
  ``ctrlrnn bench --overhead`` times them); each tree's ratio is the median over rounds.
  ``QRNN2Layers``: a 2-layer ``QRNN`` call at ``T = 1`` with the cells of the previous call,
  against a 2-layer ``nn.LSTM``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ENCODER = {"num_layers": 2, "window": [6, 2], "causal": False}


def _per_call(fn: Any, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _decoder(a: argparse.Namespace) -> tuple[Any, Any]:
    import torch

    from ctrlrnn.models.seq2seq import Seq2Seq

    torch.manual_seed(0)
    if a.decoder == "qrnn":
        model = Seq2Seq(a.vocab, a.vocab, encoder="qrnn",
                        encoder_args={"hidden_size": a.hidden, **ENCODER}, embedding_size=64)
    else:
        model = Seq2Seq(a.vocab, a.vocab, encoder="lstm", decoder="lstm",
                        encoder_args={"hidden_size": a.hidden, "num_layers": 2},
                        embedding_size=64)
    model.eval()
    src = torch.randint(4, a.vocab, (a.batch, a.length),
                        generator=torch.Generator().manual_seed(1))
    lengths = torch.full((a.batch,), a.length)
    max_len = 2 * a.length + 10

    def decode() -> list[list[int]]:
        if a.what == "beam":
            return model.beam_search(src, lengths, beam=a.beam, alpha=0.6, max_len=max_len)
        return model.greedy(src, lengths, max_len)

    return decode, decode()


def _cell(a: argparse.Namespace) -> tuple[Any, Any]:
    import torch

    import ctrlrnn

    torch.manual_seed(0)
    if a.what == "QRNN2Layers":  # a decoding step of a 2-layer QRNN against nn.LSTM's
        cell: Any = ctrlrnn.QRNN(a.hidden, a.hidden, num_layers=2)
        lstm: Any = torch.nn.LSTM(a.hidden, a.hidden, num_layers=2)
        x = torch.randn(1, 1, a.hidden)
    else:
        cell = getattr(ctrlrnn, a.what)(a.hidden, a.hidden)
        lstm = torch.nn.LSTMCell(a.hidden, a.hidden)
        x = torch.randn(1, a.hidden)
    with torch.no_grad():
        state, lstm_state = cell(x)[1], lstm(x)
        if a.what == "QRNN2Layers":
            lstm_state = lstm_state[1]

    if a.grad:  # forward + backward
        def ours() -> Any:
            cell(x, state)[0].sum().backward()

        def theirs() -> Any:
            lstm(x, lstm_state)[0].sum().backward()

        return (ours, theirs), None

    def ours() -> Any:
        with torch.no_grad():
            return cell(x, state)

    def theirs() -> Any:
        with torch.no_grad():
            return lstm(x, lstm_state)

    return (ours, theirs), None


def worker(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    fn, tokens = _decoder(a) if a.what in ("greedy", "beam") else _cell(a)
    print(json.dumps({"tokens": tokens}), flush=True)
    for line in sys.stdin:
        calls = int(line)
        if isinstance(fn, tuple):
            ours, theirs = fn
            ours(), theirs()
            pairs = [(_per_call(ours, calls), _per_call(theirs, calls)) for _ in range(5)]
            out = {"us": statistics.median(p[0] for p in pairs),
                   "ratio": statistics.median(p[0] / p[1] for p in pairs)}
        else:
            out = {"us": _per_call(fn, calls)}
        print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--what", default="greedy")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=80)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--beam", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1, help="greedy, beam: sources per decode")
    ap.add_argument("--decoder", choices=("qrnn", "lstm"), default="qrnn")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--grad", type=int, default=0, help="cells: 1 times forward + backward")
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    procs = []
    for tree in (a.before, a.after):
        env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
        args = [f"--{k}={v}" for k, v in vars(a).items()
                if k not in ("before", "after", "worker", "repeats")]
        procs.append(subprocess.Popen([sys.executable, __file__, "x", "x", "--worker", *args],
                                      env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    tokens = [json.loads(p.stdout.readline())["tokens"] for p in procs]  # type: ignore[union-attr]
    rounds: list[list[dict[str, float]]] = [[], []]
    for _ in range(a.repeats):
        for k, p in enumerate(procs):
            p.stdin.write(f"{a.calls}\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            rounds[k].append(json.loads(p.stdout.readline()))  # type: ignore[union-attr]
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    result: dict[str, Any] = {k: v for k, v in vars(a).items() if k not in ("worker",)}
    result["before_us"] = statistics.median(r["us"] for r in rounds[0])
    result["after_us"] = statistics.median(r["us"] for r in rounds[1])
    result["speedup"] = statistics.median(
        b["us"] / f["us"] for b, f in zip(rounds[0], rounds[1], strict=True))
    if "ratio" in rounds[0][0]:
        result["before_vs_LSTMCell"] = statistics.median(r["ratio"] for r in rounds[0])
        result["after_vs_LSTMCell"] = statistics.median(r["ratio"] for r in rounds[1])
    else:
        result["same_tokens"] = tokens[0] == tokens[1]
        result["tokens"] = len(tokens[1][0])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
