"""The lambda of CAS-LSTM's eq 12, which mixes the lower layer's memory cell into this one's:
the ``lambda_`` argument resolved to a constant, a constant vector, a trainable value or the
plain sum (:func:`lambda_setting`), the vector kept as a buffer, and the value a layer uses
(:func:`layer_lambda`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

#: what ``lambda_`` of :class:`~ctrlrnn.nn.cas_lstm.CASLSTM` accepts
LambdaArg = float | Sequence[float] | Tensor | str | None


def lambda_setting(lambda_: LambdaArg, peephole: bool, width: int
                    ) -> tuple[float | str | None, Tensor | None]:
    """``lambda_`` of :class:`CASLSTM` resolved: ``(float, "trainable", "vector" or None; the
    constant vector of a "vector", else None)``."""
    if isinstance(lambda_, str):
        if lambda_ == "auto":
            lambda_ = None if peephole else 0.5
        elif lambda_ == "trainable":
            return "trainable", None
        else:
            raise ValueError(
                f"lambda_: expected a number, {width} numbers, 'trainable', 'auto' or None, "
                f"got {lambda_!r}"
            )
    if lambda_ is None:
        return None, None
    const = constant_lambda(lambda_, width)
    if const.dim() == 0:
        return float(const), None
    return "vector", const


def constant_lambda(value: Any, width: int) -> Tensor:
    if isinstance(value, bool):
        raise ValueError(f"lambda_: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        t = torch.tensor(float(value), dtype=torch.float64, device="cpu")
    else:
        try:
            t = torch.as_tensor(value, device="cpu").detach().to(torch.float64)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"lambda_: expected a number or {width} numbers ({exc})") from exc
        if t.dim() != 0 and (t.dim() != 1 or t.shape[0] != width):
            raise ValueError(
                f"lambda_: expected a number or a vector of hidden_size={width} numbers, "
                f"got shape {tuple(t.shape)}"
            )
    if not bool(torch.isfinite(t).all()):
        raise ValueError("lambda_: expected finite values")
    return t.to(torch.get_default_dtype()) if t.dim() == 1 else t


def register_lambda_vector(module: nn.Module, vector: Tensor | None) -> None:
    """``lambda_vector``, the constant ``(hidden,)`` lambda of a ``"vector"`` setting (None for
    the others), as a buffer so that it follows ``.to()`` and ``state_dict``; made on the default
    device like the weights (``meta`` under ``torch.device("meta")``), its values also kept as
    numbers so that :func:`fill_lambda_vector` can restore them after ``to_empty()``."""
    constants = None if vector is None else tuple(float(v) for v in vector.tolist())
    module._lambda_constants = constants
    module.register_buffer(
        "lambda_vector",
        None if constants is None else torch.tensor(constants, dtype=torch.get_default_dtype()),
    )


def fill_lambda_vector(module: nn.Module) -> None:
    """Writes the constants of :func:`register_lambda_vector` into ``lambda_vector`` again."""
    constants = getattr(module, "_lambda_constants", None)
    if module.lambda_vector is not None and constants is not None:
        with torch.no_grad():
            module.lambda_vector.copy_(torch.tensor(constants, dtype=torch.float64))


def layer_lambda(weights: nn.Module, setting: float | str | None,
                  vector: Tensor | None) -> float | Tensor | None:
    """The lambda of eq 12 a layer uses: ``sigmoid`` of its trainable logit, the constant
    vector, the constant, or None (the plain sum)."""
    if weights.lambda_logit is not None:
        return torch.sigmoid(weights.lambda_logit)
    if vector is not None:
        return vector
    return setting if isinstance(setting, float) else None
