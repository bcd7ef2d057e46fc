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


class _WithSpare(torch.nn.Module):
    """Two layers, and (``spare``) a parameter between them the forward never reads, as
    ``Seq2Seq.query`` was in the additive mode: it never gets a gradient, so no optimizer
    state."""

    def __init__(self, spare: bool) -> None:
        super().__init__()
        self.first = torch.nn.Linear(3, 4)
        if spare:
            self.spare = torch.nn.Parameter(torch.zeros(5))
        self.second = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))

    def _load_from_state_dict(self, state_dict, prefix, *args):
        if not hasattr(self, "spare"):  # what Seq2Seq does with its legacy query.weight
            state_dict.pop(prefix + "spare", None)
        super()._load_from_state_dict(state_dict, prefix, *args)


def _adam_steps(model, opt, x, steps):
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


def test_optimizer_state_follows_parameter_names_past_a_dropped_stateless_parameter(tmp_path):
    """A checkpoint records the name of every optimizer index; a model that no longer holds a
    parameter the optimizer never updated resumes with each other parameter's Adam moments on
    that parameter (by position they would land one parameter off, or not load at all)."""
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    old = _WithSpare(spare=True)
    opt = torch.optim.Adam(old.parameters(), lr=1e-2)
    _adam_steps(old, opt, x, 3)
    assert len(opt.state) == 4  # the spare parameter has none
    path = ck.save_checkpoint(tmp_path / "c.safetensors", old, opt)
    new = _WithSpare(spare=False)
    opt2 = torch.optim.Adam(new.parameters(), lr=1e-2)
    ck.Checkpoint(path).restore(new, opt2)
    for (name, p_old), p_new in zip(
        [(n, p) for n, p in old.named_parameters() if n != "spare"], new.parameters(),
        strict=True,
    ):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(opt2.state[p_new][key], opt.state[p_old][key],
                                       rtol=0, atol=0, msg=name)
    _adam_steps(old, opt, x, 2)
    _adam_steps(new, opt2, x, 2)
    for n, p in new.named_parameters():
        torch.testing.assert_close(p, dict(old.named_parameters())[n], rtol=0, atol=0)


def test_optimizer_state_of_a_parameter_the_model_lost_is_refused(tmp_path):
    torch.manual_seed(0)
    old = _WithSpare(spare=True)
    opt = torch.optim.Adam(old.parameters(), lr=1e-2)
    _adam_steps(old, opt, torch.randn(6, 3), 1)
    path = ck.save_checkpoint(tmp_path / "c.safetensors", old, opt)
    smaller = torch.nn.Module()
    smaller.first = torch.nn.Linear(3, 4)
    loaded = ck.Checkpoint(path)
    loaded.model_state = lambda: smaller.state_dict()  # the model side is not under test
    with pytest.raises(ck.CheckpointError, match="'second.weight'"):
        loaded.restore(smaller, torch.optim.Adam(smaller.parameters()), rng=False)


def test_checkpoint_without_names_of_another_model_names_the_way_out(tmp_path):
    """A checkpoint written before the names were recorded loads by position; when the
    positions do not fit, the error says to resume with the version that wrote it."""
    torch.manual_seed(0)
    old = _WithSpare(spare=True)
    opt = torch.optim.Adam(old.parameters(), lr=1e-2)
    _adam_steps(old, opt, torch.randn(6, 3), 1)
    path = ck.save_checkpoint(tmp_path / "c.safetensors", old, opt)
    loaded = ck.Checkpoint(path)
    del loaded.meta["optimizer"]["param_names"]
    new = _WithSpare(spare=False)
    with pytest.raises(ck.CheckpointError, match="version that wrote it"):
        loaded.restore(new, torch.optim.Adam(new.parameters()), rng=False)


class _Reordered(_WithSpare):
    """_WithSpare(spare=False)'s parameters, registered in the other order."""

    def __init__(self) -> None:
        torch.nn.Module.__init__(self)
        self.second = torch.nn.Linear(4, 2)
        self.first = torch.nn.Linear(3, 4)


def test_optimizer_state_follows_names_when_the_registration_order_changes(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    old = _WithSpare(spare=False)
    opt = torch.optim.Adam(old.parameters(), lr=1e-2)
    _adam_steps(old, opt, x, 3)
    path = ck.save_checkpoint(tmp_path / "c.safetensors", old, opt)
    new = _Reordered()
    opt2 = torch.optim.Adam(new.parameters(), lr=1e-2)
    ck.Checkpoint(path).restore(new, opt2)
    _adam_steps(old, opt, x, 2)
    _adam_steps(new, opt2, x, 2)
    for n, p in new.named_parameters():
        torch.testing.assert_close(p, dict(old.named_parameters())[n], rtol=0, atol=0)
