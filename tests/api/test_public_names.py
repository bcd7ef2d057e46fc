"""What a user sees of the package: ``dir(ctrlrnn)`` lists the public API, every name in it
resolves, and nothing the package imports for itself leaks into it."""

from __future__ import annotations

import ctrlrnn


def test_dir_lists_exactly_the_public_names() -> None:
    shown = set(dir(ctrlrnn))
    assert shown == {*ctrlrnn.__all__, "nn", "ops", "__version__"}
    assert not {"annotations", "files", "unit_exports", "serialization"} & shown
    for name in shown:
        assert getattr(ctrlrnn, name) is not None, name


def test_every_exported_unit_is_in_all() -> None:
    from ctrlrnn.nn.registry import unit_exports

    assert set(unit_exports()) <= set(ctrlrnn.__all__)
