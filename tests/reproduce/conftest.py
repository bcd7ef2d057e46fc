"""Fixtures of the reproduce tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_torch_thread():
    """One torch thread in this process, as each run of ``ctrlrnn reproduce --jobs`` has."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
