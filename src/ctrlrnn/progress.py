"""Progress bars that fit the terminal (training, ``bench``, data preparation, ``reproduce``).

rich's :class:`~rich.progress.Progress` squeezes every column when the line is wider than the
console, so an 80-column terminal shows ``200/2…`` and ``0:03:…``. :class:`FittedProgress`
instead leaves whole columns out, in this order, until the line fits:

1. the bar itself (it is also narrowed, down to 10 characters, before it goes);
2. the speed text (``12.3 steps/s``);
3. the info text (``loss 1.2345  accuracy 0.5000``).

The description wraps at spaces if it still does not fit; the count (``done/total``), the
elapsed time and the remaining time are always shown in full.

:func:`progress_bar` makes one; :func:`track` iterates with one; :class:`TrainingProgressBar`
is the trainer's bar (loss, validation metric and steps per second).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table
from rich.text import Text

from ctrlrnn.metric_conventions import format_metric

T = TypeVar("T")

#: Widest and narrowest bar drawn; below the narrowest the bar is left out.
BAR_MAX = 40
BAR_MIN = 10


class FittedProgress(Progress):
    """A :class:`rich.progress.Progress` whose optional columns go when the console is narrow.

    ``optional`` lists the columns that may be left out, the first to go first; the others
    are always drawn, at their full width (the first non-optional column, the description,
    wraps if nothing else helps). Task fields ``info`` and ``speed`` default to ``""``.
    """

    def __init__(self, *columns: ProgressColumn, optional: Sequence[ProgressColumn] = (),
                 **kwargs: Any) -> None:
        self.optional = list(optional)
        self._dropped: set[int] = set()
        self._width_seen = 0
        super().__init__(*columns, **kwargs)

    def add_task(self, description: str, *args: Any, **fields: Any) -> TaskID:
        fields.setdefault("info", "")
        fields.setdefault("speed", "")
        return super().add_task(description, *args, **fields)

    def _cells(self, column: ProgressColumn, tasks: list[Task]) -> list[Any]:
        return [column(task) for task in tasks]

    def _width_of(self, renderables: list[Any]) -> int:
        console = self.console
        widths = [0]
        for r in renderables:
            if isinstance(r, Text):
                widths.append(max(Text(line).cell_len for line in r.plain.split("\n") or [""]))
            else:
                widths.append(Measurement.get(console, console.options, r).maximum)
        return max(widths)

    def make_tasks_table(self, tasks: Iterable[Task]) -> Table:
        visible = [t for t in tasks if t.visible]
        if not visible or not hasattr(self, "live"):  # nothing to draw (or still starting)
            return Table.grid()
        width = self.console.width
        if width != self._width_seen:  # a resized terminal: start again from every column
            self._dropped.clear()
            self._width_seen = width
        columns = [c for c in self.columns if isinstance(c, ProgressColumn)]
        cells = {id(c): self._cells(c, visible) for c in columns if not isinstance(c, BarColumn)}
        sizes = {key: self._width_of(value) for key, value in cells.items()}

        def needed(kept: list[ProgressColumn]) -> int:
            fixed = [sizes[id(c)] for c in kept if not isinstance(c, BarColumn)]
            bars = sum(BAR_MIN for c in kept if isinstance(c, BarColumn))
            return sum(fixed) + bars + max(len(kept) - 1, 0)

        kept = [c for c in columns if id(c) not in self._dropped]
        for victim in self.optional:
            if needed(kept) <= width:
                break
            if victim in kept:
                kept.remove(victim)
                self._dropped.add(id(victim))
        spare = width - needed(kept)
        table_columns = []
        description_width = None
        if spare < 0 and kept:
            description_width = max(sizes.get(id(kept[0]), 0) + spare, 8)
        for i, c in enumerate(kept):
            if isinstance(c, BarColumn):
                c.bar_width = min(BAR_MAX, BAR_MIN + max(spare, 0))
                table_columns.append(Column(no_wrap=True))
            elif i == 0:
                table_columns.append(Column(no_wrap=False, overflow="fold",
                                            width=description_width))
            else:
                table_columns.append(Column(no_wrap=True, width=sizes[id(c)]))
        table = Table.grid(*table_columns, padding=(0, 1), expand=False)
        for n, task in enumerate(visible):
            table.add_row(*(c(task) if isinstance(c, BarColumn) else cells[id(c)][n]
                            for c in kept))
        return table


def progress_bar(description: str = "[bold]{task.description}", *, console: Console | None = None,
                 info: bool = False, speed: bool = False, transient: bool = False,
                 **kwargs: Any) -> FittedProgress:
    """The progress bar of every ctrlrnn command: description, bar, ``done/total``, the task's
    ``info`` and ``speed`` fields (when asked for), elapsed and remaining time.

    ``description`` is the format of the first column (``{task.description}`` by default).
    The bar goes first, then the speed, then the info when the console is too narrow."""
    bar = BarColumn(bar_width=BAR_MAX)
    columns: list[ProgressColumn] = [TextColumn(description), bar, MofNCompleteColumn()]
    optional: list[ProgressColumn] = [bar]
    info_column = TextColumn(" {task.fields[info]}")
    speed_column = TextColumn(" {task.fields[speed]}")
    if info:
        columns.append(info_column)
    if speed:
        columns.append(speed_column)
        optional.append(speed_column)
    if info:
        optional.append(info_column)
    columns += [TimeElapsedColumn(), TimeRemainingColumn()]
    return FittedProgress(*columns, optional=optional, console=console, transient=transient,
                          **kwargs)


def track(sequence: Iterable[T], description: str, *, total: float | None = None,
          transient: bool = True, console: Console | None = None) -> Iterator[T]:
    """Iterate over ``sequence`` with a :func:`progress_bar` (like :func:`rich.progress.track`)."""
    if total is None and hasattr(sequence, "__len__"):
        total = float(len(sequence))  # type: ignore[arg-type]
    with progress_bar(console=console, transient=transient) as bar:
        yield from bar.track(sequence, total=total, description=description)


class TrainingProgressBar:
    """The trainer's bar: ``train``, the bar, ``step/total``, loss, the validation metric, steps
    per second, elapsed and remaining time (main process only; a no-op when not ``enabled``)."""

    def __init__(self, total: int, start: int, *, enabled: bool,
                 console: Console | None = None) -> None:
        self.enabled = enabled
        if not enabled:
            return
        self.progress = progress_bar("[bold]train", console=console, info=True, speed=True)
        self.progress.start()
        self.task_id = self.progress.add_task("train", total=total, completed=start)
        self.t0 = time.perf_counter()
        self.start = start

    def update(self, step: int, loss: float, metric: float | None, metric_name: str) -> None:
        if not self.enabled:
            return
        rate = (step - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        info = f"loss {loss:.4f}"
        if metric is not None:
            info += f"  {metric_name} {format_metric(metric_name, metric)}"
        self.progress.update(self.task_id, completed=step, info=info,
                             speed=f"{rate:.1f} steps/s")

    def close(self) -> None:
        if self.enabled:
            self.progress.stop()
