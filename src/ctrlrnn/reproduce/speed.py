"""Speed experiments of the papers, measured here with the bench's timing harness.

* qrnn.txt figure 4 (right): inference speed advantage of a 320-unit QRNN layer over an
  equal-sized ``torch.nn.LSTM`` layer across batch sizes and sequence lengths;
* rcrn.txt table 10: training and inference time of RCRN against a 3-layer bidirectional
  ``nn.LSTM`` (dimension 200, batch 32) across sequence lengths 16-256.

Each cell is a ratio of medians measured in the same run (interleaved, so load from other
processes falls on both alike). The papers' numbers are GPU numbers (K40, GTX 1070); these are
CPU numbers of this machine, and the pages say so.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

GRIDS: dict[str, dict[str, list[int]]] = {
    "quick": {"qrnn_batch": [8, 32], "qrnn_length": [32, 256], "rcrn_length": [16, 64]},
    "full": {"qrnn_batch": [8, 16, 32, 64, 128, 256], "qrnn_length": [32, 128, 512, 1024],
             "rcrn_length": [16, 32, 64, 128, 256]},
}
REPEATS = {"quick": 3, "full": 5}


def _ratio(slow: float, fast: float) -> float:
    return slow / fast if fast > 0 else float("nan")


def _timers(fns: list[Callable[[], Any]], leaves: list[list[torch.Tensor]] | None,
            repeats: int) -> list[float]:
    from ctrlrnn.bench.timing import forward_backward_timer, forward_timer, interleave

    if leaves is None:
        timers = [forward_timer(fn, warmup=1, repeats=repeats) for fn in fns]
    else:
        timers = [forward_backward_timer(fn, lv, warmup=1, repeats=repeats)
                  for fn, lv in zip(fns, leaves)]
    return [t.median_s for t in interleave(timers)]


def qrnn_figure4(mode: str) -> dict[str, Any]:
    """QRNN (320 units, window 2, fo) vs nn.LSTM (320) inference, ratio LSTM time / QRNN."""
    from ctrlrnn import QRNN

    torch.manual_seed(0)
    H = 320
    qrnn = QRNN(H, H, batch_first=True).eval()
    lstm = torch.nn.LSTM(H, H, batch_first=True).eval()
    cells: dict[str, float] = {}
    for B in GRIDS[mode]["qrnn_batch"]:
        for T in GRIDS[mode]["qrnn_length"]:
            x = torch.randn(B, T, H)
            with torch.no_grad():
                t_q, t_l = _timers([lambda x=x: qrnn(x), lambda x=x: lstm(x)], None,
                                   REPEATS[mode])
            cells[f"{B}x{T}"] = _ratio(t_l, t_q)
    return {"batch": GRIDS[mode]["qrnn_batch"], "length": GRIDS[mode]["qrnn_length"],
            "speedup": cells}


def rcrn_table10(mode: str) -> dict[str, Any]:
    """RCRN (200, bidirectional) vs 3-layer bidirectional nn.LSTM (200), batch 32."""
    try:
        from ctrlrnn.nn.rcrn import RCRN
    except ImportError as exc:
        return {"error": f"RCRN not available: {exc}"}
    torch.manual_seed(0)
    H, B = 200, 32
    rcrn = RCRN(H, H, bidirectional=True, batch_first=True)
    lstm3 = torch.nn.LSTM(H, H, num_layers=3, bidirectional=True, batch_first=True)
    rows: dict[str, dict[str, float]] = {}
    for T in GRIDS[mode]["rcrn_length"]:
        x = torch.randn(B, T, H, requires_grad=True)
        fns = [lambda x=x: rcrn(x)[0], lambda x=x: lstm3(x)[0]]
        leaves = [[x, *rcrn.parameters()], [x, *lstm3.parameters()]]
        train = _timers(fns, leaves, REPEATS[mode])
        with torch.no_grad():
            infer = _timers(fns, None, REPEATS[mode])
        rows[str(T)] = {"train_ratio": _ratio(train[0], train[1]),
                        "inference_ratio": _ratio(infer[0], infer[1])}
    return {"length": GRIDS[mode]["rcrn_length"], "rows": rows}


def _machine() -> str:
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"torch {torch.__version__}")


def run_speed(mode: str, results_dir: Path, docs_dir: Path) -> dict[str, list[str]]:
    """Measure (or read cached) speed results and return the page sections."""
    path = results_dir / mode / "speed.json"
    if not path.exists():
        data = {"machine": _machine(), "qrnn": qrnn_figure4(mode), "rcrn": rcrn_table10(mode)}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return speed_sections_from_results(mode, results_dir, docs_dir)


def speed_sections_from_results(mode: str, results_dir: Path,
                                docs_dir: Path) -> dict[str, list[str]]:
    path = results_dir / mode / "speed.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    sections: dict[str, list[str]] = {}
    q = data.get("qrnn", {})
    if "speedup" in q:
        lines = ["### Speed: QRNN vs LSTM inference (figure 4, right)", "",
                 f"Ratio of `nn.LSTM` time to QRNN time (320 units, inference), measured in one "
                 f"run on {data['machine']}. The paper's figure is on a K40 GPU (up to 16x); "
                 "these are CPU numbers.", "",
                 "| batch \\ length | " + " | ".join(map(str, q["length"])) + " |",
                 "|---|" + "---|" * len(q["length"])]
        for B in q["batch"]:
            cells = [f"{q['speedup'][f'{B}x{T}']:.2f}x" for T in q["length"]]
            lines.append(f"| {B} | " + " | ".join(cells) + " |")
        faster = sum(v > 1 for v in q["speedup"].values())
        total = len(q["speedup"])
        v = "reproduced" if faster == total else (
            "partly reproduced" if faster else "not reproduced")
        lines += ["", f"Claim *QRNN is faster than the LSTM*: faster in {faster} of {total} "
                  f"cells — **{v}** (on CPU).", ""]
        sections["qrnn"] = lines
    r = data.get("rcrn", {})
    if "rows" in r:
        lines = ["### Speed: RCRN vs 3-layer BiLSTM (table 10)", "",
                 f"Time of RCRN divided by time of a 3-layer bidirectional `nn.LSTM` (200 units, "
                 f"batch 32), measured in one run on {data['machine']}. The paper reports "
                 "0.97x (training, CUDA-optimised RCRN vs cuDNN) on a GTX 1070.", "",
                 "| length | training (fwd+bwd) | inference |", "|---|---|---|"]
        for T in r["length"]:
            row = r["rows"][str(T)]
            lines.append(f"| {T} | {row['train_ratio']:.2f}x | {row['inference_ratio']:.2f}x |")
        ok = all(row["train_ratio"] <= 1.0 for row in r["rows"].values())
        lines += ["", "Claim *RCRN is as fast as a 3-layer BiLSTM*: **"
                  f"{'reproduced' if ok else 'not reproduced'}** (training time ratio <= 1 at "
                  "every length).", ""]
        sections["rcrn"] = lines
    elif "error" in r:
        sections["rcrn"] = ["### Speed: RCRN vs 3-layer BiLSTM (table 10)", "",
                            f"Not measured: {r['error']}", ""]
    return sections
