"""Wall-clock timing of a forward pass and of a forward+backward pass (``ctrlrnn bench``, the
training-speed sections of ``ctrlrnn reproduce`` and ``scripts/gpu-check`` all time with it).

Every measurement is a warm-up followed by repeats; the reported number is the median. A
sample is wall-clock time by default; on a GPU, :func:`cuda_event_seconds` times the work on
the device with CUDA events instead (``Timer(..., clock=cuda_event_seconds)``). Rows
that are compared with each other can be timed in turn, one sample of each at a time
(:func:`interleave`), so that load from other processes falls on all of them alike. The
thread count is whatever :func:`torch.get_num_threads` says (the default unless the user asked
for another with ``--threads``) and is recorded beside each result.

* forward: the workload's callable under :func:`torch.no_grad` (inference).
* forward+backward: the callable with autograd on, then :func:`torch.autograd.backward` of every
  differentiable output with a fixed random output gradient (made once, outside the timing), so
  the backward pass does exactly the work a layer inside a network does. Gradients of the
  leaves are reset to ``None`` between repeats, outside the timed region, so no repeat pays for
  accumulating into the previous one's gradients.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

Outputs = torch.Tensor | Sequence[Any]


@dataclass
class Timing:
    """Result of one timed measurement.

    Attributes:
        median_s: median of ``samples_s`` in seconds.
        samples_s: every timed repeat in seconds, in order.
        warmup: number of untimed calls before the repeats.
        threads: ``torch.get_num_threads()`` while timing.
        cpu_samples_s: process CPU time (all threads) of each repeat, in seconds.
    """

    median_s: float
    samples_s: list[float] = field(default_factory=list)
    warmup: int = 0
    threads: int = 0
    cpu_samples_s: list[float] = field(default_factory=list)

    @property
    def cpu_share(self) -> float | None:
        """Median over repeats of ``CPU time / (wall time * threads)``: near 1 when the run had
        its threads' CPUs to itself and kept them busy, lower when other processes took CPU
        time or threads waited (a diagnostic of how trustworthy a timing is)."""
        if not self.cpu_samples_s or not self.threads:
            return None
        shares = [
            c / (w * self.threads)
            for c, w in zip(self.cpu_samples_s, self.samples_s, strict=False)
            if w > 0
        ]
        return statistics.median(shares) if shares else None

    @property
    def repeats(self) -> int:
        """How many timed repeats the median is taken over."""
        return len(self.samples_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (with the repeat count and the fastest and slowest sample)."""
        d = asdict(self)
        d["repeats"] = self.repeats
        d["cpu_share"] = self.cpu_share
        d["min_s"] = min(self.samples_s) if self.samples_s else None
        d["max_s"] = max(self.samples_s) if self.samples_s else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        """Inverse of :meth:`to_dict`."""
        return cls(
            median_s=float(d["median_s"]),
            samples_s=[float(v) for v in d.get("samples_s", [])],
            warmup=int(d.get("warmup", 0)),
            threads=int(d.get("threads", 0)),
            cpu_samples_s=[float(v) for v in d.get("cpu_samples_s", [])],
        )


def differentiable_outputs(out: Outputs) -> list[torch.Tensor]:
    """The tensors in ``out`` (a tensor or a nested tuple/list) that require grad."""
    if isinstance(out, torch.Tensor):
        return [out] if out.requires_grad else []
    found: list[torch.Tensor] = []
    if isinstance(out, (tuple, list)):
        for item in out:
            found.extend(differentiable_outputs(item))
    return found


