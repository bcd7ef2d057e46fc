"""``ctrlrnn bench --overhead``: the fixed host cost per call, at shapes where the work is tiny.

Each ctrlrnn layer and cell is timed against ``torch.nn.LSTM`` / ``nn.GRU`` (layers) or
``nn.LSTMCell`` (cells) at the same shape: batch 1, ``T`` 1 and 8, width 8 and 64, forward
without grad and forward + backward, always with carried state (the state a previous call
returned, as a decoder passes it). The translation model's greedy decoding at batch 1 is timed
against its readable loop over its readable step (the same tokens; the row's ``T`` is the
number of tokens decoded). Every pair is measured interleaved in one process: each
repeat times ``calls`` calls of ctrlrnn, then ``calls`` of torch, and the row's ratio is the
median over repeats of the per-repeat ratios, so a loaded machine slows both sides alike.

:func:`profile_summary` says where the time of one call goes (cProfile over many calls):
ctrlrnn's Python frames, torch's Python frames, the calls into torch's C++ (the dispatcher
and the kernels behind it), and autograd ``Function.apply``.

A timing is never a test: ``--tiny`` (one width, ``T`` 1, one repeat) only checks the table.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["COLUMNS", "Row", "measure", "print_rows", "profile_summary", "rows_markdown",
           "run"]

#: The table's columns, in order.
COLUMNS = ("case", "against", "H", "T", "mode", "ctrlrnn_us", "torch_us", "ratio")

#: The grids: widths, lengths, repeats and calls per repeat.
GRIDS: dict[str, dict[str, Any]] = {
    "tiny": {"widths": (8,), "lengths": (1,), "repeats": 1, "calls": 2, "modes": ("fwd",)},
    "quick": {"widths": (8, 64), "lengths": (1, 8), "repeats": 21, "calls": 50,
              "modes": ("fwd", "fwd+bwd")},
}


@dataclass
class Row:
    """One measured pair."""

    case: str
    against: str
    H: int
    T: int
    mode: str
    ctrlrnn_us: float
    torch_us: float

    @property
    def ratio(self) -> float:
        return self.ctrlrnn_us / self.torch_us if self.torch_us else float("nan")

    def cells(self) -> list[str]:
        return [self.case, self.against, str(self.H), str(self.T), self.mode,
                f"{self.ctrlrnn_us:.1f}", f"{self.torch_us:.1f}", f"{self.ratio:.2f}x"]


# ------------------------------------------------------------------ the callables timed

Step = Callable[[], Any]


def _layer_step(module: nn.Module, x: torch.Tensor, extra: tuple[Any, ...] = (),
                hx_pos: int = 1) -> Step:
    """A call of a layer on ``x`` with the state of its previous call (carried state)."""
    with torch.no_grad():
        out = module(x, *extra)
    state = _detach(out[1])

    def step() -> Any:
        args = list((x, *extra))
        args.insert(hx_pos, state)
        return module(*args)

    return step


def _cell_step(module: nn.Module, x: torch.Tensor, kind: str, extra: Any = None) -> Step:
    """One step of a cell with the state of its previous step."""
    with torch.no_grad():
        if kind == "carnn":
            state: Any = _detach(module(x, extra))
        elif kind == "cas":
            state = _detach(module(x, extra)[1])
        elif kind == "torch":
            state = _detach(module(x))
        else:
            state = _detach(module(x)[1])
    if kind == "carnn":
        return lambda: module(x, extra, state)
    if kind == "cas":
        return lambda: module(x, extra, state)
    return lambda: module(x, state)


def _detach(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return state.detach()
    return type(state)(_detach(s) for s in state)


def _first_tensor(out: Any) -> torch.Tensor:
    while not isinstance(out, torch.Tensor):
        out = out[0]
    return out


def _layers(H: int, T: int) -> list[tuple[str, str, Step, Step]]:
    """(case, against, ctrlrnn step, torch step) for every layer at width ``H``, length ``T``."""
    import ctrlrnn

    x = torch.randn(T, 1, H)
    ctx = torch.randn(1, H)
    lstm = _layer_step(nn.LSTM(H, H), x)
    gru = _layer_step(nn.GRU(H, H), x)
    lstm2 = _layer_step(nn.LSTM(H, H, num_layers=2), x)
    return [
        ("QRNN", "nn.LSTM", _layer_step(ctrlrnn.QRNN(H, H), x), lstm),
        ("QRNN", "nn.GRU", _layer_step(ctrlrnn.QRNN(H, H), x), gru),
        ("QRNN 2 layers", "nn.LSTM 2 layers",
         _layer_step(ctrlrnn.QRNN(H, H, num_layers=2), x), lstm2),
        ("METAGROSS", "nn.LSTM", _layer_step(ctrlrnn.Metagross(H, H), x), lstm),
        ("METAGROSS as printed", "nn.LSTM",
         _layer_step(ctrlrnn.Metagross(H, H, gates="state"), x), lstm),
        ("iCARNN", "nn.LSTM", _layer_step(ctrlrnn.CARNN(H, H, H, "i"), x, (ctx,), 2), lstm),
        ("sCARNN", "nn.LSTM", _layer_step(ctrlrnn.CARNN(H, H, H, "s"), x, (ctx,), 2), lstm),
        ("nCARNN", "nn.LSTM", _layer_step(ctrlrnn.CARNN(H, H, H, "n"), x, (ctx,), 2), lstm),
        ("CAS-LSTM", "nn.LSTM", _layer_step(ctrlrnn.CASLSTM(H, H), x), lstm),
        ("RCRN", "nn.LSTM", _layer_step(ctrlrnn.RCRN(H, H), x), lstm),
    ]


def _cells(H: int) -> list[tuple[str, str, Step, Step]]:
    """(case, against, ctrlrnn step, torch step) for every cell at width ``H``."""
    import ctrlrnn

    x = torch.randn(1, H)
    ctx = torch.randn(1, H)
    ref = _cell_step(nn.LSTMCell(H, H), x, "torch")
    return [
        ("QRNNCell", "nn.LSTMCell", _cell_step(ctrlrnn.QRNNCell(H, H), x, "plain"), ref),
        ("CARNNCell", "nn.LSTMCell",
         _cell_step(ctrlrnn.CARNNCell(H, H, H, "n"), x, "carnn", ctx), ref),
        ("MetagrossCell", "nn.LSTMCell", _cell_step(ctrlrnn.MetagrossCell(H, H), x, "plain"),
         ref),
        ("RCRNCell", "nn.LSTMCell", _cell_step(ctrlrnn.RCRNCell(H, H), x, "plain"), ref),
        ("CASLSTMCell", "nn.LSTMCell", _cell_step(ctrlrnn.CASLSTMCell(H, H), x, "cas", ctx), ref),
    ]


#: The decoding row's source length and number of tokens decoded (the row's untrained model,
#: seeded, emits no end-of-sequence in them at either width, so both decoders run every step).
DECODE_SOURCE, DECODE_TOKENS = 12, 30


def _decoders(H: int) -> list[tuple[str, str, int, Step, Step]]:
    """(case, against, T, ctrlrnn step, reference step): greedy decoding at batch 1 by the
    translation model's QRNN encoder-decoder (two layers) through the decoders' buffers and the
    decoder's fused step, against the readable loop over its readable step
    (:meth:`~ctrlrnn.models.search.IncrementalDecoding.greedy_reference`); ``T`` tokens."""
    from ctrlrnn.models.seq2seq import Seq2Seq

    torch.manual_seed(0)  # the same model in every run (another may end its output early)
    model = Seq2Seq(40, 40, encoder="qrnn", encoder_args={"hidden_size": H, "num_layers": 2},
                    embedding_size=H).eval()
    src = torch.randint(4, 40, (1, DECODE_SOURCE))
    lengths = torch.tensor([DECODE_SOURCE])
    return [("Seq2Seq QRNN greedy", "readable step loop", DECODE_TOKENS,
             lambda: model.greedy(src, lengths, DECODE_TOKENS),
             lambda: model.greedy_reference(src, lengths, DECODE_TOKENS))]


# ------------------------------------------------------------------ timing


def _with_mode(step: Step, mode: str) -> Step:
    if mode == "fwd":
        def fwd() -> None:
            with torch.no_grad():
                step()
        return fwd

    def fwd_bwd() -> None:
        _first_tensor(step()).sum().backward()
    return fwd_bwd


def _time(fn: Step, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def pair(ours: Step, theirs: Step, repeats: int, calls: int) -> tuple[float, float]:
    """Median microseconds per call of ``ours`` and ``theirs``, timed interleaved, scaled so
    that their ratio is the median of the per-repeat ratios."""
    ours(), theirs()  # warm up: first-call costs (kernel loading, allocator) stay out
    a, b, ratios = [], [], []
    for _ in range(repeats):
        ta, tb = _time(ours, calls), _time(theirs, calls)
        a.append(ta)
        b.append(tb)
        ratios.append(ta / tb)
    torch_us = statistics.median(b)
    return statistics.median(ratios) * torch_us, torch_us


def measure(grid: str = "quick", progress: Callable[[str], None] | None = None) -> list[Row]:
    """Every row of ``grid`` (:data:`GRIDS`)."""
    g = GRIDS[grid]
    rows: list[Row] = []
    for H in g["widths"]:
        plans = [(T, *c) for T in g["lengths"] for c in _layers(H, T)]
        plans += [(1, *c) for c in _cells(H)]
        plans += [(T, case, against, ours, theirs)
                  for case, against, T, ours, theirs in _decoders(H)]
        for T, case, against, ours, theirs in plans:
            for mode in g["modes"]:
                if case.endswith("greedy") and mode != "fwd":
                    continue  # decoding runs without gradients
                if progress is not None:
                    progress(f"{case} H={H} T={T} {mode}")
                a, b = pair(_with_mode(ours, mode), _with_mode(theirs, mode),
                            g["repeats"], g["calls"])
                rows.append(Row(case, against, H, T, mode, a, b))
    return rows


# ------------------------------------------------------------------ where the time goes


def _bucket(key: tuple[str, int, str]) -> str:
    filename, _line, name = key
    if "ctrlrnn" in filename:
        return "ctrlrnn Python"
    if filename == "~":
        if "apply" in name:
            return "autograd Function.apply"
        if "torch" in name or "Tensor" in name or "_C." in name:
            return "torch C++ calls (dispatcher + kernels)"
        return "other builtins"
    if "torch" in filename:
        return "torch Python"
    return "other Python"


def profile_summary(step: Step, calls: int = 500) -> dict[str, float]:
    """Microseconds per call of ``step`` by where they are spent (own time of each frame,
    summed by :func:`_bucket`); ``"total"`` is the sum. cProfile adds its own cost per frame,
    so the shares, not the totals, are the point."""
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        step()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for key, (_cc, _nc, tottime, _ct, _callers) in stats.items():
        b = _bucket(key)
        out[b] = out.get(b, 0.0) + tottime / calls * 1e6
    out["total"] = sum(out.values())
    return out


def default_profiles(calls: int = 500) -> dict[str, dict[str, float]]:
    """The profile of a QRNN(8, 8) forward (no grad, T=1, carried state) and of nn.LSTM's."""
    import ctrlrnn

    x = torch.randn(1, 1, 8)
    return {
        "QRNN(8, 8) fwd": profile_summary(
            _with_mode(_layer_step(ctrlrnn.QRNN(8, 8), x), "fwd"), calls),
        "nn.LSTM(8, 8) fwd": profile_summary(
            _with_mode(_layer_step(nn.LSTM(8, 8), x), "fwd"), calls),
    }


