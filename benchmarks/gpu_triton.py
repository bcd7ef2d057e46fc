"""GPU benchmark of the Triton path (issue 8): correctness first, then speed ratios from one run.

Usage (on a machine with a CUDA GPU and ``pip install 'ctrlrnn[gpu]'``)::

    python benchmarks/gpu_triton.py                 # everything, fp32
    python benchmarks/gpu_triton.py --only scan --dtype bfloat16
    python benchmarks/gpu_triton.py --quick         # a few shapes per table

Tables (forward + backward, medians of interleaved repeats, CUDA-synchronised):

1. ``check``: the GPU kernels against the references on the GPU (linear scan with lengths /
   reverse / h0 / final-state gradient, sequential and chunked; QRNN f/fo/ifo pooling with
   zoneout and lengths; LSTM/GRU cells). Aborts on a mismatch.
2. ``scan``: linear scan fwd+bwd against the copy bandwidth measured in the same run. Bytes:
   forward reads a, b and writes h (3N elements); backward reads g, a, h and writes da, db (5N).
   Reported as a fraction of ``x.copy_(y)`` bandwidth (2N elements per copy), for the sequential
   kernel at large B*C and for sequential vs chunked at small B*C and long T.
3. ``qrnn``: QRNN layer (window 2, fo-pooling) vs cuDNN ``torch.nn.LSTM`` of the same sizes over
   batch 8-256 and length 32-1024: the ratio LSTM time / QRNN time (the QRNN paper's Figure 4
   reports up to 16x at batch 8, length 1024 with its own CUDA kernel).
4. ``rcrn``: bidirectional RCRN (1 layer) vs a 3-layer bidirectional cuDNN LSTM (the RCRN
   paper's section 5.4 speed comparison; same parameter count when input = 2 * hidden).
5. ``cells``: the fused LSTM (cuBLAS GEMMs + Triton pointwise) vs cuDNN ``torch.nn.LSTM``.

Every ratio is computed from times measured in this run, never against a stored number.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch

import ctrlrnn
from ctrlrnn import linear_scan, linear_scan_ref
from ctrlrnn.ops.linear_scan.reference import linear_scan_ref_backward
from ctrlrnn.ops.qrnn_pooling import qrnn_pooling, qrnn_pooling_ref


def cuda_medians(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each function, run in turn (A B A B ...) after two warm-ups."""
    for fn in fns.values():
        fn()
        fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: statistics.median(ts) for name, ts in times.items()}


