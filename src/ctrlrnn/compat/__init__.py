"""Drop-in modules for code written against other recurrent-network packages.

* :mod:`ctrlrnn.compat.torchqrnn`: the API of Salesforce's ``torchqrnn`` (``QRNN``,
  ``QRNNLayer``, ``ForgetMult``) on ctrlrnn's kernels, so that ``from torchqrnn import QRNN``
  becomes ``from ctrlrnn.compat.torchqrnn import QRNN`` (or ``from ctrlrnn.compat import
  torchqrnn``) and nothing else changes.
"""

from __future__ import annotations

from ctrlrnn.compat import torchqrnn

__all__ = ["torchqrnn"]
