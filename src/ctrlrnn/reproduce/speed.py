"""Speed experiments of the papers, measured here with the bench's timing harness.

* QRNN paper, figure 4 (right): inference speed advantage of a 320-unit QRNN layer over an
  equal-sized ``torch.nn.LSTM`` layer across batch sizes and sequence lengths;
* RCRN paper, table 10: training and inference time of RCRN against a 3-layer bidirectional
  ``nn.LSTM`` (dimension 200, batch 32) across sequence lengths 16-256;
* QRNN paper, table 3 (hours per epoch) and figure 4 (left, PTB LM training speed): the time of
  one training epoch of the experiments' own models (``qrnn-ptb-lm``,
  ``translation-char-qrnn``), from whole optimizer steps on batches sampled across the epoch.

Each cell is a ratio of medians measured in the same run (interleaved, so load from other
processes falls on both alike). The training runs' own "train s" columns are wall times of
whole runs and move with the machine's load; the epoch times here are the comparison. The
papers' numbers are GPU numbers (K40, GTX 1070); these are CPU numbers of this machine, and
the pages say so.
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ctrlrnn import files
from ctrlrnn.nn.qrnn import QRNN
from ctrlrnn.nn.rcrn import RCRN
from ctrlrnn.reproduce import experiments
from ctrlrnn.reproduce.cache_validity import Standing
from ctrlrnn.reproduce.runner import config_for
from ctrlrnn.reproduce.verdicts import SPEED_TOLERANCE, speed_verdict
from ctrlrnn.timing import forward_backward_timer, forward_timer, interleave
from ctrlrnn.train.optim import build_optimizer
from ctrlrnn.train.run import seed_everything

GRIDS: dict[str, dict[str, list[int]]] = {
    "quick": {"qrnn_batch": [8, 32], "qrnn_length": [32, 256], "rcrn_length": [16, 64]},
    "full": {"qrnn_batch": [8, 16, 32, 64, 128, 256], "qrnn_length": [32, 128, 512, 1024],
             "rcrn_length": [16, 32, 64, 128, 256]},
}
REPEATS = {"quick": 3, "full": 5}
#: experiments whose training time per epoch the paper compares -> (page, where, what it says)
EPOCH_TIME: dict[str, tuple[str, str, str]] = {
    "qrnn-ptb-lm": ("qrnn", "figure 4 (left)", "the training time of this 2-layer PTB LM, "
                    "where the QRNN's recurrent part costs a fraction of the cuDNN LSTM's"),
    "translation-char-qrnn": ("translation", "QRNN paper, table 3", "4.2 hours per epoch for the "
                              "4-layer LSTM, 1.0 for the QRNN (4.2x)"),
}
SAMPLED_BATCHES = {"quick": 3, "full": 8}


def _ratio(slow: float, fast: float) -> float:
    return slow / fast if fast > 0 else float("nan")


def _timers(fns: list[Callable[[], Any]], leaves: list[list[torch.Tensor]] | None,
            repeats: int) -> list[float]:
    if leaves is None:
        timers = [forward_timer(fn, warmup=1, repeats=repeats) for fn in fns]
    else:
        timers = [forward_backward_timer(fn, lv, warmup=1, repeats=repeats)
                  for fn, lv in zip(fns, leaves)]
    return [t.median_s for t in interleave(timers)]


def qrnn_figure4(mode: str) -> dict[str, Any]:
    """QRNN (320 units, window 2, fo) vs nn.LSTM (320) inference, ratio LSTM time / QRNN."""
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


def _sample(n: int, k: int) -> list[int]:
    """``k`` batch indices spread evenly over an epoch of ``n`` batches."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def epoch_time(exp_id: str, mode: str) -> dict[str, Any]:
    """Seconds per training epoch of each arm of experiment ``exp_id`` at ``mode``'s config.

    Every arm is built as its training run builds it (seed 0): task, model, optimizer, batch
    size. The same batches, spread over epoch 0, go through whole optimizer steps
    (:func:`ctrlrnn.train.trainer.training_step`: loss, backward, clipping, update), the arms
    interleaved batch by batch; an arm's step time is the mean over batches of each batch's
    median over the repeats, and its epoch time that mean times the batches in an epoch.
    """
    # the trainer needs the `train` extra (rich, safetensors): `ctrlrnn reproduce` registers
    # its parser without it
    from ctrlrnn.train.trainer import training_step

    exp = next(e for e in experiments.EXPERIMENTS if e.id == exp_id)
    arms = []
    with tempfile.TemporaryDirectory() as tmp:
        for arm in exp.arms:
            cfg, cls = config_for(exp, arm, 0, mode, Path(tmp))
            seed_everything(0)
            task = cls(cfg.task_args, 0)
            task.setup()
            model = task.build_model(cfg.model, cfg.model_args).train()
            params = [q for q in model.parameters() if q.requires_grad]
            opt = build_optimizer(cfg.optimizer, params, lr=cfg.lr,
                                  weight_decay=cfg.weight_decay, momentum=cfg.momentum)
            arms.append((arm.label, cfg, task, model, params, opt,
                         task.train_batches(0, cfg.batch_size)))
    n = len(arms[0][6])
    picked = _sample(n, SAMPLED_BATCHES[mode])
    samples: dict[str, list[list[float]]] = {a[0]: [[] for _ in picked] for a in arms}
    for repeat in range(REPEATS[mode] + 1):  # the first round warms up and is not kept
        for j, b in enumerate(picked):
            for label, cfg, task, model, params, opt, batches in arms:
                start = time.perf_counter()
                training_step(task, model, opt, params, batches[b], cfg.clip_norm)
                if repeat:
                    samples[label][j].append(time.perf_counter() - start)
    rows = {}
    settings = arm_settings(exp_id, mode)
    for label, cfg, *_ in arms:
        step = statistics.fmean(statistics.median(t) for t in samples[label])
        rows[label] = {"step_s": step, "epoch_s": step * n, "batch_size": cfg.batch_size,
                       "setting": settings[label]}
    return {"experiment": exp_id, "batches_per_epoch": n, "sampled_batches": len(picked),
            "repeats": REPEATS[mode], "arms": rows}


