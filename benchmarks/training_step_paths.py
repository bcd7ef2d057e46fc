"""Whole training steps of an experiment's arm on two paths of one of its parts, timed in
alternation in one process:
``python benchmarks/training_step_paths.py [--repeats 5] [--steps 10] [--threads 1]``.

Cases:

* ``bahdanau-step``: the tree-traversal BiLSTM (``metagross-tree5``), its Bahdanau decoder
  stepping through ``nn.LSTM`` on a sequence of one against ``torch.lstm_cell``
  (:mod:`ctrlrnn.models.torch_rnn_step`);
* ``position-encoder``: the dialog models (``carnn-dialog``'s LSTM and nCARNN arms), each
  utterance and candidate response encoded with every position weight ``l_{kj}`` written out
  against two weighted sums over positions (:mod:`ctrlrnn.nn.position_encoder`);
* ``rcrn-controllers-*``: the RCRN arms of the sentence tasks (``rcrn-entailment``,
  ``rcrn-sst5``, ``rcrn-mr``: varied lengths), ``controllers="auto"`` choosing by the rule
  measured on equal lengths (torch's packed LSTMs here) against the rule that sends varied
  lengths in training to the fused engine (:func:`ctrlrnn.nn.rcrn.fused_controllers_faster`);
* ``full-length-pixels``: the pixel classifier's LSTM (``metagross-fashion``; 784 steps of
  one pixel), trained over sequences of one length on the fused cells by
  :func:`ctrlrnn.models.torch_rnn_lengths.fused_training_faster`, against the module itself.

The model, optimizer and batches are the experiment's full-mode ones (its training set cut to
640 examples and 64 of each other split: their sizes change no shape). A round runs
``--steps`` whole optimizer steps on each path in turn, so a load on the machine slows both
alike; each path's figure is its median step time over ``--repeats`` rounds, the speed-up the
median of the rounds' ratios. The two paths' losses on one batch are checked equal first.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import torch
from torch import Tensor

from ctrlrnn.models import seq2seq, torch_rnn_lengths
from ctrlrnn.models.torch_rnn_step import lstm_step
from ctrlrnn.nn import position_encoder, rcrn
from ctrlrnn.reproduce import experiments
from ctrlrnn.reproduce.runner import config_for
from ctrlrnn.train.optim import build_optimizer
from ctrlrnn.train.trainer import training_step


def _module_step(rnn, x, state):
    """The decoder's step as ``nn.LSTM`` runs it on a sequence of one."""
    out, new = rnn(x.unsqueeze(1), state)
    return out[:, 0], new


@contextlib.contextmanager
def _decoder_step(new: bool) -> Iterator[None]:
    """The Bahdanau decoder steps through ``torch.lstm_cell`` (``new``), else the module."""
    found = seq2seq.lstm_step
    seq2seq.lstm_step = lstm_step if new else _module_step
    try:
        yield
    finally:
        seq2seq.lstm_step = found


def _written_out(self, embeddings: Tensor, lengths: Tensor | None = None) -> Tensor:
    """``sum_j l_j * x_j`` with every weight ``l_{kj}`` written out."""
    max_len, dim = embeddings.shape[-2:]
    weights = position_encoder.position_weights(max_len if lengths is None else lengths, dim,
                                                max_len, like=embeddings)
    return (weights * embeddings).sum(-2)


@contextlib.contextmanager
def _position_encoder(new: bool) -> Iterator[None]:
    """The Position Encoder as two weighted sums (``new``), else with its weights written out."""
    found = position_encoder.PositionEncoder.forward
    if not new:
        position_encoder.PositionEncoder.forward = _written_out  # type: ignore[method-assign]
    try:
        yield
    finally:
        position_encoder.PositionEncoder.forward = found  # type: ignore[method-assign]


