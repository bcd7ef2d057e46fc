"""Where each unit and base function of a METAGROSS tree lives (METAGROSS paper section 2).

A tree of maximum depth ``L`` holds ``N = 2^L - 1`` units in heap order: the root is unit 0,
unit ``k``'s children are ``2k+1`` and ``2k+2`` (the ``F^F``/``F^O`` instances that gate it,
eq 2-1..2-2), and level ``n`` (1-based from the root) holds units ``2^(n-1)-1 .. 2^n-2``
(:func:`level_slice`). Each unit has three base functions ``F^F_k, F^O_k, F^Z_k`` (section
2.2), ``3N`` in all, laid out level-major (:func:`base_index`): the levels follow each other
from the root down, and inside a level come all its ``F`` maps, then its ``O`` maps, then its
``Z`` maps. One level's pre-activations are then one contiguous block of ``3 k H`` columns
(:func:`level_columns`), which is what the level kernels read.

The modules, the reference cell, the level kernels and the one-node tree all index the
parameters through these functions, so the layout is defined here once.
"""

from __future__ import annotations

__all__ = ["base_index", "base_offsets", "level_columns", "level_slice", "tree_nodes"]


def tree_nodes(depth: int) -> int:
    """Units in a METAGROSS tree of maximum depth ``depth``: ``2^depth - 1``."""
    return 2**depth - 1


def level_slice(level: int) -> slice:
    """Heap indices of the units at ``level`` (1-based): ``2^(level-1)-1 .. 2^level-2``."""
    return slice(2 ** (level - 1) - 1, 2**level - 1)


def level_columns(level: int, hidden_size: int) -> tuple[int, int]:
    """``[start, stop)`` of level ``level``'s base pre-activations in a row of ``3 N H`` (the
    base maps of every unit, level-major): ``3 H (2^(level-1) - 1) .. 3 H (2^level - 1)``."""
    sl = level_slice(level)
    return 3 * hidden_size * sl.start, 3 * hidden_size * sl.stop


def base_offsets(node: int) -> tuple[int, int, int]:
    """Offsets, in units of ``H``, of unit ``node``'s base maps ``F^F, F^O, F^Z`` in the
    level-major layout: the level of ``node`` starts at unit ``s = 2^(n-1) - 1`` and holds
    ``s + 1`` units, and its block is ``[F of its s+1 units | O | Z]``."""
    if node < 0:
        raise ValueError(f"node: a heap index is >= 0, got {node}")
    start = (1 << (node + 1).bit_length() - 1) - 1
    width, j = start + 1, node - start
    return 3 * start + j, 3 * start + width + j, 3 * start + 2 * width + j


def base_index(gate: int, node: int) -> int:
    """Index of base function ``F^gate_node`` (gate 0 F, 1 O, 2 Z) in the level-major layout
    (:func:`base_offsets`); its weight rows are ``base_index * H .. (base_index + 1) * H``."""
    if gate not in (0, 1, 2):
        raise ValueError(f"gate: 0 (F), 1 (O) or 2 (Z), got {gate}")
    return base_offsets(node)[gate]
