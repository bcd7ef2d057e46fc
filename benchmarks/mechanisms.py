"""What each mechanism of the tuned CPU runtime gives: ``ctrlrnn bench`` with it switched off,
against the tuned runtime, on the same grid.

Usage::

    python benchmarks/mechanisms.py [--grid quick|tiny] [--only PATTERN] [--out-dir DIR]
                                    [--variants tuned,no-poly-exp,...]
    python benchmarks/mechanisms.py --from-dir DIR          # the table of a finished run
    python benchmarks/mechanisms.py --pair LABEL=BASE.json,OTHER.json   # two saved runs
    python benchmarks/mechanisms.py --pair LABEL=B1.json+B2.json,O1.json+O2.json  # repeats

Each variant runs ``python -m ctrlrnn bench --<grid> --processes 0`` in a fresh process with
the variant's settings (``--out DIR/<variant>.json``); the variants run one after another, so
run it on an idle machine. The table gives, per variant, the median over the benchmark's rows
of ``time(variant) / time(tuned)`` for the forward and the forward+backward timings, their
range, and how many rows ran more than 5% slower without the mechanism: a ratio above 1 is the
mechanism's gain. The torch baselines' rows, which no mechanism touches, give the noise level
beside each. ``--pair`` compares two saved results files (say ``CTRLRNN_GEMM=blas``
against ``auto`` on one commit) the same way; a side given as several files joined by ``+``
(runs of one configuration repeated, alternating with the other side's) takes each row's
median over them first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: Variant -> the settings that switch its mechanism off (docs/environment.md).
VARIANTS: dict[str, dict[str, str]] = {
    "tuned": {},
    "plain": {"CTRLRNN_RUNTIME": "plain"},  # every mechanism off at once
    "no-output-cache": {"CTRLRNN_OUTPUT_CACHE_MB": "0"},  # huge pages go with it
    "no-huge-pages": {"CTRLRNN_HUGE_PAGES": "0"},
    "no-streaming-stores": {"CTRLRNN_STREAMING_BYTES": "-1"},
    # the GEMM chooser's candidates (oneDNN, BLAS on one thread, the tiny kernel) off
    "gemm-blas-only": {"CTRLRNN_GEMM": "blas"},
    "no-packed-gemm": {"CTRLRNN_RUNTIME_OFF": "packed_gemm"},
    "no-poly-exp": {"CTRLRNN_RUNTIME_OFF": "poly_exp"},
    "no-stacked-outputs": {"CTRLRNN_RUNTIME_OFF": "stacked_outputs"},
}


#: The benchmark's torch baselines: no ctrlrnn kernel runs in them, so their ratios show the
#: run-to-run noise the ratios of ctrlrnn's rows sit in.
TORCH_CASES = {"lstm", "gru", "lstm2", "lstm3bi", "rcrn_torch_lstms", "scan_loop",
               "scan_loop_unbind", "scan_ref"}


def _rows(path: Path, torch_rows: bool = False) -> dict[tuple, dict[str, float]]:
    """(case, batch, length, width) -> {"fwd": median s, "fwdbwd": median s} of a results file:
    ctrlrnn's rows, or with ``torch_rows`` the torch baselines'."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out: dict[tuple, dict[str, float]] = {}
    for r in doc.get("results", []):
        if r.get("kind") != "time" or r.get("status") != "ok":
            continue
        if (r["case"] in TORCH_CASES) != torch_rows:
            continue
        key = (r["case"], r.get("batch"), r.get("length"), r.get("width"))
        out[key] = {k: r[k]["median_s"] for k in ("fwd", "fwdbwd")
                    if isinstance(r.get(k), dict) and r[k].get("median_s")}
    return out


def _median_rows(paths: list[Path], torch_rows: bool = False) -> dict[tuple, dict[str, float]]:
    """Each row's median over the runs of ``paths`` (runs of one configuration repeated, so that
    one run's drift does not decide a ratio), over the runs that timed it."""
    runs = [_rows(p, torch_rows) for p in paths]
    out: dict[tuple, dict[str, float]] = {}
    for key in set().union(*runs):
        kinds: dict[str, list[float]] = {}
        for run_rows in runs:
            for kind, t in run_rows.get(key, {}).items():
                kinds.setdefault(kind, []).append(t)
        out[key] = {kind: statistics.median(ts) for kind, ts in kinds.items()}
    return out


