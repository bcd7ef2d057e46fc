"""DropConnect on a layer's weights, the ``weight_drop=`` option of ctrlrnn's layers.

DropConnect (Wan et al., 2013) zeroes each *weight* with probability ``p`` instead of each
activation. The AWD-LSTM language model (Merity, Keskar & Socher, 2018, "Regularizing and
Optimizing LSTM Language Models", section 2) applies it to the hidden-to-hidden matrices
``[U^i, U^f, U^o, U^c]`` of its LSTMs and to the convolution weights of its QRNNs: one mask per
weight matrix per forward pass, shared by every time step of that pass, the kept weights scaled
by ``1 / (1 - p)`` (inverted dropout, ``torch.nn.functional.dropout``), and the weights
themselves in evaluation.

ctrlrnn applies it where the weight enters its kernel: the dropped matrix is an ordinary tensor
computed from the parameter at every forward call, so the kernels read it as they read the
parameter and the gradient flows back to the parameter through the mask.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ctrlrnn.nn.arguments import check_rate


def check_weight_drop(value: object) -> float:
    """The DropConnect probability ``p``: a real number in ``[0, 1]``."""
    return check_rate("weight_drop", value)


def refuse_weight_drop(p: float, layer: str, why: str) -> None:
    """``ValueError`` naming ``weight_drop`` when ``p > 0`` is asked of a layer with no
    recurrent matrix (``why`` says what its gates read instead)."""
    if p > 0.0:
        raise ValueError(
            f"weight_drop: {layer} has no recurrent weight matrix to drop ({why}); "
            f"pass weight_drop=0"
        )


def drop_weight(weight: Tensor, p: float, training: bool) -> Tensor:
    """``weight`` with DropConnect: ``dropout(weight, p)`` (a fresh 0/1 mask over its entries,
    kept entries scaled by ``1 / (1 - p)``) in training, ``weight`` itself in evaluation or with
    ``p = 0`` (the very parameter, so the layer computes exactly what it does without the
    option)."""
    if p == 0.0 or not training:
        return weight
    return F.dropout(weight, p, training=True)
