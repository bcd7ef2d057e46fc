"""Synthetic generators checked against independent solvers."""

from __future__ import annotations

import itertools

import pytest

from ctrlrnn.data.synthetic import (
    addition_splits,
    copy_splits,
    logic_splits,
    sort_splits,
    tree_traversal_splits,
)
from ctrlrnn.data.synthetic.logic import RELATIONS
from ctrlrnn.data.synthetic.tree_traversal import SEPARATOR

SMALL = {"train": 300, "valid": 50, "test": 50}


def _disjoint(splits: dict, key) -> None:
    seen: dict = {}
    for name, examples in splits.items():
        for e in examples:
            k = key(e)
            assert seen.setdefault(k, name) == name, f"{k} in {seen[k]} and {name}"


def test_copy_and_addition() -> None:
    copy = copy_splits(max_digits=6, sizes=SMALL, seed=3)
    for examples in copy.values():
        for e in examples:
            assert e.source == e.target and 1 <= len(e.source) <= 6
            assert e.source == ("0",) or e.source[0] != "0"
    add = addition_splits(max_digits=5, sizes=SMALL, seed=4)
    for examples in add.values():
        for e in examples:
            left, right = "".join(e.source).split("+")
            assert max(len(left), len(right)) <= 5
            assert int("".join(e.target)) == int(left) + int(right)
    _disjoint(copy, lambda e: e.source)
    _disjoint(add, lambda e: e.source)
    assert [len(v) for v in add.values()] == [300, 50, 50]


def test_seeded_and_deterministic() -> None:
    assert sort_splits(sizes=SMALL, seed=1) == sort_splits(sizes=SMALL, seed=1)
    assert sort_splits(sizes=SMALL, seed=1) != sort_splits(sizes=SMALL, seed=2)


def test_sort_against_insertion_sort() -> None:
    splits = sort_splits(max_length=7, sizes=SMALL, seed=0, max_value=20)
    for examples in splits.values():
        for e in examples:
            values = [int(t) for t in e.source]
            result: list[int] = []
            for v in values:  # independent: insertion sort
                i = 0
                while i < len(result) and result[i] <= v:
                    i += 1
                result.insert(i, v)
            assert [int(t) for t in e.target] == result
            assert 2 <= len(values) <= 7 and all(1 <= v <= 20 for v in values)
    _disjoint(splits, lambda e: e.source)


def _postorder_from(inorder: list[str], preorder: list[str]) -> list[str]:
    """Independent reconstruction: the first preorder symbol is the root; split the
    inorder around it."""
    if not preorder:
        return []
    root = preorder[0]
    k = inorder.index(root)
    left = _postorder_from(inorder[:k], preorder[1 : k + 1])
    right = _postorder_from(inorder[k + 1 :], preorder[k + 1 :])
    return left + right + [root]


@pytest.mark.parametrize("depth,minimum", [(3, 1), (5, 10), (8, 10), (10, 15)])
def test_tree_traversal_reconstructed(depth: int, minimum: int) -> None:
    splits = tree_traversal_splits(max_depth=depth, sizes={"train": 60, "valid": 20,
                                                           "test": 20}, seed=depth)
    for examples in splits.values():
        for e in examples:
            k = e.source.index(SEPARATOR)
            inorder, preorder = list(e.source[:k]), list(e.source[k + 1 :])
            assert sorted(inorder) == sorted(preorder) and len(set(inorder)) == len(inorder)
            assert minimum <= len(inorder) <= 2**depth - 1
            assert list(e.target) == _postorder_from(inorder, preorder)
    _disjoint(splits, lambda e: e.source)


def test_tree_traversal_bad_arguments() -> None:
    with pytest.raises(ValueError, match="p"):
        tree_traversal_splits(max_depth=4, p=1.5)
    with pytest.raises(ValueError, match="min_nodes"):
        tree_traversal_splits(max_depth=3, min_nodes=8)


def _truth(tokens: tuple[str, ...]) -> frozenset[int]:
    """Independent evaluator: recursive descent over the tokens, world by world."""

    def evaluate(world: dict[str, bool]) -> bool:
        def expr(i: int) -> tuple[bool, int]:
            if tokens[i] != "(":
                return world[tokens[i]], i + 1
            if tokens[i + 1] == "not":
                value, j = expr(i + 2)
                return not value, j + 1
            a, j = expr(i + 1)
            op = tokens[j + 1]
            b, k = expr(j + 2)
            return (a and b) if op == "and" else (a or b), k + 2

        value, end = expr(0)
        assert end == len(tokens)
        return value

    worlds = set()
    for n, bits in enumerate(itertools.product([False, True], repeat=6)):
        if evaluate(dict(zip("abcdef", bits, strict=True))):
            worlds.add(n)
    return frozenset(worlds)


def _relation(x: frozenset[int], y: frozenset[int]) -> str:
    everything = frozenset(range(64))
    table = {
        "=": x == y,
        "<": x < y,
        ">": x > y,
        "^": not (x & y) and (x | y) == everything,
        "|": not (x & y) and (x | y) != everything,
        "v": bool(x & y) and (x | y) == everything,
    }
    matches = [r for r, holds in table.items() if holds]
    assert len(matches) <= 1, matches  # exclusive for non-degenerate sets
    return matches[0] if matches else "#"


def _operators(tokens: tuple[str, ...]) -> int:
    return sum(t in ("not", "and", "or") for t in tokens)


def test_logic_relations_recomputed() -> None:
    splits = logic_splits(sizes={"train": 400, "valid": 100}, test_per_count=30, seed=5)
    seen_relations = set()
    for name, pairs in splits.items():
        for p in pairs:
            x, y = _truth(p.left), _truth(p.right)
            assert 0 < len(x) < 64 and 0 < len(y) < 64
            assert p.relation == _relation(x, y)
            assert p.operators == max(_operators(p.left), _operators(p.right))
            assert (p.operators <= 6) if name != "test" else (7 <= p.operators <= 12)
            seen_relations.add(p.relation)
    assert seen_relations == set(RELATIONS)
    assert len(splits["test"]) == 6 * 30
    _disjoint(splits, lambda p: (p.left, p.right))


def test_unique_splits_reports_impossible_sizes() -> None:
    with pytest.raises(ValueError, match="sizes"):
        copy_splits(max_digits=1, sizes={"train": 11})
