"""Shared pieces of the Triton kernels: activations, dtypes, launch heuristics, the carry scan.

Imports Triton; imported only by the kernel modules (never at ``import ctrlrnn``).

Conventions of every kernel in this package:

* Tensors are contiguous and batch-first ``(B, T, C)``; a program owns one batch row and a block
  of ``BLOCK`` channels and walks time sequentially with its state in registers, in the
  accumulation type ``ACC`` (fp32 for fp16/bf16/fp32 inputs, fp64 for fp64), like the CPU
  kernels of ``linear_scan.cpp``.
* Offsets are int64 (the batch index is widened before any multiplication), so tensors beyond
  2**31 elements are addressed correctly.
* Per-step conditions (time step valid for this row, step inside the tensor) are computed as
  vectors over the channel block: masks combined with ``&`` are then always vector booleans,
  which both the compiler and the interpreter handle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ctrlrnn.ops.gpu import interpreting

#: torch dtype -> the Triton accumulation dtype of the state.
_ACC = {
    torch.float16: tl.float32,
    torch.bfloat16: tl.float32,
    torch.float32: tl.float32,
    torch.float64: tl.float64,
}

#: torch dtype -> the torch dtype of fp32/fp64 scratch buffers.
_ACC_TORCH = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float32,
    torch.float64: torch.float64,
}


def acc_dtype(dtype: torch.dtype) -> tl.dtype:
    """The Triton accumulation dtype for inputs of ``dtype`` (raises ValueError if unsupported)."""
    try:
        return _ACC[dtype]
    except KeyError:
        raise ValueError(
            f"dtype: expected float16, bfloat16, float32 or float64, got {dtype}"
        ) from None


def acc_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype of accumulation scratch buffers for inputs of ``dtype``."""
    acc_dtype(dtype)
    return _ACC_TORCH[dtype]


#: (channel block, warps) of the autotuned sequential kernels: one warp up to 128 channels, and
#: 4 channels a thread beyond, the layouts measured fast. With fewer channels a thread on several
#: warps (128 on 2, 256 on 4) the scan kernels ran several times slower (docs/overhead.md, GPU
#: section): a tile's time steps are then likely spread over warps, and picking one step out of
#: it is a reduction across them.
BLOCK_WARPS: tuple[tuple[int, int], ...] = ((32, 1), (64, 1), (128, 1), (256, 2), (512, 4))


def block_configs(blocks: tuple[tuple[int, int], ...] = BLOCK_WARPS) -> list[triton.Config]:
    """Autotuning configurations over (channel block, warps); one small one under the
    interpreter."""
    if interpreting():
        return [triton.Config({"BLOCK": 16}, num_warps=1)]
    return [triton.Config({"BLOCK": blk}, num_warps=warps) for blk, warps in blocks]


def _launch_options(config: triton.Config) -> dict[str, Any]:
    """What the autotuner passes to a launch for ``config``: its meta-parameters and options."""
    all_kwargs = getattr(config, "all_kwargs", None)
    if all_kwargs is not None:
        return dict(all_kwargs())
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


class TunedKernel:
    """A kernel autotuned over :func:`block_configs`, launched directly once its configuration
    is chosen.

    Triton's autotuner does its own work at every launch (its key, dictionaries of the
    arguments), which costs more than the launch itself. Here the autotuner runs on a key's
    first launch only; the configuration it chose is kept under the caller's ``key`` (which
    holds at least what the autotuner's own key holds: its key arguments, the dtypes, and the
    device), and later launches call the kernel with it.
    """

    def __init__(self, kernel: Any, key: list[str]) -> None:
        self.kernel = kernel
        self.tuned = triton.autotune(configs=block_configs(), key=key)(kernel)
        self._chosen: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any]]] = {}

    def launch(self, key: tuple[Any, ...], grid: Callable[[dict[str, Any]], tuple[int, ...]],
               *args: Any, **kwargs: Any) -> None:  # fmt: skip
        """Launch on ``grid`` (a function of the chosen meta-parameters) with ``args``."""
        chosen = self._chosen.get(key)
        if chosen is None:
            self.tuned[grid](*args, **kwargs)
            config = getattr(self.tuned, "best_config", None)
            if config is not None:
                self._chosen[key] = (dict(config.kwargs), _launch_options(config))
            return
        meta, options = chosen
        self.kernel[grid(meta)](*args, **kwargs, **options)


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (8 for CPU tensors under the interpreter)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 8


def chunk_length(
    batch: int, channels: int, steps: int, sms: int, block: int = 64, min_steps: int = 256
) -> int:
    """The chunk length for the chunked scans, or 0 to run the plain sequential kernel.

    The sequential kernel runs ``batch * ceil(channels / block)`` programs, each walking all
    ``steps``. When that is too few to fill the GPU (< 2 per SM) and the sequence is long, time
    is split into chunks so that about 4 programs per SM run the per-chunk passes; chunks are at
    least 64 steps so that the extra pass over chunk carries stays negligible.
    """
    programs = batch * triton.cdiv(max(channels, 1), block)
    if steps < min_steps or programs >= 2 * sms:
        return 0
    want_chunks = triton.cdiv(4 * sms, programs)
    length = max(64, triton.cdiv(steps, want_chunks))
    return 0 if triton.cdiv(steps, length) < 2 else length


