"""The documentation site builds with MkDocs in strict mode, renders every page with its title
and code blocks, shows every public name of ``ctrlrnn`` and ``ctrlrnn.nn`` in its API
reference, and the screenshot script pictures it where a headless browser is installed.

``mkdocs build --strict`` turns every warning into an error: a broken link or anchor between
pages, a cross-reference of the API reference that resolves to nothing, a docstring the
renderer cannot read, a page left out of the navigation. The site is built once, into a
temporary folder (nothing is written under the repository).
"""

from __future__ import annotations

import html
import importlib
import inspect
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _mkdocs_or_skip() -> None:
    try:
        importlib.import_module("mkdocs")
        importlib.import_module("mkdocstrings_handlers.python")
    except ImportError:
        if os.environ.get("CI"):
            raise  # CI installs the `test` extra, which has the `docs` one: the site is built
        pytest.skip("the `docs` extra is not installed (pip install -e '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _mkdocs_or_skip()
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def _sources() -> dict[str, Path]:
    """Every page of the site: its HTML file (relative to the site) and its markdown source."""
    pages = {"index.html": ROOT / "README.md", "benchmarks.html": ROOT / "BENCHMARKS.md"}
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS)
        if rel.parts[:2] == ("results", "data"):
            continue
        name = "index.html" if md.name == "README.md" else md.with_suffix(".html").name
        pages[(rel.parent / name).as_posix()] = md
    return pages


def _title(md: Path) -> str:
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise AssertionError(f"{md} has no title")


def _code_blocks(md: Path) -> int:
    """Fenced code blocks of a page (the API pages' blocks come from docstrings)."""
    count, fence = 0, None
    for line in md.read_text(encoding="utf-8").splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence, count = m.group(1), count + 1
        elif fence is not None and m and m.group(1)[0] == fence[0]:
            fence = None
    return count


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


@pytest.mark.parametrize("page", sorted(_sources()))
def test_every_page_has_its_title_and_code_blocks(site: Path, page: str) -> None:
    md = _sources()[page]
    built = site / page
    assert built.is_file(), f"{md.relative_to(ROOT)} was not rendered as {page}"
    text = built.read_text(encoding="utf-8")
    h1 = re.findall(r"<h1[^>]*>(.*?)</h1>", text, re.S)
    want = _text(re.sub(r"`([^`]*)`", r"\1", _title(md)))
    assert any(_text(h).replace("¶", "").strip() == want for h in h1), \
        f"{page}: no title {want!r} (h1: {[_text(h) for h in h1]})"
    blocks = len(re.findall(r"<pre\b", text))
    assert blocks >= _code_blocks(md), f"{page}: {blocks} code blocks rendered, the page has " \
        f"{_code_blocks(md)}"


def _public() -> dict[str, object]:
    import ctrlrnn
    import ctrlrnn.nn

    found = {}
    for module in (ctrlrnn, ctrlrnn.nn):
        for name in module.__all__:
            found[f"{module.__name__}.{name}"] = getattr(module, name)
    return found


def test_api_reference_shows_every_public_name(site: Path) -> None:
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html"))
    ids = set(re.findall(r'\bid="([^"]+)"', pages))
    missing = []
    for public, obj in _public().items():
        canonical = f"{obj.__module__}.{obj.__qualname__}"
        if canonical not in ids:
            missing.append(f"{public} ({canonical})")
    assert not missing, f"not in the API reference (docs/api/*.md): {missing}"


def test_api_reference_renders_the_docstrings(site: Path) -> None:
    """A layer's section holds its docstring's parts: the arguments, the shapes and the
    example; a function's its parameters."""
    units = (site / "api" / "units.html").read_text(encoding="utf-8")
    import ctrlrnn

    for name in ("QRNN", "CASLSTM", "Metagross"):
        doc = inspect.getdoc(getattr(ctrlrnn, name)) or ""
        first = _text(doc.split("\n\n", 1)[0].replace("`", "")).split(" ")[:6]
        assert " ".join(first) in _text(units), f"{name}'s docstring is not rendered"
    assert units.count(">>> ") + units.count("&gt;&gt;&gt;") >= 10, "examples not rendered"


def test_api_pages_list_exactly_the_public_names() -> None:
    """docs/api/*.md names each public object once (a new public name needs its line)."""
    targets = []
    for md in sorted((DOCS / "api").glob("*.md")):
        targets += re.findall(r"^::: ([\w.]+)", md.read_text(encoding="utf-8"), re.M)
    assert len(targets) == len(set(targets)), "an object is rendered twice"
    shown = {f"{o.__module__}.{o.__qualname__}" for o in _public().values()}
    assert set(targets) == shown, (f"missing: {sorted(shown - set(targets))}; "
                                   f"not public: {sorted(set(targets) - shown)}")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.skipif(not any(shutil.which(b) for b in ("chromium", "chromium-browser",
                                                      "google-chrome")),
                    reason="no headless browser on PATH (Debian: apt-get install chromium)")
def test_screenshots_of_the_front_page_and_an_api_page(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "shots"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "screenshot_site.py"),
                          str(site), str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    for name in ("front-page.png", "api-units.png"):
        path = out / name
        assert path.is_file(), f"no {name}"
        width, height = _png_size(path)
        assert (width, height) == (1280, 1600), (name, width, height)
        assert path.stat().st_size > 20_000, f"{name} is nearly blank"