class Timer:
    """Incremental timing of one callable: warm it up, then take one timed sample at a time.

    Lets a caller interleave several timers (A, B, C, A, B, C, ...) so that a change in machine
    load during the measurement hits every compared row alike; :func:`time_calls` runs one
    timer to completion.

    Args:
        fn: the work to time.
        warmup: untimed calls first (at least one is recommended: first calls allocate).
        repeats: the most timed calls.
        min_repeats: the fewest timed calls, even when ``max_seconds`` has been used up.
        max_seconds: stop adding repeats (after ``min_repeats``) once this much time has been
            spent timing; None means always run ``repeats``.
        before_each: untimed call before every call of ``fn`` (e.g. resetting gradients).
        deadline: stop adding repeats (after ``min_repeats``) once ``time.monotonic()`` has
            passed this; None means no deadline.
        clock: times one call, ``clock(fn) -> seconds`` (e.g. :func:`cuda_event_seconds`);
            None means wall-clock time around the call.
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        *,
        warmup: int = 1,
        repeats: int = 5,
        min_repeats: int = 3,
        max_seconds: float | None = None,
        before_each: Callable[[], None] | None = None,
        deadline: float | None = None,
        clock: Callable[[Callable[[], Any]], float] | None = None,
    ) -> None:
        if repeats < 1:
            raise ValueError(f"repeats: expected at least 1, got {repeats}")
        if warmup < 0:
            raise ValueError(f"warmup: expected >= 0, got {warmup}")
        self.fn = fn
        self.warmup = warmup
        self.repeats = repeats
        self.min_repeats = max(1, min(min_repeats, repeats))
        self.max_seconds = max_seconds
        self.before_each = before_each
        self.deadline = deadline
        self.clock = clock
        self.samples: list[float] = []
        self.cpu_samples: list[float] = []
        self._warm = False

    def warm_up(self) -> None:
        """Make the untimed warm-up calls (once)."""
        if self._warm:
            return
        for _ in range(self.warmup):
            if self.before_each is not None:
                self.before_each()
            self.fn()
        self._warm = True

    @property
    def done(self) -> bool:
        """True once ``repeats`` samples are taken, or ``min_repeats`` are and the time budget
        ``max_seconds`` is spent or the ``deadline`` passed."""
        n = len(self.samples)
        if n >= self.repeats:
            return True
        if n < self.min_repeats:
            return False
        if self.max_seconds is not None and sum(self.samples) >= self.max_seconds:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def step(self) -> float:
        """Take one timed sample (warming up first if needed); return it in seconds."""
        self.warm_up()
        if self.before_each is not None:
            self.before_each()
        c0 = time.process_time()
        if self.clock is None:
            t0 = time.perf_counter()
            self.fn()
            dt = time.perf_counter() - t0
        else:
            dt = self.clock(self.fn)
        self.cpu_samples.append(time.process_time() - c0)
        self.samples.append(dt)
        return dt

    def result(self) -> Timing:
        """The median and samples so far (at least one sample must have been taken)."""
        if not self.samples:
            raise RuntimeError("Timer.result: no sample taken yet")
        return Timing(
            median_s=statistics.median(self.samples),
            samples_s=list(self.samples),
            warmup=self.warmup,
            threads=torch.get_num_threads(),
            cpu_samples_s=list(self.cpu_samples),
        )


def cuda_event_seconds(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()``'s work takes on the current CUDA stream, by CUDA events recorded before
    and after it (waits for the work to finish)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def interleave(timers: Sequence[Timer]) -> list[Timing]:
    """Warm every timer up, then take samples round-robin until each is done; return results."""
    for t in timers:
        t.warm_up()
    while True:
        pending = [t for t in timers if not t.done]
        if not pending:
            break
        for t in pending:
            t.step()
    return [t.result() for t in timers]


def time_calls(fn: Callable[[], Any], **kwargs: Any) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then time up to ``repeats`` calls; return the median.

    kwargs as in :class:`Timer`.
    """
    return interleave([Timer(fn, **kwargs)])[0]


def forward_timer(fn: Callable[[], Outputs], **kwargs: Any) -> Timer:
    """A :class:`Timer` of ``fn()`` under :func:`torch.no_grad` (inference)."""

    def run() -> None:
        with torch.no_grad():
            fn()

    return Timer(run, **kwargs)


def forward_backward_timer(
    fn: Callable[[], Outputs], leaves: Sequence[torch.Tensor], **kwargs: Any
) -> Timer:
    """A :class:`Timer` of ``fn()`` followed by the backward pass of its differentiable outputs.

    ``leaves`` are the tensors whose ``.grad`` is reset to None between calls (parameters and
    inputs that require grad). The output gradients are random, drawn once from a fixed seed
    during the first call (a warm-up call unless ``warmup=0``). kwargs as in :class:`Timer`.
    """
    grads: list[torch.Tensor] = []

    def run() -> None:
        outs = differentiable_outputs(fn())
        if not outs:
            raise ValueError("fn: returned no output that requires grad; nothing to backward")
        if not grads:
            gen = torch.Generator().manual_seed(1234)
            grads.extend(
                torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype) for o in outs
            )
        torch.autograd.backward(outs, grads)

    def reset() -> None:
        for leaf in leaves:
            leaf.grad = None

    return Timer(run, before_each=reset, **kwargs)


def time_forward(fn: Callable[[], Outputs], **kwargs: Any) -> Timing:
    """Median time of ``fn()`` under :func:`torch.no_grad` (inference); kwargs as in
    :class:`Timer`."""
    return interleave([forward_timer(fn, **kwargs)])[0]


def time_forward_backward(
    fn: Callable[[], Outputs], leaves: Sequence[torch.Tensor], **kwargs: Any
) -> Timing:
    """Median time of ``fn()`` and the backward pass of its outputs (see
    :func:`forward_backward_timer`)."""
    return interleave([forward_backward_timer(fn, leaves, **kwargs)])[0]