def ratios(base: Path | list[Path], other: Path | list[Path],
           torch_rows: bool = False) -> dict[str, list[float]]:
    """time(other) / time(base) of every row both sides timed, per measurement kind; a side
    given as several files (repeated runs) takes each row's median over them."""
    a = _median_rows(base if isinstance(base, list) else [base], torch_rows)
    b = _median_rows(other if isinstance(other, list) else [other], torch_rows)
    out: dict[str, list[float]] = {"fwd": [], "fwdbwd": []}
    for key in sorted(set(a) & set(b)):
        for kind in out:
            if kind in a[key] and kind in b[key]:
                out[kind].append(b[key][kind] / a[key][kind])
    return out


def line(label: str, r: dict[str, list[float]]) -> str:
    """One table row: median, range and rows over 1.05 per kind."""
    cells = [label]
    for kind in ("fwd", "fwdbwd"):
        v = r[kind]
        if not v:
            cells.append("-")
            continue
        slower = sum(x > 1.05 for x in v)
        cells.append(f"{statistics.median(v):.3f} ({min(v):.2f}-{max(v):.2f}; "
                     f"{slower}/{len(v)} > 1.05)")
    return "| " + " | ".join(cells) + " |"


def table(rows: list[tuple[str, dict[str, list[float]]]]) -> str:
    head = ["| mechanism off | fwd: median ratio (range; rows > 1.05) | fwd+bwd: the same |",
            "|---|---|---|"]
    return "\n".join(head + [line(label, r) for label, r in rows])


def chosen_variants(text: str) -> list[str]:
    """The variants a comma list names (all of :data:`VARIANTS` for an empty one), in the
    order of :data:`VARIANTS`; an unknown name is an error naming ``--variants``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: {', '.join(unknown)} not among {', '.join(VARIANTS)}")
    return [n for n in VARIANTS if not names or n in names]


def run(grid: str, only: list[str], out_dir: Path, variants: list[str] | None = None) -> None:
    """The bench run of each of ``variants`` (default: all) into ``out_dir``, in fresh
    processes, one after another."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in variants or list(VARIANTS):
        env = VARIANTS[name]
        cmd = [sys.executable, "-m", "ctrlrnn", "bench", f"--{grid}", "--processes", "0",
               "--out", str(out_dir / f"{name}.json")]
        for pattern in only:
            cmd += ["--only", pattern]
        print(f"[mechanisms] {name}: {' '.join(f'{k}={v}' for k, v in env.items()) or '-'}",
              flush=True)
        subprocess.run(cmd, env={**os.environ, **env}, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", choices=("quick", "tiny"), default="quick")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN")
    p.add_argument("--out-dir", type=Path, default=Path("bench-results/mechanisms"))
    p.add_argument("--variants", default="", metavar="NAME,...",
                   help=f"run only these variants (comma list of {', '.join(VARIANTS)}; "
                        "default all; the table needs tuned in the folder)")
    p.add_argument("--from-dir", type=Path, help="do not measure: tabulate this folder's runs")
    p.add_argument("--pair", action="append", default=[], metavar="LABEL=BASE,OTHER",
                   help="tabulate time(OTHER) / time(BASE) of two saved results files (or "
                        "of each row's median over several, joined by +)")
    args = p.parse_args(argv)
    if args.pair:
        rows = []
        for spec in args.pair:
            label, _, files = spec.partition("=")
            base, other = ([Path(f) for f in side.split("+")] for side in files.split(","))
            rows.append((label, ratios(base, other)))
            rows.append((f"{label}: torch rows (noise)", ratios(base, other, True)))
        print(table(rows))
        return 0
    folder = args.from_dir or args.out_dir
    if args.from_dir is None:
        run(args.grid, args.only, folder, chosen_variants(args.variants))
    base = folder / "tuned.json"
    rows = []
    for name in VARIANTS:
        if name != "tuned" and (folder / f"{name}.json").is_file():
            rows.append((name, ratios(base, folder / f"{name}.json")))
            rows.append((f"{name}: torch rows (noise)", ratios(base, folder / f"{name}.json",
                                                               True)))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
