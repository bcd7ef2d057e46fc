"""The small-shape point timed in several processes: its ratios are medians over them.

No test asserts a speed: only that every process's ratio is recorded and the median and the
targets are taken from them.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import pytest
import torch

from ctrlrnn.bench import fresh_processes, runner
from ctrlrnn.bench.benchmarks_page import fresh_process_lines
from ctrlrnn.bench.cases import REGISTRY, Point, select
from ctrlrnn.bench.grids import SMALL
from ctrlrnn.bench.targets import target_rows

TINY = Point(2, 8, 8)


def _rec(case: str, fwd: float, fwdbwd: float, compare_to: tuple[str, ...] = ()) -> dict[str, Any]:
    p = SMALL
    return {
        "case": case, "kind": "time", "status": "ok", "batch": p.batch, "length": p.length,
        "width": p.width, "dtype": "float32", "compare_to": list(compare_to),
        "fwd": {"median_s": fwd}, "fwdbwd": {"median_s": fwdbwd},
    }


def test_medians_are_over_the_fresh_processes() -> None:
    results = [_rec("lstm", 1.0, 4.0), _rec("fused_lstm", 1.0, 4.0, ("lstm",))]
    results[1]["ratios"] = {"speedup": {"lstm": {"fwd": 1.0, "fwdbwd": 1.0}}}
    runs = [
        [_rec("lstm", 2.0, 6.0), _rec("fused_lstm", 1.0, 2.0, ("lstm",))],  # 2x, 3x
        [_rec("lstm", 1.0, 3.0), _rec("fused_lstm", 2.0, 6.0, ("lstm",))],  # 0.5x, 0.5x
        [{"case": "lstm", "status": "error", "reason": "boom"},
         _rec("fused_lstm", 1.0, 1.0, ("lstm",))],  # no ratio: its baseline failed
    ]
    fresh_processes.add_process_medians(results, {SMALL: runs})
    ratios = results[1]["ratios"]
    assert ratios["speedup_processes"]["lstm"] == {"fwd": [2.0, 0.5], "fwdbwd": [3.0, 0.5]}
    assert ratios["speedup_median"]["lstm"] == {"fwd": 1.25, "fwdbwd": 1.75}
    assert ratios["speedup"]["lstm"]["fwd"] == 1.0  # this run's own ratio is kept
    assert results[1]["processes"]["fwdbwd"] == [2.0, 6.0, 1.0]
    assert results[0]["processes"]["fwd"] == [2.0, 1.0, None]


def test_targets_read_the_median_and_show_the_range() -> None:
    doc = {"results": [_rec("fused_lstm", 1.0, 1.0, ("lstm",))], "memory_fits": []}
    doc["results"][0]["ratios"] = {
        "speedup": {"lstm": {"fwd": 0.5, "fwdbwd": 0.5}},  # this process's draw
        "speedup_processes": {"lstm": {"fwdbwd": [0.5, 1.0, 1.25]}},
        "speedup_median": {"lstm": {"fwdbwd": 1.0}},
    }
    rows = {label: (val, met) for label, val, _, met, _ in target_rows(doc)}
    small = next(k for k in rows if k.startswith("fused LSTM") and "small shape" in k)
    # time ratios: 1 / speed-up, so the 0.5x draw is a 2.00x time ratio
    assert rows[small] == ("1.00x (median of 3 fresh processes, 0.80x-2.00x)", "yes")
    # without a median (a one-process run's record), the run's own value
    del doc["results"][0]["ratios"]["speedup_median"]
    without = {label: (val, met) for label, val, _, met, _ in target_rows(doc)}
    assert without[small][0].startswith("2.00x") and without[small][1] == "no"


def test_a_run_times_the_fresh_points_again_in_new_processes() -> None:
    """A real run over a tiny point, again in 2 fresh processes: every ratio there has their 2
    values, and the page says what they were."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        doc = runner.run(
            select(["fused_lstm"]), grid="tiny", warmup=1, repeats=2, max_seconds=None,
            gemm_shape=(64, 32, 48), copy_bytes=1 << 20, roofline_repeats=3,
            processes=2, fresh_points=(TINY,), argv=["ctrlrnn", "bench", "(test)"],
        )
    finally:
        torch.set_num_threads(threads)
    assert doc["settings"]["processes"] == 2
    assert doc["settings"]["process_points"] == [[2, 8, 8]]
    row = next(r for r in doc["results"] if r["case"] == "fused_lstm")
    assert row["status"] == "ok"
    for mode in ("fwd", "fwdbwd"):
        values = row["ratios"]["speedup_processes"]["lstm"][mode]
        assert len(values) == 2 and all(v > 0 for v in values)
        assert row["ratios"]["speedup_median"]["lstm"][mode] == statistics.median(values)
        assert len(row["processes"][mode]) == 2 and all(row["processes"][mode])
    page = "\n".join(fresh_process_lines(doc))
    assert "timed again in 2 fresh processes" in page and "nn.LSTM there took: forward" in page


