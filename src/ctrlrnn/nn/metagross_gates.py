"""The elementwise part of one METAGROSS level: :mod:`ctrlrnn.ops.metagross_gates` (the ops
compose it with the scan, so it lives there; this module keeps its names importable here)."""

from ctrlrnn.ops.metagross_level.gates import (
    COMPILE_MIN_NUMEL,
    gate_backend,
    level_gates,
    set_gate_backend,
)

__all__ = ["COMPILE_MIN_NUMEL", "gate_backend", "level_gates", "set_gate_backend"]
