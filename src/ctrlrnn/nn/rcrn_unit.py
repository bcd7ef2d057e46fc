"""RCRN's entry in the registry of units (:mod:`ctrlrnn.nn.registry`), declared here rather
than on the class in :mod:`ctrlrnn.nn.rcrn`."""

from __future__ import annotations

from ctrlrnn.nn.rcrn import RCRN, RCRNCell
from ctrlrnn.nn.registry import BenchRow, register_unit

register_unit(
    "rcrn",
    description="Recurrently controlled recurrent network (RCRN paper)",
    options={"cell": (str, "lstm"), "output_gate": (str, "sigmoid"),
             "listener": (str, "per_direction")},
    cell=RCRNCell,
    bench=[BenchRow(
        "rcrn",
        "ctrlrnn.RCRN, bidirectional, LSTM cells (3 BiLSTMs + listener scan)",
        # 3 BiLSTMs: 6 LSTM directions, each over [x_t, h_{t-1}]
        gemms=lambda C: 6 * [(2 * C, 4 * C)],
        # the 6 LSTM directions, plus eq 15-16 per direction: read h1, h2, h3, write c4, h4
        # (5); backward reads grad h4, h1, h2, h3, c4 and writes their 3 gradients (8)
        values=lambda C: [(6 * C, 7, 10), (2 * C, 5, 8)],
        options={"bidirectional": True},
        grid="rcrn_table10",
        compare_to=("lstm3bi", "rcrn_torch_lstms"),
    )],
)(RCRN)
