"""Checkpoints: round trip of model, optimizer and RNG; atomic writes; no pickle."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from safetensors.torch import save_file

from ctrlrnn import QRNN
from ctrlrnn.train import checkpoint as ck


def _trained(seed=0):
    torch.manual_seed(seed)
    model = QRNN(3, 4, num_layers=2, batch_first=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        out, _ = model(torch.randn(2, 5, 3))
        opt.zero_grad()
        out.square().mean().backward()
        opt.step()
    return model, opt


def test_round_trip_continues_identically(tmp_path):
    model, opt = _trained()
    x = torch.randn(2, 5, 3)
    path = ck.save_checkpoint(tmp_path / "c.safetensors", model, opt,
                              progress={"step": 3}, config={"task": "x"})

    def step(m, o):
        out, _ = m(x + torch.randn(1))  # consumes the RNG too
        o.zero_grad()
        out.square().mean().backward()
        o.step()
        return [p.detach().clone() for p in m.parameters()]

    expected = step(model, opt)
    model2, opt2 = _trained(seed=1)  # different weights and optimizer state
    loaded = ck.Checkpoint(path)
    loaded.restore(model2, opt2)
    assert loaded.progress == {"step": 3} and loaded.config == {"task": "x"}
    got = step(model2, opt2)
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_write_is_atomic(tmp_path, monkeypatch):
    model, opt = _trained()
    path = tmp_path / "c.safetensors"
    ck.save_checkpoint(path, model, opt, progress={"step": 1})
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(ck, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(path, model, opt, progress={"step": 2})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]  # no temporary left


def test_loading_never_unpickles(tmp_path):
    evil = tmp_path / "evil.safetensors"
    evil.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        ck.Checkpoint(evil)
    plain = tmp_path / "plain.safetensors"
    save_file({"x": torch.zeros(1)}, str(plain))
    with pytest.raises(ValueError, match="no ctrlrnn metadata"):
        ck.Checkpoint(plain)
    with pytest.raises(FileNotFoundError, match="checkpoint: no such file"):
        ck.Checkpoint(tmp_path / "missing.safetensors")
    source = open(ck.__file__).read()
    assert not re.search(r"(?<![\w.])torch\.load\(|^import pickle|pickle\.load", source, re.M)
