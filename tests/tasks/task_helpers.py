"""Tiny data sets written to tmp dirs, and a helper that trains a task end to end through the
real :class:`~ctrlrnn.train.trainer.Trainer` (the path of ``ctrlrnn train``)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ctrlrnn.models.encoders import encoder_options
from ctrlrnn.tasks import task_class
from ctrlrnn.train.cli import seed_everything
from ctrlrnn.train.config import check_options, load_config
from ctrlrnn.train.trainer import Trainer


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


#: a third architecture for the end-to-end runs where it has landed
EXTRA_ENCODER = "caslstm" if _importable("ctrlrnn.nn.cas_lstm") else "metagross"


def train_task(
    name: str, model: str, out: Path, task: dict[str, Any], model_args: dict[str, Any],
    **config: Any,
) -> dict[str, Any]:
    """Validate the configuration as ``ctrlrnn train`` does, train, and return the result, the
    training losses, the task and the model."""
    cls = task_class(name)
    overrides: dict[str, Any] = {"task": name, "model": model, "out": str(out),
                                 "log_every": 1, "checkpoint_every": 1000, **config}
    overrides.update({f"task.{k}": v for k, v in task.items()})
    overrides.update({f"model.{k}": v for k, v in model_args.items()})
    cfg = load_config(None, overrides, base=dict(cls.defaults))
    cfg.task_args = check_options("task", name, cfg.task_args, cls.options)
    cfg.model_args = encoder_options(model, cfg.model_args)
    seed_everything(cfg.seed)
    t = cls(cfg.task_args, cfg.seed)
    t.setup()
    m = t.build_model(model, cfg.model_args)
    routed = check_device_routing(t, m)
    result = Trainer(cfg, t, m, out, show_progress=False).fit()
    assert routed["forwards"] > 0
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x]
    losses = [r["loss"] for r in rows if r.get("split") == "train"]
    return {"result": result, "losses": losses, "task": t, "model": m, "rows": rows}


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def check_device_routing(task: Any, model: torch.nn.Module) -> dict[str, int]:
    """Make every call of ``model`` check that its input came through ``task.to_device`` (the
    trainer's training batches and the task's own evaluation batches), so a batch that would
    stay on the CPU while the model is on a GPU fails here, on a machine without one."""
    moved: set[int] = set()
    original = task.to_device
    count = {"forwards": 0}

    def to_device(batch: Any) -> Any:
        out = original(batch)
        moved.update(id(t) for t in _tensors(out))
        return out

    def check(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        assert first is None or id(first) in moved, (
            f"{type(task).__name__}: the model read a batch that did not go through "
            "Task.to_device (it would stay on the CPU with the model on a GPU)")
        count["forwards"] += 1

    task.to_device = to_device
    model.register_forward_pre_hook(check, with_kwargs=True)
    return count


def assert_trained(run: dict[str, Any], out: Path, *, falls: bool = True) -> None:
    """The run wrote its files, its metrics are finite, and (``falls``) the training loss of
    the last steps is below that of the first steps."""
    for name in ("checkpoint.safetensors", "best.safetensors", "log.jsonl", "log.csv"):
        assert (out / name).is_file(), name
    result = run["result"]
    metric = result["metric"]
    assert math.isfinite(result["valid"][metric]) and math.isfinite(result["test"][metric])
    losses = run["losses"]
    assert all(math.isfinite(x) for x in losses)
    if falls:
        k = max(1, len(losses) // 4)
        first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
        assert last < first, (first, last, losses)


# ---------------------------------------------------------------------------- data writers
def write_labelled_dir(root: Path, classes: int, sizes: dict[str, int], seed: int = 0) -> Path:
    """``{split}.tsv`` of ``label<TAB>tokens``: the label is given by a cue word ``cueK``
    among filler words (learnable in a few steps)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    fillers = [f"w{i}" for i in range(12)]
    for split, n in sizes.items():
        lines = []
        for _ in range(n):
            label = rng.randrange(classes)
            words = rng.choices(fillers, k=rng.randint(2, 7))
            words.insert(rng.randint(0, len(words)), f"cue{label}")
            lines.append(f"{label}\t{' '.join(words)}\n")
        (root / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return root


def write_text_dir(root: Path, sentences: dict[str, int], seed: int = 0) -> Path:
    """``{split}.txt``, one sentence per line, drawn from a tiny grammar (PTB/Brown format)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    subjects, verbs, objects = ["the cat", "a dog", "the bird"], ["sees", "eats"], ["fish", "seed"]
    for split, n in sentences.items():
        lines = [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} ."
                 for _ in range(n)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def write_pixel_dir(root: Path, sizes: dict[str, int], side: int = 4, seed: int = 0) -> Path:
    """``{split}_images.npy`` / ``_labels.npy`` of ``side x side`` images; class k lights the
    pixel k (plus noise)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        labels = rng.integers(0, 10, n).astype(np.int64)
        images = rng.integers(0, 60, (n, side * side)).astype(np.uint8)
        images[np.arange(n), labels] = 255
        np.save(root / f"{split}_images.npy", images)
        np.save(root / f"{split}_labels.npy", labels)
    return root


def write_roll_dir(root: Path, pieces: dict[str, int], seed: int = 0) -> Path:
    """``{split}_rolls.npy`` / ``_offsets.npy`` of pieces cycling through three chords."""
    rng = np.random.default_rng(seed)
    chords = [[39, 43, 46], [41, 44, 48], [43, 46, 50]]
    root.mkdir(parents=True, exist_ok=True)
    for split, n in pieces.items():
        rolls = []
        for _ in range(n):
            length = int(rng.integers(6, 12))
            start = int(rng.integers(0, 3))
            roll = np.zeros((length, 88), np.uint8)
            for t in range(length):
                roll[t, chords[(start + t) % 3]] = 1
            rolls.append(roll)
        offsets = np.cumsum([0] + [len(r) for r in rolls]).astype(np.int64)
        np.save(root / f"{split}_rolls.npy", np.concatenate(rolls))
        np.save(root / f"{split}_offsets.npy", offsets)
    return root


def write_qa_files(root: Path, fmt: str, questions: dict[str, int], seed: int = 0) -> Path:
    """WikiQA or TrecQA files: question ``q`` mentions topic ``tK``; its correct answer
    mentions ``tK`` too, the wrong ones other topics."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = {"train": "train", "valid": "dev", "test": "test"}
    header = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n"
    for split, n in questions.items():
        lines = []
        for q in range(n):
            topic = rng.randrange(8)
            question = f"what about t{topic} {rng.choice(['then', 'now'])} ?"
            cands = [(f"it is t{topic} indeed", 1)] + [
                (f"it is t{(topic + d) % 8} indeed", 0) for d in rng.sample(range(1, 8), 3)
            ]
            rng.shuffle(cands)
            for s, (answer, label) in enumerate(cands):
                if fmt == "wikiqa":
                    lines.append(f"Q{split}{q}\t{question}\tD{q}\ttitle\tD{q}-{s}\t{answer}\t"
                                 f"{label}\n")
                else:
                    lines.append(f"{question} #{q}\t{answer}\t{label}\n")
        name = f"WikiQA-{names[split]}.tsv" if fmt == "wikiqa" else f"{names[split]}.tsv"
        text = (header if fmt == "wikiqa" else "") + "".join(lines)
        (root / name).write_text(text, encoding="utf-8")
    return root