def arm_settings(exp_id: str, mode: str) -> dict[str, dict[str, Any]]:
    """The setting each arm of experiment ``exp_id`` trains in now
    (:meth:`~ctrlrnn.reproduce.cache_validity.Standing.setting`: model, its arguments, data and
    batch), by label; empty for an experiment no longer defined."""
    exp = next((e for e in experiments.EXPERIMENTS if e.id == exp_id), None)
    if exp is None:
        return {}
    standing = Standing(exp, mode, None)
    return {arm.label: standing.setting(arm) for arm in exp.arms}


def epoch_times(mode: str) -> dict[str, Any]:
    return {exp_id: epoch_time(exp_id, mode) for exp_id in EPOCH_TIME}


#: one claim of a speed section for the summary: (page, experiment, claim, where, verdict)
SpeedClaim = tuple[str, str, str, str, str]


def _epoch_time_lines(exp_id: str, r: dict[str, Any], machine: str,
                      claims: list[SpeedClaim], mode: str = "full") -> list[str]:
    """The page section of one epoch-time measurement ``r``; an arm measured in a setting
    ``exp_id`` no longer defines (its row records the setting) is marked *earlier setting*,
    and a measurement whose rows record none says so."""
    page, where, said = EPOCH_TIME[exp_id]
    rows = r["arms"]
    base_label = next(iter(rows))  # the experiments list the LSTM baseline first
    base = rows[base_label]["epoch_s"]
    now = arm_settings(exp_id, mode)
    earlier = [label for label, row in rows.items()
               if "setting" in row and row["setting"] != now.get(label)]
    lines = [f"### Speed: training time per epoch (`{exp_id}`)", "",
             f"One epoch is {r['batches_per_epoch']} batches of "
             f"{rows[base_label]['batch_size']}; each arm ran whole optimizer steps on the same "
             f"{r['sampled_batches']} batches spread over it, interleaved, median of "
             f"{r['repeats']} repeats, measured in one run on {machine}. "
             f"The QRNN paper ({where.removeprefix('QRNN paper, ')}): {said}.",
             ""]
    if earlier:
        lines += [f"**Earlier setting.** The times of {', '.join(earlier)} were measured in a "
                  "setting this experiment no longer defines (a model or data size, the batch "
                  "or an arm's argument has changed since); `ctrlrnn reproduce --rerun speed` "
                  "measures them again.", ""]
    if any("setting" not in row for row in rows.values()):
        lines += ["These times were measured before the speed results recorded each arm's "
                  "setting (model and arguments, data size, batch), so whether they are of the "
                  "setting this experiment defines now is not recorded here; `ctrlrnn "
                  "reproduce --rerun speed` measures them again.", ""]
    lines += [f"| arm | s per step | s per epoch | {base_label} time / arm time |",
              "|---|---|---|---|"]
    for label, row in rows.items():
        shown = f"{label} (earlier setting)" if label in earlier else label
        lines.append(f"| {shown} | {row['step_s']:.3g} | {row['epoch_s']:.3g} | "
                     f"{_ratio(base, row['epoch_s']):.2f}x |")
    qrnns, lstms = _speed_sides(now, list(rows))
    holds = [rows[q]["epoch_s"] < rows[b]["epoch_s"] for q in qrnns for b in lstms]
    verdict = speed_verdict(holds, "arms" if len(lstms) == 1 else "pairs")
    claim = (f"{' and '.join(qrnns)} train{'s' if len(qrnns) == 1 else ''} faster per epoch "
             f"than {' and '.join(f'the {b}' for b in lstms)}")
    mark = ", earlier setting" if earlier else ""
    lines += ["", f"Claim *{claim}*: **{verdict}** (on CPU{mark}).", ""]
    claims.append((page, f"Training time per epoch (`{exp_id}`)", claim, where,
                   f"{verdict} (CPU{mark})"))
    return lines


