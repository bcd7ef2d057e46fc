"""Encoders by name: any registered unit (:mod:`ctrlrnn.nn.registry`), or ``torch.nn.LSTM`` /
``nn.GRU`` as the baseline (``model.dense=true``: densely connected, as the QRNN's ``dense``,
:mod:`ctrlrnn.models.dense_rnn`).

Every task model takes its encoder from here, so comparing architectures means swapping one
name (``--model``) while the rest of the model stays the same. :class:`SequenceEncoder` gives
all of them one interface: ``forward(x, lengths=None) -> (output, final, h_n)`` on batch-first
input, padding ignored (``nn.LSTM`` / ``nn.GRU`` get packed sequences), and
:meth:`SequenceEncoder.forward_layers` adds every layer's final state (the QRNN paper's eq 7).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ctrlrnn.models.torch_rnn_lengths import run_full, run_with_lengths
from ctrlrnn.nn.registry import UNITS
from ctrlrnn.ops.padding import last_valid
from ctrlrnn.options import check_options

COMMON: dict[str, tuple[Any, Any]] = {
    "hidden_size": (int, 128),
    "num_layers": (int, 1),
    "dropout": (float, 0.0),
    "bidirectional": (bool, False),
}


@dataclass(frozen=True)
class EncoderSpec:
    """How to build encoder ``name``: its class (or ``"module:Class"``) and its own options
    beyond ``COMMON``."""

    name: str
    target: str | type[nn.Module]
    options: Mapping[str, tuple[Any, Any]]
    description: str

    def cls(self) -> type[nn.Module]:
        if isinstance(self.target, type):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


#: the baselines, before every registered unit
_DENSE = {"dense": (bool, False)}
BASELINES: dict[str, EncoderSpec] = {
    "lstm": EncoderSpec("lstm", "torch.nn:LSTM", _DENSE, "torch.nn.LSTM (baseline)"),
    "gru": EncoderSpec("gru", "torch.nn:GRU", _DENSE, "torch.nn.GRU (baseline)"),
}


class _Encoders(Mapping[str, EncoderSpec]):
    """:data:`BASELINES`, then every unit of :data:`ctrlrnn.nn.registry.UNITS` (read on each
    use, so a unit registered later is an encoder too)."""

    def _all(self) -> dict[str, EncoderSpec]:
        units = {name: EncoderSpec(name, unit.cls, unit.options, unit.description)
                 for name, unit in UNITS.items()}
        return {**BASELINES, **units}

    def __getitem__(self, name: str) -> EncoderSpec:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: encoder name -> how to build it: the baselines and every registered unit
ENCODERS: Mapping[str, EncoderSpec] = _Encoders()


def encoder_options(name: str, given: dict[str, Any]) -> dict[str, Any]:
    """Validate ``model.*`` options for encoder ``name`` (unknown keys and bad types refused)."""
    if name not in ENCODERS:
        raise ValueError(f"model: unknown encoder {name!r} (known: {', '.join(ENCODERS)})")
    return check_options("model", name, given, {**COMMON, **ENCODERS[name].options})


class SequenceEncoder(nn.Module):
    """One interface over every encoder: batch-first input, lengths, padding ignored.

    ``forward(x, lengths=None, hx=None, context=None) -> (output, final, h_n)``: ``output``
    ``(B, T, H*D)``
    with zeros past each length, ``final`` ``(B, H*D)`` the output at each sequence's last valid
    step for the forward direction and at step 0 for the backward one (the summary states),
    ``h_n`` the layer's own final state(s).

    ``stateful``: ``hx``/``h_n`` carry everything a following chunk of the same stream needs
    (for the QRNN also each layer's last window - 1 inputs; see ``QRNN.forward_stateful``).
    ``causal_only``: the model reads the output at ``t`` to predict what follows ``t`` (a
    language model, next-frame prediction), so options that read ahead are refused with a
    ``ValueError`` naming them: the QRNN's ``model.causal=false``. A stateful encoder is
    causal only.
    """

    def __init__(
        self, name: str, input_size: int, options: dict[str, Any], *, stateful: bool = False,
        causal_only: bool = False,
    ) -> None:
        super().__init__()
        self.stateful = stateful
        opts = encoder_options(name, options)
        if (causal_only or stateful) and opts.get("causal") is False:
            raise ValueError(
                "model.causal: this model predicts what follows each step from the encoder's "
                "output there, so the encoder must not read ahead (causal=false centres the "
                "QRNN's convolution on t)"
            )
        self.name = name
        self.hidden_size = opts["hidden_size"]
        self.num_layers = opts["num_layers"]
        self.bidirectional = opts["bidirectional"]
        self.torch_rnn = name in ("lstm", "gru")
        cls = ENCODERS[name].cls()
        extra = {k: v for k, v in opts.items() if k not in COMMON}
        self.dense = bool(extra.pop("dense", False)) if self.torch_rnn else False
        if self.dense:  # a densely connected stack of torch's layers: the units' interface
            from ctrlrnn.models.dense_rnn import DenseRNN

            self.torch_rnn = False
            cls = partial(DenseRNN, name)
        self.rnn = cls(
            input_size,
            opts["hidden_size"],
            num_layers=opts["num_layers"],
            batch_first=True,
            dropout=opts["dropout"] if opts["num_layers"] > 1 or not self.torch_rnn else 0.0,
            bidirectional=opts["bidirectional"],
            **extra,
        )
        self.output_size = opts["hidden_size"] * (2 if opts["bidirectional"] else 1)
        self.options = opts

    def forward(
        self, x: Tensor, lengths: Tensor | None = None, hx: Any = None,
        context: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Any]:
        if self.name == "carnn":
            out, h_n = self.rnn(x, context, hx, lengths=lengths)
        elif context is not None:
            raise ValueError(f"context: encoder {self.name!r} takes no context")
        elif self.stateful and self.name == "qrnn":
            out, h_n = self.rnn.forward_stateful(x, hx, lengths)
        elif self.torch_rnn and lengths is not None:
            out, h_n = run_with_lengths(self.rnn, x, lengths, hx)
        elif self.torch_rnn:
            out, h_n = run_full(self.rnn, x, hx)
        else:
            out, h_n = self.rnn(x, hx, lengths=lengths)
        return out, self._final(out, lengths), h_n

    def _final(self, out: Tensor, lengths: Tensor | None) -> Tensor:
        if self.bidirectional:
            half = self.hidden_size
            return torch.cat([last_valid(out[..., :half], lengths), out[:, 0, half:]], dim=-1)
        return last_valid(out, lengths)

    @property
    def has_layer_states(self) -> bool:
        """Whether :meth:`forward_layers` can give every layer's final state: the QRNN (its
        layers' outputs), ``nn.LSTM`` / ``nn.GRU`` (their ``h_n``), any one-layer encoder (its
        ``final``)."""
        return (self.name in ("qrnn", "lstm", "gru") and not self.dense) or self.num_layers == 1

    def forward_layers(
        self, x: Tensor, lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(output, final, layer_states)``: :meth:`forward`'s first two, and
        ``layer_states`` ``(B, num_layers, H*D)``, every layer's final state as ``final`` is the
        last layer's (the output where each direction's pass ends: the forward direction at the
        last valid step, the backward one at step 0; the directions concatenated), so that
        ``layer_states[:, -1]`` equals ``final``. This is ``h~^l_T`` of the QRNN paper's eq 7.

        Available where :attr:`has_layer_states` says; elsewhere a ``ValueError``.
        """
        if not self.has_layer_states:
            raise ValueError(
                f"model: encoder {self.name!r} with {self.num_layers} layers does not expose "
                "its layers' final states (the QRNN, nn.LSTM and nn.GRU do, and any one-layer "
                "encoder)"
            )
        if self.name == "qrnn":
            out, _, states = self.rnn.forward_with_layer_states(x, lengths=lengths)
            return out, self._final(out, lengths), states.transpose(0, 1)
        out, final, h_n = self.forward(x, lengths)
        if not self.torch_rnn:  # one layer: its final state is ``final``
            return out, final, final.unsqueeze(1)
        h = h_n[0] if isinstance(h_n, tuple) else h_n  # nn.LSTM: (h_n, c_n)
        L, D, H = self.num_layers, 2 if self.bidirectional else 1, self.hidden_size
        # (L*D, B, H), layer-major: each layer's directions side by side, as in the output
        states = h.view(L, D, -1, H).permute(2, 0, 1, 3).reshape(-1, L, D * H)
        return out, final, states
