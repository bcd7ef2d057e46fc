"""Every layer test runs on both backends: the compiled kernels and the reference path
(``CTRLRNN_BACKEND=reference``, what users without a compiler get), so a reference path that
cannot train, differentiate or take packed input fails CI.

A test that compares the two paths itself is marked ``compares_backends`` and runs once. A test
whose cases each choose their backend parametrizes ``ctrlrnn_backend`` itself (``indirect``)."""

import pytest
import torch

from ctrlrnn.ops import backend


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "compares_backends: the test runs both backends itself (it runs once)"
    )


def _parametrizes_the_backend(metafunc) -> bool:
    """Whether the test's own ``parametrize`` marks name ``ctrlrnn_backend``."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "ctrlrnn_backend" in names:
            return True
    return False


def pytest_generate_tests(metafunc):
    if "ctrlrnn_backend" not in metafunc.fixturenames or _parametrizes_the_backend(metafunc):
        return
    if metafunc.definition.get_closest_marker("compares_backends") is None:
        metafunc.parametrize("ctrlrnn_backend", ["compiled", "reference"], indirect=True)


@pytest.fixture(autouse=True)
def ctrlrnn_backend(request, monkeypatch):
    which = getattr(request, "param", "compiled")
    if which == "reference":
        monkeypatch.setenv("CTRLRNN_BACKEND", "reference")
    else:
        monkeypatch.delenv("CTRLRNN_BACKEND", raising=False)
    # graphs traced under the other backend hold its choice as a constant: trace again
    torch._dynamo.reset()
    assert backend.has_kernel("scan", torch.device("cpu")) == (which == "compiled")
    return which