def fwd_bwd(module: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        out = module(x)[0]
        out.float().sum().backward()

    return run


# ------------------------------------------------------------------------------------------------


def check(dev: torch.device, dtype: torch.dtype, steps: int = 301, channels: int = 96) -> None:
    """The GPU kernels against the references (on ``dev``; ``steps`` odd on purpose)."""
    from ctrlrnn.ops import cells_ref, fused_cells
    from ctrlrnn.ops.linear_scan.triton_kernels import linear_scan_backward, linear_scan_forward

    tol = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
    g = torch.Generator(device=dev).manual_seed(0)
    B, T, C = 4, steps, channels
    a = torch.rand(B, T, C, device=dev, generator=g).to(dtype)
    b = torch.randn(B, T, C, device=dev, generator=g).to(dtype)
    h0 = torch.randn(B, C, device=dev, generator=g).to(dtype)
    lengths = torch.tensor([T, T // 3, 0, T - 2], device=dev)
    for reverse in (False, True):
        ref, ref_last = linear_scan_ref(a, b, h0, reverse=reverse, lengths=lengths,
                                        return_last=True)  # fmt: skip
        go, gl = torch.randn_like(ref), torch.randn_like(ref_last)
        for chunk in (0, max(2, T // 5)):
            out, last = linear_scan_forward(a, b, h0, lengths, reverse, chunk=chunk)
            torch.testing.assert_close(out.float(), ref.float(), **tol)
            torch.testing.assert_close(last.float(), ref_last.float(), **tol)
            d_ker = linear_scan_backward(go, gl, a, out, h0, lengths, reverse, chunk=chunk)
            d_ref = linear_scan_ref_backward(go, gl, a, ref, h0, lengths, reverse)
            for x, y in zip(d_ker, d_ref):
                torch.testing.assert_close(x.float(), y.float(), **tol)
    gates = torch.randn(B, T, 4 * C, device=dev, generator=g).to(dtype).requires_grad_()
    keep = (torch.rand(B, T, C, device=dev, generator=g) > 0.1).to(dtype)
    for pooling in ("f", "fo", "ifo"):
        G = {"f": 2, "fo": 3, "ifo": 4}[pooling]
        gg = gates[..., : G * C].detach().contiguous().requires_grad_()
        kw = dict(pooling=pooling, keep=keep, keep_scale=1.0, lengths=lengths.cpu())
        outs, ref = qrnn_pooling(gg, **kw), qrnn_pooling_ref(gg, **kw)
        for x, y in zip(outs, ref):
            torch.testing.assert_close(x.float(), y.float(), **tol)
        ws = [torch.randn_like(x) for x in outs]
        for x, y in zip(torch.autograd.grad(outs, gg, ws), torch.autograd.grad(ref, gg, ws)):
            torch.testing.assert_close(x.float(), y.float(), **tol)
    H, T = C // 2, min(T, 50)
    x = torch.randn(B, T, 4 * H, device=dev, requires_grad=True)
    w = (0.1 * torch.randn(4 * H, H, device=dev)).requires_grad_()
    s0 = torch.zeros(B, H, device=dev)
    lens = lengths.clamp(max=T)
    for got, want in zip(fused_cells.lstm_sequence(x, w, s0, s0, lens),  # the Triton kernels
                         cells_ref.lstm_sequence_ref(x, w, s0, s0, lens)):  # fmt: skip
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    print("check: GPU kernels match the references")


def _scan_row(dev: torch.device, dtype: torch.dtype, B: int, T: int, C: int, repeats: int) -> dict:
    from ctrlrnn.ops.linear_scan.triton_kernels import linear_scan_backward, linear_scan_forward

    n = B * T * C
    a = torch.rand(B, T, C, device=dev, dtype=dtype).requires_grad_()
    b = torch.randn(B, T, C, device=dev, dtype=dtype).requires_grad_()
    src, dst = torch.empty(n, device=dev, dtype=dtype), torch.empty(n, device=dev, dtype=dtype)

    def kernels(chunk: int | None) -> Callable[[], None]:
        def run() -> None:
            out, _ = linear_scan_forward(a, b, None, None, False, chunk=chunk)
            linear_scan_backward(out, None, a, out, None, None, False, chunk=chunk)

        return run

    fns: dict[str, Callable[[], object]] = {
        "copy": lambda: dst.copy_(src),
        "sequential": kernels(0),
        "chunked/auto": kernels(None),
        "public op fwd+bwd": lambda: linear_scan(a, b).sum().backward(),
    }
    ms = cuda_medians(fns, repeats)
    elem = a.element_size()
    copy_gbs = 2 * n * elem / ms["copy"] / 1e6
    row: dict[str, object] = {"B": B, "T": T, "C": C, "copy GB/s": round(copy_gbs, 1)}
    for name in ("sequential", "chunked/auto", "public op fwd+bwd"):
        gbs = 8 * n * elem / ms[name] / 1e6
        row[f"{name} ms"] = round(ms[name], 3)
        row[f"{name} % copy bw"] = round(100 * gbs / copy_gbs, 1)
    return row


def bench_scan(dev: torch.device, dtype: torch.dtype, quick: bool, repeats: int) -> list[dict]:
    rows = []
    shapes = [(64, 512, 1024), (1, 16384, 64), (4, 8192, 128), (2, 65536, 32)]
    for B, T, C in shapes[:2] if quick else shapes:
        rows.append(_scan_row(dev, dtype, B, T, C, repeats))
        print(json.dumps(rows[-1]))
    return rows


def bench_qrnn(dev: torch.device, dtype: torch.dtype, quick: bool, repeats: int) -> list[dict]:
    from ctrlrnn.nn import QRNN

    rows = []
    hidden = 256
    batches = [8, 32, 256] if quick else [8, 16, 32, 64, 128, 256]
    lengths = [32, 1024] if quick else [32, 64, 128, 256, 512, 1024]
    qrnn = QRNN(hidden, hidden, window=2, pooling="fo", batch_first=True).to(dev, dtype)
    lstm = torch.nn.LSTM(hidden, hidden, batch_first=True).to(dev, dtype)
    for B in batches:
        for T in lengths:
            x = torch.randn(B, T, hidden, device=dev, dtype=dtype, requires_grad=True)
            ms = cuda_medians({"qrnn": fwd_bwd(qrnn, x), "cudnn_lstm": fwd_bwd(lstm, x)}, repeats)
            row = {"batch": B, "length": T, "qrnn ms": round(ms["qrnn"], 3),
                   "lstm ms": round(ms["cudnn_lstm"], 3),
                   "lstm/qrnn": round(ms["cudnn_lstm"] / ms["qrnn"], 2)}  # fmt: skip
            rows.append(row)
            print(json.dumps(row))
    return rows


def bench_rcrn(dev: torch.device, dtype: torch.dtype, quick: bool, repeats: int) -> list[dict]:
    from ctrlrnn.nn import RCRN

    rows = []
    hidden = 128
    rcrn = RCRN(2 * hidden, hidden, bidirectional=True, batch_first=True).to(dev, dtype)
    lstm3 = torch.nn.LSTM(2 * hidden, hidden, num_layers=3, bidirectional=True,
                          batch_first=True).to(dev, dtype)  # fmt: skip
    for B, T in [(32, 64), (32, 256)] if quick else [(32, 64), (32, 256), (128, 128), (8, 512)]:
        x = torch.randn(B, T, 2 * hidden, device=dev, dtype=dtype, requires_grad=True)
        ms = cuda_medians({"rcrn": fwd_bwd(rcrn, x), "bilstm3": fwd_bwd(lstm3, x)}, repeats)
        row = {"batch": B, "length": T, "rcrn ms": round(ms["rcrn"], 3),
               "3-layer BiLSTM ms": round(ms["bilstm3"], 3),
               "bilstm3/rcrn": round(ms["bilstm3"] / ms["rcrn"], 2)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row))
    return rows


def _fused_lstm(lstm: torch.nn.LSTM, x: torch.Tensor) -> Callable[[], None]:
    from ctrlrnn.ops import fused_cells

    s0 = x.new_zeros(x.shape[0], lstm.hidden_size)

    def run() -> None:
        xp = torch.nn.functional.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
        h = fused_cells.lstm_sequence(xp, lstm.weight_hh_l0, s0, s0)[0]
        h.sum().backward()

    return run


def bench_cells(dev: torch.device, dtype: torch.dtype, quick: bool, repeats: int) -> list[dict]:
    rows = []
    for B, T, H in [(32, 128, 256)] if quick else [(8, 256, 256), (32, 128, 256), (128, 64, 512)]:
        lstm = torch.nn.LSTM(H, H, batch_first=True).to(dev)
        x = torch.randn(B, T, H, device=dev, requires_grad=True)
        ms = cuda_medians({"fused": _fused_lstm(lstm, x), "cudnn": fwd_bwd(lstm, x)}, repeats)
        row = {"B": B, "T": T, "H": H, "fused ms": round(ms["fused"], 3),
               "cudnn ms": round(ms["cudnn"], 3),
               "fused/cudnn": round(ms["fused"] / ms["cudnn"], 2)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=["check", "scan", "qrnn", "rcrn", "cells"], action="append")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", help="write all tables to this file")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_triton.py needs a CUDA device")
    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    info = ctrlrnn.backend_info()
    print(json.dumps({"device": torch.cuda.get_device_name(), "cuda": info["cuda"],
                      "scan": info["families"]["scan"]["cuda"],
                      "cells": info["families"]["cells"]["cuda"]}))  # fmt: skip
    todo = args.only or ["check", "scan", "qrnn", "rcrn", "cells"]
    results: dict[str, object] = {"device": torch.cuda.get_device_name(), "dtype": args.dtype}
    if "check" in todo:
        check(dev, dtype)
    for name, fn in (("scan", bench_scan), ("qrnn", bench_qrnn), ("rcrn", bench_rcrn),
                     ("cells", bench_cells)):  # fmt: skip
        if name in todo:
            print(f"== {name}")
            results[name] = fn(dev, dtype, args.quick, args.repeats)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
