"""The roofline of this machine, measured in the same run as the layers it is compared with.

Two rates bound every layer ctrlrnn benchmarks on CPU:

* the GEMM throughput: FLOP/s of the faster of torch's two CPU GEMM libraries (its BLAS,
  :func:`torch.mm`, and oneDNN, reached through ctrlrnn's kernels, :mod:`ctrlrnn.ops.gemm_path`)
  at a shape typical of an RNN's input projection (``(batch*length) x in_features`` times
  ``in_features x gates*hidden``); each time row's floor uses the rate measured at its own
  point's projection shape (:func:`gemm_rate_at`), and
* the copy bandwidth (bytes/s of ``dst.copy_(src)`` on tensors far larger than the caches,
  counting the bytes read plus the bytes written).

The floor of a layer is ``matmul FLOPs / GEMM rate + elementwise bytes / bandwidth``: the time
it would take if its matrix multiplies ran at the measured GEMM rate and its elementwise work
moved only the bytes it must move, at the measured copy bandwidth. Both rates are medians of
repeats, measured in the same process and with the same thread count as the layer timings.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from ctrlrnn.ops import _extension, gemm_path

#: GEMM shape (M, K, N) used for the throughput measurement: batch 32 x 256 steps of a layer with
#: 512 inputs (e.g. a window-2 QRNN of width 256) and 1024 gate outputs.
DEFAULT_GEMM_SHAPE: tuple[int, int, int] = (8192, 512, 1024)
#: Bytes per tensor in the copy-bandwidth measurement (far above any last-level cache).
DEFAULT_COPY_BYTES: int = 256 * 1024 * 1024


@dataclass
class Roofline:
    """Measured machine rates and the floor they imply.

    Attributes:
        gemm_flops_per_s: median GEMM throughput in FLOP/s.
        copy_bytes_per_s: median copy bandwidth in bytes/s (read + write bytes per second).
        gemm_shape: (M, K, N) of the measured ``torch.mm``.
        copy_bytes: size in bytes of the source (and of the destination) tensor that was copied.
        dtype: dtype name of both measurements.
        threads: ``torch.get_num_threads()`` during the measurement.
        gemm_samples_s: every GEMM timing in seconds.
        copy_samples_s: every copy timing in seconds.
        clone_bytes_per_s: median bandwidth of ``src.clone()`` (a fresh output each call, as
            most ops produce): not part of the floor, but on machines where first-touching
            new memory is slow it shows how much of a gap to the floor is allocation.
    """

    gemm_flops_per_s: float
    copy_bytes_per_s: float
    gemm_shape: tuple[int, int, int]
    copy_bytes: int
    dtype: str
    threads: int
    gemm_samples_s: list[float] = field(default_factory=list)
    copy_samples_s: list[float] = field(default_factory=list)
    clone_bytes_per_s: float | None = None

    def floor_s(self, flops: float, nbytes: float) -> float:
        """Lower bound in seconds for work of ``flops`` matmul FLOPs and ``nbytes`` moved bytes."""
        return flops / self.gemm_flops_per_s + nbytes / self.copy_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (rates also given in GFLOP/s and GB/s for readability)."""
        d = asdict(self)
        d["gemm_shape"] = list(self.gemm_shape)
        d["gemm_gflops"] = self.gemm_flops_per_s / 1e9
        d["copy_gb_per_s"] = self.copy_bytes_per_s / 1e9
        d["clone_gb_per_s"] = (
            None if self.clone_bytes_per_s is None else self.clone_bytes_per_s / 1e9
        )
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Roofline:
        """Inverse of :meth:`to_dict` (extra readability keys are ignored)."""
        return cls(
            gemm_flops_per_s=float(d["gemm_flops_per_s"]),
            copy_bytes_per_s=float(d["copy_bytes_per_s"]),
            gemm_shape=tuple(int(v) for v in d["gemm_shape"]),  # type: ignore[arg-type]
            copy_bytes=int(d["copy_bytes"]),
            dtype=str(d["dtype"]),
            threads=int(d["threads"]),
            gemm_samples_s=[float(v) for v in d.get("gemm_samples_s", [])],
            copy_samples_s=[float(v) for v in d.get("copy_samples_s", [])],
            clone_bytes_per_s=(
                None if d.get("clone_bytes_per_s") is None else float(d["clone_bytes_per_s"])
            ),
        )