def test_a_failing_process_is_recorded_not_raised() -> None:
    missing = replace(REGISTRY["lstm"], name="no-such-case")  # unknown to the new process
    out = fresh_processes.time_points_in_fresh_processes(
        [(TINY, [missing])], torch.float32, 1, warmup=1, repeats=1, max_seconds=None,
        points=(TINY,),
    )
    (record,) = out[TINY][0]
    assert record["status"] == "error"
    assert "no-such-case" in record["reason"] and "exited with 1" in record["reason"]


def test_processes_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="processes"):
        runner.run([], grid="tiny", processes=-1)


def test_the_time_table_shows_the_median_where_there_is_one() -> None:
    from ctrlrnn.bench.result_rows import speedups

    r = _rec("fused_lstm", 1.0, 1.0, ("lstm",))
    r["ratios"] = {"speedup": {"lstm": {"fwd": 0.5, "fwdbwd": 0.5}}}
    assert speedups(r, "fwdbwd") == "0.50x vs lstm"
    r["ratios"]["speedup_processes"] = {"lstm": {"fwdbwd": [0.5, 1.0, 1.25]}}
    r["ratios"]["speedup_median"] = {"lstm": {"fwdbwd": 1.0}}
    assert speedups(r, "fwdbwd") == "1.00x vs lstm (med. of 3 fresh)"
    assert speedups(r, "fwd") == "0.50x vs lstm"


def test_target_points_time_only_the_targets_rows_with_few_repeats(monkeypatch) -> None:
    """At the targets' large points the fresh processes time the rows the targets read, each
    with at most TARGET_POINT_REPEATS repeats; elsewhere every row, at the run's repeats; and a
    row they did not time keeps no process medians."""
    seen: list[tuple[Point, list[str], int]] = []

    def fake(cases, p, dtype, *, warmup, repeats, max_seconds):
        seen.append((p, [c.name for c in cases], repeats))
        return [_rec(c.name, 1.0, 1.0) for c in cases]

    monkeypatch.setattr(fresh_processes, "time_point_in_fresh_process", fake)
    big = Point(32, 256, 256)
    every = list(REGISTRY.values())
    out = fresh_processes.time_points_in_fresh_processes(
        [(big, every), (SMALL, [REGISTRY["lstm"], REGISTRY["gru"]])], torch.float32, 2,
        warmup=1, repeats=7, max_seconds=None)
    assert set(out) == {big, SMALL}
    wanted = fresh_processes.TARGET_POINT_CASES[big]
    assert [s for s in seen if s[0] == big] == 2 * [(big, list(wanted), 3)]
    assert [s for s in seen if s[0] == SMALL] == 2 * [(SMALL, ["lstm", "gru"], 7)]
    # every row a target reads at that point is among them
    from ctrlrnn.bench.targets import TARGETS

    for t in TARGETS:
        point, case = getattr(t.value, "point", None), getattr(t.value, "case", None)
        rows = fresh_processes.TARGET_POINT_CASES.get(Point(*point)) if point else None
        if rows is not None:
            assert case in rows
            other = getattr(t.value, "other", None)  # a floor target compares no other row
            assert other is None or other in rows
    gru = {**_rec("gru", 1.0, 1.0, ("lstm",)), "batch": 32, "length": 256, "width": 256}
    fresh_processes.add_process_medians([gru], {big: [[_rec("lstm", 1.0, 1.0)]]})
    assert "processes" not in gru


