"""MkDocs hooks of the documentation site (mkdocs.yml): the repository's README.md becomes the
site's front page and BENCHMARKS.md its benchmarks page, their links rewritten from the
repository's layout to the site's (``docs/qrnn.md`` -> ``qrnn.md``); the docs pages' links to
``../BENCHMARKS.md`` and ``../README.md`` follow them. The files stay where GitHub shows them.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: repository files shown on the site: (file at the root, its page on the site)
ROOT_PAGES = {"README.md": "index.md", "BENCHMARKS.md": "benchmarks.md"}
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def _site_target(target: str, page: str) -> str:
    """A link of the root page ``page`` (README.md, BENCHMARKS.md) as the site sees it."""
    if re.match(r"^[a-z]+:|^#", target):
        return target
    path, hash_, anchor = target.partition("#")
    if path in ROOT_PAGES:
        path = ROOT_PAGES[path]
    elif path.startswith("docs/"):
        path = path[len("docs/"):]
    return path + hash_ + anchor


def _docs_target(target: str, src: str) -> str:
    """A link of a docs page (``src``, relative to docs/) to a root page, as the site sees
    it."""
    path, hash_, anchor = target.partition("#")
    if re.match(r"^[a-z]+:", path) or not path:
        return target
    here = posixpath.dirname(src)
    resolved = posixpath.normpath(posixpath.join("docs", here, path))
    if resolved in ROOT_PAGES:
        return posixpath.relpath(ROOT_PAGES[resolved], here or ".") + hash_ + anchor
    return target


def on_files(files: Files, config) -> Files:
    for name, dest in ROOT_PAGES.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        text = _LINK.sub(lambda m, name=name: m.group(1) + _site_target(m.group(2), name)
                         + m.group(3), text)
        files.append(File.generated(config, dest, content=text))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src in ROOT_PAGES.values():
        return markdown
    return _LINK.sub(lambda m: m.group(1) + _docs_target(m.group(2), src) + m.group(3),
                     markdown)


#: a Sphinx role before a code span, as the docstrings write cross-references
#: (":class:`torch.nn.LSTM`"): the site shows the code span alone
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj|py:\w+):(?=<code>)")


def on_page_content(html: str, page, config, files) -> str:
    return _ROLE.sub("", html)
