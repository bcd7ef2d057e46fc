"""CUDA graphs of the fused cells' step loops: no host work per time step.

The Triton host (:mod:`ctrlrnn.ops.cells.triton_host`) runs a recurrence as a Python loop that
makes, per step, one GEMM and one step kernel launch, forward and backward. On a GPU at widths
of a few hundred, the host's launch work per step (tens of microseconds for a stack of
recurrences) is longer than the step's GPU work, so the GPU idles between steps. By default
(``CTRLRNN_CUDA_GRAPHS=1``) the whole loop of a call (every step's GEMM and kernel, and the
set-up and the weight-gradient GEMM around them) is captured once in a CUDA graph and then
replayed with a single launch:

* one graph per (cell, forward or backward, number of stacked recurrences, every input's
  shape, strides and dtype, which optional inputs are present, the flags), so a change of
  batch size, sequence length or lengths-present is a different graph;
* a call signature is captured the second time it is seen: the first call runs eagerly (it
  compiles the Triton kernels and initialises cuBLAS, which a capture must not do), and a
  signature seen once, as a one-off batch shape, never costs a capture;
* each graph owns static copies of its inputs: a replay first copies the call's inputs into
  them, and the outputs are cloned out of the graph's memory (the next replay overwrites it);
* at most :data:`MAX_GRAPHS` graphs are kept (least recently used first out), so bucketing
  sequence lengths keeps memory bounded; each graph holds its own copy of the loop's
  activations, so a process that keeps several signatures alive holds several copies;
* when signatures churn (more than :data:`MAX_GRAPHS` evicted, and on average less than one
  replay per graph after the call that captured it: every batch a new shape, say) no new
  signature is captured any more and those calls run eagerly, so a stream of shapes never
  costs a capture per call;
* inside an enclosing capture (a user's own ``torch.cuda.graph``) or on tensors not on CUDA,
  the loop runs eagerly as without this module.

The default is on: ``scripts/gpu-check`` measured the graphs faster than per-step launches at
every length and batch of its ``cells_graphs`` rows on an H100 (docs/gpu.md), and results are
the same either way (the same kernels in the same order; tested). ``CTRLRNN_CUDA_GRAPHS=0``
launches each step from Python and keeps no graphs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from torch import Tensor

from ctrlrnn import settings

ENV = "CTRLRNN_CUDA_GRAPHS"
#: the most graphs kept at once (each holds its inputs, outputs and intermediates)
MAX_GRAPHS = 8
#: the most call signatures remembered as seen once (not yet captured)
MAX_SEEN = 64

Body = Callable[[SimpleNamespace], tuple[Any, ...]]


def enabled() -> bool:
    """Whether ``CTRLRNN_CUDA_GRAPHS`` asks for graphs (unset, empty, ``1``/``on``: the
    default); a value that is neither on nor off is an error naming the variable."""
    return bool(settings.value(ENV))


class GraphBackend(Protocol):
    """How graphs are made: CUDA's, or a stand-in that tests the caching on the CPU."""

    def applies(self, tensors: list[Tensor]) -> bool:
        """Whether a call on ``tensors`` may be captured."""
        ...

    def capture(self, run: Callable[[], tuple[Any, ...]]) -> tuple[Callable[[], None],
                                                                   tuple[Any, ...]]:
        """Capture ``run``; returns the replay function and the outputs it writes."""
        ...


class CudaGraphs:
    """:class:`GraphBackend` on ``torch.cuda.CUDAGraph`` (each graph its own memory pool)."""

    def applies(self, tensors: list[Tensor]) -> bool:
        if not tensors or not all(t.is_cuda for t in tensors):
            return False
        return not torch.cuda.is_current_stream_capturing()

    def capture(self, run: Callable[[], tuple[Any, ...]]) -> tuple[Callable[[], None],
                                                                   tuple[Any, ...]]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = run()
        return graph.replay, outputs


@dataclass
class _Graph:
    inputs: dict[str, Tensor]
    replay: Callable[[], None]
    outputs: tuple[Any, ...]


def _describe(value: Any) -> Hashable:
    if isinstance(value, Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.dtype, value.device)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"step graphs: cannot key an input of type {type(value).__name__}")


def signature(args: SimpleNamespace) -> tuple[Hashable, ...]:
    """What a graph is specialised on: every input's name, and its shape, strides, dtype and
    device (tensors) or value (flags, ``None`` for an absent input)."""
    return tuple((name, _describe(v)) for name, v in sorted(vars(args).items()))


class StepGraphs:
    """The graphs of one process: :meth:`run` replays the graph of a call's signature, captures
    it on the signature's second call, or runs the body eagerly (module docstring)."""

    def __init__(self, backend: GraphBackend | None = None, max_graphs: int = MAX_GRAPHS,
                 max_seen: int = MAX_SEEN, force: bool | None = None) -> None:
        self.backend: GraphBackend = backend if backend is not None else CudaGraphs()
        self.max_graphs, self.max_seen = max_graphs, max_seen
        self.force = force
        self._graphs: OrderedDict[Hashable, _Graph] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self.captures = 0
        self.replays = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()
        self.captures = self.replays = self.evictions = 0

    def churning(self) -> bool:
        """Whether signatures come and go faster than graphs pay off (module docstring): more
        than ``max_graphs`` graphs evicted, and less than one replay per graph on average after
        the call that captured it (which replays it once)."""
        return self.evictions > self.max_graphs and self.replays < 2 * self.captures

    def run(self, tag: Hashable, args: SimpleNamespace, body: Body) -> tuple[Any, ...]:
        """``body(args)``, through a graph where graphs are on and apply (``tag`` names the
        loop: cell, direction of the pass, stacked recurrences)."""
        on = enabled() if self.force is None else self.force
        tensors = [v for v in vars(args).values() if isinstance(v, Tensor)]
        if not on or not self.backend.applies(tensors):
            return body(args)
        key = (tag, signature(args))
        graph = self._graphs.get(key)
        if graph is None:
            if key not in self._seen or self.churning():
                self._seen[key] = None
                while len(self._seen) > self.max_seen:
                    self._seen.popitem(last=False)
                return body(args)
            graph = self._capture(key, args, body)
        else:
            self._graphs.move_to_end(key)
        # the loops are raw compute below the cell op's own autograd: no history on the copies
        with torch.no_grad():
            for name, static in graph.inputs.items():
                static.copy_(getattr(args, name))
            graph.replay()
            self.replays += 1
            return tuple(o.clone() if isinstance(o, Tensor) else o for o in graph.outputs)

    def _capture(self, key: Hashable, args: SimpleNamespace, body: Body) -> _Graph:
        with torch.no_grad():
            inputs = {n: v.detach().clone() for n, v in vars(args).items()
                      if isinstance(v, Tensor)}
            namespace = SimpleNamespace(**{**vars(args), **inputs})
            replay, outputs = self.backend.capture(lambda: body(namespace))
        graph = _Graph(inputs, replay, tuple(outputs))
        self._seen.pop(key, None)
        self._graphs[key] = graph
        while len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
            self.evictions += 1
        self.captures += 1
        return graph


#: the graphs of the Triton host's step loops
GRAPHS = StepGraphs()
