"""Mixed-precision training steps: the ``precision`` key of ``ctrlrnn train``.

``fp32`` (the default) trains in float32. ``bf16`` and ``fp16`` run each training step's
forward pass and loss under :func:`torch.autocast` on the run's device (the GEMMs, and the
recurrences of ctrlrnn's layers, in that dtype, the recurrent state accumulated in float32, as
the layers document), while the weights, their gradients and the optimizer stay float32.
``fp16`` also scales the loss with a :class:`torch.amp.GradScaler` (its range is narrow) and
skips a step whose gradients overflowed, as the scaler does; its state is stored in the
checkpoint, so a resumed run continues with the same scale. Evaluations run in float32, so the
validation and test metrics of runs in any precision compare as they are.

``torch.nn.LSTM`` under CPU autocast runs oneDNN's LSTM primitive in the autocast dtype. oneDNN
has that primitive only where the CPU has instructions for the dtype: an AVX2-only CPU has no
bfloat16 LSTM, and many CPUs have no float16 one. :func:`lstm_autocast_error` asks the machine
(a tiny LSTM's step under the autocast), not a list of CPU models. Where it finds an error,
:meth:`MixedPrecision.check_model` refuses a model holding an ``nn.LSTM`` in one line that names
the module and what runs instead: the precisions under which torch's LSTM runs there, and the
ctrlrnn units that run in the asked precision there (their recurrences are ctrlrnn's kernels).
"""

from __future__ import annotations

import contextlib
import re
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
        """Refuse a model this precision cannot train here: where the model holds a
        ``torch.nn.LSTM`` and :func:`lstm_autocast_error` finds that torch's LSTM cannot run
        under this autocast on the model's device, a :class:`ConfigError` (one line, naming the
        key) says what stopped, which module holds the LSTM, and what runs here instead."""
        if self.dtype is None:
            return
        lstms = [name for name, m in model.named_modules() if isinstance(m, torch.nn.LSTM)]
        if not lstms:
            return
        device = next(model.parameters(), torch.empty(0)).device
        error = lstm_autocast_error(device, self.dtype)
        if error is None:
            return
        where = ".".join(filter(None, (type(model).__name__, lstms[0])))
        raise ConfigError(f"precision: {self.name} autocast cannot run torch.nn.LSTM on "
                          f"{device.type} with torch {torch.__version__} ({error}), and the "
                          f"model holds one (its module {where}); use "
                          f"{_instead(self.name, device)}")

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
    why = _autocast_unavailable(device_type, dtype)
    if why is not None:
        raise ConfigError(f"precision: {precision} autocast is not available on {device_type} "
                          f"with torch {torch.__version__} ({why})")


def _autocast_unavailable(device_type: str, dtype: torch.dtype) -> str | None:
    """Why ``torch.autocast`` to ``dtype`` does not run on ``device_type`` (torch's error or
    warning), or None where it does."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device_type, dtype=dtype):
                active = torch.is_autocast_enabled(device_type) if _takes_device() else True
        except (RuntimeError, ValueError) as exc:
            return str(exc).strip().splitlines()[0]
    disabled = [w for w in caught if "autocast" in str(w.message).lower()]
    if disabled:
        return str(disabled[0].message).strip()
    return None if active else "autocast stayed off"


def _first_sentence(exc: BaseException) -> str:
    """The first sentence of the first line of ``exc``'s message (oneDNN appends advice on
    verbose logging to its errors)."""
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return re.split(r"(?<=\.)\s", line, maxsplit=1)[0].rstrip(".")


#: (device, dtype) -> the answer of :func:`lstm_autocast_error`, asked once per process
_LSTM_PROBES: dict[tuple[str, torch.dtype], str | None] = {}


def lstm_autocast_error(device: torch.device, dtype: torch.dtype) -> str | None:
    """Whether ``torch.nn.LSTM`` runs under ``torch.autocast`` to ``dtype`` on ``device``: None
    where a tiny LSTM's forward and backward run there, else the first sentence of the error
    it stops with (on CPU, oneDNN's missing primitive for that dtype).

    The answer is the machine's (its CPU's instruction sets, capped by ``ONEDNN_MAX_CPU_ISA``)
    and torch's, not a list of CPU models; it is computed once per process and device. The
    probe runs on the side of the random streams, which it leaves as they were.
    """
    key = (str(device), dtype)
    if key not in _LSTM_PROBES:
        devices = [device] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                probe = torch.nn.LSTM(2, 2, batch_first=True).to(device)
                with torch.autocast(device.type, dtype=dtype):
                    out, _ = probe(torch.randn(1, 2, 2, device=device))
                out.float().sum().backward()
            _LSTM_PROBES[key] = None
        except RuntimeError as exc:
            _LSTM_PROBES[key] = _first_sentence(exc)
    return _LSTM_PROBES[key]


def _runs_under_autocast(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether autocast to ``dtype`` is available on ``device`` and torch's LSTM runs under it."""
    return (_autocast_unavailable(device.type, dtype) is None
            and lstm_autocast_error(device, dtype) is None)


def ctrlrnn_units_under_autocast(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The registered units (``--model`` names) whose encoder, built as ``--model NAME`` builds
    it at a tiny size, runs its forward and backward under ``torch.autocast`` to ``dtype`` on
    ``device``; on the side of the random streams, as :func:`lstm_autocast_error`."""
    from ctrlrnn.models.encoders import SequenceEncoder
    from ctrlrnn.nn.registry import UNITS

    devices = [device] if device.type == "cuda" else []
    running = []
    for name in UNITS:
        try:
            with torch.random.fork_rng(devices=devices):
                encoder = SequenceEncoder(name, 2, {"hidden_size": 2}).to(device)
                with torch.autocast(device.type, dtype=dtype):
                    out, _, _ = encoder(torch.randn(1, 2, 2, device=device))
                out.float().sum().backward()
        except (RuntimeError, ValueError, TypeError):
            continue
        running.append(name)
    return running


def _instead(precision: str, device: torch.device) -> str:
    """What a model holding ``torch.nn.LSTM`` can use on ``device`` in place of ``precision``:
    the other precisions under which torch's LSTM runs there (float32 always does), and the
    ctrlrnn units that run in ``precision`` there."""
    others = [f"precision={name}" for name, dtype in PRECISIONS.items()
              if name != precision and (dtype is None or _runs_under_autocast(device, dtype))]
    dtype = PRECISIONS[precision]
    units = [] if dtype is None else ctrlrnn_units_under_autocast(device, dtype)
    advice = " or ".join(others)
    if units:
        advice += (f", or a model with no torch.nn.LSTM in it (of ctrlrnn's units, "
                   f"{', '.join(units)} run in {precision} on this {device.type})")
    return advice


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
