"""Every layer test runs on both backends: the compiled kernels and the reference path
(``CTRLRNN_BACKEND=reference``, what users without a compiler get), so a reference path that
cannot train, differentiate or take packed input fails CI."""

import pytest
import torch

from ctrlrnn.ops import backend


@pytest.fixture(autouse=True, params=["compiled", "reference"])
def ctrlrnn_backend(request, monkeypatch):
    if request.param == "reference":
        monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    else:
        monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    # graphs traced under the other backend hold its choice as a constant: trace again
    torch._dynamo.reset()
    assert backend.has_kernel("scan", torch.device("cpu")) == (request.param == "compiled")
    return request.param
