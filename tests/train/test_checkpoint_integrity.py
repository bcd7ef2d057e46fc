"""Checkpoints verify their content: checksums, clear one-line errors, the previous file kept,
stale temporary files removed."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ctrlrnn.train import checkpoint as ck
from ctrlrnn.train.checkpoint import CheckpointError

WEIGHT = "model/weight_ih_l0"


def _model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.LSTM(4, 8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    out, _ = model(torch.randn(3, 2, 4))
    out.square().mean().backward()
    opt.step()
    return model, opt


def _save(path: Path, step: int = 1, **kwargs) -> Path:
    model, opt = _model_and_optimizer(step)
    return ck.save_checkpoint(path, model, opt, progress={"step": step}, config={"task": "t"},
                              **kwargs)


def _header(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return n, json.loads(raw[8 : 8 + n])


def _tensor_start(path: Path, name: str) -> int:
    n, header = _header(path)
    return 8 + n + header[name]["data_offsets"][0]


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def _assert_one_line(exc: BaseException, path: Path) -> str:
    message = str(exc)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"checkpoint: {path}: ")
    return message


def test_round_trip_is_equal_and_verified(tmp_path):
    model, opt = _model_and_optimizer()
    path = ck.save_checkpoint(tmp_path / "c.safetensors", model, opt, progress={"step": 1},
                              config={"task": "t"}, task_state=({"k": [1, 2]},
                                                                {"buf": torch.arange(3)}))
    loaded = ck.Checkpoint(path)
    assert loaded.verified and loaded.meta["format"] == ck.FORMAT == "ctrlrnn-checkpoint/2"
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.model_state()[name], value, rtol=0, atol=0)
    assert loaded.progress == {"step": 1} and loaded.config == {"task": "t"}
    state, tensors = loaded.task_state()
    assert state == {"k": [1, 2]} and torch.equal(tensors["buf"], torch.arange(3))
    model2, opt2 = _model_and_optimizer(seed=5)
    loaded.restore(model2, opt2)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    torch.testing.assert_close(opt2.state_dict()["state"][0]["exp_avg"],
                               opt.state_dict()["state"][0]["exp_avg"], rtol=0, atol=0)
    sums = loaded.meta["checksums"]
    assert set(sums["tensors"]) == set(loaded.tensors) and len(sums["metadata"]) == 64


def test_flipped_bit_names_file_and_tensor(tmp_path):
    path = _save(tmp_path / "c.safetensors")
    offset = _tensor_start(path, WEIGHT) + 5
    byte = path.read_bytes()[offset]
    _patch(path, offset, bytes([byte ^ 0x10]))
    with pytest.raises(CheckpointError) as info:
        ck.Checkpoint(path)
    message = _assert_one_line(info.value, path)
    assert f"tensor {WEIGHT} does not match its checksum" in message
    assert isinstance(info.value, ValueError)


def test_nan_written_into_a_tensor(tmp_path):
    path = _save(tmp_path / "c.safetensors")
    _patch(path, _tensor_start(path, "model/bias_hh_l0"), struct.pack("<f", float("nan")))
    with pytest.raises(CheckpointError, match="tensor model/bias_hh_l0 does not match"):
        ck.Checkpoint(path)


def test_edited_metadata_is_detected(tmp_path):
    path = _save(tmp_path / "c.safetensors", step=1)
    n, header = _header(path)
    meta = json.loads(header["__metadata__"]["ctrlrnn"])
    meta["progress"]["step"] = 7
    header["__metadata__"]["ctrlrnn"] = json.dumps(meta, separators=(",", ":"))
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n  # same header length, padded with spaces: still valid safetensors
    _patch(path, 8, text.ljust(n, b" "))
    with safe_open(str(path), framework="pt") as fh:  # still valid safetensors
        assert json.loads(fh.metadata()["ctrlrnn"])["progress"]["step"] == 7
    with pytest.raises(CheckpointError) as info:
        ck.Checkpoint(path)
    assert "metadata does not match its checksum" in _assert_one_line(info.value, path)


def test_truncated_empty_and_cut_json(tmp_path):
    good = _save(tmp_path / "good.safetensors")
    raw = good.read_bytes()
    n, _ = _header(good)
    for cut in (4, 8 + n // 2, 8 + n + 10, len(raw) - 1):
        bad = tmp_path / f"cut{cut}.safetensors"
        bad.write_bytes(raw[:cut])
        with pytest.raises(CheckpointError, match="not a readable safetensors file") as info:
            ck.Checkpoint(bad)
        _assert_one_line(info.value, bad)
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty file$") as info:
        ck.Checkpoint(empty)
    _assert_one_line(info.value, empty)
    # valid safetensors whose ctrlrnn metadata is cut JSON
    cut_meta = tmp_path / "cutmeta.safetensors"
    with safe_open(str(good), framework="pt") as fh:
        text = fh.metadata()["ctrlrnn"]
    save_file({"x": torch.zeros(2)}, str(cut_meta), metadata={"ctrlrnn": text[: len(text) // 2]})
    with pytest.raises(CheckpointError, match="the metadata is not valid JSON") as info:
        ck.Checkpoint(cut_meta)
    _assert_one_line(info.value, cut_meta)
    # no ctrlrnn metadata, unknown format
    plain = tmp_path / "plain.safetensors"
    save_file({"x": torch.zeros(1)}, str(plain))
    with pytest.raises(CheckpointError, match="no ctrlrnn metadata$"):
        ck.Checkpoint(plain)
    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(1)}, str(other), metadata={"ctrlrnn": '{"format": "x/9"}'})
    with pytest.raises(CheckpointError, match="has format 'x/9'"):
        ck.Checkpoint(other)
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        ck.Checkpoint(tmp_path / "missing.safetensors")


def test_format_1_file_loads_unverified(tmp_path):
    v2 = _save(tmp_path / "v2.safetensors")
    tensors = load_file(str(v2))
    with safe_open(str(v2), framework="pt") as fh:
        meta = json.loads(fh.metadata()["ctrlrnn"])
    del meta["checksums"]
    meta["format"] = "ctrlrnn-checkpoint/1"
    v1 = tmp_path / "v1.safetensors"
    save_file(tensors, str(v1), metadata={"ctrlrnn": json.dumps(meta)})
    loaded = ck.Checkpoint(v1)
    assert not loaded.verified and loaded.progress == {"step": 1}
    model, opt = _model_and_optimizer(seed=3)
    loaded.restore(model, opt)
    torch.testing.assert_close(model.state_dict()["weight_ih_l0"], tensors[WEIGHT])


def test_keep_previous_rotation_and_fallback(tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    previous = tmp_path / "checkpoint.previous.safetensors"
    assert ck.previous_path(path) == previous
    _save(path, step=1, keep_previous=True)
    assert path.is_file() and not previous.exists()
    _save(path, step=2, keep_previous=True)
    _save(path, step=3, keep_previous=True)
    assert ck.Checkpoint(path).progress["step"] == 3
    assert ck.Checkpoint(previous).progress["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [previous.name, path.name]
    _save(path, step=4)  # without keep_previous the previous file is left alone
    assert ck.Checkpoint(previous).progress["step"] == 2

    loaded, skipped = ck.load_newest_intact(path)
    assert loaded.path == path and skipped == []
    # the newest is corrupt: fall back to the previous one, saying why
    offset = _tensor_start(path, WEIGHT)
    _patch(path, offset, bytes([path.read_bytes()[offset] ^ 1]))
    loaded, skipped = ck.load_newest_intact(path)
    assert loaded.path == previous and loaded.progress["step"] == 2
    assert len(skipped) == 1 and skipped[0].startswith(f"checkpoint: {path}: tensor {WEIGHT}")
    # both bad: one line naming both files and both reasons
    previous.write_bytes(b"")
    with pytest.raises(CheckpointError) as info:
        ck.load_newest_intact(path)
    message = _assert_one_line(info.value, path)
    assert f"tensor {WEIGHT} does not match" in message
    assert f"{previous}: empty file" in message
    # newest missing: the previous one is used
    path.unlink()
    _save(previous, step=9)
    loaded, skipped = ck.load_newest_intact(path)
    assert loaded.path == previous and skipped == [f"checkpoint: no such file {path}"]
    previous.unlink()
    with pytest.raises(FileNotFoundError, match="no such file"):
        ck.load_newest_intact(path)


def test_keep_previous_never_leaves_path_missing(tmp_path, monkeypatch):
    path = _save(tmp_path / "c.safetensors", step=1)
    before = path.read_bytes()
    real_replace = os.replace
    seen: list[bool] = []

    def watching_replace(src, dst):
        seen.append(path.is_file())  # the current checkpoint exists at every rename
        return real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", watching_replace)
    _save(path, step=2, keep_previous=True)
    assert seen and all(seen)
    assert ck.previous_path(path).read_bytes() == before
    assert ck.Checkpoint(path).progress["step"] == 2


def test_temporary_name_carries_the_pid(tmp_path, monkeypatch):
    names: list[str] = []

    def crash(tensors, filename, metadata=None):
        names.append(Path(filename).name)
        raise KeyboardInterrupt

    monkeypatch.setattr(ck, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path / "checkpoint.safetensors")
    assert names[0].startswith(f".checkpoint.safetensors.{os.getpid()}.")
    assert names[0].endswith(".tmp")
    assert list(tmp_path.iterdir()) == []


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_remove_stale_temporaries(tmp_path):
    dead = tmp_path / f".checkpoint.safetensors.{_dead_pid()}.ab12cd_x.tmp"
    live = tmp_path / f".checkpoint.safetensors.{os.getpid()}.zz99yy00.tmp"
    dead_previous = tmp_path / f".checkpoint.previous.safetensors.{_dead_pid()}.0a1b2c3d.tmp"
    legacy_empty = tmp_path / ".checkpoint.safetensors.k3j4h5g6.tmp"
    legacy_recent = tmp_path / ".best.safetensors.q1w2e3r4.tmp"
    legacy_old = tmp_path / ".best.safetensors.a1s2d3f4.tmp"
    unrelated = tmp_path / ".something.12345.tmp"
    checkpoint = tmp_path / "checkpoint.safetensors"
    for p in (dead, live, dead_previous, legacy_recent, legacy_old, unrelated, checkpoint):
        p.write_bytes(b"x" * 10)
    legacy_empty.write_bytes(b"")
    old = time.time() - 3600
    os.utime(legacy_old, (old, old))
    removed = ck.remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([dead, dead_previous, legacy_empty, legacy_old])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live, legacy_recent, unrelated, checkpoint))
    assert ck.remove_stale_temporaries(tmp_path / "nowhere") == []
    assert ck.pid_alive(os.getpid()) and not ck.pid_alive(0)
