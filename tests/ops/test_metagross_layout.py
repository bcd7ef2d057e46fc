"""The METAGROSS tree layout (ctrlrnn.ops.metagross_level.layout): heap order, level-major base
maps."""

from __future__ import annotations

import pytest

from ctrlrnn.ops.metagross_level.layout import (
    base_index,
    base_offsets,
    level_columns,
    level_slice,
    tree_nodes,
)

DEPTHS = (1, 2, 3, 4, 5)


def _naive_layout(depth: int) -> list[tuple[int, int]]:
    """``(gate, node)`` of each base map in order, written out level by level: inside a level,
    every unit's F, then every unit's O, then every unit's Z."""
    order = []
    for level in range(1, depth + 1):
        first, width = 2 ** (level - 1) - 1, 2 ** (level - 1)
        for gate in range(3):
            order += [(gate, first + j) for j in range(width)]
    return order


@pytest.mark.parametrize("depth", DEPTHS)
def test_base_index_is_the_level_major_order(depth: int) -> None:
    order = _naive_layout(depth)
    assert len(order) == 3 * tree_nodes(depth)
    got = [base_index(gate, node) for gate, node in order]
    assert got == list(range(len(order)))
    for node in range(tree_nodes(depth)):
        assert base_offsets(node) == tuple(base_index(g, node) for g in range(3))


@pytest.mark.parametrize("depth", DEPTHS)
def test_levels_partition_the_heap_and_hold_their_children(depth: int) -> None:
    seen: list[int] = []
    for level in range(1, depth + 1):
        sl = level_slice(level)
        units = list(range(sl.start, sl.stop))
        assert len(units) == 2 ** (level - 1)
        seen += units
        if level < depth:
            below = level_slice(level + 1)
            kids = [c for k in units for c in (2 * k + 1, 2 * k + 2)]
            assert kids == list(range(below.start, below.stop))
    assert seen == list(range(tree_nodes(depth)))


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("hidden", (1, 3, 8))
def test_level_columns_hold_exactly_that_levels_maps(depth: int, hidden: int) -> None:
    stop = 0
    for level in range(1, depth + 1):
        c0, c1 = level_columns(level, hidden)
        assert c0 == stop  # levels follow each other from the root down
        sl = level_slice(level)
        maps = sorted(base_index(g, k) for g in range(3) for k in range(sl.start, sl.stop))
        assert [m * hidden for m in maps] == list(range(c0, c1, hidden))
        stop = c1
    assert stop == 3 * hidden * tree_nodes(depth)


def test_the_module_parameters_follow_the_layout() -> None:
    from ctrlrnn.nn.metagross import Metagross
    from ctrlrnn.nn.metagross import base_index as public_base_index

    assert public_base_index is base_index  # the public name is the one layout
    unit = Metagross(4, 5, depth=3).units[0]
    assert unit.num_nodes == tree_nodes(3) and unit.num_internal == tree_nodes(2)
    assert unit.weight.shape == (level_columns(3, 5)[1], 4)
    assert unit.depth_weight.shape == (2 * tree_nodes(2), 4)


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="gate"):
        base_index(3, 0)
    with pytest.raises(ValueError, match="node"):
        base_offsets(-1)
