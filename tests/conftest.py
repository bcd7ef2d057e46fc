"""Test-wide settings: the compiled kernels must build (never a silent fallback in CI)."""

import os

os.environ.setdefault("CTRLRNN_REQUIRE_COMPILED", "1")
# training in the tests runs on the CPU even where a GPU is visible: the tests compare runs
# bitwise (resume, torchrun against one process), which CUDA's atomics would not give
os.environ.setdefault("CTRLRNN_DEVICE", "cpu")
