"""Greedy decoding at batch 1 of the translation model (a QRNN encoder-decoder) in two source
trees, timed in alternation: ``python benchmarks/decode_speed.py BEFORE_SRC AFTER_SRC``.

Each tree runs in a worker process of its own (``PYTHONPATH=<tree>``, the same virtual
environment); the driver asks them in turn to time ``--calls`` decodes, ``--repeats`` times,
so a load on the machine slows both alike; the ratio is the median of the per-round ratios.
Both workers build the same model from one seed and check that their tokens agree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: the model: the translation task's QRNN arm (experiments_translation.py: two layers, the
#: encoder's windows 6 and 2 unmasked), width and vocabulary as given on the command line
ENCODER = {"num_layers": 2, "window": [6, 2], "causal": False}


def worker(hidden: int, vocab: int, length: int, beam: int) -> None:
    import torch

    from ctrlrnn.models.seq2seq import Seq2Seq

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Seq2Seq(vocab, vocab, encoder="qrnn", encoder_args={"hidden_size": hidden, **ENCODER},
                    embedding_size=64).eval()
    src = torch.randint(4, vocab, (1, length), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([length])
    max_len = 2 * length + 10  # as the translation task decodes

    def decode() -> list[list[int]]:
        if beam > 1:
            return model.beam_search(src, lengths, beam=beam, alpha=0.6, max_len=max_len)
        return model.greedy(src, lengths, max_len)

    print(json.dumps({"tokens": decode()}), flush=True)
    for line in sys.stdin:
        calls = int(line)
        start = time.perf_counter()
        for _ in range(calls):
            decode()
        print(json.dumps({"ms": (time.perf_counter() - start) / calls * 1e3}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=80)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        worker(a.hidden, a.vocab, a.length, a.beam)
        return
    procs = []
    for tree in (a.before, a.after):
        env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, __file__, "x", "x", "--worker", f"--hidden={a.hidden}",
               f"--vocab={a.vocab}", f"--length={a.length}", f"--beam={a.beam}"]
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True))
    tokens = [json.loads(p.stdout.readline())["tokens"] for p in procs]  # type: ignore[union-attr]
    times: list[list[float]] = [[], []]
    for _ in range(a.repeats):
        for k, p in enumerate(procs):
            p.stdin.write(f"{a.calls}\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            times[k].append(json.loads(p.stdout.readline())["ms"])  # type: ignore[union-attr]
    for p in procs:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    ratios = [b / f for b, f in zip(times[0], times[1], strict=True)]
    print(json.dumps({
        "hidden": a.hidden, "vocab": a.vocab, "length": a.length, "beam": a.beam,
        "same_tokens": tokens[0] == tokens[1], "tokens": len(tokens[1][0]),
        "before_ms": statistics.median(times[0]), "after_ms": statistics.median(times[1]),
        "speedup": statistics.median(ratios),
    }))


if __name__ == "__main__":
    main()
