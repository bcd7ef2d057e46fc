"""Every environment variable ctrlrnn reads, in one place.

Each :class:`Setting` names its variable, its default, the values it takes and its effect.
:func:`value` reads a variable and parses it; a value it cannot parse raises
:class:`SettingError`, which names the variable and the values it takes.
``docs/environment.md`` lists the same tables (:func:`markdown_table` writes each one,
:func:`rewrite_tables` puts them on the page, and a test holds the page to them).
The compiled kernels never read the environment: ``ops`` hands them these values as arguments.
A shell-only setting (``CTRLRNN_VENV``) is read by ``scripts/`` alone and listed here so that
the page names it.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RUNTIME_MECHANISMS", "SETTINGS", "SETTINGS_GROUPS", "Setting", "SettingError",
           "child_environment",
           "markdown_table", "raw", "raw_int", "rewrite_tables", "set_value", "value"]


class SettingError(ValueError):
    """An environment variable holds a value ctrlrnn cannot use."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, how its text is read, and what it does.

    ``shell_only`` marks a variable that only the shell scripts read; :func:`value` refuses
    it."""

    name: str
    group: str
    default: str
    values: str
    effect: str
    parse: Callable[[str], Any]
    shell_only: bool = False

    def read(self, text: str | None) -> Any:
        """The parsed value of ``text`` (None or empty: the default's)."""
        text = "" if text is None else text.strip()
        try:
            return self.parse(text)
        except (ValueError, TypeError) as err:
            raise SettingError(f"{self.name}={text!r}: expected {self.values} ({err})") from None


def _choice(options: dict[str, Any], default: Any) -> Callable[[str], Any]:
    """A parser for one of ``options`` (case-insensitive); empty gives ``default``."""

    def parse(text: str) -> Any:
        if not text:
            return default
        key = text.lower()
        if key not in options:
            raise ValueError(f"{text!r} is not one of {', '.join(sorted(options))}")
        return options[key]

    return parse


_ON = {"1": True, "on": True, "true": True, "yes": True}
_OFF = {"0": False, "off": False, "false": False, "no": False}


def _flag(default: bool) -> Callable[[str], bool]:
    """A parser for on/off words (``1``, ``on``, ``true``, ``yes`` and their opposites)."""
    return _choice({**_ON, **_OFF}, default)


def _integer(default: int | None) -> Callable[[str], int | None]:
    """A parser for a whole number; empty gives ``default``."""

    def parse(text: str) -> int | None:
        return default if not text else int(text)

    return parse


def _number(default: float) -> Callable[[str], float]:
    """A parser for a positive number; empty gives ``default``."""

    def parse(text: str) -> float:
        value = default if not text else float(text)
        if not value > 0:
            raise ValueError("must be positive")
        return value

    return parse


def _text(default: str | None) -> Callable[[str], str | None]:
    """A parser for free text, such as a folder; empty gives ``default``."""

    def parse(text: str) -> str | None:
        return text or default

    return parse


#: the tuned runtime's mechanisms that ``CTRLRNN_RUNTIME_OFF`` switches off, in the order the
#: kernels' configure op takes them
RUNTIME_MECHANISMS = ("packed_gemm", "poly_exp", "stacked_outputs")


def _mechanisms(text: str) -> tuple[str, ...]:
    """A comma list of :data:`RUNTIME_MECHANISMS` (case-insensitive, each once at most, in that
    order); empty gives none."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()] if text else []
    unknown = [n for n in names if n not in RUNTIME_MECHANISMS]
    if unknown:
        raise ValueError(f"{', '.join(map(repr, unknown))} not among "
                         f"{', '.join(RUNTIME_MECHANISMS)}")
    return tuple(n for n in RUNTIME_MECHANISMS if n in names)


def _device(text: str) -> str | None:
    """A device name as the ``device`` key takes it; empty or ``auto``: None."""
    if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", text or "auto"):
        raise ValueError(f"{text!r} is not auto, cpu, cuda or cuda:N")
    return None if text in ("", "auto") else text


_KERNELS = "Kernels and backends"
_MEMORY = "Memory"
_GPU = "GPU"
_TRAINING = "Training and data"
_SCRIPTS = "Shell scripts"

SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("CTRLRNN_BACKEND", _KERNELS, "unset", "`reference` (or `ref`, `python`)",
            "`reference` runs every op on its readable reference code, without building or "
            "warning", _choice({"reference": "reference", "ref": "reference",
                                "python": "reference", "auto": None}, None)),
    Setting("CTRLRNN_REQUIRE_COMPILED", _KERNELS, "`0`", "`0` or `1`",
            "`1` makes a failed kernel build an error instead of a warning", _flag(False)),
    Setting("CTRLRNN_CACHE", _KERNELS, "`~/.cache/ctrlrnn`", "a folder",
            "where compiled kernels and their GEMM choices are kept "
            "(`$XDG_CACHE_HOME/ctrlrnn` when that is set)", _text(None)),
    Setting("CTRLRNN_GEMM", _KERNELS, "`auto`", "`auto`, `blas`, `onednn`, `blas1` or `tiny`",
            "the GEMM path of the compiled kernels",
            _choice({k: k for k in ("auto", "blas", "onednn", "blas1", "tiny")}, "auto")),
    Setting("CTRLRNN_RUNTIME", _KERNELS, "`tuned`", "`tuned` or `plain`",
            "the CPU runtime behind the compiled kernels: `tuned` (the output cache, the "
            "measured GEMM paths, streaming stores, a vectorised exp) or `plain` (torch's "
            "allocator and `at::mm`, `std::exp`); results agree up to float32 rounding",
            _choice({"tuned": "tuned", "plain": "plain"}, "tuned")),
    Setting("CTRLRNN_RUNTIME_OFF", _KERNELS, "unset",
            "a comma list of `packed_gemm`, `poly_exp`, `stacked_outputs`",
            "tuned runtime mechanisms to switch off one by one, so a benchmark can measure each "
            "alone: MKL's packed per-step GEMM, the polynomial exp and tanh, the stacked "
            "recurrences' outputs without a copy (the other mechanisms have variables of their "
            "own; `plain` has none of them)", _mechanisms),
    Setting("CTRLRNN_METAGROSS_SPLIT", _KERNELS, "`auto`", "`auto`, `batch` or `hidden`",
            "how METAGROSS as printed splits its work over threads",
            _choice({"auto": 0, "batch": 1, "hidden": 2}, 0)),
    Setting("CTRLRNN_OUTPUT_CACHE_MB", _MEMORY, "`512`", "a whole number of MiB",
            "the most free memory the kernels' output cache keeps; `0` turns the cache off",
            _integer(512)),
    Setting("CTRLRNN_HUGE_PAGES", _MEMORY, "`1`", "`0` or `1`",
            "`0` stops advising large cached blocks onto transparent huge pages", _flag(True)),
    Setting("CTRLRNN_STREAMING_BYTES", _MEMORY,
            "a quarter of the last-level cache, at most 4 MiB per thread",
            "a whole number of bytes",
            "outputs larger than this are written with streaming stores; negative: never",
            _integer(None)),
    Setting("CTRLRNN_CUDA_GRAPHS", _GPU, "`1`", "`0` or `1`",
            "`0` launches the fused cells' step loops step by step instead of replaying CUDA "
            "graphs", _flag(True)),
    Setting("CTRLRNN_TRITON_NATIVE", _GPU, "`0`", "`0` or `1`",
            "`1` runs the Triton kernels natively in the GPU check's tests "
            "(set by `scripts/gpu-check`)", _flag(False)),
    Setting("CTRLRNN_DEVICE", _TRAINING, "unset", "`auto`, `cpu`, `cuda` or `cuda:N`",
            "the device that `device=auto` picks; unset or `auto`, the GPU when there is one",
            _device),
    Setting("CTRLRNN_DIST_TIMEOUT", _TRAINING, "`120`", "seconds",
            "how long a distributed run waits for its peers before it stops with an error",
            _number(120.0)),
    Setting("CTRLRNN_DATA", _TRAINING, "`~/.cache/ctrlrnn/data`", "a folder",
            "where prepared data sets are kept (`$XDG_CACHE_HOME/ctrlrnn/data` when that is set)",
            _text(None)),
    Setting("CTRLRNN_VENV", _SCRIPTS, "`.venv` in the checkout", "a folder",
            "the virtual environment that `scripts/setup.sh` creates and `scripts/run` and "
            "`scripts/test` use; read by these scripts only", _text(None), shell_only=True),
)}


#: the groups of settings, in the order of :data:`SETTINGS` (a heading each on the page)
SETTINGS_GROUPS: tuple[str, ...] = tuple(dict.fromkeys(s.group for s in SETTINGS.values()))


def raw(name: str) -> str | None:
    """The text of an environment variable as set (None when unset); for variables that other
    programs define (``XDG_CACHE_HOME``, torchrun's ``RANK``) as well as ctrlrnn's own."""
    # CPython's os.environ keeps its entries encoded in a dict, _data: read with the mapping's
    # own encoder and decoder it costs less than os.environ.get, which the kernels' dispatch
    # pays at every call (CTRLRNN_BACKEND is read each time, so that it can be switched at run
    # time). Any other mapping in os.environ is read with get.
    env = os.environ
    data = getattr(env, "_data", None)
    if type(data) is dict:
        try:
            value = data.get(env.encodekey(name))  # type: ignore[attr-defined]
            return None if value is None else env.decodevalue(value)  # type: ignore[attr-defined]
        except AttributeError:
            pass
    return env.get(name)


def raw_int(name: str, default: int | None = None) -> int:
    """The whole number in variable ``name`` (``default`` when unset or empty), for numbers
    that other programs set, such as torchrun's ``WORLD_SIZE``; a :class:`SettingError` naming
    the variable when its text is not a whole number, or when it is unset with no default."""
    text = (os.environ.get(name) or "").strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise SettingError(f"{name}={text!r}: expected a whole number") from None


def value(name: str) -> Any:
    """The parsed value of ctrlrnn's variable ``name``; a :class:`SettingError` naming it when
    its text cannot be used."""
    try:
        setting = SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not one of ctrlrnn's settings: {sorted(SETTINGS)}") from None
    if setting.shell_only:
        raise KeyError(f"{name} is read by the shell scripts only")
    return setting.read(os.environ.get(name))


def set_value(name: str, text: str | None) -> None:
    """Set ctrlrnn's variable ``name`` for this process and its children (None: unset it);
    the text is checked first, so a bad value fails here."""
    SETTINGS[name].read(text)
    if text is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = text


def child_environment(**changes: str | None) -> dict[str, str]:
    """This process's environment with ``changes`` applied (None removes a variable), for a
    child process."""
    env = dict(os.environ)
    for name, text in changes.items():
        if text is None:
            env.pop(name, None)
        else:
            env[name] = text
    return env


def markdown_table(group: str) -> str:
    """The table of one group's settings, as ``docs/environment.md`` prints it."""
    rows = ["| variable | default | values | what it does |", "|---|---|---|---|"]
    found = [s for s in SETTINGS.values() if s.group == group]
    if not found:
        raise KeyError(f"{group!r} is not a group of settings: {list(SETTINGS_GROUPS)}")
    rows += [f"| `{s.name}` | {s.default} | {s.values} | {s.effect} |" for s in found]
    return "\n".join(rows)


def rewrite_tables(page: str) -> str:
    """``page`` (Markdown) with the first table under each ``## <group>`` heading replaced by
    :func:`markdown_table` of that group, the prose around the tables kept. A group without a
    heading and a table on the page raises ValueError naming it."""
    out: list[str] = []
    done: list[str] = []
    group: str | None = None
    replacing = False
    for line in page.split("\n"):
        if line.startswith("## "):
            group = line[3:].strip()
        is_row = line.startswith("|")
        if is_row and group in SETTINGS_GROUPS and group not in done:
            out += markdown_table(group).split("\n")
            done.append(group)
            replacing = True
        elif not (is_row and replacing):
            out.append(line)
            replacing = False
    missing = [g for g in SETTINGS_GROUPS if g not in done]
    if missing:
        raise ValueError(f"the page has no heading with a table for {missing}")
    return "\n".join(out)
