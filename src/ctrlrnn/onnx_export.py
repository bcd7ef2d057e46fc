"""ONNX export of ctrlrnn's layers: :func:`export_onnx` (``docs/onnx.md``).

Every layer exports with torch's dynamo ONNX exporter, ``torch.onnx.export(..., dynamo=True)``
(the default from torch 2.9): while it traces, each recurrent op runs as one
``torch._higher_order_ops.scan`` over time (:mod:`ctrlrnn.ops.scan_export` says how and why),
which the exporter writes as an ONNX ``Scan``, so the graph takes any batch size and any
sequence length. :func:`export_onnx` is that call with what it needs filled in: the dynamic
batch and time axes of every input (``dynamic_shapes``), input and output names that say what
each tensor is, and a clear error when the ONNX packages are missing.

The ONNX packages (``onnx``, ``onnxscript``; ``onnxruntime`` to run the graph) are imported by
torch only when an export runs; ``import ctrlrnn`` never needs them (``pip install
'ctrlrnn[onnx]'`` installs them).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.nn.metagross_ffn import MetagrossFFN
from ctrlrnn.ops import scan_export

__all__ = ["dynamic_shapes_for", "export_onnx", "output_names_for"]

#: What torch's dynamo exporter imports (``onnxruntime`` is only needed to run the graph).
EXPORT_PACKAGES = ("onnx", "onnxscript")


def require_onnx(packages: Sequence[str] = EXPORT_PACKAGES) -> None:
    """Raise an ``ImportError`` naming the install command when an ONNX package is missing.

    Looks the packages up without importing them (``importlib.util.find_spec``).
    """
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"ctrlrnn ONNX export needs {', '.join(missing)}, which is not installed: "
            "pip install 'ctrlrnn[onnx]'"
        )


def _is_recurrent(model: nn.Module) -> bool:
    return isinstance(model, RecurrentBase)


def _is_ffn(model: nn.Module) -> bool:
    return isinstance(model, MetagrossFFN)


def _bound_arguments(
    model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The arguments given to ``model.forward`` by parameter name (defaults not filled in); a
    ``**kwargs`` parameter holds the dict of its entries, as ``torch.export`` expects them."""
    return dict(inspect.signature(model.forward).bind(*args, **(kwargs or {})).arguments)


def _axes(value: Any, axes: dict[int, Any]) -> dict[int, Any] | None:
    """``axes`` for a tensor argument with dynamic axes, else None (all fixed, or no tensor)."""
    return axes if isinstance(value, Tensor) and axes else None


