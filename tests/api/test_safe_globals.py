"""``ctrlrnn.safe_globals()``: whole ctrlrnn modules saved with ``torch.save`` load with
``torch.load(weights_only=True)`` (torch >= 2.6's default) once its classes are allowed."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import ctrlrnn
from ctrlrnn.compat import torchqrnn

pytestmark = pytest.mark.skipif(
    not hasattr(torch.serialization, "safe_globals"),
    reason="torch.serialization.safe_globals (the context manager) needs torch >= 2.5",
)

X = torch.randn(5, 2, 4)  # (T, B, D)
CTX = torch.randn(2, 3)
TOKENS, PREV_TOKENS = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 4))
E, GATES = torch.randn(2, 5, 4), torch.rand(5, 2, 4)

# name -> (module factory, forward call)
CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], Any]]] = {
    "QRNN": (lambda: ctrlrnn.QRNN(4, 5, num_layers=2, bidirectional=True, window=(3, 1),
                                  zoneout=0.1, weight_drop=0.2), lambda m: m(X)),
    "QRNN-encoder": (lambda: ctrlrnn.QRNN(4, 5, encoder_state_size=3, causal=False),
                     lambda m: m(X, encoder_state=CTX)),
    "QRNNCell": (lambda: ctrlrnn.QRNNCell(4, 5), lambda m: m(X[0])),
    "RCRN": (lambda: ctrlrnn.RCRN(4, 5, bidirectional=True), lambda m: m(X)),
    "RCRN-gru": (lambda: ctrlrnn.RCRN(4, 5, cell="gru", listener="concat_forward"),
                 lambda m: m(X)),
    "RCRNCell": (lambda: ctrlrnn.RCRNCell(4, 5), lambda m: m(X[0])),
    "CASLSTM": (lambda: ctrlrnn.CASLSTM(4, 5, num_layers=3, lambda_=[0.2] * 5), lambda m: m(X)),
    "CASLSTM-peephole": (lambda: ctrlrnn.CASLSTM(4, 5, num_layers=2, peephole=True,
                                                 lambda_="trainable"), lambda m: m(X)),
    "CARNN": (lambda: ctrlrnn.CARNN(4, 5, context_size=3, num_layers=2), lambda m: m(X, CTX)),
    "CARNN-i": (lambda: ctrlrnn.CARNN(4, 5, context_size=None, variant="i"), lambda m: m(X)),
    "CARNNCell": (lambda: ctrlrnn.CARNNCell(4, 5, 3), lambda m: m(X[0], CTX)),
    "Metagross": (lambda: ctrlrnn.Metagross(4, 5, depth=3), lambda m: m(X)),
    "Metagross-state": (lambda: ctrlrnn.Metagross(4, 5, gates="state", depth_gate="scalar"),
                        lambda m: m(X)),
    "Metagross-gru": (lambda: ctrlrnn.Metagross(4, 5, base="gru", bidirectional=True),
                      lambda m: m(X)),
    "MetagrossCell": (lambda: ctrlrnn.MetagrossCell(4, 5), lambda m: m(X[0])),
    "MetagrossFFN": (lambda: ctrlrnn.MetagrossFFN(4, dropout=0.1), lambda m: m(X)),
    "ContextualCARNNLM": (
        lambda: ctrlrnn.ContextualCARNNLM(11, 4, 5, context_size=3, num_latent_labels=2,
                                          io_dropout=0.1),
        lambda m: m(TOKENS, PREV_TOKENS)),
    "PositionEncoder": (lambda: ctrlrnn.PositionEncoder(), lambda m: m(E)),
    "HistorySummary": (lambda: ctrlrnn.HistorySummary(), lambda m: m(E, E.flip(1), E[:, 0])),
    "torchqrnn.QRNN": (lambda: torchqrnn.QRNN(4, 5, num_layers=2, window=2, save_prev_x=True,
                                              zoneout=0.1), lambda m: m(X)),
    "torchqrnn.ForgetMult": (lambda: torchqrnn.ForgetMult(),
                             lambda m: m(GATES, X)),
}


def saved(module: nn.Module) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    return buf


def flat(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    return [t for r in result for t in flat(r)] if isinstance(result, (tuple, list)) else []


def module_classes() -> set[type]:
    """Every nn.Module subclass defined in ctrlrnn.nn and ctrlrnn.compat."""
    found = set()
    for pkg in ("ctrlrnn.nn", "ctrlrnn.compat"):
        root = importlib.import_module(pkg)
        for info in pkgutil.iter_modules(root.__path__, pkg + "."):
            mod = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(mod, inspect.isclass):
                if issubclass(obj, nn.Module) and obj.__module__ == mod.__name__:
                    found.add(obj)
    return found


def test_every_module_class_is_listed():
    listed = set(ctrlrnn.safe_globals())
    # RecurrentBase is only a base class: a pickle names the concrete class of each module
    missing = module_classes() - listed - {ctrlrnn.RecurrentBase}
    assert missing == set()
    assert {nn.ModuleList, nn.Linear, nn.Embedding, nn.Dropout} <= listed


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_with_weights_only(name):
    make, call = CASES[name]
    torch.manual_seed(0)
    module = make()
    call(module)  # state a forward call leaves behind (torchqrnn's prevX) is saved too
    module.eval()
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        torch.load(saved(module), weights_only=True)
    with torch.serialization.safe_globals(ctrlrnn.safe_globals()):
        loaded = torch.load(saved(module), weights_only=True)
    assert type(loaded) is type(module)
    assert loaded.state_dict().keys() == module.state_dict().keys()
    for key, value in module.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert repr(loaded) == repr(module)
    for got, want in zip(flat(call(loaded)), flat(call(module)), strict=True):
        assert torch.equal(got, want)


class Tagger(nn.Module):
    """A model of one's own around a ctrlrnn layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.rnn = ctrlrnn.CASLSTM(4, 6, bidirectional=True)
        self.head = nn.Linear(12, 3)

    def forward(self, tokens: Tensor) -> Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out)


def test_a_model_of_ones_own_adds_its_class():
    model = Tagger().eval()
    tokens = torch.randint(0, 10, (5, 2))
    with torch.serialization.safe_globals([*ctrlrnn.safe_globals(), Tagger]):
        loaded = torch.load(saved(model), weights_only=True)
    assert torch.equal(loaded(tokens), model(tokens))


def test_a_new_list_each_call():
    first = ctrlrnn.safe_globals()
    first.clear()
    assert ctrlrnn.QRNN in ctrlrnn.safe_globals()
