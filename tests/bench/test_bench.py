"""Tests of ``ctrlrnn bench`` on tiny shapes: registry, roofline, timing, memory, JSON, markdown.

No test asserts a speed: timings are measurements, checked here only for being well-formed.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import ctrlrnn
from ctrlrnn.bench import report, roofline, runner, timing
from ctrlrnn.bench.cases import (
    REGISTRY,
    Cost,
    Point,
    gru,
    lstm,
    scan_python_loop,
    scan_python_loop_unbind,
    select,
)
from ctrlrnn.bench.memory import linear_fit, measure_training_memory

TINY_ROOF = {"gemm_shape": (64, 32, 48), "copy_bytes": 1 << 20, "roofline_repeats": 3}


@pytest.fixture(scope="module")
def tiny_doc() -> dict[str, Any]:
    """One tiny run of every registered case (a few seconds). One thread: on a busy machine
    OpenMP's barriers make tiny multi-threaded ops orders of magnitude slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return runner.run(
            list(REGISTRY.values()),
            grid="tiny",
            warmup=1,
            repeats=2,
            max_seconds=None,
            threads=1,
            argv=["ctrlrnn", "bench", "(test)"],
            **TINY_ROOF,
        )
    finally:
        torch.set_num_threads(threads)


def test_registry_runs_on_tiny_shape(tiny_doc: dict[str, Any]) -> None:
    by_status: dict[str, list[str]] = {}
    for r in tiny_doc["results"]:
        by_status.setdefault(r["status"], []).append(r["case"])
    # every row either ran or was skipped with a reason (an unbuilt op); none crashed
    assert "error" not in by_status, [
        (r["case"], r.get("traceback")) for r in tiny_doc["results"] if r["status"] == "error"
    ]
    for r in tiny_doc["results"]:
        if r["status"] == "skipped":
            assert r["reason"]
    ok = set(by_status.get("ok", []))
    assert {"lstm", "gru", "scan_loop", "scan_loop_unbind"} <= ok
    assert {r["case"] for r in tiny_doc["results"]} == set(REGISTRY)
    for r in tiny_doc["results"]:
        if r["status"] != "ok" or r["kind"] != "time":
            continue
        for mode in ("fwd", "fwdbwd"):
            t = r[mode]
            assert t["median_s"] > 0 and math.isfinite(t["median_s"])
            assert t["min_s"] <= t["median_s"] <= t["max_s"]
            assert r["floor"][f"{mode}_s"] > 0
            assert r["ratios"][f"{mode}_over_floor"] == pytest.approx(
                t["median_s"] / r["floor"][f"{mode}_s"]
            )
    gru_row = next(r for r in tiny_doc["results"] if r["case"] == "gru")
    lstm_row = next(r for r in tiny_doc["results"] if r["case"] == "lstm")
    assert gru_row["ratios"]["speedup"]["lstm"]["fwd"] == pytest.approx(
        lstm_row["fwd"]["median_s"] / gru_row["fwd"]["median_s"]
    )


def test_memory_rows_grow_with_length(tiny_doc: dict[str, Any]) -> None:
    rows = [r for r in tiny_doc["results"] if r["kind"] == "memory" and r["status"] == "ok"]
    for name in {r["case"] for r in rows}:
        mine = sorted((r for r in rows if r["case"] == name), key=lambda r: r["length"])
        saved = [r["memory"]["saved_bytes"] for r in mine]
        assert saved == sorted(saved) and saved[0] < saved[-1]
        fit = next(f for f in tiny_doc["memory_fits"] if f["case"] == name)
        assert fit["train_bytes"]["slope"] > 0


def test_roofline_positive_and_finite() -> None:
    gemm, gemm_samples = roofline.measure_gemm((64, 32, 48), repeats=3)
    copy, copy_samples = roofline.measure_copy(1 << 20, repeats=3)
    for rate in (gemm, copy):
        assert rate > 0 and math.isfinite(rate)
    assert len(gemm_samples) == 3 and len(copy_samples) == 3
    clone, _ = roofline.measure_clone(1 << 20, repeats=2)
    assert clone > 0 and math.isfinite(clone)
    roof = roofline.measure(gemm_shape=(64, 32, 48), copy_bytes=1 << 20, repeats=3)
    assert roof.threads == torch.get_num_threads()
    assert roof.floor_s(roof.gemm_flops_per_s, 0) == pytest.approx(1.0)
    assert roof.floor_s(0, roof.copy_bytes_per_s) == pytest.approx(1.0)
    assert roofline.Roofline.from_dict(roof.to_dict()) == roof
    with pytest.raises(ValueError, match="shape"):
        roofline.measure_gemm((0, 1, 1))


