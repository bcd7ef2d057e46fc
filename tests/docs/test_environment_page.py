"""``docs/environment.md`` lists exactly the settings of :mod:`ctrlrnn.settings`: each group's
table is the one :func:`~ctrlrnn.settings.markdown_table` writes, and every ``CTRLRNN_*`` name
on the page is a setting. The prose around the tables is the page's own.

To rewrite the tables after changing the module::

    python -c "from pathlib import Path; from ctrlrnn.settings import rewrite_tables as r; \\
    p = Path('docs/environment.md'); p.write_text(r(p.read_text()))"
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctrlrnn.settings import SETTINGS, SETTINGS_GROUPS, markdown_table, rewrite_tables

PAGE = Path(__file__).resolve().parents[2] / "docs" / "environment.md"
_NAME = re.compile(r"\bCTRLRNN_[A-Z0-9_]+\b")


def test_the_tables_are_the_modules() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert text == rewrite_tables(text), (
        "docs/environment.md's tables differ from ctrlrnn.settings; rewrite them (see this "
        "test's docstring)")


def test_the_page_names_each_setting_and_no_other() -> None:
    on_page = set(_NAME.findall(PAGE.read_text(encoding="utf-8")))
    assert sorted(on_page - set(SETTINGS)) == [], "on the page, not in ctrlrnn.settings"
    assert sorted(set(SETTINGS) - on_page) == [], "in ctrlrnn.settings, not on the page"


_FAKE = """# Settings

Intro prose.

## {first}

| old | table |
|---|---|
| `CTRLRNN_GONE` | x |

Prose after the first table.

| a second | table, kept |
|---|---|

{rest}
"""


def _fake(groups: tuple[str, ...]) -> str:
    rest = "\n".join(f"## {g}\n\n|\n\nProse of {g}.\n" for g in groups[1:])
    return _FAKE.format(first=groups[0], rest=rest)


def test_rewrite_replaces_each_groups_first_table_and_keeps_the_prose() -> None:
    page = rewrite_tables(_fake(SETTINGS_GROUPS))
    assert "CTRLRNN_GONE" not in page
    for group in SETTINGS_GROUPS:
        assert markdown_table(group) in page
        assert group == SETTINGS_GROUPS[0] or f"Prose of {group}." in page
    assert "Intro prose." in page and "Prose after the first table." in page
    assert "| a second | table, kept |" in page
    assert rewrite_tables(page) == page


def test_rewrite_refuses_a_page_without_a_group() -> None:
    with pytest.raises(ValueError, match=re.escape(repr([SETTINGS_GROUPS[-1]]))):
        rewrite_tables(_fake(SETTINGS_GROUPS[:-1]))