def _speed_sides(settings: dict[str, dict[str, Any]],
                 labels: list[str]) -> tuple[list[str], list[str]]:
    """The measured arms the paper's speed claim is about (its QRNNs) and those they are
    claimed faster than (every other arm measured: the LSTM baselines), by the model each
    arm's current ``settings`` (:func:`arm_settings`) name; an arm the experiment no longer
    defines is in neither."""
    qrnns = [label for label in labels if settings.get(label, {}).get("model") == "qrnn"]
    return qrnns, [label for label in labels if label in settings and label not in qrnns]


def _machine() -> str:
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"torch {torch.__version__}")


#: the parts of ``speed.json``, each measured by its function of the mode
SPEED_PARTS = ("qrnn", "rcrn", "epoch_time")


def _measures() -> dict[str, Callable[[str], dict[str, Any]]]:
    return {"qrnn": qrnn_figure4, "rcrn": rcrn_table10, "epoch_time": epoch_times}


def missing_speed_parts(mode: str, results_dir: Path) -> list[str]:
    """The parts of the speed results not yet measured in ``mode``."""
    path = results_dir / mode / "speed.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return [key for key in SPEED_PARTS if key not in data]


def forget_speed(mode: str, results_dir: Path) -> None:
    """Drop the stored speed results of ``mode``, so that they are measured again."""
    path = results_dir / mode / "speed.json"
    if path.exists():
        path.unlink()


def run_speed(mode: str, results_dir: Path, docs_dir: Path) -> dict[str, list[str]]:
    """Measure (or read cached) speed results and return the page sections."""
    path = results_dir / mode / "speed.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data.setdefault("machine", _machine())
    for key, measure in _measures().items():  # a part already measured is kept
        if key not in data:
            data[key] = measure(mode)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(files.dumps(data, indent=1), encoding="utf-8")
            tmp.replace(path)
    return speed_sections_from_results(mode, results_dir, docs_dir)


def speed_sections_from_results(mode: str, results_dir: Path,
                                docs_dir: Path) -> dict[str, list[str]]:
    """The speed sections of the pages, by page, from ``speed.json``."""
    return _speed_report(mode, results_dir)[0]


def speed_claims(mode: str, results_dir: Path) -> list[SpeedClaim]:
    """The speed claims and their verdicts, for the summary page."""
    return _speed_report(mode, results_dir)[1]


def _speed_report(mode: str, results_dir: Path) -> tuple[dict[str, list[str]], list[SpeedClaim]]:
    path = results_dir / mode / "speed.json"
    if not path.exists():
        return {}, []
    data = json.loads(path.read_text(encoding="utf-8"))
    sections: dict[str, list[str]] = {}
    claims: list[SpeedClaim] = []
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
        v = speed_verdict([x > 1 for x in q["speedup"].values()])
        lines += ["", f"Claim *QRNN is faster than the LSTM*: faster in {faster} of {total} "
                  f"cells — **{v}** (on CPU).", ""]
        sections["qrnn"] = lines
        claims.append(("qrnn", "Speed: QRNN vs LSTM inference", "QRNN is faster than the LSTM",
                       "figure 4 (right)", f"{v} (CPU)"))
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
        limit = 1.0 + SPEED_TOLERANCE
        v = speed_verdict([row["train_ratio"] <= limit for row in r["rows"].values()])
        lines += ["", f"Claim *RCRN is as fast as a 3-layer BiLSTM*: **{v}** (training time "
                  f"ratio <= {limit:.2f}, i.e. within the {SPEED_TOLERANCE:.0%} timing "
                  "tolerance of the verdict rule, at every length).", ""]
        sections["rcrn"] = lines
        claims.append(("rcrn", "Speed: RCRN vs 3-layer BiLSTM",
                       "RCRN is as fast as a 3-layer BiLSTM", "table 10", f"{v} (CPU)"))
    elif "error" in r:
        sections["rcrn"] = ["### Speed: RCRN vs 3-layer BiLSTM (table 10)", "",
                            f"Not measured: {r['error']}", ""]
    for exp_id, result in data.get("epoch_time", {}).items():
        if exp_id in EPOCH_TIME:
            page = EPOCH_TIME[exp_id][0]
            sections[page] = [*sections.get(page, []),
                              *_epoch_time_lines(exp_id, result, data["machine"], claims, mode)]
    return sections, claims