def test_best_of_takes_highest_rates() -> None:
    a = roofline.Roofline(10.0, 5.0, (1, 1, 1), 8, "float32", 1)
    b = roofline.Roofline(7.0, 9.0, (1, 1, 1), 8, "float32", 1)
    best = roofline.best_of(a, b)
    assert (best.gemm_flops_per_s, best.copy_bytes_per_s) == (10.0, 9.0)


def test_json_round_trip(tiny_doc: dict[str, Any], tmp_path: Path) -> None:
    path = report.save_json(tiny_doc, tmp_path / "sub" / "r.json")
    loaded = report.load_json(path)
    assert loaded == json.loads(json.dumps(tiny_doc, default=str))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a ctrlrnn bench result"):
        report.load_json(bad)


def test_markdown_has_cases_and_machine(tiny_doc: dict[str, Any], tmp_path: Path) -> None:
    path = report.write_markdown(tiny_doc, tmp_path / "BENCHMARKS.md", source="r.json")
    text = path.read_text()
    m = tiny_doc["machine"]
    assert str(m["cpu_model"]) in text
    assert torch.__version__ in text
    assert f"{m['torch_threads']} intra-op threads" in text
    assert "set by --threads 1" in text
    assert "GFLOP/s" in text and "GB/s" in text
    for name in REGISTRY:
        assert f"`{name}`" in text
    for r in tiny_doc["results"]:
        if r["status"] == "ok" and r["kind"] == "time":
            assert f"| {r['case']} | {r['batch']} | {r['length']} | {r['width']} |" in text
    assert "## Targets" in text


def test_lstm_and_gru_flops_match_hand_count() -> None:
    p = Point(3, 5, 7)
    w = lstm(p, torch.float32)
    # per step: x (7) and h (7) each times a 7 -> 4*7 weight matrix, 2 FLOPs per multiply-add
    hand = 2 * 3 * 5 * (7 * 28 + 7 * 28)
    assert w.flops == Cost(fwd=hand, bwd=2 * hand)
    # and the same count read off the module's own weight matrices
    weights = sum(t.numel() for t in w.params if t.dim() == 2)
    assert w.flops.fwd == 2 * p.batch * p.length * weights
    g = gru(p, torch.float32)
    assert g.flops.fwd == 2 * 3 * 5 * (7 + 7) * 21
    assert sum(t.numel() for t in g.params if t.dim() == 2) * 2 * 15 == g.flops.fwd
    # LSTM elementwise bytes: 7 values forward and 10 backward per (batch, step, unit), fp32
    assert w.bytes == Cost(fwd=3 * 5 * 7 * 4 * 7, bwd=3 * 5 * 7 * 4 * 10)


def test_qrnn_flops_match_module_weights() -> None:
    case = REGISTRY["qrnn_fo"]
    try:
        w = case.build(Point(2, 4, 6), torch.float32)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"ctrlrnn.QRNN not available: {exc}")
    # window 2, fo pooling: 3 gates of 6 units from 2*6 inputs
    assert w.flops.fwd == 2 * 2 * 4 * (2 * 6) * (3 * 6)
    weights = sum(t.numel() for t in w.params if t.dim() >= 2)
    assert w.flops.fwd == 2 * 2 * 4 * weights


