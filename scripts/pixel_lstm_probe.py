"""Learning-curve probe of the pixel-by-pixel LSTM baseline (MNIST-5k), one thread.

Builds the model, batches and loss through ``task mnist-5k`` (the experiment's own code) and
trains it as the trainer does (Adam or RMSprop, gradient norm clipped), so that one
initialisation or sequence length can be compared with another at small cost:

    OMP_NUM_THREADS=1 .venv/bin/python scripts/pixel_lstm_probe.py --init chrono --steps 300

``--init``: ``fb3`` (forget gates 3 higher, the recipe until 2026-12-03), ``fb3i`` (forget
gates 3 higher and input gates 3 lower: the biases ``task.forget_bias=3
task.couple_gates=true`` gives), ``chrono`` (Tallec & Ollivier 2018: forget bias
log U(1, T - 1), input bias its negative), ``default`` (torch's). ``--rows``: 28 steps of a
row each instead of 784 pixels; ``--pool 2``: 14x14 images (196 steps). Prints one line per
evaluation: step, seconds, training loss, gradient norm before clipping, validation loss and
accuracy (the whole validation split).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from ctrlrnn.tasks import task_class


def _init(rnn: torch.nn.LSTM, kind: str, steps: int) -> None:
    hidden = rnn.hidden_size
    with torch.no_grad():
        if kind in ("fb3", "fb3i"):
            rnn.bias_ih_l0[hidden : 2 * hidden] += 3.0
        if kind == "fb3i":
            rnn.bias_ih_l0[:hidden] -= 3.0
        if kind == "chrono":
            forget = torch.log(torch.empty(hidden).uniform_(1.0, max(steps - 1, 2)))
            rnn.bias_ih_l0[hidden : 2 * hidden] = forget
            rnn.bias_hh_l0[hidden : 2 * hidden] = 0.0
            rnn.bias_ih_l0[:hidden] = -forget
            rnn.bias_hh_l0[:hidden] = 0.0


def _shape(pixels: torch.Tensor, rows: bool, pool: int) -> torch.Tensor:
    images = pixels.view(-1, 1, 28, 28)
    if pool > 1:
        images = F.avg_pool2d(images, pool)
    side = images.shape[-1]
    return images.view(-1, side, side) if rows else images.view(-1, side * side, 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--init", default="fb3", choices=("default", "fb3", "fb3i", "chrono"))
    p.add_argument("--optimizer", default="adam", choices=("adam", "rmsprop"))
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--rows", action="store_true")
    p.add_argument("--pool", type=int, default=1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    cls = task_class("mnist-5k")
    task = cls({k: v for k, (_, v) in cls.options.items()}, args.seed)
    task.setup()
    side = 28 // args.pool
    width, steps = (side, side) if args.rows else (1, side * side)
    torch.manual_seed(args.seed)
    model = task.build_model("lstm", {"hidden_size": args.hidden, "num_layers": 1,
                                      "dropout": 0.0, "bidirectional": False})
    if width != 1:
        model = type(model)(10, encoder="lstm", encoder_args={"hidden_size": args.hidden},
                            input_size=width)
    _init(model.encoder.rnn, args.init, steps)
    optim = (torch.optim.Adam(model.parameters(), lr=args.lr) if args.optimizer == "adam"
             else torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.9, eps=1e-8))
    valid = task._batch("valid", torch.arange(len(task.data["valid"])))
    vx, vy = _shape(valid["pixels"], args.rows, args.pool), valid["labels"]
    start, step, epoch = time.time(), 0, 0
    print(f"# {vars(args)} steps/seq={steps} width={width}", flush=True)
    while step < args.steps:
        for batch in task.train_batches(epoch, 64):
            x = _shape(batch["pixels"], args.rows, args.pool)
            loss = F.cross_entropy(model(x), batch["labels"])
            optim.zero_grad()
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                        args.clip or math.inf))
            optim.step()
            step += 1
            if step % args.eval_every == 0 or step == args.steps:
                with torch.no_grad():
                    logits = torch.cat([model(vx[k : k + 250]) for k in range(0, len(vx), 250)])
                vloss = float(F.cross_entropy(logits, vy))
                acc = float((logits.argmax(-1) == vy).float().mean())
                print(f"step {step} t={time.time() - start:.0f}s train_loss {loss.item():.4f} "
                      f"grad_norm {norm:.3g} valid_loss {vloss:.4f} valid_acc {acc:.3f}",
                      flush=True)
            if step >= args.steps:
                break
        epoch += 1


if __name__ == "__main__":
    main()
