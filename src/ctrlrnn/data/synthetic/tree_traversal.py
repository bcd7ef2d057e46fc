"""Tree traversal (METAGROSS section 3.1, task 2): inorder + preorder -> postorder.

A random binary tree of maximum depth ``N`` (levels; the root is level 1) is grown from the
root: every node above level ``N`` gets each of its two children independently with growth
probability ``p``. Nodes carry distinct labels drawn from ``1..num_values`` (default
``2**N - 1``, enough for a full tree), which makes the tree — and so the postorder —
unique given the inorder and preorder traversals.

Minimum sizes follow the paper: for ``N`` in {5, 8} every traversal has at least 10 tokens,
for ``N = 10`` at least 15 (we apply 10 for ``5 <= N < 10`` and 15 for ``N >= 10``); trees
below the minimum are redrawn.

Source: ``inorder + ["X"] + preorder`` (``X`` is the delimiter token); target: postorder.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ctrlrnn.data.source import SyntheticTask
from ctrlrnn.data.stats import DatasetStats
from ctrlrnn.data.synthetic.common import Seq2SeqExample, seq2seq_stats, unique_splits

SEPARATOR = "X"
DEFAULT_SIZES = {"train": 10_000, "valid": 1_000, "test": 1_000}


@dataclass
class Node:
    label: int
    left: Node | None = None
    right: Node | None = None


def paper_min_nodes(max_depth: int) -> int:
    """Minimum traversal length used by the paper for a given maximum depth."""
    if max_depth >= 10:
        return 15
    if max_depth >= 5:
        return 10
    return 1


def _grow(rng: random.Random, level: int, max_depth: int, p: float) -> Node:
    node = Node(0)
    if level < max_depth:
        if rng.random() < p:
            node.left = _grow(rng, level + 1, max_depth, p)
        if rng.random() < p:
            node.right = _grow(rng, level + 1, max_depth, p)
    return node


def preorder(node: Node | None) -> list[int]:
    if node is None:
        return []
    return [node.label, *preorder(node.left), *preorder(node.right)]


def inorder(node: Node | None) -> list[int]:
    if node is None:
        return []
    return [*inorder(node.left), node.label, *inorder(node.right)]


def postorder(node: Node | None) -> list[int]:
    if node is None:
        return []
    return [*postorder(node.left), *postorder(node.right), node.label]


def random_tree(
    rng: random.Random,
    max_depth: int,
    p: float = 0.7,
    min_nodes: int | None = None,
    num_values: int | None = None,
    max_tries: int = 10_000,
) -> Node:
    """A random labelled tree as described in the module docstring."""
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    min_nodes = paper_min_nodes(max_depth) if min_nodes is None else min_nodes
    num_values = 2**max_depth - 1 if num_values is None else num_values
    if min_nodes > 2**max_depth - 1:
        raise ValueError(f"min_nodes {min_nodes} exceeds a full tree of depth {max_depth}")
    if num_values < min_nodes:
        raise ValueError(f"num_values must be >= min_nodes ({min_nodes}), got {num_values}")
    for _ in range(max_tries):
        root = _grow(rng, 1, max_depth, p)
        nodes = _nodes(root)
        if min_nodes <= len(nodes) <= num_values:
            labels = rng.sample(range(1, num_values + 1), len(nodes))
            for node, label in zip(nodes, labels, strict=True):
                node.label = label
            return root
    raise ValueError(f"p: no tree with >= {min_nodes} nodes in {max_tries} draws; raise p")


def _nodes(root: Node) -> list[Node]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(c for c in (node.right, node.left) if c is not None)
    return out


def traversal_example(tree: Node) -> Seq2SeqExample:
    source = [*map(str, inorder(tree)), SEPARATOR, *map(str, preorder(tree))]
    return Seq2SeqExample(tuple(source), tuple(map(str, postorder(tree))))


def tree_traversal_splits(
    max_depth: int = 5,
    sizes: dict[str, int] | None = None,
    seed: int = 0,
    p: float = 0.7,
    min_nodes: int | None = None,
    num_values: int | None = None,
) -> dict[str, list[Seq2SeqExample]]:
    """Disjoint train/valid/test splits of the tree traversal task."""
    random_tree(random.Random(seed), max_depth, p, min_nodes, num_values)  # validates
    return unique_splits(
        lambda r: traversal_example(random_tree(r, max_depth, p, min_nodes, num_values)),
        sizes or DEFAULT_SIZES, seed, key=lambda e: e.source,
    )


class TreeTraversalTask(SyntheticTask):
    name = "tree-traversal"
    summary = "inorder + preorder -> postorder of random trees (METAGROSS 3.1), N=5, p=0.7"
    size = "generated: 10k/1k/1k"

    def default_stats(self) -> DatasetStats:
        return seq2seq_stats(self.name, tree_traversal_splits())
