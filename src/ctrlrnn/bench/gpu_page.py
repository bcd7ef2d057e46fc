"""``docs/gpu.md`` from the results of ``scripts/gpu-check``: the device, the CUDA tests, the
benchmarks' tables and the how-to (:data:`HOWTO`); :func:`render_page` re-renders a results file
without measuring again."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctrlrnn.bench.gpu_benchmarks import QRNN_HIDDEN, QRNN_PAPER_MAX

HOWTO = """\
## GPU check: how to run it

Run it on a machine with a CUDA GPU, from the repository root.
It needs Python with torch (a CUDA build), Triton and pytest, and no network.

```
scripts/gpu-check OUT        # e.g. scripts/gpu-check /tmp/gpu-out
```

The check does four things:

- It installs ctrlrnn from the working tree into a temporary folder, with no downloads.
  The machine's torch is not touched.
- It runs the CUDA tests: every layer forward and backward on CUDA against the CPU reference.
  They cover fp32 and bf16, lengths and packed input, the dispatch table, and `ctrlrnn train`.
- It runs the GPU benchmarks.
- It writes `OUT/results.json`, `OUT/gpu.md` and this page.

It is budgeted to finish within 8 minutes on an H100.
Each part has a time share, and benchmarks take fewer repeats when time runs low.
`PYTHON=...` picks the interpreter (default `python3`).
`--skip-install`, `--skip-tests` and `--skip-bench` leave parts out.
To render this page again from a results file:
`python -m ctrlrnn.bench.gpu_check --render OUT/results.json --page docs/gpu.md`.

Timings are medians of repeats, timed with CUDA events after a warm-up.
Rows compared with each other are timed in turn.
Every ratio on this page comes from one run on one device.
fp32 runs with TF32 off on both sides, as on the papers' K40 and GTX 1070.

