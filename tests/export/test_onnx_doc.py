"""docs/onnx.md: its Python blocks run as written, in order, in one namespace (a reader pastes
them one after the other), writing their files into a temporary folder."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(BLOCKS) >= 3
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {"__name__": "docs_onnx"}
    for i, block in enumerate(BLOCKS):
        exec(compile(block, f"{PAGE.name}[{i}]", "exec"), namespace)
    assert {"qrnn.onnx", "tagger.onnx"} <= set(os.listdir(tmp_path))