def test_page_names_the_rows_timed_again_at_a_target_point() -> None:
    doc = {"settings": {"processes": 5, "process_points": [[2, 128, 64], [32, 256, 200]]},
           "results": []}
    small, big = (line for line in fresh_process_lines(doc) if line)
    assert "every row was timed again in 5 fresh processes" in small
    assert "the rows the targets read (`lstm3bi`, `rcrn_torch_lstms`, `rcrn`) were" in big


def test_floor_targets_read_the_fresh_processes_median() -> None:
    """A floor target (time / roofline floor) reads the median of the fresh processes' times
    over the run's floor, shown with their range; without fresh processes, the run's own."""
    rec = {
        "case": "metagross", "kind": "time", "status": "ok", "batch": 32, "length": 256,
        "width": 256, "dtype": "float32", "fwdbwd": {"median_s": 2.0},
        "floor": {"fwdbwd_s": 1.0}, "ratios": {"fwdbwd_over_floor": 2.0},
        "processes": {"fwdbwd": [1.5, 1.1, 1.2, 1.4, 1.25]},
    }  # fmt: skip
    label = "METAGROSS depth 2 linear fwd+bwd time / roofline floor (B=32, T=256, C=256)"
    rows = {r[0]: r for r in target_rows({"results": [rec]})}
    assert rows[label][1] == "1.25x (median of 5 fresh processes, 1.10x-1.50x)"
    assert rows[label][3] == "yes"  # goal <= 1.3x; the run's own 2.0x would miss it
    del rec["processes"]
    rows = {r[0]: r for r in target_rows({"results": [rec]})}
    assert rows[label][1] == "2.00x" and rows[label][3] == "no"


def test_floor_targets_divide_each_process_by_its_own_gemm_rate() -> None:
    """A fresh process that measured its own GEMM rate is set against a floor at that rate (its
    FLOPs part scaled, its bytes part kept); one without a rate against the run's floor."""
    rec = {
        "case": "metagross", "kind": "time", "status": "ok", "batch": 32, "length": 256,
        "width": 256, "dtype": "float32", "fwdbwd": {"median_s": 2.0},
        "gemm_rate_flops_per_s": 300e9,
        "floor": {"fwdbwd_s": 1.0, "fwdbwd_gemm_s": 0.8, "fwdbwd_bytes_s": 0.2},
        "ratios": {"fwdbwd_over_floor": 2.0},
        # rates: the run's, a faster process (a tighter floor), a slower one, one without
        "processes": {"fwdbwd": [1.2, 1.2, 1.2, 1.2],
                      "gemm_rate_flops_per_s": [300e9, 400e9, 200e9, None]},
    }  # fmt: skip
    label = "METAGROSS depth 2 linear fwd+bwd time / roofline floor (B=32, T=256, C=256)"
    floors = [1.0, 0.8 * 300 / 400 + 0.2, 0.8 * 300 / 200 + 0.2, 1.0]
    want = sorted(1.2 / f for f in floors)
    rows = {r[0]: r for r in target_rows({"results": [rec]})}
    assert rows[label][1] == (f"{statistics.median(want):.2f}x (median of 4 fresh processes, "
                              f"{want[0]:.2f}x-{want[-1]:.2f}x)")  # fmt: skip


def test_process_records_carry_their_gemm_rate() -> None:
    results = [_rec("lstm", 1.0, 4.0)]
    runs = [[{**_rec("lstm", 2.0, 6.0), "gemm_rate_flops_per_s": 3e11}],
            [{"case": "lstm", "status": "error", "reason": "boom"}]]  # fmt: skip
    fresh_processes.add_process_medians(results, {SMALL: runs})
    assert results[0]["processes"]["gemm_rate_flops_per_s"] == [3e11, None]
