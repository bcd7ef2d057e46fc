"""Probe of the pixel-by-pixel METAGROSS arm (MNIST-5k): how much gradient reaches the digit at
initialisation, and whether a short training run leaves chance, as ``task.output_bias`` moves.

Builds the models through ``task mnist-5k`` under the pixel recipe (``task.forget_bias=3``,
``task.couple_gates=true``: what every arm of the experiment trains under) and, for METAGROSS,
the given ``task.output_bias``. One thread:

    OMP_NUM_THREADS=1 .venv/bin/python scripts/pixel_metagross_probe.py gradient
    OMP_NUM_THREADS=1 .venv/bin/python scripts/pixel_metagross_probe.py train \\
        --output-bias 5 --lr 0.003 --steps 310

``gradient``: for the LSTM and for METAGROSS at each ``--biases`` value, the mean absolute
gradient of the loss at each image's last inked pixel and at the last step (3 draws of 64
training images, each with its own initialisation seed). ``train``: METAGROSS (depth 2, width
128, linear base) trained with Adam and gradients clipped to norm 1, batch 64; one line per
epoch (62 steps): the training loss, the gradient norm before clipping, and the validation loss
and accuracy on the whole validation split.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.nn.functional as F

from ctrlrnn.tasks import task_class

RECIPE = {"forget_bias": 3.0, "couple_gates": True}
METAGROSS = {"hidden_size": 128, "depth": 2}
PIXELS = 784


def _task(output_bias: float, seed: int = 0) -> Any:
    cls = task_class("mnist-5k")
    opts = {k: v for k, (_, v) in cls.options.items()}
    task = cls({**opts, **RECIPE, "output_bias": output_bias}, seed)
    task.setup()
    return task


def gradient(biases: list[float], draws: int = 3) -> None:
    """Print the mean gradient at the last inked pixel and at the last step, per model."""
    arms = [("LSTM", "lstm", {"hidden_size": 128}, 0.0)]
    arms += [(f"METAGROSS, output bias +{b:g}", "metagross", METAGROSS, b) for b in biases]
    for label, encoder, args, bias in arms:
        task = _task(bias)
        at_ink, at_end = [], []
        for draw in range(draws):
            torch.manual_seed(draw)
            model = task.build_model(encoder, args)
            batch = task._batch("train", torch.arange(draw * 64, (draw + 1) * 64))
            pixels = batch["pixels"].view(-1, PIXELS)
            x = pixels.view(-1, PIXELS, 1).clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(F.cross_entropy(model(x), batch["labels"]), x)
            grad = grad.abs().squeeze(-1)
            last_ink = ((pixels > 0).float() * torch.arange(PIXELS)).argmax(1)
            at_ink.append(float(grad[torch.arange(len(grad)), last_ink].mean()))
            at_end.append(float(grad[:, -1].mean()))
        print(f"{label}: at the last inked pixel {sum(at_ink) / draws:.2g}, "
              f"at the last step {sum(at_end) / draws:.2g}", flush=True)


def train(output_bias: float, lr: float, steps: int, seed: int) -> None:
    """Train METAGROSS ``steps`` steps; print one line an epoch."""
    task = _task(output_bias, seed)
    torch.manual_seed(seed)
    model = task.build_model("metagross", METAGROSS)
    optim = torch.optim.Adam(model.parameters(), lr=lr)
    valid = task._batch("valid", torch.arange(len(task.data["valid"])))
    vx, vy = valid["pixels"].view(-1, PIXELS, 1), valid["labels"]
    start, step, epoch = time.time(), 0, 0
    while step < steps:
        for batch in task.train_batches(epoch, 64):
            loss = F.cross_entropy(model(batch["pixels"].view(-1, PIXELS, 1)), batch["labels"])
            optim.zero_grad()
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            optim.step()
            step += 1
            if step % 62 == 0 or step == steps:
                model.eval()
                with torch.no_grad():
                    logits = torch.cat([model(vx[k : k + 250]) for k in range(0, len(vx), 250)])
                model.train()
                accuracy = float((logits.argmax(-1) == vy).float().mean())
                print(f"step {step} t={time.time() - start:.0f}s train_loss {loss.item():.4f} "
                      f"grad_norm {norm:.3g} valid_loss {float(F.cross_entropy(logits, vy)):.4f} "
                      f"valid_acc {accuracy:.3f}", flush=True)
            if step >= steps:
                break
        epoch += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("measure", choices=("gradient", "train"))
    p.add_argument("--biases", type=float, nargs="+", default=[0.0, 3.0, 5.0, 8.0],
                   help="gradient: METAGROSS's output-gate offsets to compare")
    p.add_argument("--output-bias", type=float, default=5.0, help="train: the offset")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=310)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.measure == "gradient":
        gradient(args.biases)
    else:
        train(args.output_bias, args.lr, args.steps, args.seed)


if __name__ == "__main__":
    main()