def test_scan_loops_agree() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(2, 6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    h1 = scan_python_loop(a, b)
    h2 = scan_python_loop_unbind(a, b)
    expect = torch.zeros(2, 3, dtype=torch.float64)
    for t in range(6):
        expect = a[:, t] * expect + b[:, t]
        assert torch.allclose(h1[:, t], expect)
    assert torch.allclose(h1, h2)
    g = torch.randn_like(h1)
    ga1, gb1 = torch.autograd.grad(h1, (a, b), g)
    ga2, gb2 = torch.autograd.grad(h2, (a, b), g)
    assert torch.allclose(ga1, ga2) and torch.allclose(gb1, gb2)


def test_time_calls_repeats_and_budget() -> None:
    calls: list[int] = []
    resets: list[int] = []
    t = timing.time_calls(
        lambda: calls.append(1), warmup=2, repeats=4, before_each=lambda: resets.append(1)
    )
    assert len(calls) == 6 and len(resets) == 6 and t.repeats == 4 and t.warmup == 2
    assert len(t.cpu_samples_s) == 4 and t.cpu_share is not None and t.cpu_share >= 0
    assert timing.Timing.from_dict(t.to_dict()) == t
    calls.clear()
    t = timing.time_calls(lambda: calls.append(1), warmup=0, repeats=50, max_seconds=0.0)
    assert t.repeats == 3 and len(calls) == 3
    with pytest.raises(ValueError, match="repeats"):
        timing.time_calls(lambda: None, repeats=0)


def test_forward_backward_resets_grads_and_runs_backward() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    lin = torch.nn.Linear(3, 2)
    seen: list[bool] = []

    def fn() -> torch.Tensor:
        seen.append(x.grad is None)
        return lin(x)

    timing.time_forward_backward(fn, [x, *lin.parameters()], warmup=1, repeats=3)
    assert all(seen) and x.grad is not None and lin.weight.grad is not None
    fwd_only = timing.time_forward(lambda: lin(x), warmup=0, repeats=2)
    assert fwd_only.repeats == 2
    with pytest.raises(ValueError, match="no output that requires grad"):
        timing.time_forward_backward(lambda: lin(x).detach(), [], warmup=0, repeats=1)


def test_saved_tensor_bytes_counted_once_without_params() -> None:
    x = torch.randn(16, 8, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(8, 4))

    def fn() -> torch.Tensor:
        return torch.tanh(x @ w)  # saves x (for grad w), w (param), tanh's output

    mem = measure_training_memory(fn, [w], [x])
    assert mem.param_bytes == 8 * 4 * 4
    assert mem.saved_bytes == 16 * 8 * 4 + 16 * 4 * 4
    assert mem.train_bytes == mem.saved_bytes + mem.param_bytes
    assert mem.saved_tensors >= 3


def test_linear_fit_exact_line() -> None:
    fit = linear_fit([1, 2, 4], [5, 7, 11])
    assert fit["slope"] == pytest.approx(2.0) and fit["intercept"] == pytest.approx(3.0)
    assert fit["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        linear_fit([1], [1])


def test_select_adds_baselines_and_rejects_unknown() -> None:
    names = [c.name for c in select(["gr?"])]  # a glob matches whole names only
    assert names == ["lstm", "gru"]
    assert {"gru", "fused_gru"} <= {c.name for c in select(["gru"])}  # a plain word: substring
    assert "scan_loop" in [c.name for c in select(["scan_compiled"])]
    assert [c.name for c in select(["gr*"], with_baselines=False)] == ["gru"]
    with pytest.raises(ValueError, match="no case matches"):
        select(["no-such-case"])


def test_plan_groups_points() -> None:
    steps = runner.plan(select(["gr?"]), "quick")
    pairs = [(c.name, p) for c, p in steps]
    # each point's lstm row comes right before its gru row
    for i in range(0, len(pairs), 2):
        assert pairs[i][0] == "lstm" and pairs[i + 1][0] == "gru"
        assert pairs[i][1] == pairs[i + 1][1]


def test_targets_read_measured_values() -> None:
    doc = {
        "results": [
            {
                "case": "scan_compiled",
                "batch": 32,
                "length": 256,
                "width": 1024,
                "status": "ok",
                "ratios": {
                    "fwdbwd_floor_fraction": 0.8,
                    "speedup": {"scan_loop": {"fwd": 3.0, "fwdbwd": 4.0}},
                },
            }
        ],
        "memory_fits": [],
    }
    rows = {label: (val, met) for label, val, _, met, _ in report.target_rows(doc)}
    share = next(k for k in rows if k.startswith("linear_scan fwd+bwd, share"))
    loop = next(k for k in rows if "Python loop" in k)
    assert rows[share] == ("0.80", "yes")
    assert rows[loop] == ("4.00x", "no")
    assert all(v == ("not measured", "-") for k, v in rows.items() if k.startswith("QRNN"))


def _timed(case: str, point: tuple[int, int, int], fwdbwd_s: float, floor_s: float,
           **ratios: Any) -> dict[str, Any]:
    b, t, c = point
    return {"case": case, "batch": b, "length": t, "width": c, "status": "ok",
            "fwd": {"median_s": fwdbwd_s / 3}, "fwdbwd": {"median_s": fwdbwd_s},
            "floor": {"fwd_s": floor_s / 3, "fwdbwd_s": floor_s}, "ratios": ratios}


def test_targets_at_equal_efficiency_is_the_floors_ratio() -> None:
    p = (32, 256, 256)
    doc = {"results": [
        _timed("lstm", p, 0.2, 0.16),
        _timed("metagross_state", p, 0.5, 0.36,
               speedup={"lstm": {"fwd": 0.4, "fwdbwd": 0.4}}),
        _timed("qrnn_fo", p, 0.1, 0.12, speedup={"lstm": {"fwd": 2.0, "fwdbwd": 2.0}}),
    ], "memory_fits": []}
    rows = {r[0]: r for r in report.target_rows(doc)}
    printed = rows[next(k for k in rows if k.startswith("METAGROSS as printed"))]
    # a time ratio: row floor / baseline floor; measured 1 / 0.4
    assert printed[1:] == ("2.50x", "<= 2x", "no", "2.25x")
    qrnn = rows[next(k for k in rows if k.startswith("QRNN fo fwd+bwd speed-up over nn.LSTM ("))]
    # a speed-up: baseline floor / row floor
    assert qrnn[4] == "1.33x"
    # a floor-relative target has no second row; an absent row no floors
    assert rows[next(k for k in rows if k.startswith("QRNN fo fwd+bwd time"))][4] == "-"
    assert rows[next(k for k in rows if k.startswith("CAS-LSTM 2x256"))][4] == "-"


def test_targets_show_the_decimals_that_decide() -> None:
    p = (32, 256, 256)

    def shown(speedup: float) -> tuple[str, str]:
        doc = {"results": [_timed("metagross", p, 1.0, 1.0,
                                  speedup={"lstm": {"fwd": 1.0, "fwdbwd": speedup}})]}
        rows = {r[0]: r for r in report.target_rows(doc)}
        row = rows[next(k for k in rows if k.startswith("METAGROSS depth 2 linear fwd+bwd time "
                                                        "/ nn.LSTM (B=32"))]
        return row[1], row[3]

    assert shown(1 / 1.2049) == ("1.205x", "no")  # not "1.20x" beside "<= 1.2x", "no"
    assert shown(1 / 1.1949) == ("1.19x", "yes")
    assert shown(1 / 1.25) == ("1.25x", "no")


def test_rcrn_target_notes_its_floor_on_torch_lstms(tiny_doc: dict[str, Any]) -> None:
    p = (32, 256, 200)
    alone = _timed("rcrn_torch_lstms", p, 0.75, 0.45,
                   speedup={"lstm3bi": {"fwd": 1.0, "fwdbwd": 1 / 0.75}})
    rcrn = _timed("rcrn", p, 0.8, 0.5, speedup={"lstm3bi": {"fwd": 1.0, "fwdbwd": 1 / 0.8},
                                                "rcrn_torch_lstms": {"fwd": 1.0,
                                                                     "fwdbwd": 0.75 / 0.8}})
    doc = {"results": [_timed("lstm3bi", p, 1.0, 0.7), rcrn, alone], "memory_fits": []}
    (note,) = report.target_notes(doc)
    assert "0.75x the 3-layer BiLSTM's time:" in note and "1.07x its BiLSTMs' time" in note
    assert report.target_notes({"results": doc["results"][:2]}) == []
    # timed again in fresh processes: the medians, and it says so
    alone["ratios"]["speedup_median"] = {"lstm3bi": {"fwd": 1.0, "fwdbwd": 1 / 0.7}}
    alone["ratios"]["speedup_processes"] = {"lstm3bi": {"fwdbwd": [1.4, 1 / 0.7, 1.5]}}
    (note,) = report.target_notes(doc)
    assert "0.70x the 3-layer BiLSTM's time (medians of 3 fresh processes)" in note
    assert "| at equal efficiency |" in report.markdown(tiny_doc)
    # the engine controllers="auto" trains this shape on, at the run's threads
    doc["machine"] = {"torch_threads": 2}
    (note,) = report.target_notes(doc)
    assert "which trains this shape on ctrlrnn's fused-cell engine at 2 threads" in note
    assert "took 1.07x their time" in note
    doc["machine"] = {"torch_threads": 1}
    (note,) = report.target_notes(doc)
    assert "fused-cell" not in note and "1.07x its BiLSTMs' time" in note


def test_rcrn_torch_lstms_is_the_rcrns_three_bilstms() -> None:
    w = REGISTRY["rcrn_torch_lstms"].build(Point(2, 5, 8), torch.float32)
    outs = w.fn()
    assert len(outs) == 3 and all(o.shape == (2, 5, 16) for o in outs)
    rcrn = ctrlrnn.RCRN(8, 8, bidirectional=True)
    assert len(w.params) == 3 * 2 * 4  # 3 BiLSTMs: per direction W_ih, W_hh, b_ih, b_hh
    shapes = sorted(tuple(q.shape) for q in w.params)
    ref = sorted(tuple(q.shape) for q in rcrn.parameters())
    assert shapes == ref
    assert "rcrn_torch_lstms" in REGISTRY["rcrn"].compare_to


def test_cli_from_json_and_list(tiny_doc: dict[str, Any], tmp_path: Path) -> None:
    from ctrlrnn.bench.cli import register

    parser = argparse.ArgumentParser(prog="ctrlrnn")
    register(parser.add_subparsers(dest="command"))
    src = report.save_json(tiny_doc, tmp_path / "r.json")
    md = tmp_path / "B.md"
    args = parser.parse_args(["bench", "--from", str(src), "--markdown", str(md)])
    assert args.func(args) == 0
    assert "# ctrlrnn benchmarks" in md.read_text()
    args = parser.parse_args(["bench", "--list"])
    assert args.func(args) == 0
    args = parser.parse_args(["bench", "--full", "--only", "lstm,gru", "--repeats", "3"])
    assert (args.grid, args.only, args.repeats) == ("full", ["lstm,gru"], 3)
    args = parser.parse_args(["bench", "--only", "nothing-matches"])
    assert args.func(args) == 2


def test_interleave_round_robin_order() -> None:
    order: list[str] = []
    timers = [
        timing.Timer(lambda: order.append("a"), warmup=1, repeats=2),
        timing.Timer(lambda: order.append("b"), warmup=0, repeats=3),
    ]
    results = timing.interleave(timers)
    assert order == ["a", "a", "b", "a", "b", "b"]
    assert [r.repeats for r in results] == [2, 3]


def test_time_point_records_failures_and_keeps_going() -> None:
    from ctrlrnn.bench.cases import Case, CaseUnavailable, Workload

    def good(p: Point, dtype: torch.dtype) -> Workload:
        x = torch.randn(p.batch, p.width, requires_grad=True)
        return Workload(fn=lambda: x * 2, flops=Cost(0, 0), bytes=Cost(8, 8), leaves=[x])

    def broken(p: Point, dtype: torch.dtype) -> Workload:
        def fn() -> torch.Tensor:
            raise RuntimeError("kernel exploded")

        return Workload(fn=fn, flops=Cost(0, 0), bytes=Cost(8, 8))

    def missing(p: Point, dtype: torch.dtype) -> Workload:
        raise CaseUnavailable("op not built")

    def make(name: str, build: Any) -> Case:
        return Case(name, build, "test", "time", (), (), (), name)

    recs = runner.time_point(
        [make("good", good), make("broken", broken), make("missing", missing)],
        Point(2, 3, 4),
        torch.float32,
        warmup=0,
        repeats=2,
    )
    status = {r["case"]: r["status"] for r in recs}
    assert status == {"good": "ok", "broken": "error", "missing": "skipped"}
    broken_rec = next(r for r in recs if r["case"] == "broken")
    assert "kernel exploded" in broken_rec["reason"]
    assert next(r for r in recs if r["case"] == "good")["fwdbwd"]["repeats"] == 2


def test_busy_warning_follows_load_and_cpu_share() -> None:
    def doc(load: float, shares: list[float]) -> dict[str, Any]:
        rows = [{"kind": "time", "status": "ok", "fwdbwd": {"cpu_share": v}} for v in shares]
        return {
            "machine": {"cpus_available": 2, "load_average_at_start": [load, 0.2, 0.1]},
            "load_average_at_end": [6.0, 5.0, 4.0],  # includes the run itself: not used
            "results": rows,
        }

    assert report.busy_warning(doc(0.3, [0.99, 0.98, 0.5, 1.0])) == []
    text = "\n".join(report.busy_warning(doc(6.0, [0.99])))
    assert "shared the machine" in text and "6.0 on 2 CPUs" in text
    assert report.busy_warning(doc(0.3, [0.4, 0.5, 0.99])) != []


def test_busy_warning_prefers_the_measured_contention_to_the_load_average() -> None:
    def doc(load: float, elsewhere: float) -> dict[str, Any]:
        return {"machine": {"cpus_available": 2, "load_average_at_start": [load, 1.0, 1.0],
                            "busy_cpus_elsewhere_at_start": elsewhere},
                "results": [{"kind": "time", "status": "ok", "fwdbwd": {"cpu_share": 0.99}}]}

    # the load average still trails work stopped a minute ago; the measure says idle
    assert report.busy_warning(doc(1.6, 0.02)) == []
    text = "\n".join(report.busy_warning(doc(0.1, 1.5)))
    assert "kept 1.5 of its 2 CPUs busy" in text


def test_busy_cpus_elsewhere_sees_a_busy_child_process() -> None:
    import subprocess
    import sys

    from ctrlrnn.bench.machine import busy_cpus_elsewhere

    idle = busy_cpus_elsewhere(0.3)
    if idle is None:
        pytest.skip("no /proc/stat here")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = busy_cpus_elsewhere(0.5)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and busy >= 0.5  # one spinning process: about a whole CPU


def test_compare_labels_may_hold_an_equals_sign(tmp_path: Path) -> None:
    from ctrlrnn.bench.cli import _compared

    doc = {"schema": runner.SCHEMA, "results": []}
    src = report.save_json(doc, tmp_path / "r.json")
    with pytest.raises(ValueError, match="LABEL=JSON"):
        _compared(["no-separator"])
    assert _compared([f"rows at B=1 from one process={src}"]) == [
        ("rows at B=1 from one process", str(src), doc)]


def test_a_bench_measures_the_other_processes_load_once(monkeypatch, tmp_path: Path) -> None:
    """`ctrlrnn bench` measures the CPUs other processes keep busy once, at its start: the
    warning and the JSON's record read the same value; machine() measures only when not given
    one."""
    from ctrlrnn.bench import cli
    from ctrlrnn.bench import machine as machine_module
    from ctrlrnn.bench.cli import register

    calls: list[int] = []

    def fake(seconds: float = 0.5) -> float:
        calls.append(1)
        return 0.25

    monkeypatch.setattr(cli, "busy_cpus_elsewhere", fake)
    monkeypatch.setattr(machine_module, "busy_cpus_elsewhere", fake)
    assert machine_module.machine(None)["busy_cpus_elsewhere_at_start"] is None and not calls
    assert machine_module.machine()["busy_cpus_elsewhere_at_start"] == 0.25 and calls == [1]
    calls.clear()
    parser = argparse.ArgumentParser(prog="ctrlrnn")
    register(parser.add_subparsers(dest="command"))
    out = tmp_path / "r.json"
    args = parser.parse_args(["bench", "--tiny", "--only", "scan_compiled", "--processes", "0",
                              "--repeats", "1", "--out", str(out)])
    assert args.func(args) == 0
    assert calls == [1]
    doc = json.loads(out.read_text())
    assert doc["machine"]["busy_cpus_elsewhere_at_start"] == 0.25