The fused cells' step loops run as CUDA graphs by default.
The "step loops as CUDA graphs" rows time them against the same loops launched step by step
(`CTRLRNN_CUDA_GRAPHS=0`).
The CUDA tests check that both give the same outputs and gradients.
The other tables run with the defaults: graphs on, and RCRN's `controllers="auto"`.
"""

#: the unit comparisons of the summary: (results key, unit, what it is timed against)
SUMMARY_PAIRS = (
    ("caslstm", "CAS-LSTM", "2-layer cuDNN LSTM"),
    ("rcrn_table10", "RCRN", "3-layer cuDNN BiLSTM"),
    ("carnn", "CARNN (nCARNN)", "cuDNN LSTM"),
    ("metagross", "METAGROSS", "cuDNN LSTM"),
    ("metagross_state", "METAGROSS as printed", "cuDNN LSTM"),
)


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ratio(slow: float | None, fast: float | None) -> float | None:
    if not slow or not fast:
        return None
    return slow / fast


def _qrnn_tables(q: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    batches, lengths, cells = q.get("batch", []), q.get("length", []), q.get("cells", {})
    for kind, label in (("infer", "inference"), ("train", "training (forward + backward)")):
        lines += [f"**{label}**: cuDNN LSTM time / QRNN time (above 1: the QRNN is faster)", "",
                  "| batch \\ length | " + " | ".join(str(t) for t in lengths) + " |",
                  "|---|" + "---:|" * len(lengths)]  # fmt: skip
        for b in batches:
            row = []
            for t in lengths:
                c = cells.get(f"{b}x{t}")
                row.append(_f(_ratio(c[f"lstm_{kind}_ms"], c[f"qrnn_{kind}_ms"]), 1) if c else "-")
            lines.append(f"| {b} | " + " | ".join(row) + " |")
        lines.append("")
    small = [
        _ratio(c["lstm_infer_ms"], c["qrnn_infer_ms"])
        for k, c in cells.items() if int(k.split("x")[0]) <= 32
    ]  # fmt: skip
    small = [s for s in small if s]
    if small:
        lines += [f"At batch 8-32 the inference speedup ranges {min(small):.1f}x-"
                  f"{max(small):.1f}x (paper: up to {q.get('paper_max', QRNN_PAPER_MAX):.0f}x on "
                  "a K40).", ""]  # fmt: skip
    if q.get("skipped"):
        lines += [f"Not measured (time budget): {', '.join(q['skipped'])}.", ""]
    return lines


def _pair_table(d: dict[str, Any], paper: bool = False) -> list[str]:
    head = "| batch | length | width | train ms (ours) | train ms (baseline) | train ratio |" \
        " inference ms (ours) | inference ms (baseline) | inference ratio |"
    sep = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if paper:
        head += " paper train ratio | paper inference ratio |"
        sep += "---:|---:|"
    lines = [f"{d.get('ours', 'ours')} against {d.get('baseline', 'the baseline')}; ratio = "
             "our time / baseline time (below 1: faster than the baseline).", "", head, sep]
    for r in d.get("rows", []):
        cells = [r["batch"], r["length"], r["width"], _f(r["ours_train_ms"]),
                 _f(r["base_train_ms"]), _f(_ratio(r["ours_train_ms"], r["base_train_ms"])),
                 _f(r["ours_infer_ms"]), _f(r["base_infer_ms"]),
                 _f(_ratio(r["ours_infer_ms"], r["base_infer_ms"]))]  # fmt: skip
        if paper:
            cells += [_f(r.get("paper_train_ratio")), _f(r.get("paper_infer_ratio"))]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if d.get("skipped"):
        lines += ["", f"Not measured (time budget): {', '.join(d['skipped'])}."]
    return [*lines, ""]


def _graphs_table(d: dict[str, Any]) -> list[str]:
    """The fused cells' step loops launched per step against the same loops as CUDA graphs."""
    lines = ["The same model with its step loops launched step by step from Python "
             "(`CTRLRNN_CUDA_GRAPHS=0`) and replayed as CUDA graphs "
             f"(`CTRLRNN_CUDA_GRAPHS=1`, the default), beside {d.get('baseline', 'the baseline')}; "
             "graphs / launched below 1: the graphs are faster.", "",
             "| model | batch | length | width | train ms launched | train ms graphs | "
             "graphs / launched | train ms cuDNN | graphs / cuDNN | inference ms launched | "
             "inference ms graphs | graphs / launched | inference ms cuDNN | graphs captured |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in d.get("rows", []):
        cells = [r["model"], r["batch"], r["length"], r["width"], _f(r["launched_train_ms"]),
                 _f(r["graphs_train_ms"]), _f(_ratio(r["graphs_train_ms"], r["launched_train_ms"])),
                 _f(r["base_train_ms"]), _f(_ratio(r["graphs_train_ms"], r["base_train_ms"])),
                 _f(r["launched_infer_ms"]), _f(r["graphs_infer_ms"]),
                 _f(_ratio(r["graphs_infer_ms"], r["launched_infer_ms"])),
                 _f(r["base_infer_ms"]), r.get("captures", "-")]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if d.get("skipped"):
        lines += ["", f"Not measured (time budget): {', '.join(d['skipped'])}."]
    return [*lines, ""]


def _section(title: str, d: dict[str, Any] | None, body: Callable[[dict[str, Any]], list[str]]
             ) -> list[str]:  # fmt: skip
    lines = [f"### {title}", ""]
    if not d:
        return [*lines, "Not run.", ""]
    if "error" in d:
        return [*lines, f"Failed: `{d['error']}`", ""]
    return lines + body(d)


def _scan_body(s: dict[str, Any]) -> list[str]:
    Bn, Tn, C = s["shape"]
    verdict = _goal_verdict(s, "fraction")
    return [f"Linear scan forward + backward at B={Bn}, T={Tn}, C={C} ({s['dtype']}): "
            f"{_f(s['scan']['median_ms'])} ms, moving {s['bytes'] / 1e9:.2f} GB (8 passes: read "
            "a, b, write h; read the output gradient, a, h, write da, db) at "
            f"{s['scan_gbps']:.0f} GB/s. The device's copy bandwidth in the same run (torch copy "
            f"of the same bytes): {s['copy_gbps']:.0f} GB/s. The scan reaches "
            f"**{100 * s['fraction']:.0f}%** of it through the autograd op, which {verdict} the "
            f"goal of {100 * s.get('goal', 0.8):.0f}%.", "", *_scan_kernels_line(s),
            *_scan_steady_line(s)]  # fmt: skip


def _goal_verdict(s: dict[str, Any], key: str) -> str:
    """Whether the scan's ``s[key]`` share of the copy bandwidth meets its goal."""
    return "meets" if s[key] >= s.get("goal", 0.8) else "is below"


def _scan_kernels_line(s: dict[str, Any]) -> list[str]:
    """The kernels-alone measurement (results from before it existed have none)."""
    if "kernels_fraction" not in s:
        return []
    verdict = _goal_verdict(s, "kernels_fraction")
    k = s["kernels"]
    return [f"The two Triton kernels alone (forward and backward launchers called back to back, "
            f"{k['pairs']} pairs per timed sample, no autograd): {_f(k['pair_ms'])} ms per pair, "
            f"{s['kernels_gbps']:.0f} GB/s, **{100 * s['kernels_fraction']:.0f}%** of the copy "
            f"bandwidth, which {verdict} the goal. The difference between the two figures is the "
            "autograd op's own cost per call (Python, the autograd engine, launches), which one "
            "call at this size does not hide.", ""]  # fmt: skip


def _scan_steady_line(s: dict[str, Any]) -> list[str]:
    """The autograd op called back to back (results from before it existed have none)."""
    if "steady_fraction" not in s:
        return []
    verdict = _goal_verdict(s, "steady_fraction")
    k = s["steady"]
    return [f"The autograd op called back to back, as a training loop calls it ({k['calls']} "
            f"forward+backward calls per timed sample, so the CPU's work runs ahead of the GPU): "
            f"{_f(k['call_ms'])} ms per call, {s['steady_gbps']:.0f} GB/s, "
            f"**{100 * s['steady_fraction']:.0f}%** of the copy bandwidth, which {verdict} the "
            "goal.", ""]  # fmt: skip


def _span(values: list[float]) -> str:
    """A range of speed-ups as ``1.2x-3.4x`` (one value: ``1.2x``; none: ``-``)."""
    values = [v for v in values if v]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:.1f}x" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}x-{high:.1f}x"


