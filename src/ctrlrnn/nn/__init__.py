"""The recurrent layers, all on the shared :class:`~ctrlrnn.nn.base.RecurrentBase` contract."""

from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.nn.carnn import CARNN, CARNNCell
from ctrlrnn.nn.carnn_lm import ContextualCARNNLM
from ctrlrnn.nn.carnn_summary import HistorySummary, history_summary
from ctrlrnn.nn.cas_lstm import CASLSTM
from ctrlrnn.nn.metagross import Metagross, MetagrossCell
from ctrlrnn.nn.metagross_ffn import MetagrossFFN
from ctrlrnn.nn.position_encoder import PositionEncoder
from ctrlrnn.nn.qrnn import QRNN, QRNNCell
from ctrlrnn.nn.rcrn import RCRN, RCRNCell

__all__ = [
    "CARNN",
    "CARNNCell",
    "CASLSTM",
    "ContextualCARNNLM",
    "HistorySummary",
    "Metagross",
    "MetagrossCell",
    "MetagrossFFN",
    "PositionEncoder",
    "QRNN",
    "QRNNCell",
    "RCRN",
    "RCRNCell",
    "RecurrentBase",
    "history_summary",
]
