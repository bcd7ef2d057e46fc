"""What a resume checks and says: the stored run is the one asked for
(:func:`check_same_run`), and the line that tells where it continues (:func:`resume_line`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ctrlrnn.train.checkpoint import Checkpoint, WeightsMismatch
from ctrlrnn.train.config import ConfigError, TrainConfig
from ctrlrnn.train.config_changes import config_differences, override_advice, show_value

__all__ = ["check_same_run", "resume_line"]


def check_same_run(ckpt: Checkpoint, cfg: TrainConfig, accept: frozenset[str],
                   model: nn.Module, out: Path) -> None:
    """Refuse to resume with a configuration other than the stored one, but for the keys
    meant to change and those the user accepted (``--override``). The refusal suggests
    the overrides only where the checkpoint's weights fit the model this configuration
    builds and each key is one the requested model and task accept."""
    requested = cfg.to_dict()
    differ = config_differences(ckpt.config, requested, accept)
    if not differ:
        return
    changes = ", ".join(f"{k} {show_value(a)} -> {show_value(b)}"
                        for k, (a, b) in differ.items())
    head = f"resume: the run in {out} was started with another configuration ({changes})"
    try:  # the weights are loaded again, with the optimizer's state, once the run is the same
        ckpt.load_model_state(model)
    except WeightsMismatch as exc:
        raise ConfigError(
            f"{head}; its checkpoint {ckpt.path} does not fit the model these settings "
            f"build ({exc.why}), so it cannot continue with them: resume it with its own "
            "settings, or train into a new --out") from exc
    advice = override_advice(differ, requested)
    if advice is None:
        raise ConfigError(f"{head}; it cannot continue with these settings: resume it with "
                          "its own, or train into a new --out")
    raise ConfigError(f"{head}; to continue it with the new values add {advice}, or train "
                      "into a new --out")


def resume_line(progress: dict[str, Any], cfg: TrainConfig, out: Path, extend: bool) -> str:
    """The line a resume prints: the finished run with nothing left to train, or the step it
    continues from and the limit it trains to."""
    step = int(progress["step"])
    if progress.get("done"):
        why = {"patience": "by early stopping"}.get(str(progress.get("stop_reason")), "")
        limit = (f"max_steps {cfg.max_steps}" if cfg.max_steps and step >= cfg.max_steps
                 else f"epochs {cfg.epochs}")
        return (f"resume: {out} finished at step {step}"
                f"{' ' + why if why else ''}; nothing left to train under {limit} "
                "(raise --max-steps or --epochs to continue it)")
    target = f"step {cfg.max_steps}" if cfg.max_steps else f"epoch {cfg.epochs}"
    verb = "continuing the finished run" if extend else "resuming"
    return (f"resume: {verb} {out} from step {step} (epoch {int(progress['epoch']) + 1}), "
            f"to {target}")
