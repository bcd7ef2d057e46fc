"""The docs are self-contained: every relative markdown link resolves inside the repository.

For every markdown file of the repository (tracked, or new and not ignored), each inline link
or image ``[text](target)`` / ``![alt](target)`` and each reference definition
``[label]: target`` whose target is not http(s)/mailto must name an existing file or folder,
relative to the markdown file (``/...`` relative to the repository root); an ``#anchor`` into
a markdown file must name one of its headings (GitHub's slugs) or an explicit HTML anchor.
Links inside code spans and fenced code blocks are not links and are skipped.

The five papers are cited by short name (docs/papers.md), never as files that are not in the
repository: no markdown file and no source of the generated results pages
(``src/ctrlrnn/reproduce/``) may name the old design notes, a folder of paper texts or the
papers' text files (the patterns of ``FORBIDDEN``).
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: folders never searched by the fallback glob (no git): environments, runs, build outputs
SKIP_DIRS = {".venv", "venv", ".git", "runs", "build", "dist", "bench-results", "node_modules",
             ".pytest_cache", ".ruff_cache", "__pycache__"}
#: the pages ``ctrlrnn reproduce`` writes, and the sources it writes them from
GENERATED_PAGES = "docs/results/"
GENERATED_PAGE_SOURCES = ("src/ctrlrnn/reproduce",)
#: references to files that are not in the repository
FORBIDDEN = re.compile(
    r"\b(?:qrnn|rcrn|carnn|metagross|cas-lstm)\.txt\b"
    r"|\bDESIGN\.md\b"
    r"|(?<![\w./-])papers[/]",
    re.IGNORECASE,
)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
#: ``](target)`` or ``](target "title")``: the tail of every inline link and image, nested too
_INLINE = re.compile(
    r"\]\(\s*(<[^>\n]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[(?!\^)[^\]]+\]:\s*(<[^>\n]*>|\S+)")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_EXTERNAL = ("http:", "https:", "mailto:")


def markdown_files() -> list[Path]:
    """The repository's markdown files: ``git ls-files`` (tracked plus new, not ignored), or a
    glob that leaves out environments, runs and build folders when git is unavailable."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            cwd=ROOT, capture_output=True, check=True, timeout=30).stdout.decode()
        names = sorted({n for n in out.split("\0") if n})
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    except (OSError, subprocess.SubprocessError):
        return sorted(p for p in ROOT.rglob("*.md")
                      if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts[:-1])
                      and not any(part.endswith(".egg-info") for part in p.parts))


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    lines, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        lines.append((n, _CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)))
    return lines


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    found = []
    for n, line in _prose_lines(text):
        for m in _INLINE.finditer(line):
            found.append((n, m.group(1)))
        m = _REF_DEF.match(line)
        if m:
            found.append((n, m.group(1)))
    return [(n, t[1:-1] if t.startswith("<") and t.endswith(">") else t) for n, t in found]


