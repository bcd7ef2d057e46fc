"""English-Spanish verse-aligned pairs (translation stand-in): World English Bible
(Debian ``sword-text-web``, module ``engWEB2015eb``) and Reina-Valera 1909 (Debian
``sword-text-sparv``, module ``spaRV1909eb``), both public domain, read with PyPI
``pysword``.

Verses are paired by (book, chapter, verse) where both versifications have them. The OSIS
markup is stripped by :func:`strip_osis` rather than pysword's ``clean=True``, which glues
words around removed footnotes (``God<note>..</note><w>created`` -> ``Godcreated``): notes
and titles are removed with their content, block tags become spaces, inline tags vanish.
:func:`glued_words` then checks every verse: no token of the stripped text may be two
adjacent ``<w>`` words run together; preparation fails if one is.

Split (fixed, by chapter so that neighbouring verses stay together):
:func:`~ctrlrnn.data.sources.common.hash_split` of ``BOOK.CHAPTER``.

Prepared as ``{split}.tsv``: ``BOOK.CHAPTER.VERSE<TAB>english<TAB>spanish``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ctrlrnn.data.errors import DataFormatError, MissingSourceError
from ctrlrnn.data.fetch import DebPackage, deb_files
from ctrlrnn.data.source import CacheDir, PreparedSource
from ctrlrnn.data.sources.common import SPLITS, hash_split
from ctrlrnn.data.stats import DatasetStats, split_stats
from ctrlrnn.data.tokenize import char_tokenize, word_tokenize
from ctrlrnn.progress import track

SWORD = "/usr/share/sword"
MODULES = {
    "en": (DebPackage("sword-text-web"), "engWEB2015eb"),
    "es": (DebPackage("sword-text-sparv"), "spaRV1909eb"),
}
PYSWORD_INSTALL = "pip install pysword==0.2.8"

_REMOVE = re.compile(r"<(note|title)\b[^>]*?(?<!/)>.*?</\1>|<(note|title)\b[^>]*/>", re.DOTALL)
_BLOCK = re.compile(r"</?(div|l|lg|p|chapter|milestone|lb|br|list|item|head)\b[^>]*>")
_TAG = re.compile(r"<[^>]+>")
_SPACE_BEFORE = re.compile(r"\s+([,.;:!?’”»)\]])")
_MARKUP_RUN = re.compile(r"((?:<[^>]+>)+)")
_ELEMENT_BOUNDARY = re.compile(r"</[^>]+>\s*<[^/]")
_INLINE = "w|transChange|divineName|hi|foreign"
_ADJACENT = re.compile(rf"(</(?:{_INLINE}|q)>)(?=<(?:{_INLINE})\b)")


def _module_files(name: str) -> list[str]:
    base = f"{SWORD}/modules/texts/ztext/{name}"
    return [f"{SWORD}/mods.d/{name}.conf"] + [
        f"{base}/{t}.{ext}" for t in ("ot", "nt") for ext in ("bzs", "bzv", "bzz")
    ]


def strip_osis(raw: str) -> str:
    """Plain text of one OSIS verse, without gluing words (see the module docstring)."""
    text = _REMOVE.sub(" ", raw)
    text = _ADJACENT.sub(r"\1 ", text)
    text = _BLOCK.sub(" ", text)
    text = _TAG.sub("", text)
    text = " ".join(text.split())
    return _SPACE_BEFORE.sub(r"\1", text)


def glued_words(raw: str, clean: str) -> list[str]:
    """Tokens of ``clean`` that run together two words which ``raw`` separates only by
    markup between two elements (``<w>otra</w><w>tercera</w>``) or by a removed footnote,
    and that never occur as one word in ``raw``. Markup inside a word
    (``hécho<transChange>lo</transChange>``) is not a boundary."""
    known: set[str] = set()
    pairs: set[str] = set()
    last: str | None = None
    parts = _MARKUP_RUN.split(_REMOVE.sub("<removed/>", raw))
    for i, part in enumerate(parts):
        if i % 2:  # a run of tags between two text pieces
            if "<removed/>" not in part and not _ELEMENT_BOUNDARY.search(part):
                last = None
            continue
        tokens = word_tokenize(part)
        known.update(tokens)
        if last is not None and tokens and not part[0].isspace():
            pairs.add(last + tokens[0])
        last = tokens[-1] if tokens and not part[-1].isspace() else None
    return [t for t in word_tokenize(clean) if t in pairs and t not in known]


def _read_module(root: Path, module: str, source: str) -> dict[tuple[str, int, int], str]:
    try:
        from pysword.modules import SwordModules
    except ImportError as exc:
        raise MissingSourceError(source, PYSWORD_INSTALL, "pysword is not installed") from exc
    modules = SwordModules(str(root))
    modules.parse_modules()
    bible = modules.get_bible_from_module(module)
    books = bible.get_structure().get_books()
    verses: dict[tuple[str, int, int], str] = {}
    for book in track([b for t in ("ot", "nt") for b in books.get(t, [])],
                      description=f"reading {module}", transient=True):
        keys = [(book.osis_name, c, v) for c in range(1, book.num_chapters + 1)
                for v in range(1, book.chapter_lengths[c - 1] + 1)]
        texts = list(bible.get_iter(books=[book.osis_name], clean=False))
        if len(texts) != len(keys):
            raise DataFormatError(root, None, f"{module} {book.osis_name}: {len(texts)} verses "
                                  f"for {len(keys)} keys")
        verses.update(zip(keys, texts, strict=True))
    return verses


class VersesSource(PreparedSource):
    name = "verses-en-es"
    summary = "English-Spanish verse-aligned pairs (WEB / Reina-Valera 1909), word+char"
    size = "~31k pairs, 7 MB"
    origin = "Debian sword-text-web + sword-text-sparv, read with PyPI pysword"
    licence = "public domain (both texts)"
    install = "apt-get install sword-text-web sword-text-sparv; " + PYSWORD_INSTALL

    def build(self, work: Path, out: Path) -> None:
        texts = {}
        for lang, (package, module) in MODULES.items():
            files = deb_files(package, _module_files(module), work, self.name)
            root = files[_module_files(module)[0]].parent.parent
            texts[lang] = _read_module(root, module, self.name)
        rows: dict[str, list[str]] = {s: [] for s in SPLITS}
        glued: list[str] = []
        for key, raw_en in texts["en"].items():
            raw_es = texts["es"].get(key)
            if raw_es is None:
                continue
            en, es = strip_osis(raw_en), strip_osis(raw_es)
            if not en or not es:
                continue
            glued += [f"{key}: {g}" for g in glued_words(raw_en, en) + glued_words(raw_es, es)]
            book, chapter, verse = key
            rows[hash_split(f"{book}.{chapter}")].append(f"{book}.{chapter}.{verse}\t{en}\t{es}")
        if glued:
            raise DataFormatError(out, None, f"{len(glued)} glued words, e.g. {glued[:3]}")
        for split in SPLITS:
            (out / f"{split}.tsv").write_text("".join(r + "\n" for r in rows[split]),
                                              encoding="utf-8")

    def compute_stats(self, out: Path) -> DatasetStats:
        data = {s: read_pairs(out / f"{s}.tsv") for s in SPLITS}
        en_vocab = {t for _, en, _ in data["train"] for t in word_tokenize(en)}
        es_vocab = {t for _, _, es in data["train"] for t in word_tokenize(es)}
        es_mean = {s: sum(len(word_tokenize(es)) for _, _, es in v) / max(len(v), 1)
                   for s, v in data.items()}
        chars = {c for _, en, es in data["train"] for c in char_tokenize(en + " " + es)}
        return DatasetStats(
            self.name,
            [split_stats(s, [word_tokenize(en) for _, en, _ in data[s]]) for s in SPLITS],
            len(en_vocab),
            unit="English words",
            extra={
                "Spanish vocabulary (train)": str(len(es_vocab)),
                "Spanish mean words": " / ".join(f"{s} {es_mean[s]:.2f}" for s in SPLITS),
                "characters (train, both)": str(len(chars)),
                "glued words found": "0",
            },
        )


def read_pairs(path: Path) -> list[tuple[str, str, str]]:
    """``(key, english, spanish)`` rows of a prepared file."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise DataFormatError(path, number, "expected KEY<TAB>english<TAB>spanish")
            rows.append((parts[0], parts[1], parts[2]))
    return rows


SOURCE = VersesSource()


def load_verses(cache_dir: CacheDir = None, level: str = "word"
                ) -> dict[str, list[tuple[list[str], list[str]]]]:
    """``(english tokens, spanish tokens)`` per split, at ``level`` 'word' or 'char'."""
    if level not in ("word", "char"):
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")
    tok = word_tokenize if level == "word" else char_tokenize
    directory = SOURCE.ready_dir(cache_dir)
    return {s: [(tok(en), tok(es)) for _, en, es in read_pairs(directory / f"{s}.tsv")]
            for s in SPLITS}
