"""Synthetic tasks from the papers, generated from a seed (never downloaded)."""

from ctrlrnn.data.synthetic.arithmetic import addition_splits, copy_splits
from ctrlrnn.data.synthetic.common import Seq2SeqExample
from ctrlrnn.data.synthetic.logic import LogicPair, logic_splits
from ctrlrnn.data.synthetic.sort import sort_splits
from ctrlrnn.data.synthetic.tree_traversal import tree_traversal_splits

__all__ = [
    "LogicPair",
    "Seq2SeqExample",
    "addition_splits",
    "copy_splits",
    "logic_splits",
    "sort_splits",
    "tree_traversal_splits",
]