@triton.jit
def sigmoid(x):
    """Logistic function in the dtype of ``x``."""
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def tanh(x):
    """``tanh(x) = 2 sigmoid(2x) - 1``: saturates correctly at both ends."""
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def step_lanes(len_ptr, t, H, HAS_LEN: tl.constexpr, BLOCK: tl.constexpr):
    """The lanes of a program of a fused cell's step kernel (grid ``(B, cdiv(H, BLOCK))``):
    ``(row, channels, which channels exist, an int64 zero vector, which channels are valid at
    step t)``; past the row's length (``HAS_LEN``) none is valid."""
    pid_b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    zero = tl.zeros([BLOCK], tl.int64)
    if HAS_LEN:
        valid = cmask & ((zero + t) < tl.load(len_ptr + pid_b))
    else:
        valid = cmask
    return pid_b, cols, cmask, zero, valid


@triton.jit
def chunk_carry_kernel(
    prod_ptr,
    state_ptr,
    init_ptr,
    C,
    n_chunks,
    HAS_INIT: tl.constexpr,
    BACKWARD: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Scan over chunk summaries: the middle pass of every chunked scan.

    ``prod`` and ``state`` are ``(B, n_chunks, C)``: the product of the decay factors over each
    chunk and the chunk's final state when started from zero. In processing order (chunk
    ``n_chunks - 1`` first when ``BACKWARD``) this writes into ``state`` the state *entering*
    each chunk, ``h_in(k+1) = prod(k) * h_in(k) + state(k)``, starting from ``init`` ``(B, C)``
    (zeros without it). Grid: ``(cdiv(C, BLOCK), B)``.
    """
    pid_b = tl.program_id(1).to(tl.int64)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < C
    if HAS_INIT:
        h = tl.load(init_ptr + pid_b * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        h = tl.zeros([BLOCK], ACC)
    for j in range(0, n_chunks):
        if BACKWARD:
            k = n_chunks - 1 - j
        else:
            k = j
        off = (pid_b * n_chunks + k) * C + cols
        p = tl.load(prod_ptr + off, mask=cmask, other=1.0).to(ACC)
        s = tl.load(state_ptr + off, mask=cmask, other=0.0).to(ACC)
        tl.store(state_ptr + off, h, mask=cmask)
        h = p * h + s


def launch_chunk_carry(
    prod: torch.Tensor, state: torch.Tensor, init: torch.Tensor | None, backward: bool
) -> None:
    """Run :func:`chunk_carry_kernel` in place on ``state`` (``(B, n_chunks, C)`` scratch)."""
    batch, n_chunks, channels = state.shape
    block = 16 if interpreting() else 128
    grid = (triton.cdiv(channels, block), batch)
    chunk_carry_kernel[grid](
        prod,
        state,
        init if init is not None else state,
        channels,
        n_chunks,
        HAS_INIT=init is not None,
        BACKWARD=backward,
        ACC=acc_dtype(state.dtype),
        BLOCK=block,
        num_warps=1 if interpreting() else 4,
    )


#: Channels a program of the chunked passes owns.
CHUNK_BLOCK = 16 if interpreting() else 64


def check_btc(x: torch.Tensor, name: str) -> None:
    """Raise unless ``x`` is a contiguous ``(B, T, C)`` tensor of a supported dtype."""
    if x.dim() != 3 or not x.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous (B, T, C) tensor, got {tuple(x.shape)}")
    acc_dtype(x.dtype)


def lengths_arg(
    lengths: torch.Tensor | None, batch: int, device: torch.device
) -> torch.Tensor | None:
    """``lengths`` as the kernels read it (contiguous int64 on ``device``), checked against
    ``batch``."""
    if lengths is None:
        return None
    if lengths.shape != (batch,):
        raise ValueError(f"lengths: expected shape ({batch},), got {tuple(lengths.shape)}")
    return lengths.to(device=device, dtype=torch.int64).contiguous()


def pick_chunk(
    batch: int, channels: int, steps: int, device: torch.device, chunk: int | None
) -> tuple[int, int]:
    """``(chunk length, number of chunks)``: ``(0, 1)`` runs the sequential kernel. ``chunk``
    overrides the heuristic of :func:`chunk_length`."""
    if chunk is None:
        chunk = chunk_length(batch, channels, steps, sm_count(device), block=CHUNK_BLOCK)
    if chunk <= 0 or chunk >= steps:
        return 0, 1
    return chunk, triton.cdiv(steps, chunk)


@triton.jit
def length_of(len_ptr, pid_b, T, HAS_LEN: tl.constexpr):
    """The valid length of row ``pid_b``: ``lengths[b]``, or ``T`` without lengths."""
    if HAS_LEN:
        L = tl.load(len_ptr + pid_b)
    else:
        L = T
    return L


@triton.jit
def backward_entry(init_ptr, s0_ptr, pid_b, k, n_chunks, C, cols, cmask,
                   HAS_INIT: tl.constexpr, HAS_S0: tl.constexpr, ACC: tl.constexpr,
                   BLOCK: tl.constexpr):
    """What a backward program of chunk ``k`` starts from, both in ``ACC``: the carry entering
    the chunk (``init[b, k]``, or zero) and the initial state ``s0[b]`` (or zero)."""
    if HAS_INIT:
        carry = tl.load(init_ptr + (pid_b * n_chunks + k) * C + cols, mask=cmask, other=0.0)
        carry = carry.to(ACC)
    else:
        carry = tl.zeros([BLOCK], ACC)
    if HAS_S0:
        s0 = tl.load(s0_ptr + pid_b * C + cols, mask=cmask, other=0.0).to(ACC)
    else:
        s0 = tl.zeros([BLOCK], ACC)
    return carry, s0