def dynamic_shapes_for(
    model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``dynamic_shapes`` for ``torch.onnx.export`` / ``torch.export.export`` of a ctrlrnn layer
    called as ``model(*args, **kwargs)``: the batch axis (``"batch"``) and the time axis
    (``"time"``) of every tensor argument are dynamic, everything else is fixed.

    Recurrent layers (:class:`~ctrlrnn.nn.base.RecurrentBase`): ``input`` ``(T, B, D)``
    (``(B, T, D)`` with ``batch_first``, ``(T, D)`` unbatched); ``hx`` (a tensor or a tuple)
    ``(L*D, B, S)``; ``lengths`` ``(B,)``; ``context`` (CARNN) ``(B, C)``.
    :class:`~ctrlrnn.nn.metagross_ffn.MetagrossFFN`: every axis of ``x`` but the last
    (``"dim0"``, ``"dim1"``, ...).

    Raises:
        ValueError: for a PackedSequence input (export the padded batch with ``lengths``), a
            tensor passed through ``**kwargs`` (QRNN's ``encoder_state``: wrap the layer in a
            module that names it) or a model that is not a ctrlrnn layer (pass your own
            ``dynamic_shapes``).
    """
    from torch.export import Dim

    named = _bound_arguments(model, args, kwargs)
    if _is_ffn(model):
        x = named.get("x")
        lead = {i: Dim(f"dim{i}") for i in range(x.dim() - 1)} if isinstance(x, Tensor) else {}
        return {name: _axes(value, lead) if name == "x" else None for name, value in named.items()}
    if not _is_recurrent(model):
        raise ValueError(
            f"model: dynamic_shapes_for knows ctrlrnn's layers, not {type(model).__name__}; pass "
            "dynamic_shapes yourself: for each forward argument a dict {axis: torch.export.Dim} "
            "of its dynamic axes (the 'ONNX export' page of ctrlrnn's documentation has an "
            "example for a model of several layers)"
        )
    batch, time = Dim("batch"), Dim("time")
    x = named.get("input")
    if isinstance(x, PackedSequence):
        raise ValueError(
            "input: a PackedSequence cannot be exported; export the padded batch and pass "
            "lengths=... (the ONNX graph then takes a lengths input)"
        )
    unbatched = isinstance(x, Tensor) and x.dim() == 2

    def axes_of(name: str, value: Any) -> Any:
        if name == "input":
            if unbatched:
                return _axes(value, {0: time})
            return _axes(value, {0: batch, 1: time} if model.batch_first else {0: time, 1: batch})
        if name == "hx":
            if isinstance(value, (tuple, list)):
                return type(value)(axes_of(name, v) for v in value)
            return _axes(value, {} if unbatched else {1: batch})
        if name in ("lengths", "context"):
            return _axes(value, {} if unbatched else {0: batch})
        return None

    parameters = inspect.signature(model.forward).parameters
    for name, value in named.items():
        if parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            tensors = sorted(k for k, v in value.items() if isinstance(v, Tensor))
            if tensors:  # QRNN's encoder_state
                raise ValueError(
                    f"{tensors[0]}: torch.export (2.13) cannot give a dynamic batch axis to a "
                    f"tensor passed through forward's **{name}; export a module whose forward "
                    f"names it, e.g. def forward(self, x, {tensors[0]}): return "
                    f"self.layer(x, {tensors[0]}={tensors[0]})"
                )
    return {name: axes_of(name, value) for name, value in named.items()}


def output_names_for(model: nn.Module, args: tuple[Any, ...],
                     kwargs: Mapping[str, Any] | None = None) -> list[str] | None:  # fmt: skip
    """The graph's output names for a ctrlrnn layer, in the order of its flattened outputs:
    ``output`` then ``<state>_n`` for each state variable (``h_n``; ``h_n, c_n`` for LSTM-like
    units; ``c_n`` for QRNN; ``h1_n ... c4_n`` for RCRN; ``tree_n`` (``base_n``) for Metagross),
    then ``alpha, beta`` with ``return_gates=True``. None for other models (torch's names)."""
    named = _bound_arguments(model, args, kwargs)
    gates = ["alpha", "beta"] if named.get("return_gates") else []
    if _is_ffn(model):
        return ["output", *gates]
    if _is_recurrent(model):
        return ["output", *(f"{name}_n" for name in model.state_names), *gates]
    return None


def export_onnx(
    model: nn.Module,
    args: tuple[Any, ...],
    path: str | os.PathLike[str] | None = None,
    *,
    kwargs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    opset_version: int | None = None,
    optimize: bool = True,
    verify: bool = False,
    verbose: bool = False,
) -> Any:
    """Export ``model`` (a ctrlrnn layer, or any module built from them) to ONNX.

    ``torch.onnx.export(model, args, path, kwargs=kwargs, dynamo=True, ...)`` with the
    recurrent ops on their export path (:mod:`ctrlrnn.ops.scan_export`) and, for a ctrlrnn
    layer, dynamic batch and time axes (:func:`dynamic_shapes_for`) and named outputs
    (:func:`output_names_for`). Put the model in ``eval()`` mode first (dropout and zoneout
    are random in training mode).

    Args:
        model: the module to export.
        args: example positional arguments, e.g. ``(x,)``; use a batch and a length of at least
            2 (torch.export fixes axes of size 0 or 1).
        path: where to write the ``.onnx`` file (None: only return the program).
        kwargs: example keyword arguments, e.g. ``{"lengths": lengths}``.
        dynamic_shapes: as ``torch.onnx.export``; required for a model that is not a ctrlrnn
            layer, computed by :func:`dynamic_shapes_for` otherwise.
        input_names: the graph's input names (default: ``forward``'s argument names).
        output_names: the graph's output names (default: :func:`output_names_for`).
        opset_version: as ``torch.onnx.export``.
        optimize: as ``torch.onnx.export``.
        verify: as ``torch.onnx.export``.
        verbose: as ``torch.onnx.export``: prints the exporter's steps.

    Returns:
        The ``torch.onnx.ONNXProgram`` (``.model_proto``, ``.save(path)``).

    Raises:
        ImportError: ``onnx`` or ``onnxscript`` is not installed (``pip install
            'ctrlrnn[onnx]'``).
        ValueError: no ``dynamic_shapes`` for a model that is not a ctrlrnn layer, or a
            PackedSequence input.
    """
    require_onnx()
    if dynamic_shapes is None:
        dynamic_shapes = dynamic_shapes_for(model, args, kwargs)
    if output_names is None:
        output_names = output_names_for(model, args, kwargs)
    with scan_export.scan_mode():
        program = torch.onnx.export(
            model,
            args,
            kwargs=dict(kwargs) if kwargs else None,
            dynamo=True,
            dynamic_shapes=dynamic_shapes,
            input_names=list(input_names) if input_names is not None else None,
            output_names=list(output_names) if output_names is not None else None,
            opset_version=opset_version,
            optimize=optimize,
            verify=verify,
            verbose=verbose,
        )
    if path is not None:
        program.save(path)  # one file (the weights go to a side file only above 2 GB)
    return program
