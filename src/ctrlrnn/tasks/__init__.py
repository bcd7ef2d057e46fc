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
    "translate-char": "ctrlrnn.tasks.translation_tasks:CharTranslationTask",
    "translate-word": "ctrlrnn.tasks.translation_tasks:WordTranslationTask",
    "carnn-lm": "ctrlrnn.tasks.carnn_tasks:CarnnLmTask",
    "carnn-dialog": "ctrlrnn.tasks.carnn_tasks:CarnnDialogTask",
    "mr": "ctrlrnn.tasks.classification_tasks:MrTask",
    "sst5": "ctrlrnn.tasks.classification_tasks:Sst5Task",
    "sst2": "ctrlrnn.tasks.classification_tasks:Sst2Task",
    "imdb": "ctrlrnn.tasks.classification_tasks:ImdbTask",
    "trec": "ctrlrnn.tasks.classification_tasks:TrecTask",
    "logic": "ctrlrnn.tasks.pair_tasks:LogicTask",
    "nli": "ctrlrnn.tasks.pair_tasks:NliTask",
    "ranking": "ctrlrnn.tasks.ranking_tasks:RankingTask",
    "ptb-lm": "ctrlrnn.tasks.lm_tasks:PtbLmTask",
    "ptb-char": "ctrlrnn.tasks.lm_tasks:PtbCharTask",
    "brown-lm": "ctrlrnn.tasks.lm_tasks:BrownLmTask",
    "mnist-5k": "ctrlrnn.tasks.pixel_tasks:Mnist5kTask",
    "fashion-mnist": "ctrlrnn.tasks.pixel_tasks:FashionMnistTask",
    "mnist": "ctrlrnn.tasks.pixel_tasks:MnistTask",
    "cifar10": "ctrlrnn.tasks.pixel_tasks:Cifar10Task",
    "chorales": "ctrlrnn.tasks.music_tasks:ChoralesTask",
}


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r} (known: {', '.join(sorted(TASKS))})")
    module, _, attr = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["TASKS", "Task", "task_class"]
