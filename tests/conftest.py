"""Test-wide settings: the compiled kernels must build (never a silent fallback in CI), and every
test starts from the same random state."""

import os
import random

import pytest
import torch

os.environ.setdefault("CTRLRNN_REQUIRE_COMPILED", "1")
# training in the tests runs on the CPU even where a GPU is visible: the tests compare runs
# bitwise (resume, torchrun against one process), which CUDA's atomics would not give
os.environ.setdefault("CTRLRNN_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seeded_rngs() -> None:
    """Seed Python's and torch's generators before each test, so a failure reproduces on rerun.

    A test that draws unseeded inputs and compares two float32 paths would otherwise fail at
    random, once in some hundreds of runs, where the inputs happen to land near a rounding edge.
    """
    random.seed(0)
    torch.manual_seed(0)
