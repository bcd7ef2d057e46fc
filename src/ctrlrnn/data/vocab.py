"""Token vocabularies with the special tokens ``<pad>``, ``<unk>``, ``<bos>``, ``<eos>``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

PAD = "<pad>"
UNK = "<unk>"
BOS = "<bos>"
EOS = "<eos>"
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)


class Vocab:
    """A bijection between tokens and ids; specials first (``<pad>`` is id 0 by default).

    Tokens that are not in the vocabulary map to ``<unk>`` when it is present, and raise
    ``KeyError`` otherwise.
    """

    def __init__(
        self,
        tokens: Iterable[str],
        specials: Sequence[str] = SPECIALS,
        counts: dict[str, int] | None = None,
    ) -> None:
        self.itos: list[str] = []
        self.stoi: dict[str, int] = {}
        self.specials: tuple[str, ...] = tuple(specials)
        for token in (*specials, *tokens):
            if token not in self.stoi:
                self.stoi[token] = len(self.itos)
                self.itos.append(token)
        self.counts: dict[str, int] = dict(counts or {})

    @classmethod
    def build(
        cls,
        sequences: Iterable[Iterable[str]],
        min_count: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = SPECIALS,
    ) -> Vocab:
        """Vocabulary of the tokens in ``sequences``, most frequent first (ties by token).

        ``min_count`` drops rarer tokens; ``max_size`` bounds the total size, specials
        included.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < len(specials):
            raise ValueError(f"max_size must be >= {len(specials)} (the specials), got {max_size}")
        counter: Counter[str] = Counter()
        for sequence in sequences:
            counter.update(sequence)
        for special in specials:
            counter.pop(special, None)
        kept = [t for t, c in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
                if c >= min_count]
        if max_size is not None:
            kept = kept[: max_size - len(specials)]
        return cls(kept, specials, {t: counter[t] for t in kept})

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        if token in self.stoi:
            return self.stoi[token]
        if UNK in self.stoi:
            return self.stoi[UNK]
        raise KeyError(f"token {token!r} not in vocabulary and no {UNK} token")

    def _special_id(self, token: str) -> int:
        if token not in self.stoi:
            raise KeyError(f"vocabulary has no {token} token")
        return self.stoi[token]

    @property
    def pad_id(self) -> int:
        return self._special_id(PAD)

    @property
    def unk_id(self) -> int:
        return self._special_id(UNK)

    @property
    def bos_id(self) -> int:
        return self._special_id(BOS)

    @property
    def eos_id(self) -> int:
        return self._special_id(EOS)

    def encode(self, tokens: Iterable[str], add_bos: bool = False, add_eos: bool = False
               ) -> list[int]:
        """Ids of ``tokens``, optionally framed by ``<bos>`` / ``<eos>``."""
        ids = [self[t] for t in tokens]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], strip_specials: bool = False) -> list[str]:
        """Tokens of ``ids``; with ``strip_specials`` the special tokens are left out."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"ids: {i} is out of range for a vocabulary of {len(self)}")
            token = self.itos[i]
            if not (strip_specials and token in self.specials):
                out.append(token)
        return out

    def coverage(self, tokens: Iterable[str]) -> float:
        """Fraction of ``tokens`` (running text) that are in the vocabulary."""
        total = hits = 0
        for token in tokens:
            total += 1
            hits += token in self.stoi
        return hits / total if total else 0.0

    def save(self, path: str | Path) -> None:
        """Write one token per line (specials first), UTF-8."""
        Path(path).write_text("\n".join(self.itos) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path, specials: Sequence[str] = SPECIALS) -> Vocab:
        """Read a file written by :meth:`save`."""
        tokens = Path(path).read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        present = tuple(s for s in specials if s in tokens[: len(specials)])
        return cls(tokens, present)

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, specials={self.specials})"
