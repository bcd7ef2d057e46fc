"""ctrlrnn: controlled recurrent networks for PyTorch.

QRNN, RCRN, CARNN, METAGROSS and CAS-LSTM as drop-in replacements for :class:`torch.nn.LSTM`,
built on two compiled primitives: the diagonal linear scan and the fused gated cell.
"""

from __future__ import annotations

__version__ = "0.1.0"