def _timed(fn: Any, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def _onednn_mm() -> Any:
    """``a @ b`` forced onto oneDNN by ctrlrnn's kernels, or None where that path is missing
    (no compiled kernels, or a torch that runs no float32 GEMM on oneDNN)."""
    if _extension.forced_reference():
        return None
    ext = _extension.load("scan")
    if ext is None or not ext.gemm_onednn_usable():
        return None

    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with gemm_path.use("onednn"):
            return ext.gemm(a, b)

    return mm


def measure_gemm(
    shape: tuple[int, int, int] = DEFAULT_GEMM_SHAPE,
    *,
    dtype: torch.dtype = torch.float32,
    warmup: int = 2,
    repeats: int = 7,
) -> tuple[float, list[float]]:
    """Median FLOP/s of the faster GEMM path for ``a: (M, K)`` times ``b: (K, N)``:
    ``torch.mm(a, b, out=c)`` (torch's BLAS) or, for float32, oneDNN (:func:`_onednn_mm`).

    Returns ``(flops_per_s, samples_s)`` of the faster path; one product counts ``2*M*K*N``
    FLOPs.
    """
    m, k, n = shape
    if min(shape) <= 0:
        raise ValueError(f"shape: expected three positive sizes (M, K, N), got {shape}")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    c = torch.empty(m, n, dtype=dtype)
    samples = _timed(lambda: torch.mm(a, b, out=c), warmup, repeats)
    onednn = _onednn_mm() if dtype == torch.float32 else None
    if onednn is not None:
        other = _timed(lambda: onednn(a, b), warmup, repeats)
        if statistics.median(other) < statistics.median(samples):
            samples = other
    return 2.0 * m * k * n / statistics.median(samples), samples


_RATES: dict[tuple[int, int, int, str, int], float] = {}


def gemm_rate_at(shape: tuple[int, int, int], dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of the faster GEMM path at ``shape`` (measured once per shape, dtype and thread
    count in this process; the median of at least 9 products on each path, best of both).

    At least 9: the floor targets divide by this rate, and a median of 3 on a shared host moved
    between runs far more than the rows' own times did."""
    key = (*shape, str(dtype), torch.get_num_threads())
    if key not in _RATES:
        m, k, n = shape
        reps = max(9, min(25, int(2e9 / max(1.0, 2.0 * m * k * n))))
        _RATES[key] = measure_gemm(shape, dtype=dtype, warmup=2, repeats=reps)[0]
    return _RATES[key]


def measure_copy(
    nbytes: int = DEFAULT_COPY_BYTES,
    *,
    dtype: torch.dtype = torch.float32,
    warmup: int = 2,
    repeats: int = 7,
) -> tuple[float, list[float]]:
    """Median bandwidth in bytes/s of ``dst.copy_(src)`` for tensors of ``nbytes`` each.

    A copy reads ``nbytes`` and writes ``nbytes``; the rate counts both (``2*nbytes / time``),
    which is how the elementwise byte counts of the benchmark cases are stated too.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = nbytes // itemsize
    if numel <= 0:
        raise ValueError(f"nbytes: expected at least one {dtype} element, got {nbytes} bytes")
    src = torch.ones(numel, dtype=dtype)
    dst = torch.empty_like(src)
    samples = _timed(lambda: dst.copy_(src), warmup, repeats)
    return 2.0 * numel * itemsize / statistics.median(samples), samples


def measure_clone(
    nbytes: int = DEFAULT_COPY_BYTES,
    *,
    dtype: torch.dtype = torch.float32,
    warmup: int = 1,
    repeats: int = 5,
) -> tuple[float, list[float]]:
    """Median bandwidth in bytes/s of ``src.clone()``: like :func:`measure_copy` but into a
    freshly allocated output each call, so it includes the cost of first touching new memory."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = nbytes // itemsize
    if numel <= 0:
        raise ValueError(f"nbytes: expected at least one {dtype} element, got {nbytes} bytes")
    src = torch.ones(numel, dtype=dtype)
    samples = _timed(src.clone, warmup, repeats)
    return 2.0 * numel * itemsize / statistics.median(samples), samples


def measure(
    *,
    gemm_shape: tuple[int, int, int] = DEFAULT_GEMM_SHAPE,
    copy_bytes: int = DEFAULT_COPY_BYTES,
    dtype: torch.dtype = torch.float32,
    repeats: int = 7,
) -> Roofline:
    """Measure both rates now, in this process, with the current thread count."""
    gemm, gemm_samples = measure_gemm(gemm_shape, dtype=dtype, repeats=repeats)
    copy, copy_samples = measure_copy(copy_bytes, dtype=dtype, repeats=repeats)
    clone, _ = measure_clone(copy_bytes, dtype=dtype, repeats=max(1, repeats // 2))
    return Roofline(
        gemm_flops_per_s=gemm,
        copy_bytes_per_s=copy,
        gemm_shape=gemm_shape,
        copy_bytes=int(copy_bytes),
        dtype=str(dtype).replace("torch.", ""),
        threads=torch.get_num_threads(),
        gemm_samples_s=gemm_samples,
        copy_samples_s=copy_samples,
        clone_bytes_per_s=clone,
    )


def with_copy_samples(roof: Roofline, samples: list[float]) -> Roofline:
    """``roof`` with its copy bandwidth replaced by the median over ``samples`` (seconds per
    ``dst.copy_(src)`` of ``roof.copy_bytes``), which are kept as its copy samples.

    The benchmark takes copy samples all through its run (on a shared machine the memory
    bandwidth moves with the load from outside the process, from one minute to the next), so
    the floor of every row rests on the bandwidth of the whole run rather than on one moment of
    it."""
    if not samples:
        raise ValueError("samples: expected at least one copy timing")
    return replace(
        roof,
        copy_bytes_per_s=2.0 * roof.copy_bytes / statistics.median(samples),
        copy_samples_s=list(samples),
    )


def best_of(*measured: Roofline) -> Roofline:
    """A roofline with the highest GEMM rate and the highest copy bandwidth among ``measured``
    (the tightest floor); samples of all of them are kept."""
    if not measured:
        raise ValueError("measured: expected at least one Roofline")
    gemm = max(measured, key=lambda r: r.gemm_flops_per_s)
    copy = max(measured, key=lambda r: r.copy_bytes_per_s)
    return Roofline(
        gemm_flops_per_s=gemm.gemm_flops_per_s,
        copy_bytes_per_s=copy.copy_bytes_per_s,
        gemm_shape=gemm.gemm_shape,
        copy_bytes=copy.copy_bytes,
        dtype=gemm.dtype,
        threads=gemm.threads,
        gemm_samples_s=gemm.gemm_samples_s,
        copy_samples_s=copy.copy_samples_s,
        clone_bytes_per_s=max(
            (r.clone_bytes_per_s for r in measured if r.clone_bytes_per_s is not None),
            default=None,
        ),
    )
