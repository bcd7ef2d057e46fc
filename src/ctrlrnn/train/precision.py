"""Mixed-precision training steps: the ``precision`` key of ``ctrlrnn train``.

``fp32`` (the default) trains in float32. ``bf16`` and ``fp16`` run each training step's
forward pass and loss under :func:`torch.autocast` on the run's device (the GEMMs, and the
recurrences of ctrlrnn's layers, in that dtype, the recurrent state accumulated in float32, as
the layers document), while the weights, their gradients and the optimizer stay float32.
``fp16`` also scales the loss with a :class:`torch.amp.GradScaler` (its range is narrow) and
skips a step whose gradients overflowed, as the scaler does; its state is stored in the
checkpoint, so a resumed run continues with the same scale. Evaluations run in float32, so the
validation and test metrics of runs in any precision compare as they are.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ctrlrnn.options import ConfigError

#: the values of the ``precision`` key and the autocast dtype of each (None: float32)
PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def precision_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of the ``precision`` key's value (None: float32); an unknown value is
    a :class:`ConfigError` naming the key."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: expected one of {', '.join(PRECISIONS)}, "
                          f"got {precision!r}")
    return PRECISIONS[precision]


class MixedPrecision:
    """The precision of a run's training steps on ``device``: :meth:`autocast` around the
    forward pass and loss, :meth:`backward_and_step` for the rest of the step."""

    def __init__(self, precision: str, device: torch.device) -> None:
        self.name = precision
        self.dtype = precision_dtype(precision)
        self.device_type = device.type
        if self.dtype is not None:
            _check_autocast(self.device_type, self.dtype, precision)
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler(self.device_type) if self.dtype is torch.float16 else None)

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward pass and loss of a training step in this precision."""
        if self.dtype is None:
            yield
            return
        with torch.autocast(self.device_type, dtype=self.dtype):
            yield

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                          between: Callable[[], None]) -> None:  # fmt: skip
        """``loss.backward()``, then ``between()`` (averaging and clipping the gradients, which
        it sees unscaled), then the optimizer's step: with ``fp16``, the scaled loss's backward,
        and the scaler's step (skipped where a gradient is not finite) and update."""
        if self.scaler is None:
            loss.backward()
            between()
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(optimizer)
        between()
        self.scaler.step(optimizer)
        self.scaler.update()

    def check_model(self, model: torch.nn.Module) -> None:
        """Refuse a model this precision cannot train here: torch's own LSTM under CPU float16
        autocast stops in oneDNN (no float16 LSTM primitive) on the CPUs tried, so where the
        model holds one, a tiny LSTM is run under the autocast first and a failure is one
        line that names the module."""
        if self.dtype is None:
            return
        lstms = [name for name, m in model.named_modules() if isinstance(m, torch.nn.LSTM)]
        if not lstms:
            return
        device = next(model.parameters(), torch.empty(0)).device
        try:  # on the side of the run's random streams, which the probe leaves as they were
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                probe = torch.nn.LSTM(2, 2, batch_first=True).to(device)
                with self.autocast():
                    out, _ = probe(torch.randn(1, 2, 2, device=device))
                out.float().sum().backward()
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"precision: {self.name} autocast cannot run torch.nn.LSTM on "
                              f"{self.device_type} with torch {torch.__version__} ({first}), "
                              f"and the model holds one (its module {lstms[0] or 'itself'}); use "
                              "bf16" + (" or a GPU" if self.device_type == "cpu" else "")
                              ) from exc  # fmt: skip

    def state(self) -> dict[str, Any] | None:
        """The scaler's state (numbers only), for the checkpoint; None without a scaler."""
        return None if self.scaler is None else dict(self.scaler.state_dict())

    def restore(self, state: dict[str, Any] | None) -> None:
        """The scaler's state from :meth:`state` (nothing to restore without a scaler)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(dict(state))


def _check_autocast(device_type: str, dtype: torch.dtype, precision: str) -> None:
    """Refuse a precision this torch cannot autocast to on this device (torch would only warn,
    and train in float32)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device_type, dtype=dtype):
                active = torch.is_autocast_enabled(device_type) if _takes_device() else True
        except (RuntimeError, ValueError) as exc:
            raise ConfigError(f"precision: {precision} autocast is not available on "
                              f"{device_type} ({exc})") from exc
    disabled = [w for w in caught if "autocast" in str(w.message).lower()]
    if disabled or not active:
        why = str(disabled[0].message).strip() if disabled else "autocast stayed off"
        raise ConfigError(f"precision: {precision} autocast is not available on {device_type} "
                          f"with torch {torch.__version__} ({why})")


def _takes_device() -> bool:
    """Whether ``torch.is_autocast_enabled`` takes a device type (torch >= 2.4)."""
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        return False
    return True


#: float32 steps (no autocast, no scaler): what :func:`ctrlrnn.train.trainer.training_step`
#: runs when given no precision
FLOAT32 = MixedPrecision("fp32", torch.device("cpu"))
