"""The method part of BENCHMARKS.md: how the run was made, the machine, the roofline, what
each number is and the cases; and the small helpers its text needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctrlrnn.bench.result_rows import MIB, time_rows


def md_table(headers: list[str], rows: Iterable[list[str]]) -> list[str]:
    """A Markdown table of ``headers`` and ``rows`` (``|`` inside a cell escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return lines


def method_lines(doc: dict[str, Any], source: str | None) -> list[str]:
    """The "Method" and "Machine" sections: the run, how to make it again, and the machine
    it ran on (``source``: the result JSON's path)."""
    m = doc["machine"]
    mem_gb = (m.get("memory_bytes") or 0) / 1e9
    asked = doc.get("settings", {}).get("threads")
    threads_how = "the default" if asked is None else f"set by --threads {asked}"
    lines: list[str] = [
        "## Method",
        "",
        f"Measured by `ctrlrnn bench` ({doc['grid']} grid, {doc['dtype']}) on {doc['created']}"
        + (f", results in `{source}`" if source else "")
        + ". Every number below comes from that one run on the machine described here; the "
        "ratios compare rows measured in the same process, interleaved at each grid point. "
        "Absolute times are for this machine only: compare the ratios. A single run is one "
        "draw: re-run before trusting a difference of a few percent (every sample is in the "
        "JSON).",
        "",
        f"Reproduce: `ctrlrnn bench` (the {doc['grid']} grid took {doc.get('elapsed_s', 0):.0f} s "
        "in this run) "
        "or `ctrlrnn bench --full`; "
        "`ctrlrnn bench --from RESULTS.json --markdown BENCHMARKS.md` rewrites this page from a "
        "saved run.",
        "",
        "## Machine",
        "",
        f"- CPU: {m.get('cpu_model')}, {m.get('physical_cores')} physical cores, "
        f"{m.get('logical_cpus')} logical CPUs ({m.get('cpus_available')} available to the "
        f"process), {mem_gb:.1f} GB memory"
        + (f"; vector extensions: {', '.join(m['cpu_isa'])}" if m.get("cpu_isa") else ""),
        f"- {m.get('platform')}, Python {m.get('python')}",
        f"- torch {m.get('torch')}, {m.get('torch_threads')} intra-op threads "
        f"(torch.get_num_threads(), {threads_how}), "
        f"{m.get('torch_interop_threads')} inter-op threads",
        "- load average (1, 5, 15 min) when the run started: "
        f"{_load(m.get('load_average_at_start'))}, "
        f"when it ended (this includes the run itself): {_load(doc.get('load_average_at_end'))}"
        + _elsewhere(m.get("busy_cpus_elsewhere_at_start")),
        f"- ctrlrnn {m.get('ctrlrnn_version')}, git {m.get('git_commit')}",
        *backend_lines(m.get("backend")),
    ]
    par = [ln for ln in m.get("torch_parallel_info", []) if "backend" in ln or "Library" in ln]
    if par:
        lines.append("- torch parallel: " + "; ".join(par))
    return lines


def roofline_lines(doc: dict[str, Any]) -> list[str]:
    """The "Roofline" section: the GEMM rate and copy bandwidth of the run, and the floor of
    a row they make."""
    roof = doc["roofline"]
    return [
        "",
        "## Roofline (measured in the same run)",
        "",
        "Both rates were measured at the start and again at the end of the run, and the copy "
        "before every timed point too; the floors use the higher of the two GEMM rates (the "
        "tighter floor) and the median of all the copy samples"
        + (
            f" (GEMM {doc['roofline_start']['gemm_gflops']:.1f} then "
            f"{doc['roofline_end']['gemm_gflops']:.1f} GFLOP/s; copy at the start "
            f"{doc['roofline_start']['copy_gb_per_s']:.1f}, at the end "
            f"{doc['roofline_end']['copy_gb_per_s']:.1f} GB/s)."
            if "roofline_start" in doc and "roofline_end" in doc
            else "."
        ),
        "",
        f"- GEMM: **{roof['gemm_gflops']:.1f} GFLOP/s**, median of "
        f"{len(roof['gemm_samples_s'])} products (the faster of `torch.mm` and oneDNN) of "
        f"{' x '.join(map(str, roof['gemm_shape']))} (M x K x N, 2*M*K*N FLOPs each).",
        f"- Copy bandwidth: **{roof['copy_gb_per_s']:.1f} GB/s**, median of "
        f"{len(roof['copy_samples_s'])} `dst.copy_(src)` of {roof['copy_bytes'] / MIB:.0f} MiB "
        "(bytes read + bytes written, per second) taken all through the run (at the start, "
        "before every timed point, at the end)"
        + _copy_range(roof),
        *(
            [
                f"- For reference, not in the floor: `src.clone()` of the same size, which "
                f"writes into freshly allocated memory each call as most ops do, ran at "
                f"{roof['clone_gb_per_s']:.1f} GB/s. Where that is far below the copy bandwidth, "
                "first-touching new memory (page faults) is expensive on this machine, and a "
                "bandwidth-bound op that allocates its outputs on every call cannot get near "
                "its floor. ctrlrnn's compiled kernels therefore take outputs of 1 MiB or more "
                "from a cache of freed blocks (`ctrlrnn.output_cache_info()`; README), and kernels "
                "writing more than a quarter of the last-level cache, and at most 4 MiB per "
                "thread, use streaming stores (`CTRLRNN_STREAMING_BYTES` sets the bytes).",
            ]
            if roof.get("clone_gb_per_s")
            else []
        ),
        "",
        "The floor of a row is `matmul FLOPs / GEMM rate + elementwise bytes / copy bandwidth`. "
        "Each case declares its FLOPs (forward; backward = 2x forward for the weight and input "
        "gradients) and the fewest elementwise bytes a fused implementation must move "
        "(listed below). `time / floor` = 1.00x would be running at the floor. The GEMM rate "
        "of each row is the faster of torch's BLAS and oneDNN measured at that row's own "
        "point, at its input projection's shape `(B*T) x C` times `C x 4C` (the rates above "
        "are at the fixed shape, for the machine's record). Where a row was timed again in fresh "
        "processes (the targets' points), each process measures that rate again before its rows, "
        "and its time over the floor divides the row's FLOPs by its own rate: the rate moves "
        "between processes and runs, and a ratio takes its numerator and divisor from one "
        "process. A row whose per-step products run "
        "below that rate (small batches) cannot reach 1.00x; a row far above it is losing time "
        "outside its GEMMs and minimal elementwise traffic (per-step overhead, extra passes, "
        "allocation).",
        "",
    ]


def definitions_lines(doc: dict[str, Any]) -> list[str]:
    """The "What each number is" section."""
    return [
        "## What each number is",
        "",
        "- **fwd**: median wall time of the forward pass under `torch.no_grad()` (inference), "
        f"after {repeats_text(doc)}.",
        "- **fwd+bwd**: median wall time of the forward pass with autograd plus "
        "`torch.autograd.backward` of the output with a fixed random gradient (input, weights "
        "and scan inputs all require grad).",
        "- Rows at the same (B, T, C) are built together and timed in turn, one sample of "
        "each at a time (A, B, C, A, B, C, ...; forwards first, then forward+backward "
        "passes), so a change in load from other processes falls on the compared rows alike.",
        "- **/ floor**: measured median divided by the roofline floor of that row.",
        "- **CPU share**: median over the fwd+bwd repeats of process CPU time / (wall time x "
        "threads). Near 100%: the row had its CPUs to itself and kept them busy; well below: "
        "other processes took the CPUs or threads sat waiting, and that row's time is "
        "inflated.",
        "- **speed-up vs X**: X's median divided by this row's median, same point, same run "
        "(> 1: this row is faster). Layer rows compare to `torch.nn.LSTM` of the same width; "
        "the compiled scan compares to the Python loop.",
        "- B = batch, T = sequence length, C = width (input size = hidden size, or channels of "
        "the scan).",
        "",
    ]


def cases_lines(doc: dict[str, Any]) -> list[str]:
    """The "Cases" section: each case's kind, rows in this run and description."""
    lines: list[str] = []
    cases = doc.get("cases", {})
    if cases:
        lines += ["### Cases", ""]
        counts: dict[str, int] = {}
        for r in doc.get("results", []):
            counts[r["case"]] = counts.get(r["case"], 0) + 1
        lines += md_table(
            ["case", "kind", "rows in this run", "description"],
            [
                [f"`{n}`", c["kind"], str(counts.get(n, 0)), c["description"]]
                for n, c in cases.items()
            ],
        )
        lines += [
            "",
            "Elementwise bytes per (batch, step, unit), in values of the dtype, forward + "
            "backward: LSTM 7 + 10, GRU 8 + 12, QRNN f 3 + 6, fo 5 + 8, ifo 6 + 10, linear "
            "scan 3 + 5 (32 bytes per element in fp32).",
            "",
        ]
    return lines


def _load(v: Any) -> str:
    if not v:
        return "unknown"
    return ", ".join(f"{x:.2f}" for x in v)


def _elsewhere(busy: float | None) -> str:
    if busy is None:
        return ""
    return (f"; CPUs kept busy by other processes over half a second at the start: {busy:.2f} "
            "(the load average trails the last minute)")


def repeats_text(doc: dict[str, Any]) -> str:
    """How many warm-up calls and timed repeats the medians are over, in words."""
    st = doc.get("settings", {})
    n, warm, budget = st.get("repeats"), st.get("warmup"), st.get("max_seconds")
    text = f"{warm} warm-up call(s), over {n} timed repeats"
    if budget is not None and n is not None and n > 3:
        text += (
            f" (at least 3: a measurement stops adding repeats once they have taken {budget:g} s)"
        )
    over = [
        f"`{name}` {c['warmup']} warm-up, {c.get('min_repeats') or 3} to {c['max_repeats']} repeats"
        for name, c in doc.get("cases", {}).items()
        if c.get("warmup") is not None or c.get("max_repeats") is not None
    ]
    if over:
        text += "; except " + ", ".join(over) + " (too slow for more)"
    repeats = [
        r[m]["repeats"]
        for r in time_rows(doc)
        if r.get("status") == "ok"
        for m in ("fwd", "fwdbwd")
    ]
    if repeats:
        text += f"; repeats actually taken: {min(repeats)} to {max(repeats)}"
    return text


def _yes(v: Any) -> str:
    return "yes" if v else "no"


def backend_lines(backend: Any) -> list[str]:
    """The ctrlrnn backend of a run (``ctrlrnn.backend_info()``) as a short Markdown list: the
    compiler and cache, each kernel family's CPU and CUDA status, and how many GEMM shape
    classes went to each path (the full map stays in the result JSON)."""
    if not isinstance(backend, dict):
        return ["- ctrlrnn backend: not recorded"]
    head = (f"- ctrlrnn backend: compiled kernels cached in `{backend.get('cache')}`, compiler "
            f"`{backend.get('compiler') or 'none found'}`; reference forced: "
            f"{_yes(backend.get('forced_reference'))}, compiled kernels required: "
            f"{_yes(backend.get('require_compiled'))}")
    lines = [head]
    for name, fam in (backend.get("families") or {}).items():
        if not isinstance(fam, dict):
            continue
        what = f" ({fam['ops']})" if fam.get("ops") else ""
        threads = (f", {fam['parallel_threads']} parallel threads"
                   if fam.get("parallel_threads") else "")
        lines.append(f"  - `{name}`{what}: CPU {fam.get('cpu')}, {fam.get('reason')}{threads}; "
                     f"CUDA: {fam.get('cuda')}")
    cuda = backend.get("cuda")
    if isinstance(cuda, dict):
        lines.append(f"  - CUDA device: {cuda.get('device') or 'none'}; Triton: "
                     f"{cuda.get('triton') or 'not installed'}"
                     + (f"; step loops as CUDA graphs: {cuda['step_graphs']}"
                        if cuda.get("step_graphs") else ""))
    g = backend.get("gemm")
    if isinstance(g, dict):
        classes = g.get("classes") or {}
        counts: dict[str, int] = {}
        for v in classes.values():
            path = v.get("path", "?") if isinstance(v, dict) else str(v)
            counts[path] = counts.get(path, 0) + 1
        split = ", ".join(f"{n} {p}" for p, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines.append(f"  - GEMM path: `{g.get('forced')}` (`CTRLRNN_GEMM` requested "
                     f"`{g.get('requested')}`), oneDNN usable: {_yes(g.get('onednn_usable'))}; "
                     f"{len(classes)} shape classes measured on this CPU"
                     + (f": {split}" if split else "")
                     + " (each class and its BLAS/oneDNN time ratio: `machine.backend.gemm` in "
                     "the result JSON)")
    return lines


def _copy_range(roof: dict[str, Any]) -> str:
    """"; single samples ranged A-B GB/s." for the copy samples of a roofline, else "."."""
    samples = roof.get("copy_samples_s") or []
    if not samples:
        return "."
    nbytes = 2 * roof["copy_bytes"]
    return f"; single samples ranged {nbytes / max(samples) / 1e9:.0f}-" \
        f"{nbytes / min(samples) / 1e9:.0f} GB/s."