@contextlib.contextmanager
def _rcrn_rule(new: bool) -> Iterator[None]:
    """``controllers="auto"`` with the varied-lengths rule (``new``), else without it."""
    found = rcrn.fused_controllers_faster
    if not new:
        rcrn.fused_controllers_faster = (  # type: ignore[assignment]
            lambda hidden, batch, training, threads, varied_lengths=False:
            found(hidden, batch, training, threads))
    try:
        yield
    finally:
        rcrn.fused_controllers_faster = found  # type: ignore[assignment]


def _full_length(new: bool) -> contextlib.AbstractContextManager:
    """Full-length ``nn.LSTM`` training on the fused cells by the rule (``new``), else the
    module itself."""
    if new:
        return contextlib.nullcontext()
    return mock.patch.object(torch_rnn_lengths, "fused_training_faster", lambda rnn, x: False)


#: name -> (experiment, arms, the context manager choosing the old or the new path)
CASES: dict[str, tuple[str, tuple[str, ...], Callable[[bool], contextlib.AbstractContextManager]]]
CASES = {
    "bahdanau-step": ("metagross-tree5", ("BiLSTM",), _decoder_step),
    "position-encoder": ("carnn-dialog", ("LSTM (no context)", "nCARNN"), _position_encoder),
    "rcrn-controllers-entailment": ("rcrn-entailment", ("RCRN",), _rcrn_rule),
    "rcrn-controllers-sst5": ("rcrn-sst5", ("RCRN",), _rcrn_rule),
    "rcrn-controllers-mr": ("rcrn-mr", ("RCRN",), _rcrn_rule),
    "full-length-pixels": ("metagross-fashion", ("LSTM",), _full_length),
}


def build(exp_id: str, label: str, examples: int = 640):
    """The arm as its full-mode run builds it: configuration, task, model, parameters and
    optimizer."""
    exp = next(e for e in experiments.EXPERIMENTS if e.id == exp_id)
    arm = next(a for a in exp.arms if a.label == label)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, cls = config_for(exp, arm, 0, "full", Path(tmp))
    sizes = {key: n for key, n in (("train_size", examples), ("valid_size", 64),
                                   ("test_size", 64)) if key in cls.options}
    task = cls({**cfg.task_args, **sizes}, 0)
    task.setup()
    model = task.build_model(cfg.model, cfg.model_args).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(cfg.optimizer, params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                          momentum=cfg.momentum)
    return cfg, task, model, params, opt


def run(case: str, label: str, repeats: int, steps: int) -> dict:
    exp_id, _labels, path = CASES[case]
    cfg, task, model, params, opt = build(exp_id, label)
    batches = task.train_batches(0, cfg.batch_size)[:steps]
    # without dropout, and with autograd recording: the rules that choose a path in training
    # only (the RCRN controllers', the full-length LSTM's) must take their new path here
    model.eval()
    losses = []
    for new in (False, True):
        with path(new):
            losses.append(float(task.loss(model, batches[0]).detach()))
    assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0]), losses
    model.train()

    def timed(new: bool) -> float:
        with path(new):
            start = time.perf_counter()
            for b in batches:
                training_step(task, model, opt, params, b, cfg.clip_norm)
            return (time.perf_counter() - start) / len(batches)

    timed(False), timed(True)  # warm-up: every batch's shapes seen once
    rounds = [(timed(False), timed(True)) for _ in range(repeats)]
    return {"case": case, "experiment": exp_id, "arm": label, "steps": len(batches),
            "old_ms": 1e3 * statistics.median(o for o, _ in rounds),
            "new_ms": 1e3 * statistics.median(n for _, n in rounds),
            "speedup": statistics.median(o / n for o, n in rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=sorted(CASES), help="one case")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [run(case, label, args.repeats, args.steps)
            for case, (_exp, labels, _path) in CASES.items()
            if args.only in (None, case) for label in labels]
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{args.threads} thread(s), {args.steps} steps a round, median of {args.repeats} "
          "rounds")
    print("| case | experiment, arm | old path (ms a step) | new path (ms a step) | speed-up |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['experiment']}, {r['arm']} | {r['old_ms']:.1f} "
              f"| {r['new_ms']:.1f} | {r['speedup']:.2f}x |")


if __name__ == "__main__":
    main()
