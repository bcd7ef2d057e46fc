"""``ctrlrnn bench --overhead`` at its smallest setting: the table's shape, never a timing."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ctrlrnn.bench import overhead


def test_overhead_cli_tiny_writes_the_table(tmp_path: Path) -> None:
    from ctrlrnn.bench.cli import register

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parser = argparse.ArgumentParser(prog="ctrlrnn")
        register(parser.add_subparsers(dest="command"))
        md = tmp_path / "overhead.md"
        args = parser.parse_args(["bench", "--overhead", "--tiny", "--markdown", str(md)])
        assert args.func(args) == 0
    finally:
        torch.set_num_threads(threads)
    text = md.read_text()
    table = [line for line in text.split("\n\n")[0].splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert tuple(header) == overhead.COLUMNS
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    cases = {r[0] for r in rows}
    assert {"QRNN", "QRNN 2 layers", "METAGROSS", "iCARNN", "CAS-LSTM", "RCRN", "QRNNCell",
            "CARNNCell", "MetagrossCell", "RCRNCell", "Seq2Seq QRNN greedy"} <= cases
    assert all(len(r) == len(overhead.COLUMNS) and r[-1].endswith("x") for r in rows)
    assert {r[2] for r in rows} == {"8"} and {r[4] for r in rows} == {"fwd"}
    assert "ctrlrnn Python" in text and "total" in text


def test_profile_summary_buckets() -> None:
    lstm = torch.nn.LSTM(4, 4)
    x = torch.randn(1, 1, 4)
    prof = overhead.profile_summary(lambda: lstm(x), calls=5)
    assert prof["total"] >= 0 and "torch Python" in prof