# ------------------------------------------------------------------ output


def rows_markdown(rows: list[Row]) -> str:
    """The rows as one markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def profile_markdown(profiles: dict[str, dict[str, float]]) -> str:
    """The profiles as one markdown table (microseconds per call, under cProfile)."""
    buckets = sorted({b for p in profiles.values() for b in p if b != "total"})
    names = list(profiles)
    lines = ["| where | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for b in [*buckets, "total"]:
        lines.append(f"| {b} | " + " | ".join(f"{profiles[n].get(b, 0.0):.1f}" for n in names)
                     + " |")
    return "\n".join(lines)


def print_rows(rows: list[Row], console: Any) -> None:
    """The table on ``console`` (rich)."""
    from rich.table import Table

    table = Table(title="per-call overhead (median of interleaved repeats)")
    for c in COLUMNS:
        table.add_column(c, justify="left" if c in ("case", "against", "mode") else "right")
    for r in rows:
        table.add_row(*r.cells())
    console.print(table)


def run(grid: str, console: Any, markdown: str | None = None, profile: bool = True) -> int:
    """``ctrlrnn bench --overhead``: measure ``grid``, print it, and with ``markdown`` write
    the table (and the profile) to that file (a whole file of its own: paste it into
    BENCHMARKS.md's section)."""
    rows = measure(grid, progress=lambda what: console.print(f"  {what}", highlight=False))
    print_rows(rows, console)
    text = rows_markdown(rows)
    if profile:
        prof = profile_markdown(default_profiles(50 if grid == "tiny" else 1000))
        console.print(prof, highlight=False)
        text += "\n\nProfile (µs per call under cProfile):\n\n" + prof
    if markdown:
        with open(markdown, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        console.print(f"markdown written to {markdown}")
    return 0
