"""Whole-module ``torch.save`` / ``torch.load`` of ctrlrnn's layers: :func:`safe_globals`.

``torch.save(model, path)`` pickles a module with its classes; ``torch.load`` in torch >= 2.6
unpickles with ``weights_only=True`` by default, which builds only the classes it is told are
safe and names the first one missing in its error, one per attempt. :func:`safe_globals` lists
every class a saved ctrlrnn layer holds (ctrlrnn's own modules and the torch containers and
modules inside them), for ``torch.serialization.add_safe_globals(...)`` or the
``torch.serialization.safe_globals(...)`` context manager (torch >= 2.5)::

    with torch.serialization.safe_globals([*ctrlrnn.safe_globals(), MyModel, nn.Embedding]):
        model = torch.load(path)

(A model of one's own also needs its own class and the torch modules it uses, as for any
module.) ``model.state_dict()`` with ``load_state_dict`` needs none of this.
"""

from __future__ import annotations

from torch import nn

from ctrlrnn.compat import torchqrnn
from ctrlrnn.nn.carnn import CARNN, CARNNCell
from ctrlrnn.nn.carnn_lm import ContextualCARNNLM
from ctrlrnn.nn.carnn_summary import HistorySummary
from ctrlrnn.nn.cas_lstm import CASLSTM, CASLayer
from ctrlrnn.nn.metagross import Metagross, MetagrossCell, MetagrossUnit
from ctrlrnn.nn.metagross_ffn import MetagrossFFN
from ctrlrnn.nn.position_encoder import PositionEncoder
from ctrlrnn.nn.qrnn import QRNN, QRNNCell
from ctrlrnn.nn.rcrn import RCRN, GatedRNN, RCRNCell


def safe_globals() -> list[type]:
    """The classes a pickled ctrlrnn module may contain: every module class of
    :mod:`ctrlrnn.nn` and :mod:`ctrlrnn.compat`, and the torch modules they are built from
    (``ModuleList``, ``Linear``, ``Embedding``, ``Dropout``). A new list on every call."""
    return [
        QRNN, QRNNCell,
        RCRN, RCRNCell, GatedRNN,
        CASLSTM, CASLayer,
        CARNN, CARNNCell, ContextualCARNNLM, HistorySummary, PositionEncoder,
        Metagross, MetagrossCell, MetagrossUnit, MetagrossFFN,
        torchqrnn.QRNN, torchqrnn.QRNNLayer, torchqrnn.ForgetMult,
        nn.ModuleList, nn.Linear, nn.Embedding, nn.Dropout,
    ]  # fmt: skip
