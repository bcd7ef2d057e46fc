"""Console tables that fit the terminal: wrap text, drop columns, never cut a number.

rich shrinks a table that is wider than the console by wrapping its headers letter by letter
and cutting cells with an ellipsis (``200/2…``, ``1.0…``). :func:`fit_table` instead chooses,
for the console's width, a layout in which

* every column is at least as wide as its header (no header wraps over several lines);
* the cells of a column with ``wrap=False`` (numbers, names; the default) are never cut;
* a column with ``wrap=True`` wraps its cells at spaces (``wrap=", "``: after commas where
  it can, so ``5 MB`` stays together), never narrower than its longest word nor ``min_width``;

trying, in order, the usual boxed table and a compact one (no vertical rules), then both
without the columns of highest ``drop`` (least important first). The room left over goes to
the wrapping columns where it saves the most lines. The headers of the columns left out are
named under the table, so a reader knows what a wider terminal would show.

Use::

    cols = [Col("name"), Col("what it is", wrap=True, min_width=30), Col("size", wrap=", "),
            Col("origin", wrap=True, drop=1)]
    layout = fit_table(console.width, cols, rows)
    console.print(layout.table(rows, title="data"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from rich import box as _box
from rich.table import Table
from rich.text import Text

#: The table styles tried, widest first: rich's default boxed table, then a compact one.
STYLES: dict[str, dict[str, Any]] = {
    "boxed": {},
    "compact": {"box": _box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False},
}


@dataclass(frozen=True)
class Col:
    """One column of a :func:`fit_table` table.

    ``wrap``: False (the cells keep their full width), True (prose: wrap at spaces) or a
    separator such as ``", "`` (wrap after it where possible; shown as plain text).
    ``min_width``: the narrowest a wrapping column may get (a readable paragraph) unless
    nothing else fits. ``drop``: 0 keeps the column at any width; columns
    with higher values are left out first. ``short``: the header in the compact style.
    """

    header: str
    justify: str = "left"
    wrap: bool | str = False
    drop: int = 0
    min_width: int = 0
    short: str | None = None
    style: str | None = None


@dataclass
class Layout:
    """A chosen layout: the kept columns, their content widths and the table style."""

    columns: list[Col]
    widths: list[int]
    style: str
    dropped: list[str] = field(default_factory=list)
    width: int = 80
    indices: list[int] = field(default_factory=list)

    def keep(self, row: Sequence[Any]) -> list[Any]:
        """The cells of ``row`` (all columns, in order) that the layout shows."""
        return [row[i] for i in self.indices]

    def table(self, rows: Sequence[Sequence[Any]], *, title: str | None = None,
              caption: str | None = None, note_dropped: bool = True) -> Table:
        """A :class:`rich.table.Table` of ``rows`` (full rows: all columns, in order).

        ``caption`` is shown under the table, followed by the names of the columns left out
        (unless ``note_dropped`` is false)."""
        notes = [caption] if caption else []
        if self.dropped and note_dropped:
            notes.append(f"not shown at {self.width} columns: {', '.join(self.dropped)}")
        table = Table(title=title, caption="; ".join(notes) or None, expand=False,
                      caption_justify="left", **STYLES[self.style])
        for col, width in zip(self.columns, self.widths):
            header = _header(col, self.style)
            if _width(header) > width:  # the last-resort layout: headers wrap at spaces
                header = "\n".join(_wrap(_parts(header, True), width))
            table.add_column(header, justify=col.justify,  # type: ignore[arg-type]
                             style=col.style, no_wrap=not col.wrap, overflow="fold",
                             width=width)
        for row in rows:
            cells = self.keep(row)
            table.add_row(*(
                _prewrap(cell, col.wrap, width) if isinstance(col.wrap, str) else cell
                for cell, col, width in zip(cells, self.columns, self.widths)
            ))
        return table


def fit_table(width: int, cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> Layout:
    """The layout of ``cols`` x ``rows`` for a console ``width`` columns wide.

    Tries the boxed then the compact style with every column, then both styles without the
    columns of highest ``drop``, one level at a time. When even the columns with
    ``drop == 0`` do not fit, their headers may wrap at spaces too; if that is not enough, the
    table is wider than ``width`` (rich then squeezes it)."""
    all_cols = list(cols)
    full_rows = [list(r) for r in rows]
    levels = sorted({c.drop for c in all_cols if c.drop > 0}, reverse=True)
    for level in [None, *levels]:
        keep = [i for i, c in enumerate(all_cols) if level is None or c.drop < level]
        for style in STYLES:
            widths = _fit(all_cols, keep, full_rows, style, width)
            if widths is not None:
                return _layout(all_cols, keep, widths, style, width)
    # last resort: the headers wrap at spaces too
    keep = [i for i, c in enumerate(all_cols) if c.drop == 0]
    widths = _fit(all_cols, keep, full_rows, "compact", width, last_resort=True)
    if widths is None:
        widths = _fit(all_cols, keep, full_rows, "compact", None, last_resort=True)
    assert widths is not None
    spare = width - _overhead("compact", len(keep)) - sum(widths)
    for j, i in enumerate(keep):  # widen the columns whose header wraps, while there is room
        add = max(0, min(spare, _width(_header(all_cols[i], "compact")) - widths[j]))
        widths[j] += add
        spare -= add
    return _layout(all_cols, keep, widths, "compact", width)


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def _plain(cell: Any) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell)).plain if cell is not None else ""


def _width(s: str) -> int:
    return Text(s).cell_len


Parts = tuple[tuple[str, ...], ...]


def _parts(text: str, wrap: bool | str) -> Parts:
    """``text`` as parts (a line breaks between parts if it can) of words (and within a part
    only when the part is wider than the column)."""
    if isinstance(wrap, str):
        pieces = text.split(wrap)
        sep = wrap.rstrip()
        return tuple(tuple((p + sep if i < len(pieces) - 1 else p).split())
                     for i, p in enumerate(pieces))
    return tuple((word,) for word in text.split())


@lru_cache(maxsize=65536)
def _wrap(parts: Parts, width: int) -> tuple[str, ...]:
    """Greedy wrap of ``parts`` at ``width``: whole parts where they fit, else word by word (no
    word is split: the widths given are at least the longest word)."""
    lines: list[str] = []
    line = ""
    for part in parts:
        text = " ".join(part)
        if line and _width(line) + 1 + _width(text) <= width:
            line += " " + text
            continue
        if _width(text) <= width:
            if line:
                lines.append(line)
            line = text
            continue
        for word in part:
            if line and _width(line) + 1 + _width(word) <= width:
                line += " " + word
            else:
                if line:
                    lines.append(line)
                line = word
    lines.append(line)
    return tuple(lines)


def _lines(cell: list[Parts], width: int) -> int:
    return sum(len(_wrap(parts, width)) for parts in cell)


def _prewrap(cell: Any, sep: str, width: int) -> str:
    """A cell of a column that wraps at ``sep`` first, broken into lines of ``width``."""
    return "\n".join(
        "\n".join(_wrap(_parts(paragraph, sep), width)) for paragraph in _plain(cell).split("\n")
    )


@cache
def _overhead(style: str, n: int) -> int:
    """Characters a table of ``style`` with ``n`` columns spends on rules and padding."""
    from rich.console import Console

    table = Table(**STYLES[style])
    for _ in range(n):
        table.add_column("x", no_wrap=True)
    table.add_row(*("x" * n))
    console = Console(width=1000, color_system=None, force_terminal=False)
    with console.capture() as cap:
        console.print(table)
    return max(len(line) for line in cap.get().splitlines()) - n


def _header(col: Col, style: str) -> str:
    return col.short if (col.short and style == "compact") else col.header


def _fit(all_cols: list[Col], keep: list[int], rows: list[list[Any]], style: str,
         width: int | None, last_resort: bool = False) -> list[int] | None:
    """Content widths of the columns ``keep`` in ``style`` that fit ``width`` (None: the
    narrowest possible), or None when they do not fit. ``last_resort``: headers may wrap at
    spaces and ``min_width`` is ignored."""
    cols = [all_cols[i] for i in keep]
    # per column, per row: the cell's paragraphs as tokens (wrapping columns only)
    cells: list[list[list[Parts]]] = []
    mins: list[int] = []
    maxs: list[int] = []
    for i, col in zip(keep, cols):
        head = _width(_header(col, style))
        if last_resort:
            head = max(_width(w) for w in _header(col, style).split())
        paragraphs = [_plain(r[i]).split("\n") for r in rows]
        natural = max([head] + [_width(p) for ps in paragraphs for p in ps])
        if col.wrap:
            parts = [[_parts(p, col.wrap) for p in ps] for ps in paragraphs]
            longest = max([0] + [_width(w) for c in parts for ps in c for pt in ps for w in pt])
            least = max(head, longest, 0 if last_resort else min(col.min_width, natural))
            cells.append(parts)
        else:
            least = natural
            cells.append([])
        mins.append(least)
        maxs.append(max(natural, least))
    if width is None:
        return mins
    room = width - _overhead(style, len(cols))
    if sum(mins) > room:
        return None
    widths = list(mins)
    spare = room - sum(widths)
    wrapping = [j for j, c in enumerate(cols) if c.wrap]

    per_row: dict[tuple[int, int], list[int]] = {}  # (column, width) -> lines of each row

    def height(ws: list[int]) -> int:
        counts = []
        for j in wrapping:
            if (j, ws[j]) not in per_row:
                per_row[j, ws[j]] = [_lines(cell, ws[j]) for cell in cells[j]]
            counts.append(per_row[j, ws[j]])
        return sum(max([1, *row]) for row in zip(*counts)) if counts else len(rows)

    # the spare room goes where it saves the most lines per character; then to the columns
    # still below their natural width, the smallest need first
    current = height(widths)
    while spare > 0:
        best: tuple[float, int, int] | None = None
        for j in wrapping:
            for extra in range(1, min(spare, maxs[j] - widths[j]) + 1):
                trial = list(widths)
                trial[j] += extra
                saved = current - height(trial)
                if saved > 0:
                    if best is None or saved / extra > best[0]:
                        best = (saved / extra, j, extra)
                    break
        if best is None:
            break
        _, j, extra = best
        widths[j] += extra
        spare -= extra
        current = height(widths)
    for j in sorted(wrapping, key=lambda j: maxs[j] - widths[j]):
        add = min(spare, maxs[j] - widths[j])
        widths[j] += add
        spare -= add
    return widths


def _layout(all_cols: list[Col], keep: list[int], widths: list[int], style: str,
            width: int) -> Layout:
    dropped = [c.header for i, c in enumerate(all_cols) if i not in keep]
    return Layout([all_cols[i] for i in keep], widths, style, dropped, width, keep)
