"""The repository README's reproduction table: written from the summary page's claims
between two markers (:func:`update_readme`), and those claims read back from the summary
(:func:`summary_claims`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ctrlrnn.reproduce import verdicts

#: the lines around the reproduction table of the repository's README.md, which
#: :func:`write_pages` rewrites in the full mode (tests/docs checks it against the summary)
README_START = ("<!-- the reproduction table: written by `ctrlrnn reproduce --pages-only` from "
                "the results files; do not edit -->")


README_END = "<!-- end of the reproduction table -->"


#: verdicts as the README's tally says them
_SHORT_VERDICT = {verdicts.SAME_WITHIN: "same direction", verdicts.OPPOSITE_WITHIN:
                  "opposite within spread", verdicts.BASELINE_LOW: "no verdict",
                  verdicts.EARLY_SAME: "early, same direction",
                  verdicts.EARLY_OPPOSITE: "early, opposite"}


def short_title(title: str) -> str:
    """An experiment's title without its details: the part before a colon, without a
    closing parenthesis that names its source ("Sorting, n = 5 (table 1)" -> "Sorting,
    n = 5")."""
    head = title.split(":", 1)[0].strip()
    if head.endswith(")") and "(" in head:
        said = head[head.rindex("("):]
        if any(word in said for word in ("table", "appendix", "figure", "protocol", "`")):
            head = head[: head.rindex("(")].strip()
    return head or title


def readme_table(claims: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """The README's reproduction table from the summary's claims ``(page, experiment title,
    claim, verdict)``, in their order: one row per experiment, its first claim and verdict,
    and a tally of the verdicts of its other claims."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for page, title, claim, v in claims:
        groups.setdefault((page, title), []).append((claim, v))
    lines = ["| paper | experiment | claim | verdict | its other claims |",
             "|---|---|---|---|---|"]
    for (page, title), rows in groups.items():
        (claim, v), others = rows[0], rows[1:]
        tally: dict[str, int] = {}
        for _claim, other in others:
            key = _SHORT_VERDICT.get(other, other)
            tally[key] = tally.get(key, 0) + 1
        rest = ", ".join(f"{n} {key}" for key, n in tally.items()) or "–"
        name = "Translation" if page == "translation" else page.upper()
        lines.append(f"| [{name}](docs/results/{page}.md) | {short_title(title)} | {claim} | "
                     f"{v} | {rest} |")
    return lines


def update_readme(readme: Path, claims: Sequence[tuple[str, str, str, str]]) -> bool:
    """Rewrite the reproduction table of ``readme`` between :data:`README_START` and
    :data:`README_END`; False (and nothing written) when the file or the markers are absent."""
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _old, tail = rest.split(README_END, 1)
    body = "\n".join(["", *readme_table(claims), ""])
    new = f"{head}{README_START}\n{body}\n{README_END}{tail}"
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return True


def summary_claims(summary: str) -> list[tuple[str, str, str, str]]:
    """The claims ``(page, experiment title, claim, verdict)`` of a summary page
    (``docs/results/README.md``) that :func:`write_pages` wrote, read back from its table."""
    out = []
    for line in summary.splitlines():
        if not line.startswith("| [") or line.count(" | ") < 6:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        page = cells[0][1:cells[0].index("]")]
        out.append((page, cells[1], cells[2], cells[5]))
    return out
