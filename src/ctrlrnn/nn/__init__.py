"""The recurrent layers, all on the shared :class:`~ctrlrnn.nn.base.RecurrentBase` contract.

Each unit registers itself (:func:`~ctrlrnn.nn.registry.register_unit`) when its module is
imported below; ``__all__``, which :mod:`ctrlrnn` re-exports, is read from the registry: every
unit's layer and cell, and the rest of this package's public names.
"""

# The units register as their modules are imported: this order is the one `ctrlrnn train
# --help` and `ctrlrnn bench` list them in.
# isort: off
from ctrlrnn.nn.qrnn import QRNN as QRNN, QRNNCell as QRNNCell
from ctrlrnn.nn.rcrn_unit import RCRN as RCRN, RCRNCell as RCRNCell
from ctrlrnn.nn.cas_lstm import CASLSTM as CASLSTM, CASLSTMCell as CASLSTMCell
from ctrlrnn.nn.carnn import CARNN as CARNN, CARNNCell as CARNNCell
from ctrlrnn.nn.metagross import Metagross as Metagross, MetagrossCell as MetagrossCell

# isort: on
from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.nn.carnn_lm import ContextualCARNNLM
from ctrlrnn.nn.carnn_summary import HistorySummary, history_summary
from ctrlrnn.nn.metagross_ffn import MetagrossFFN
from ctrlrnn.nn.position_encoder import PositionEncoder
from ctrlrnn.nn.registry import unit_exports

__all__ = [
    "ContextualCARNNLM",
    "HistorySummary",
    "MetagrossFFN",
    "PositionEncoder",
    "RecurrentBase",
    "history_summary",
]
__all__ = sorted([*unit_exports(), *__all__])
