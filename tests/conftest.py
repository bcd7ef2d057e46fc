"""Test-wide settings: the compiled kernels must build (never a silent fallback in CI)."""

import os

os.environ.setdefault("CTRLRNN_REQUIRE_COMPILED", "1")
