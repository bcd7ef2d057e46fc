"""The recurrent layers, all on the shared :class:`~ctrlrnn.nn.base.RecurrentBase` contract."""

from ctrlrnn.nn.base import RecurrentBase
from ctrlrnn.nn.qrnn import QRNN, QRNNCell

__all__ = ["QRNN", "QRNNCell", "RecurrentBase"]