def slugify(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text, lower-cased, punctuation dropped
    (letters, digits, ``_``, ``-`` and spaces kept), spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images -> their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a markdown file: its headings' slugs (repeats numbered ``-1``, ``-2``, as
    GitHub does) and explicit ``<a name=...>`` / ``id=...`` anchors."""
    text = path.read_text(encoding="utf-8")
    found: set[str] = set(_HTML_ANCHOR.findall(text))
    counts: dict[str, int] = {}
    prose = _prose_lines(text)
    for i, (n, line) in enumerate(prose):
        m = _ATX.match(line)
        heading = m.group(2) or "" if m else None
        if heading is None and i + 1 < len(prose) and prose[i + 1][0] == n + 1 \
                and _SETEXT.match(prose[i + 1][1]) and line.strip() \
                and not _SETEXT.match(line) and not line.lstrip().startswith(("|", ">", "-", "*")):
            heading = line.strip()
        if heading is None:
            continue
        # code spans were blanked in ``prose``: take the heading from the original line
        original = text.splitlines()[n - 1]
        m = _ATX.match(original)
        slug = slugify((m.group(2) or "") if m else original.strip())
        k = counts.get(slug, 0)
        counts[slug] = k + 1
        found.add(slug if k == 0 else f"{slug}-{k}")
    return frozenset(found)


def check_link(md: Path, target: str, root: Path = ROOT) -> str | None:
    """Why ``target`` (a link in ``md``, a file under ``root``) is broken, or None when it
    resolves."""
    if target.lower().startswith(_EXTERNAL):
        return None
    if _SCHEME.match(target):
        return "a link to something outside the repository"
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if not path_part:
        dest = md
    elif path_part.startswith("/"):
        dest = root / path_part.lstrip("/")
    else:
        dest = md.parent / path_part
    try:
        dest = dest.resolve()
        dest.relative_to(root)
    except ValueError:
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix.lower() == ".md" and dest.is_file():
        if unquote(anchor).lower() not in {a.lower() for a in anchors(dest)}:
            return f"no heading #{anchor} in {dest.relative_to(root).as_posix()}"
    return None


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _forbidden(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = sorted({m.group(0) for m in FORBIDDEN.finditer(line)})
            if found:
                bad.append(f"{_rel(path)}:{n}: {', '.join(found)} in {line.strip()[:120]!r}")
    return bad


def _generated(path: Path) -> bool:
    return _rel(path).startswith(GENERATED_PAGES)


MARKDOWN = markdown_files()


def test_markdown_files_found():
    names = {_rel(p) for p in MARKDOWN}
    assert {"README.md", "docs/papers.md"} <= names, sorted(names)


def test_every_relative_link_resolves():
    broken = []
    for md in MARKDOWN:
        for n, target in links(md.read_text(encoding="utf-8")):
            why = check_link(md, target)
            if why:
                broken.append(f"{_rel(md)}:{n}: ({target}) — {why}")
    assert not broken, f"{len(broken)} broken markdown link(s):\n" + "\n".join(broken)


def test_no_references_to_files_outside_the_repository():
    """Hand-written markdown and the sources of the generated pages."""
    sources = sorted(p for d in GENERATED_PAGE_SOURCES for p in (ROOT / d).rglob("*.py"))
    bad = _forbidden([p for p in MARKDOWN if not _generated(p)] + sources)
    assert not bad, (f"{len(bad)} line(s) cite files that are not in the repository; cite the "
                     f"paper by its short name (docs/papers.md):\n" + "\n".join(bad))


def test_no_references_to_files_outside_the_repository_in_generated_pages():
    bad = _forbidden([p for p in MARKDOWN if _generated(p)])
    assert not bad, (f"{len(bad)} line(s) of the generated pages cite files that are not in the "
                     f"repository; fix the strings in {', '.join(GENERATED_PAGE_SOURCES)} and "
                     f"regenerate the pages (`ctrlrnn reproduce --pages-only` and "
                     f"`ctrlrnn reproduce --quick --pages-only`):\n" + "\n".join(bad))


# ------------------------------------------------------------------ the checker's own parsing


@pytest.mark.parametrize("text, expected", [
    ("see [a](b.md) and ![c](d.png \"title\")", ["b.md", "d.png"]),
    ("[![badge](img.svg)](https://x.org/a_(b))", ["img.svg", "https://x.org/a_(b)"]),
    ("[x](<with space.md>)", ["with space.md"]),
    ("[ref]: ../other.md#part", ["../other.md#part"]),
    ("`[not](a-link.md)` and\n```\n[nor](this.md)\n```\n[yes](this.md)", ["this.md"]),
])
def test_link_parsing(text, expected):
    assert [t for _, t in links(text)] == expected


@pytest.mark.parametrize("heading, slug", [
    ("QRNN — Quasi-Recurrent Neural Networks", "qrnn--quasi-recurrent-neural-networks"),
    ("`ctrlrnn.QRNN(...)` API", "ctrlrnnqrnn-api"),
    ("The [papers](docs/papers.md), 2017!", "the-papers-2017"),
    ("snake_case & CAS-LSTM", "snake_case--cas-lstm"),
])
def test_slugify(heading, slug):
    assert slugify(heading) == slug


def test_broken_links_are_reported(tmp_path):
    root = tmp_path.resolve()
    md = root / "a.md"
    (root / "sub").mkdir()
    md.write_text("# Title\n\n## Part two\n\n[ok](a.md#part-two) [bad](#nowhere) [gone](b.md)\n"
                  "[dir](sub/) [up](../outside.md) [file](file:///etc/passwd)\n")
    why = {t: check_link(md, t, root) for _, t in links(md.read_text())}
    assert why["a.md#part-two"] is None and why["sub/"] is None
    assert "no heading #nowhere" in why["#nowhere"]
    assert why["b.md"] == "no such file"
    assert why["../outside.md"] == "points outside the repository"
    assert why["file:///etc/passwd"] == "a link to something outside the repository"


def test_forbidden_names_are_found():
    txt, design, folder = ".txt", "DESIGN" + ".md", "papers" + "/"
    for text in (f"qrnn{txt} eq 3", f"see `{folder}rcrn{txt}`", f"{design}'s table",
                 f"(cas-lstm{txt})", f"carnn{txt}", f"metagross{txt} 3.1"):
        assert FORBIDDEN.search(text), text
    for text in ("QRNN paper, eq 3", "docs/papers.md", "train.txt", f"https://x.org/{folder}1"):
        assert not FORBIDDEN.search(text), text