def summary_rows(bench: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(unit, baseline, training speed-up, inference speed-up) of every unit measured; a
    speed-up is the baseline's time over ours, as a range over the shapes timed."""
    rows: list[tuple[str, str, str, str]] = []
    q = bench.get("qrnn_fig4")
    if isinstance(q, dict) and q.get("cells"):
        cells = list(q["cells"].values())
        rows.append(("QRNN", "cuDNN LSTM",
                     _span([_ratio(c["lstm_train_ms"], c["qrnn_train_ms"]) for c in cells]),
                     _span([_ratio(c["lstm_infer_ms"], c["qrnn_infer_ms"]) for c in cells])))
    for key, unit, against in SUMMARY_PAIRS:
        d = bench.get(key)
        if not isinstance(d, dict) or not d.get("rows"):
            continue
        rows.append((unit, against,
                     _span([_ratio(r["base_train_ms"], r["ours_train_ms"]) for r in d["rows"]]),
                     _span([_ratio(r["base_infer_ms"], r["ours_infer_ms"]) for r in d["rows"]])))
    return rows


def _summary(bench: dict[str, Any]) -> list[str]:
    """The page's answer first: each unit's speed against cuDNN, and the scan's bandwidth."""
    rows = summary_rows(bench)
    if not rows:
        return []
    lines = ["## Summary", "",
             "Speed-up = cuDNN's time / ctrlrnn's time, over the shapes timed below.",
             "Above 1, ctrlrnn is faster.", "",
             "| unit | against | training speed-up | inference speed-up |",
             "|---|---|---:|---:|"]
    lines += [f"| {unit} | {against} | {train} | {infer} |"
              for unit, against, train, infer in rows]
    scan = bench.get("scan")
    if isinstance(scan, dict) and "fraction" in scan:
        goal = 100 * scan.get("goal", 0.8)
        lines += ["", f"The linear scan reaches {100 * scan['fraction']:.0f}% of the copy "
                  f"bandwidth through its autograd op, against a goal of {goal:.0f}%."]
        if "kernels_fraction" in scan:
            lines.append(f"Its kernels alone reach {100 * scan['kernels_fraction']:.0f}%.")
    return [*lines, ""]


def render_page(results: dict[str, Any] | None) -> str:
    """``docs/gpu.md`` from a results dict (None: the page before any GPU run)."""
    lines = ["# ctrlrnn on the GPU", ""]
    if not results:
        lines += ["No GPU run has happened yet: the Triton kernels are tested in Triton's CPU "
                  "interpreter in CI (`tests/gpu/`), and the dispatch table by a test that mocks "
                  "CUDA. The first run of the check below replaces this page with its results.",
                  "", HOWTO]  # fmt: skip
        return "\n".join(lines)
    bench = results.get("bench", {})
    env = bench.get("environment", {}) if isinstance(bench, dict) else {}
    changed = results.get("changed") or []
    plus = f" with uncommitted changes to {', '.join(f'`{c}`' for c in changed)}" if changed else ""
    lines += _summary(bench if isinstance(bench, dict) else {})
    lines += ["## The run", "",
              f"Measured by `scripts/gpu-check` on {results.get('started', '?')}.",
              f"Commit `{(results.get('commit') or '?')[:12]}`{plus}.",
              f"The check took {_f(results.get('elapsed_s'), 0)} s in all.", "",
              "| | |", "|---|---|",
              f"| device | {env.get('device', '?')} (compute capability "
              f"{env.get('capability', '?')}, {env.get('sms', '?')} SMs, "
              f"{env.get('memory_gib', '?')} GiB) |",
              f"| torch | {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}, cuDNN "
              f"{env.get('cudnn', '?')}) |",
              f"| triton | {env.get('triton', '?')} |",
              f"| python | {env.get('python', '?')} |"]  # fmt: skip
    inst = results.get("install")
    if inst:
        lines.append(f"| install | {inst['mode']} ({inst['seconds']} s) |")
    for fam, line in (env.get("cuda_backends") or {}).items():
        lines.append(f"| CUDA backend: {fam} | {line} |")
    lines.append("")
    tests = results.get("tests")
    lines += ["## CUDA tests", ""]
    if tests:
        status = "all passed" if tests.get("ok") else "**FAILURES**"
        lines += [f"`{tests['command']}`: {tests['passed']} passed, {tests['failed']} failed, "
                  f"{tests['errors']} errors, {tests['skipped']} skipped ({tests['seconds']} s): "
                  f"{status}.", ""]  # fmt: skip
        for name in tests.get("failing", [])[:40]:
            lines.append(f"- failed: `{name}`")
        if tests.get("failing"):
            lines.append("")
    else:
        lines += ["Not run.", ""]
    lines += ["## Benchmarks", ""]
    if isinstance(bench, dict) and "error" in bench:
        lines += [f"Failed: `{bench['error']}`", ""]
    else:
        st = bench.get("settings", {})
        lines += [f"Timer: {st.get('timer', '?')}, {st.get('statistic', '?')} of repeats after "
                  f"a warm-up; TF32 {'on' if st.get('tf32') else 'off'}; fp32.", ""]
        lines += _section("Linear scan vs copy bandwidth", bench.get("scan"), _scan_body)
        lines += _section(f"QRNN vs cuDNN LSTM (QRNN paper figure 4, {QRNN_HIDDEN} units)",
                          bench.get("qrnn_fig4"), _qrnn_tables)  # fmt: skip
        lines += _section("RCRN vs 3-layer cuDNN BiLSTM (RCRN paper table 10)",
                          bench.get("rcrn_table10"), lambda d: _pair_table(d, paper=True))
        lines += _section("RCRN with its controllers on cuDNN vs 3-layer cuDNN BiLSTM",
                          bench.get("rcrn_native"), _pair_table)
        lines += _section("CAS-LSTM vs 2-layer cuDNN LSTM", bench.get("caslstm"), _pair_table)
        lines += _section("CARNN (nCARNN) vs cuDNN LSTM", bench.get("carnn"), _pair_table)
        lines += _section("METAGROSS vs cuDNN LSTM", bench.get("metagross"), _pair_table)
        lines += _section("METAGROSS as printed (gates='state') vs cuDNN LSTM",
                          bench.get("metagross_state"), _pair_table)
        lines += _section("The fused cells' step loops as CUDA graphs",
                          bench.get("cells_graphs"), _graphs_table)
    lines += [HOWTO]
    return "\n".join(lines)


def render_file(results_path: Path, page: Path) -> None:
    """Re-render ``page`` from a results file."""
    page.write_text(render_page(json.loads(Path(results_path).read_text())))
