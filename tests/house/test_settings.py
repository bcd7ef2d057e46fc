""":mod:`ctrlrnn.settings`: every variable parses its default, refuses a bad value with one
:class:`SettingError` naming it, and the parts outside ``ops`` raise that error where they first
use the value."""

from __future__ import annotations

import re

import pytest
import torch

from ctrlrnn import settings
from ctrlrnn.settings import SETTINGS, SettingError

#: a value each variable cannot use
BAD: dict[str, str] = {
    "CTRLRNN_BACKEND": "fast",
    "CTRLRNN_REQUIRE_COMPILED": "maybe",
    "CTRLRNN_GEMM": "cublas",
    "CTRLRNN_METAGROSS_SPLIT": "time",
    "CTRLRNN_RUNTIME": "fast",
    "CTRLRNN_RUNTIME_OFF": "fast",
    "CTRLRNN_OUTPUT_CACHE_MB": "lots",
    "CTRLRNN_HUGE_PAGES": "2",
    "CTRLRNN_STREAMING_BYTES": "4MiB",
    "CTRLRNN_CUDA_GRAPHS": "enabled",
    "CTRLRNN_TRITON_NATIVE": "y",
    "CTRLRNN_DEVICE": "gpu",
    "CTRLRNN_DIST_TIMEOUT": "-5",
}
#: the variables that take any text (a folder), so have no bad value
FREE_TEXT = ("CTRLRNN_CACHE", "CTRLRNN_DATA", "CTRLRNN_VENV")


def test_every_variable_has_a_bad_value_or_takes_any_text() -> None:
    assert sorted([*BAD, *FREE_TEXT]) == sorted(SETTINGS)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_one_error_naming_the_variable(name: str, monkeypatch) -> None:
    monkeypatch.setenv(name, BAD[name])
    with pytest.raises(SettingError, match=rf"^{name}='{re.escape(BAD[name])}': expected "):
        settings.value(name)
    with pytest.raises(SettingError, match=rf"^{name}="):
        settings.set_value(name, BAD[name])


@pytest.mark.parametrize("name", sorted(set(SETTINGS) - {"CTRLRNN_VENV"}))
def test_unset_and_empty_give_the_default(name: str, monkeypatch) -> None:
    monkeypatch.delenv(name, raising=False)
    unset = settings.value(name)
    monkeypatch.setenv(name, "  ")
    assert settings.value(name) == unset


@pytest.mark.parametrize(("name", "text", "parsed"), [
    ("CTRLRNN_BACKEND", "Ref", "reference"),
    ("CTRLRNN_BACKEND", "auto", None),
    ("CTRLRNN_REQUIRE_COMPILED", "yes", True),
    ("CTRLRNN_GEMM", "oneDNN", "onednn"),
    ("CTRLRNN_METAGROSS_SPLIT", "hidden", 2),
    ("CTRLRNN_OUTPUT_CACHE_MB", "0", 0),
    ("CTRLRNN_HUGE_PAGES", "off", False),
    ("CTRLRNN_STREAMING_BYTES", "-1", -1),
    ("CTRLRNN_RUNTIME_OFF", "poly_exp, PACKED_GEMM", ("packed_gemm", "poly_exp")),
    ("CTRLRNN_CUDA_GRAPHS", "0", False),
    ("CTRLRNN_DEVICE", "cuda:1", "cuda:1"),
    ("CTRLRNN_DEVICE", "auto", None),
    ("CTRLRNN_DIST_TIMEOUT", "2.5", 2.5),
    ("CTRLRNN_DATA", " /tmp/d ", "/tmp/d"),
])
def test_good_values_parse(name: str, text: str, parsed: object, monkeypatch) -> None:
    monkeypatch.setenv(name, text)
    assert settings.value(name) == parsed


def test_unknown_and_shell_only_names_are_refused() -> None:
    with pytest.raises(KeyError, match="CTRLRNN_NOPE is not one of ctrlrnn's settings"):
        settings.value("CTRLRNN_NOPE")
    with pytest.raises(KeyError, match="CTRLRNN_VENV is read by the shell scripts only"):
        settings.value("CTRLRNN_VENV")
    assert SETTINGS["CTRLRNN_VENV"].shell_only
    assert not any(s.shell_only for name, s in SETTINGS.items() if name != "CTRLRNN_VENV")


def test_set_value_and_child_environment(monkeypatch) -> None:
    monkeypatch.setenv("CTRLRNN_GEMM", "auto")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    settings.set_value("CTRLRNN_GEMM", "blas")
    assert settings.raw("CTRLRNN_GEMM") == "blas"
    with pytest.raises(SettingError):
        settings.set_value("CTRLRNN_GEMM", "cublas")
    assert settings.raw("CTRLRNN_GEMM") == "blas"  # a refused value changes nothing
    settings.set_value("CTRLRNN_GEMM", None)
    assert settings.raw("CTRLRNN_GEMM") is None
    env = settings.child_environment(PYTHONPATH="/x", SOMETHING_ELSE=None)
    assert env["PYTHONPATH"] == "/x" and "SOMETHING_ELSE" not in env
    assert settings.raw("SOMETHING_ELSE") == "kept"  # this process's environment is untouched


def test_raw_int(monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert settings.raw_int("WORLD_SIZE", 1) == 1
    monkeypatch.setenv("WORLD_SIZE", " 4 ")
    assert settings.raw_int("WORLD_SIZE", 1) == 4
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(SettingError, match=r"^WORLD_SIZE='four': expected a whole number$"):
        settings.raw_int("WORLD_SIZE", 1)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SettingError, match=r"^RANK='': expected a whole number$"):
        settings.raw_int("RANK")


# Where each value is first used, outside ops/ (ops/ reads its own on its way in).


def test_the_device_names_its_variable(monkeypatch) -> None:
    from ctrlrnn.train.distributed import resolve_device

    monkeypatch.setenv("CTRLRNN_DEVICE", "gpu")
    with pytest.raises(SettingError, match=r"got 'gpu' \(from \$CTRLRNN_DEVICE\)"):
        resolve_device("auto")
    assert resolve_device("cpu") == torch.device("cpu")  # not read when not asked for


def test_the_distributed_timeout_names_its_variable(monkeypatch) -> None:
    from ctrlrnn.train import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("CTRLRNN_DIST_TIMEOUT", "soon")
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda *a, **k: pytest.fail("joined with a bad timeout"))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    with pytest.raises(SettingError, match=r"^CTRLRNN_DIST_TIMEOUT='soon'"):
        distributed.init_distributed("cpu")
    monkeypatch.setenv("CTRLRNN_DIST_TIMEOUT", "120")
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(SettingError, match=r"^WORLD_SIZE='two'"):
        distributed.init_distributed("cpu")
    assert distributed.launched_world_size() == 1


def test_the_data_folder_follows_its_variables(monkeypatch, tmp_path) -> None:
    from ctrlrnn.data.cache import default_cache_dir

    monkeypatch.setenv("CTRLRNN_DATA", str(tmp_path / "d"))
    assert default_cache_dir() == tmp_path / "d"
    monkeypatch.delenv("CTRLRNN_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "ctrlrnn" / "data"
