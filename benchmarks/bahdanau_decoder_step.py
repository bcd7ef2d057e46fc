"""A training step of the tree-traversal BiLSTM (``metagross-tree5``'s first arm), its
Bahdanau decoder stepping through ``nn.LSTM`` against ``torch.lstm_cell``
(:mod:`ctrlrnn.models.torch_rnn_step`), timed in alternation in one process:
``python benchmarks/bahdanau_decoder_step.py [--repeats 5] [--steps 10] [--threads 1]``.

The model, optimizer and batches are the experiment's full-mode ones (on 640 training trees
and 64 of each other split: their sizes change no shape). A round runs ``--steps`` whole
optimizer steps on each path in turn, so a load on the machine slows both alike; each path's
figure is its median step time over ``--repeats`` rounds, the speed-up the median of the
rounds' ratios. The two paths' losses on one batch are checked equal first.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from ctrlrnn.models import seq2seq
from ctrlrnn.models.torch_rnn_step import lstm_step
from ctrlrnn.reproduce import experiments
from ctrlrnn.reproduce.runner import config_for
from ctrlrnn.train.optim import build_optimizer
from ctrlrnn.train.trainer import training_step

EXPERIMENT = "metagross-tree5"


def _module_step(rnn, x, state):
    """The step as ``nn.LSTM`` runs it on a sequence of one."""
    out, new = rnn(x.unsqueeze(1), state)
    return out[:, 0], new


@contextlib.contextmanager
def _path(cell: bool) -> Iterator[None]:
    """The decoder steps through ``torch.lstm_cell`` (``cell``), else through the module."""
    found = seq2seq.lstm_step
    seq2seq.lstm_step = lstm_step if cell else _module_step
    try:
        yield
    finally:
        seq2seq.lstm_step = found


def build(trees: int = 640):
    """The experiment's first arm as its full-mode run builds it: task, model, optimizer."""
    exp = next(e for e in experiments.EXPERIMENTS if e.id == EXPERIMENT)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, cls = config_for(exp, exp.arms[0], 0, "full", Path(tmp))
    task = cls({**cfg.task_args, "train_size": trees, "valid_size": 64, "test_size": 64}, 0)
    task.setup()
    model = task.build_model(cfg.model, cfg.model_args).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(cfg.optimizer, params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                          momentum=cfg.momentum)
    return cfg, task, model, params, opt


def run(repeats: int, steps: int) -> dict:
    cfg, task, model, params, opt = build()
    batches = task.train_batches(0, cfg.batch_size)[:steps]
    model.eval()
    with torch.no_grad():
        losses = []
        for cell in (False, True):
            with _path(cell):
                losses.append(float(task.loss(model, batches[0])))
    assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0]), losses
    model.train()

    def timed(cell: bool) -> float:
        with _path(cell):
            start = time.perf_counter()
            for b in batches:
                training_step(task, model, opt, params, b, cfg.clip_norm)
            return (time.perf_counter() - start) / len(batches)

    timed(False), timed(True)  # warm-up: every batch's shapes seen once
    rounds = [(timed(False), timed(True)) for _ in range(repeats)]
    return {"module_ms": 1e3 * statistics.median(m for m, _ in rounds),
            "cell_ms": 1e3 * statistics.median(c for _, c in rounds),
            "speedup": statistics.median(m / c for m, c in rounds), "steps": len(batches)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    r = run(args.repeats, args.steps)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), {r['steps']} steps a round, median of {args.repeats} "
          "rounds")
    print(f"{EXPERIMENT} BiLSTM training step: nn.LSTM step {r['module_ms']:.1f} ms, "
          f"lstm_cell {r['cell_ms']:.1f} ms, {r['speedup']:.2f}x")


if __name__ == "__main__":
    main()
