"""The training loop: optimizer steps, evaluation, early stopping, checkpoints, resume.

A run writes into its output directory:

* ``checkpoint.safetensors`` — the latest state (model, optimizer, RNG, progress), written
  atomically every ``checkpoint_every`` steps, at each evaluation and at the end;
* ``best.safetensors`` — the state with the best validation metric so far (the task's
  metric, or the one the ``monitor`` key names);
* ``log.jsonl`` / ``log.csv`` — training and evaluation rows;
* ``report.md`` and ``curves.png`` — written at the end (see :mod:`ctrlrnn.train.report`).

Resuming (``resume=True``) restores the latest checkpoint, drops log rows after its step and
continues with the same batches (the order is a function of seed and epoch) and the same RNG
stream, so a killed run ends with the same weights and metrics as an uninterrupted one. A
finished run resumed with a larger ``max_steps`` (or more ``epochs``) continues to the new
limit; one stopped by early stopping stays finished.

A run directory with a log but no checkpoint (a run stopped before its first checkpoint) starts
again at step 0 with its log emptied, so the log never holds a step twice.

**Stop signals.** Ctrl-C (SIGINT), SIGTERM (container runtimes, Slurm preemption, systemd,
``timeout``) and SIGHUP during :meth:`Trainer.fit` finish the optimizer step under way (and an
evaluation or checkpoint write under way), write the checkpoint and raise
:class:`TrainingInterrupted` carrying the signal; under ``torchrun`` a signal to any process
stops every process at the same step. A second signal stops at once
(:class:`~ctrlrnn.interrupts.StopSignal`; the last checkpoint written is kept whole).
``ctrlrnn train`` then exits with ``128 + the signal's number`` (130, 143, 129), the status
shells report for a process the signal ended (:mod:`ctrlrnn.interrupts`).

**Runs that cannot take a step.** A training set smaller than one batch (partial batches are
dropped) is refused before anything is trained or written (:class:`ConfigError` naming
``batch_size``).

**Divergence.** Every step's training loss is checked, and the parameters before every
evaluation and checkpoint: at the first non-finite value the run stops (``stop_reason``
``"diverged"``) without writing a checkpoint, so ``checkpoint.safetensors`` keeps the last
finite state and ``best.safetensors`` only ever holds finite parameters. The result then
reports the best checkpoint's metrics (none when there is no best checkpoint yet) and what
went wrong (``diverged``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ctrlrnn.interrupts import StopSignal
from ctrlrnn.metric_conventions import higher_is_better, selection_key
from ctrlrnn.progress import TrainingProgressBar as _ProgressBar
from ctrlrnn.tasks.base import Task
from ctrlrnn.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_newest_intact,
    previous_path,
    remove_stale_temporaries,
    save_checkpoint,
)
from ctrlrnn.train.config import ConfigError, SameInEveryProcess, TrainConfig
from ctrlrnn.train.config_changes import (
    IMPLIED_WHEN_ABSENT,
    RESUMABLE_CHANGES,
    config_differences,
)
from ctrlrnn.train.distributed import (
    DistContext,
    barrier,
    max_over_processes,
    mean_over_processes,
)
from ctrlrnn.train.logs import RunLog
from ctrlrnn.train.optim import build_optimizer, epoch_decay_factor
from ctrlrnn.train.precision import MixedPrecision
from ctrlrnn.train.resume_checks import check_same_run, resume_line
from ctrlrnn.train.step import StepClock, training_step
from ctrlrnn.train.stops import Diverged as _Diverged
from ctrlrnn.train.stops import InterruptFlag as _InterruptFlag
from ctrlrnn.train.stops import TrainingInterrupted

__all__ = ["BEST", "IMPLIED_WHEN_ABSENT", "LATEST", "RESUMABLE_CHANGES", "Trainer",
           "TrainingInterrupted", "config_differences", "training_step"]

LATEST = "checkpoint.safetensors"
BEST = "best.safetensors"


class Trainer:
    """Runs one training job described by a :class:`TrainConfig`."""

    def __init__(
        self,
        cfg: TrainConfig,
        task: Task,
        model: nn.Module,
        out_dir: Path,
        ctx: DistContext | None = None,
        *,
        show_progress: bool = True,
        accept: frozenset[str] = frozenset(),
    ) -> None:
        self.cfg = cfg
        self.accept = accept
        self.task = task
        self.model = model
        self.out = Path(out_dir)
        self.ctx = ctx or DistContext()
        self.show_progress = show_progress and self.ctx.is_main
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(
            cfg.optimizer,
            self.params,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            momentum=cfg.momentum,
        )
        self.log = RunLog(self.out) if self.ctx.is_main else None
        self.precision = MixedPrecision(cfg.precision, self.ctx.device)
        self.precision.check_model(model)
        #: the validation metric that drives early stopping and the best checkpoint
        self.monitor = cfg.monitor or task.metric
        self.monitor_higher_is_better = higher_is_better(self.monitor, task.metric,
                                                         task.higher_is_better)
        self._per_epoch: int | None = None
        self.progress: dict[str, Any] = {
            "step": 0,
            "epoch": 0,
            "batch": 0,
            "best": None,
            "best_step": None,
            "best_loss": None,
            "bad_evals": 0,
            "done": False,
            "train_seconds": 0.0,
            "last_eval_step": -1,
            "stop_reason": None,
            "cpu_seconds": 0.0,
            "load_start": None,
        }
        self.last_metrics: dict[str, float] = {}
        #: the step of the checkpoint on disk under LATEST (None: none written or restored)
        self.checkpoint_step: int | None = None
        #: the stop-signal flag while :meth:`fit` runs
        self._interrupt: _InterruptFlag | None = None

    # ------------------------------------------------------------------ state
    def _save(self, name: str = LATEST) -> None:
        self._check_parameters()
        scaler = self.precision.state()
        if scaler is not None:
            self.progress["grad_scaler"] = scaler
        if self.ctx.is_main:
            save_checkpoint(
                self.out / name,
                self.model,
                self.optimizer,
                progress=self.progress,
                config=self.cfg.to_dict(),
                task_state=self.task.checkpoint_state() if name == LATEST else None,
                keep_previous=name == LATEST,
            )
            if self.log is not None:
                self.log.export_csv()
        if name == LATEST:
            self.checkpoint_step = int(self.progress["step"])
        barrier(self.ctx)

    def _check_parameters(self) -> None:
        """Raise :class:`_Diverged` when a parameter holds a NaN or an infinity (nothing
        evaluates or stores such a model)."""
        for name, p in self.model.named_parameters():
            if not bool(torch.isfinite(p.detach()).all()):
                raise _Diverged(int(self.progress["step"]),
                                f"the parameter {name} is not finite after step "
                                f"{int(self.progress['step'])}")

    def _restore(self) -> bool:
        path = self.out / LATEST
        if not path.exists() and not previous_path(path).exists():
            return False
        try:
            ckpt, skipped = load_newest_intact(path)
        except (ValueError, FileNotFoundError) as exc:
            raise ConfigError(f"resume: {exc}") from exc
        for reason in skipped:
            self._say(f"resume: {reason}; using {ckpt.path} (step "
                      f"{int(ckpt.progress.get('step', 0))}) instead")
        path = ckpt.path
        check_same_run(ckpt, self.cfg, self.accept, self.model, self.out)
        try:
            ckpt.restore(self.model, self.optimizer)
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if isinstance(exc, CheckpointError):
                first = exc.reason
            raise ConfigError(f"resume: the checkpoint {path} does not fit this model or "
                              f"optimizer ({first}); train into a new --out") from exc
        self.task.restore_state(*ckpt.task_state())
        self.progress.update(ckpt.progress)
        self.precision.restore(self.progress.get("grad_scaler"))
        self.checkpoint_step = int(self.progress["step"])
        extend = bool(self.progress.get("done")) and self._can_continue()
        if extend:
            self.progress["done"] = False
            self.progress["stop_reason"] = None
        if self.log is not None:
            self.log.truncate_after(int(self.progress["step"]), keep_final=not extend)
        self._say(resume_line(self.progress, self.cfg, self.out, extend))
        return True

    def _can_continue(self) -> bool:
        """Whether a finished run has steps left under this configuration's limits (a run
        stopped by early stopping has none)."""
        p, cfg = self.progress, self.cfg
        if p.get("stop_reason") == "patience" or (
            p.get("stop_reason") is None and self._should_stop_early()
        ):
            return False
        if cfg.max_steps and int(p["step"]) >= cfg.max_steps:
            return False
        return int(p["epoch"]) < cfg.epochs

    def _say(self, line: str) -> None:
        if self.ctx.is_main:
            print(line, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self) -> dict[str, float]:
        self._check_parameters()
        self.model.eval()
        with torch.no_grad():
            metrics = self.task.evaluate(self.model, "valid", self.cfg.eval_batches)
        self.model.train()
        step = int(self.progress["step"])
        self.progress["last_eval_step"] = step
        value = self._monitored(metrics)
        loss = metrics.get("loss") if self.monitor != "loss" else None
        if self._improves(value, loss):
            self.progress["best"] = value
            self.progress["best_loss"] = loss
            self.progress["best_step"] = step
            self.progress["bad_evals"] = 0
            self._save(BEST)
        else:
            self.progress["bad_evals"] += 1
        self.last_metrics = metrics
        if self.log is not None:
            self.log.write({"step": step, "epoch": self.progress["epoch"], "split": "valid",
                            **{f"valid_{k}": v for k, v in metrics.items()}})
        return metrics

    def _improves(self, value: float, loss: float | None) -> bool:
        """Whether a validation result beats the best so far in :func:`selection_key`'s
        order: a better monitored value, or an equal one with a lower validation loss
        (``loss``; None when the loss is what is monitored). Without the loss, the first
        evaluation of a run stuck at 0 exact match would stay its best checkpoint and
        patience would count from it. A run resumed from a checkpoint that kept no best loss
        takes its first tie as an improvement."""
        if not math.isfinite(value):
            return False
        best = self.progress["best"]
        higher = self.monitor_higher_is_better
        return best is None or (selection_key(value, loss, higher)
                                < selection_key(best, self.progress.get("best_loss"), higher))

    def _monitored(self, metrics: dict[str, float]) -> float:
        """The monitored metric's value in ``metrics`` (a clear error when the task has none
        of that name)."""
        if self.monitor not in metrics:
            raise ConfigError(
                f"monitor: task {self.task.name!r} reports no validation metric "
                f"{self.monitor!r}; it reports {', '.join(sorted(metrics))}")
        return float(metrics[self.monitor])

    def _check_monitor(self) -> None:
        """Before a new run trains: a monitor other than the task's metric is one its
        evaluation reports (scored on one validation batch, so a misspelt name fails at once,
        not after the first epoch)."""
        if self.monitor == self.task.metric or int(self.progress["step"]) > 0:
            return
        self.model.eval()
        with torch.no_grad():
            probe = self.task.evaluate(self.model, "valid", 1)
        self.model.train()
        self._monitored(probe)

    def _should_stop_early(self) -> bool:
        return bool(self.cfg.patience) and self.progress["bad_evals"] >= self.cfg.patience

    # ------------------------------------------------------------------ loop
    def fit(self, *, resume: bool = False) -> dict[str, Any]:
        """Train until the epochs, ``max_steps`` or early stopping end the run.

        A stop signal (Ctrl-C, SIGTERM, SIGHUP) received at any point of it stops the run at
        the next step boundary (an evaluation or a checkpoint write under way is finished
        first), with the checkpoint written: :class:`TrainingInterrupted`. Under ``torchrun``
        a signal received by any process stops every process at the same step. A second
        stop signal raises :class:`~ctrlrnn.interrupts.StopSignal` at once."""
        with _InterruptFlag() as interrupt:
            self._interrupt = interrupt
            try:
                result = self._fit(resume)
                # a signal during the test split's evaluation or the final log row: the run
                # is whole, and the command stops rather than going on to what comes next
                self._stop_if_interrupted()
                return result
            finally:
                self._interrupt = None

    def _fit(self, resume: bool) -> dict[str, Any]:
        self._open_run_directory(resume)
        if resume and self._restore() and self.progress.get("done"):
            return self._finish(already_done=True)
        self._check_monitor()
        self._stop_if_interrupted()
        bar = _ProgressBar(self._planned_steps(), self.progress["step"],
                           enabled=self.show_progress)
        clock = StepClock(self.progress)
        diverged: _Diverged | None = None
        try:
            stop = False
            while self.progress["epoch"] < self.cfg.epochs and not stop:
                stop = self._train_epoch(bar, clock)
            if not stop:
                self.progress["stop_reason"] = "epochs"
            self._check_parameters()  # before the final evaluation and checkpoint
        except _Diverged as exc:
            diverged = exc
        finally:
            bar.close()
        self.progress["done"] = True
        if diverged is not None:
            return self._finish_diverged(diverged)
        return self._finish(already_done=False)

    def _open_run_directory(self, resume: bool) -> None:
        """Before training: clear the temporaries of processes that are gone, refuse a
        directory that holds a run unless resuming, refuse an epoch of no step, and empty the
        log of a run stopped before its first checkpoint."""
        has_ckpt = (self.out / LATEST).exists() or previous_path(self.out / LATEST).exists()
        if self.ctx.is_main and self.out.is_dir():
            removed = remove_stale_temporaries(self.out)
            if removed:
                self._say(f"removed {len(removed)} temporary file(s) left in {self.out} by "
                          "processes that are gone")
        if has_ckpt and not resume:
            raise ConfigError(
                f"out: {self.out} already holds a run (checkpoint.safetensors); "
                "pass --resume to continue it or choose another --out"
            )
        self._check_steps_per_epoch()
        if not has_ckpt:
            dropped = self._drop_log_without_checkpoint()
            if resume:
                self._say(f"resume: {self.out} holds no checkpoint yet; starting at step 0"
                          + (f" (its log of {dropped} row(s) dropped)" if dropped else ""))
            elif dropped:
                self._say(f"out: {self.out} holds the log of a run stopped before its first "
                          f"checkpoint; starting again at step 0 (its {dropped} row(s) dropped)")

    def _train_epoch(self, bar: _ProgressBar, clock: StepClock) -> bool:
        """Train the rest of the current epoch (from the batch the progress names); at its
        end evaluate (without ``eval_every``) and save. Returns whether the run stops."""
        cfg = self.cfg
        epoch = int(self.progress["epoch"])
        lr = cfg.lr * epoch_decay_factor(epoch, cfg.lr_decay, cfg.lr_decay_start)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batches = self.task.train_batches(epoch, cfg.batch_size)
        self.model.train()
        stop = False
        for index in range(int(self.progress["batch"]), len(batches)):
            if self._train_step(batches[index], index, epoch, lr, bar, clock):
                stop = True
                break
        if self.progress["batch"] >= len(batches):
            self.progress["epoch"] += 1
            self.progress["batch"] = 0
            if not cfg.eval_every:
                self._evaluate()
                if self._should_stop_early():
                    stop = True
                    self.progress["stop_reason"] = "patience"
            self._save()
            if not stop:
                self._stop_if_interrupted()
        return stop

    def _train_step(self, batch: Any, index: int, epoch: int, lr: float, bar: _ProgressBar,
                    clock: StepClock) -> bool:
        """One optimizer step on batch ``index`` of the epoch, then its log row, evaluation
        and checkpoint as the configuration asks. Returns whether the run stops after it
        (early stopping or ``max_steps``; ``stop_reason`` is set)."""
        cfg = self.cfg
        batch = self.task.to_device(self.task.shard(batch, self.ctx.rank, self.ctx.world_size))
        loss = training_step(self.task, self.model, self.optimizer, self.params,
                             batch, cfg.clip_norm, self.ctx, precision=self.precision)
        loss_value = mean_over_processes(float(loss.detach()), self.ctx)
        self.progress["step"] += 1
        self.progress["batch"] = index + 1
        step = int(self.progress["step"])
        elapsed = clock.record(self.progress)
        if not math.isfinite(loss_value):
            raise _Diverged(step, f"the training loss is {loss_value} at step {step}")
        if step % cfg.log_every == 0 and self.log is not None:
            self.log.write({"step": step, "epoch": epoch, "split": "train",
                            "loss": loss_value, "lr": lr, "seconds": elapsed})
        bar.update(step, loss_value, self.last_metrics.get(self.task.metric), self.task.metric)
        stop = False
        if cfg.eval_every and step % cfg.eval_every == 0:
            self._evaluate()
            if self._should_stop_early():
                stop = True
        if step % cfg.checkpoint_every == 0 or (cfg.eval_every and step % cfg.eval_every == 0):
            self._save()
        self._stop_if_interrupted()
        if stop or (cfg.max_steps and step >= cfg.max_steps):
            self.progress["stop_reason"] = "patience" if stop else "max_steps"
            return True
        return False

    def _drop_log_without_checkpoint(self) -> int:
        """Empty the log of a run directory that holds no checkpoint (the rows of a run
        stopped before its first checkpoint, whose steps this run makes again); returns how
        many rows were dropped."""
        if self.log is None:
            return 0
        rows = len(self.log.rows())
        if rows or self.log.jsonl.exists():
            self.log.clear()
        return rows

    def _finish_diverged(self, stop: _Diverged) -> dict[str, Any]:
        """The result of a run stopped by a non-finite value: nothing is saved (the last
        checkpoint is the last finite state); the metrics are the best checkpoint's, or none."""
        self.progress["stop_reason"] = "diverged"
        best_path = self.out / BEST
        valid: dict[str, float] = {}
        test: dict[str, float] = {}
        if best_path.exists():
            try:
                Checkpoint(best_path).restore(self.model, rng=False)
            except ValueError as exc:
                raise ConfigError(f"{exc}; delete it and resume to train from the latest "
                                  "checkpoint") from exc
            self.model.eval()
            with torch.no_grad():
                valid = self.task.evaluate(self.model, "valid", self.cfg.eval_batches)
                test = self.task.evaluate(self.model, "test", self.cfg.eval_batches)
        if self.log is not None:
            self.log.export_csv()
        result = self._result(valid, test)
        result["diverged"] = {"step": stop.step, "what": stop.what,
                              "checkpoint_step": self.checkpoint_step}
        return result

    def _interrupted(self) -> int:
        """The stop signal received (in any process: they stop at the same step), or 0."""
        signum = self._interrupt.signum if self._interrupt is not None else 0
        if self.ctx.world_size > 1:
            return int(max_over_processes(float(signum), self.ctx))
        return signum

    def _stop_if_interrupted(self) -> None:
        """At a step boundary: when a stop signal came, make the checkpoint hold this step
        (written unless it already does) and raise :class:`TrainingInterrupted`; before the
        first step of a run without a checkpoint there is nothing to keep, and
        :class:`~ctrlrnn.interrupts.StopSignal` is raised instead."""
        signum = self._interrupted()
        if not signum:
            return
        step = int(self.progress["step"])
        if self.checkpoint_step != step:
            if step == 0:
                raise StopSignal(signum)
            self._save()
        raise TrainingInterrupted(step, self.out / LATEST, signum)

    def _steps_per_epoch(self) -> int:
        """How many optimizer steps an epoch takes (epoch 0's batches; counted once)."""
        if self._per_epoch is None:
            self._per_epoch = len(self.task.train_batches(0, self.cfg.batch_size))
        return self._per_epoch

    def _check_steps_per_epoch(self) -> None:
        """Refuse, before anything is trained or written, a configuration whose epoch takes
        no optimizer step (a training set smaller than one batch: partial batches are
        dropped), naming ``batch_size`` and the size of the training data."""
        try:
            steps = self._steps_per_epoch()
        except ValueError as exc:  # a task that refuses the batch size itself
            raise SameInEveryProcess(str(exc)) from exc
        if steps > 0:
            return
        size = self.task.opts.get("train_size")
        more = (f"lower batch_size (or raise task.train_size={size})"
                if isinstance(size, int) else "lower batch_size or give more training data")
        raise SameInEveryProcess(f"batch_size: {self.cfg.batch_size} leaves no full batch in the "
                          f"training data of task {self.task.name!r}, so an epoch would take "
                          f"no optimizer step; {more}")

    def _planned_steps(self) -> int:
        per_epoch = self._steps_per_epoch()
        total = per_epoch * self.cfg.epochs
        return min(total, self.cfg.max_steps) if self.cfg.max_steps else total

    def _finish(self, *, already_done: bool) -> dict[str, Any]:
        """The final evaluation of the best checkpoint on the validation and test splits (a
        stop signal before it ends stops the run, whose checkpoint is then finished: resuming
        it makes this evaluation again)."""
        step = int(self.progress["step"])
        if not already_done:
            if self.progress["last_eval_step"] != step:
                self._evaluate()
            self._save()
        self._stop_if_interrupted()
        best_path = self.out / BEST
        if best_path.exists():
            try:
                best = Checkpoint(best_path)
            except ValueError as exc:
                raise ConfigError(f"{exc}; the final evaluation needs it: delete it and "
                                  "resume to evaluate the latest weights instead") from exc
            best.restore(self.model, rng=False)
        self.model.eval()
        limit = self.cfg.eval_batches  # 0: the whole splits
        with torch.no_grad():
            valid = self.task.evaluate(self.model, "valid", limit)
            self._stop_if_interrupted()
            test = self.task.evaluate(self.model, "test", limit)
        result = self._result(valid, test)
        if self.log is not None and not (already_done and self._final_row_written(step)):
            self.log.write({"step": step, "split": "final",
                            **{f"valid_{k}": v for k, v in valid.items()},
                            **{f"test_{k}": v for k, v in test.items()}})
            self.log.export_csv()
        return result

    def _final_row_written(self, step: int) -> bool:
        """Whether the log holds the ``final`` row of ``step`` (a run stopped during its final
        evaluation has none)."""
        assert self.log is not None
        return any(r.get("split") == "final" and int(r.get("step", -1)) == step
                   for r in self.log.rows())

    def _result(self, valid: dict[str, float], test: dict[str, float]) -> dict[str, Any]:
        """The run's result with the metrics ``valid`` and ``test`` of the checkpoint kept."""
        step = int(self.progress["step"])
        seconds = float(self.progress["train_seconds"])
        threads = torch.get_num_threads()
        cpu = float(self.progress.get("cpu_seconds") or 0.0)
        result = {
            "step": step,
            "epochs_completed": int(self.progress["epoch"]),
            "steps_per_epoch": self._steps_per_epoch(),
            "train_seconds": seconds,
            "best_step": self.progress["best_step"],
            "stop_reason": self.progress.get("stop_reason"),
            # whether the run had the machine to itself: the share of its threads' CPU time it
            # got while training, and the 1-minute load average when it started
            "cpu_share": cpu / (seconds * threads) if seconds > 0 and cpu > 0 else None,
            "load_start": self.progress.get("load_start"),
            "threads": threads,
            "device": _device_name(self.ctx.device),
            "metric": self.monitor,
            "eval_batches": self.cfg.eval_batches,
            "valid": valid,
            "test": test,
        }
        return result


def _device_name(device: torch.device) -> str:
    """What the run trained on, for its result: ``cpu``, or the GPU's index and model."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return device.type
