"""Every layer configuration the shared tests of ``tests/nn`` run, listed once, and how to call it.

The contract files (``test_padding_contract.py``, ``test_layer_contract.py``,
``test_nonfinite_input.py``, ``test_empty_batch.py``, ``test_autocast.py``,
``test_contiguous_outputs.py``, ``test_weight_drop.py``, ``test_torch_compile.py``) parametrise
their cases over :data:`LAYERS` (or a named part of it); each layer's own file
(``test_qrnn.py``, ...) holds what is specific to that layer. A configuration added here is
checked by every contract at once.

:func:`make` builds a configuration at the sizes a contract asks for; :func:`run` calls any layer
the same way (a CARNN with a context takes one); :func:`gradcheck` is the float64 gradient check
the layer files share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

import ctrlrnn

D, H, C = 4, 5, 3  # input, hidden and context sizes unless a contract asks for others


@dataclass(frozen=True)
class Layer:
    """One configuration: the class, its keyword arguments (sizes apart) and whether it is
    used in evaluation mode (zoneout's expectation instead of a random mask)."""

    cls: type[nn.Module]
    kwargs: dict[str, Any] = field(default_factory=dict)
    eval: bool = False


LAYERS: dict[str, Layer] = {
    # QRNN: fo-pooling (default), ifo-pooling with dense connections, zoneout, per-layer windows
    # of the unmasked (centred) convolution of section 3.3
    "qrnn": Layer(ctrlrnn.QRNN, dict(num_layers=2, bidirectional=True, window=3)),
    "qrnn-ifo-dense": Layer(ctrlrnn.QRNN, dict(num_layers=2, pooling="ifo", dense=True)),
    "qrnn-zoneout": Layer(ctrlrnn.QRNN, dict(pooling="ifo", zoneout=0.25), eval=True),
    "qrnn-centred": Layer(ctrlrnn.QRNN, dict(num_layers=2, bidirectional=True, window=(6, 2),
                                             causal=False)),  # fmt: skip
    # RCRN: LSTM and GRU cells, each listener
    "rcrn": Layer(ctrlrnn.RCRN, dict(num_layers=2, bidirectional=True)),
    "rcrn-concat": Layer(ctrlrnn.RCRN, dict(num_layers=2, bidirectional=True,
                                            listener="concat_forward")),  # fmt: skip
    "rcrn-gru": Layer(ctrlrnn.RCRN, dict(cell="gru")),
    "rcrn-gru-bi": Layer(ctrlrnn.RCRN, dict(cell="gru", num_layers=2, bidirectional=True)),
    "rcrn-gru-concat": Layer(ctrlrnn.RCRN, dict(cell="gru", num_layers=2, bidirectional=True,
                                                listener="concat_forward")),  # fmt: skip
    # CAS-LSTM: lambda 0.5, a trainable lambda, the peephole variant (eq 17-18)
    "caslstm": Layer(ctrlrnn.CASLSTM, dict(num_layers=2, bidirectional=True)),
    "caslstm-trainable": Layer(ctrlrnn.CASLSTM, dict(num_layers=3, bidirectional=True,
                                                     lambda_="trainable")),  # fmt: skip
    "caslstm-peephole": Layer(ctrlrnn.CASLSTM, dict(num_layers=2, peephole=True)),
    # CARNN: each variant with a context, and sCARNN without one
    "ncarnn": Layer(ctrlrnn.CARNN, dict(context_size=C, variant="n", num_layers=2,
                                        bidirectional=True)),  # fmt: skip
    "icarnn": Layer(ctrlrnn.CARNN, dict(context_size=C, variant="i", num_layers=2,
                                        bidirectional=True)),  # fmt: skip
    "scarnn": Layer(ctrlrnn.CARNN, dict(context_size=C, variant="s", num_layers=2)),
    "scarnn-free": Layer(ctrlrnn.CARNN, dict(context_size=None, variant="s")),
    # METAGROSS: each base, recurrence and depth gate; the reading as printed (gates="state")
    "metagross": Layer(ctrlrnn.Metagross, dict(depth=2, num_layers=2, bidirectional=True)),
    "metagross-c-static": Layer(ctrlrnn.Metagross, dict(depth=2, num_layers=2, recurrence="c",
                                                        depth_gate="static", causal=False)),
    "metagross-scalar-c": Layer(ctrlrnn.Metagross, dict(depth=2, depth_gate="scalar",
                                                        recurrence="c")),  # fmt: skip
    "metagross-lstm": Layer(ctrlrnn.Metagross, dict(depth=2, base="lstm", recurrence="c",
                                                    num_layers=2)),  # fmt: skip
    "metagross-gru": Layer(ctrlrnn.Metagross, dict(depth=3, base="gru", residual=True,
                                                   depth_gate="static", causal=False,
                                                   bidirectional=True)),  # fmt: skip
    "metagross-state": Layer(ctrlrnn.Metagross, dict(depth=2, gates="state",
                                                     bidirectional=True)),  # fmt: skip
    "metagross-state-lstm": Layer(ctrlrnn.Metagross, dict(depth=2, gates="state", base="lstm")),
    "metagross-state-gru": Layer(ctrlrnn.Metagross, dict(depth=2, gates="state", base="gru",
                                                         num_layers=2)),  # fmt: skip
}
NAMES = list(LAYERS)
#: the position-wise METAGROSS (no recurrence, no states): in the contracts that apply to it
FFN = "metagross-ffn"


def make(name: str, input_size: int = D, hidden_size: int = H, **overrides: Any) -> nn.Module:
    """Configuration ``name`` (or :data:`FFN`) at these sizes, ``overrides`` applied to its
    keyword arguments. sCARNN's hidden size is its input size (eq 6 adds the input itself)."""
    if name == FFN:
        return ctrlrnn.MetagrossFFN(input_size, depth=2, **overrides)
    spec = LAYERS[name]
    kwargs = {**spec.kwargs, **overrides}
    if kwargs.get("variant") == "s":
        hidden_size = input_size
    module = spec.cls(input_size, hidden_size, **kwargs)
    return module.eval() if spec.eval else module


def takes_context(layer: nn.Module) -> bool:
    return isinstance(layer, ctrlrnn.CARNN) and layer.context_size is not None


def context(layer: nn.Module, batch: int, dtype: torch.dtype = torch.float32,
            generator: torch.Generator | None = None) -> Tensor | None:  # fmt: skip
    """A random context ``(batch, context_size)`` for a CARNN that takes one, else None."""
    if not takes_context(layer):
        return None
    return torch.randn(batch, layer.context_size, generator=generator, dtype=dtype)


def run(
    layer: nn.Module,
    x: Tensor | PackedSequence,
    ctx: Tensor | None = None,
    hx: Any = None,
    lengths: Tensor | None = None,
) -> tuple[Any, Any]:
    """``layer(x, [ctx,] hx, lengths=lengths)``: a CARNN takes the context (None where it was
    built without one) before the initial state."""
    if isinstance(layer, ctrlrnn.CARNN):
        return layer(x, ctx, hx, lengths=lengths)
    return layer(x, hx, lengths=lengths)


def states(h_n: Tensor | Sequence[Tensor]) -> list[Tensor]:
    """The final states as a list (one tensor for the layers that carry one)."""
    return [h_n] if isinstance(h_n, Tensor) else list(h_n)


def gradcheck(
    m: nn.Module, x: Tensor, hx: Tensor | Sequence[Tensor], lengths: Tensor | None = None,
    ctx: Tensor | None = None,
) -> bool:  # fmt: skip
    """``torch.autograd.gradcheck`` of ``m`` in float64: full Jacobians w.r.t. the input, the
    context and the initial states; random directions (fast mode) over the parameters too,
    which keeps the check thorough yet quick."""
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in m.named_parameters())
    single = isinstance(hx, Tensor)
    init = (hx,) if single else tuple(hx)
    lead = (x,) if ctx is None else (x, ctx)

    def f(*args: Tensor) -> tuple[Tensor, ...]:
        inputs, rest = args[: len(lead)], args[len(lead) :]
        given, ps = rest[: len(init)], rest[len(init) :]
        state = given[0] if single else tuple(given)
        if isinstance(m, ctrlrnn.CARNN) and ctx is None:
            inputs = (*inputs, None)  # a CARNN without a context takes None in its place
        call = (*inputs, state)
        out, h_n = torch.func.functional_call(m, dict(zip(names, ps)), call,
                                              dict(lengths=lengths))  # fmt: skip
        return (out, *states(h_n))

    full = torch.autograd.gradcheck(lambda *a: f(*a, *params), (*lead, *init))
    return full and torch.autograd.gradcheck(f, (*lead, *init, *params), fast_mode=True)
