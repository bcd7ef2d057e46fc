"""The tasks behind ``ctrlrnn train --task NAME`` (imported lazily by name)."""

from __future__ import annotations

import importlib

from ctrlrnn.tasks.base import Task

#: task name -> "module:Class"
TASKS: dict[str, str] = {
    "copy": "ctrlrnn.tasks.seq2seq_tasks:CopyTask",
    "addition": "ctrlrnn.tasks.seq2seq_tasks:AdditionTask",
    "sort": "ctrlrnn.tasks.seq2seq_tasks:SortTask",
    "tree-traversal": "ctrlrnn.tasks.seq2seq_tasks:TreeTraversalTask",
}


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r} (known: {', '.join(sorted(TASKS))})")
    module, _, attr = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["TASKS", "Task", "task_class"]
