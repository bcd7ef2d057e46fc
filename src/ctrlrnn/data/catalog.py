"""Every data source and synthetic task known to ``ctrlrnn data``."""

from __future__ import annotations

from ctrlrnn.data.source import Entry
from ctrlrnn.data.synthetic.arithmetic import AdditionTask, CopyTask
from ctrlrnn.data.synthetic.logic import LogicTask
from ctrlrnn.data.synthetic.restaurant_dialogs import RestaurantDialogsTask
from ctrlrnn.data.synthetic.sort import SortTask
from ctrlrnn.data.synthetic.tree_traversal import TreeTraversalTask


def entries() -> dict[str, Entry]:
    """Name -> entry, real sources first, in a stable order."""
    # the sources fetch with a progress bar (rich, the `train` extra): `ctrlrnn data` registers
    # its parser, which imports this module, without it
    from ctrlrnn.data.sources.brown import SOURCE as BROWN
    from ctrlrnn.data.sources.chorales import SOURCE as CHORALES
    from ctrlrnn.data.sources.glove import SOURCE as GLOVE
    from ctrlrnn.data.sources.pixel_images import FASHION_SOURCE, MNIST5K_SOURCE
    from ctrlrnn.data.sources.ptb import SOURCE as PTB
    from ctrlrnn.data.sources.rotten_tomatoes import SOURCE as MR
    from ctrlrnn.data.sources.sst5_like import SOURCE as SST5
    from ctrlrnn.data.sources.verses import SOURCE as VERSES

    items: list[Entry] = [
        PTB, GLOVE, CHORALES, MR, SST5, FASHION_SOURCE, MNIST5K_SOURCE, BROWN, VERSES,
        CopyTask(), AdditionTask(), SortTask(), TreeTraversalTask(), LogicTask(),
        RestaurantDialogsTask(),
    ]
    return {e.name: e for e in items}


def get_entry(name: str) -> Entry:
    """The entry called ``name``; ``ValueError`` naming ``name`` and the known names."""
    known = entries()
    if name not in known:
        raise ValueError(f"name: unknown data source or task {name!r}; known: {', '.join(known)}")
    return known[name]
