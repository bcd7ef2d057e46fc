"""Logical inference pairs in the style of Bowman et al. (2014), as used by METAGROSS 3.1.

Formulas are built from six variables ``a``-``f`` with ``not``, ``and``, ``or`` and written
in Bowman's bracketed form: ``( not a )``, ``( a ( and b ) )``. The label of a pair is one
of the seven basic relations of MacCartney's natural logic, computed by a solver that
enumerates the 64 truth assignments ("worlds") of the six variables and compares the sets
of worlds ``X`` and ``Y`` in which each formula holds:

=====  ====================  ==================================
``=``  equivalence           X = Y
``<``  forward entailment    X strictly inside Y
``>``  reverse entailment    Y strictly inside X
``^``  negation              X and Y disjoint, together everything
``|``  alternation           disjoint, not exhaustive
``v``  cover                 exhaustive, not disjoint
``#``  independence          none of the above
=====  ====================  ==================================

Formulas that hold in no world or in every world are redrawn (for them the seven relations
are not mutually exclusive). The operator count of a pair is the larger operator count of
its two formulas; training/validation pairs have 1..6 operators and test pairs 7..12,
as in the paper.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from ctrlrnn.data.source import SyntheticTask
from ctrlrnn.data.stats import DatasetStats, split_stats
from ctrlrnn.data.synthetic.common import check_sizes, unique_splits

VARIABLES: tuple[str, ...] = ("a", "b", "c", "d", "e", "f")
OPERATORS: tuple[str, ...] = ("not", "and", "or")
RELATIONS: tuple[str, ...] = ("=", "<", ">", "^", "|", "v", "#")
N_WORLDS = 2 ** len(VARIABLES)
ALL_WORLDS = (1 << N_WORLDS) - 1

Formula = Union[str, tuple]  # noqa: UP007 - a variable, ("not", f) or (op, f, g)


@dataclass(frozen=True)
class LogicPair:
    """Two formulas (token tuples), their relation and the pair's operator count."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    relation: str
    operators: int


def _variable_worlds(index: int) -> int:
    return sum(1 << w for w in range(N_WORLDS) if (w >> index) & 1)


_VAR_WORLDS = {v: _variable_worlds(i) for i, v in enumerate(VARIABLES)}


def worlds(formula: Formula) -> int:
    """Bit set of the worlds (0..63) in which ``formula`` is true."""
    if isinstance(formula, str):
        return _VAR_WORLDS[formula]
    if formula[0] == "not":
        return ALL_WORLDS & ~worlds(formula[1])
    left, right = worlds(formula[1]), worlds(formula[2])
    return left & right if formula[0] == "and" else left | right


def relation(x: int, y: int) -> str:
    """The relation between two world sets (bit masks over the 64 worlds)."""
    if x == y:
        return "="
    disjoint = x & y == 0
    exhaustive = x | y == ALL_WORLDS
    if disjoint and exhaustive:
        return "^"
    if x & ~y == 0:
        return "<"
    if y & ~x == 0:
        return ">"
    if disjoint:
        return "|"
    if exhaustive:
        return "v"
    return "#"


def count_operators(formula: Formula) -> int:
    if isinstance(formula, str):
        return 0
    return 1 + sum(count_operators(f) for f in formula[1:])


def to_tokens(formula: Formula) -> list[str]:
    """Bowman's bracketed notation."""
    if isinstance(formula, str):
        return [formula]
    if formula[0] == "not":
        return ["(", "not", *to_tokens(formula[1]), ")"]
    return ["(", *to_tokens(formula[1]), "(", formula[0], *to_tokens(formula[2]), ")", ")"]


def parse_tokens(tokens: Sequence[str]) -> Formula:
    """Inverse of :func:`to_tokens`; raises ``ValueError`` naming ``tokens`` when malformed."""
    pos = 0

    def expect(token: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] != token:
            raise ValueError(f"tokens: expected {token!r} at position {pos} in {' '.join(tokens)}")
        pos += 1

    def parse() -> Formula:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"tokens: unexpected end of {' '.join(tokens)}")
        token = tokens[pos]
        if token in VARIABLES:
            pos += 1
            return token
        expect("(")
        if pos < len(tokens) and tokens[pos] == "not":
            pos += 1
            inner = parse()
            expect(")")
            return ("not", inner)
        left = parse()
        expect("(")
        op = tokens[pos] if pos < len(tokens) else ""
        if op not in ("and", "or"):
            raise ValueError(f"tokens: expected 'and' or 'or' at position {pos}")
        pos += 1
        right = parse()
        expect(")")
        expect(")")
        return (op, left, right)

    formula = parse()
    if pos != len(tokens):
        raise ValueError(f"tokens: trailing tokens after position {pos}")
    return formula


def random_formula(rng: random.Random, n_operators: int) -> Formula:
    """A random formula with exactly ``n_operators`` operators."""
    if n_operators == 0:
        return rng.choice(VARIABLES)
    if rng.random() < 1 / 3:
        return ("not", random_formula(rng, n_operators - 1))
    left = rng.randint(0, n_operators - 1)
    op = rng.choice(("and", "or"))
    return (op, random_formula(rng, left), random_formula(rng, n_operators - 1 - left))


def _non_degenerate(rng: random.Random, n_operators: int) -> tuple[Formula, int]:
    while True:
        formula = random_formula(rng, n_operators)
        w = worlds(formula)
        if 0 < w < ALL_WORLDS:
            return formula, w


def random_pair(rng: random.Random, n_operators: int) -> LogicPair:
    """A pair whose larger formula has exactly ``n_operators`` operators."""
    if n_operators < 0:
        raise ValueError(f"n_operators must be >= 0, got {n_operators}")
    big, w_big = _non_degenerate(rng, n_operators)
    small, w_small = _non_degenerate(rng, rng.randint(0, n_operators))
    if rng.random() < 0.5:
        big, w_big, small, w_small = small, w_small, big, w_big
    return LogicPair(tuple(to_tokens(big)), tuple(to_tokens(small)),
                     relation(w_big, w_small), n_operators)


def logic_splits(
    sizes: dict[str, int] | None = None,
    test_per_count: int = 500,
    train_operators: tuple[int, int] = (1, 6),
    test_operators: tuple[int, int] = (7, 12),
    seed: int = 0,
) -> dict[str, list[LogicPair]]:
    """``train``/``valid`` pairs with operator counts in ``train_operators`` (uniform) and
    ``test`` with ``test_per_count`` pairs for each count in ``test_operators``."""
    sizes = sizes or {"train": 20_000, "valid": 2_000}
    check_sizes(sizes)
    lo, hi = train_operators
    tlo, thi = test_operators
    if not 0 <= lo <= hi:
        raise ValueError(f"train_operators must be 0 <= lo <= hi, got {train_operators}")
    if not hi < tlo <= thi:
        raise ValueError(f"test_operators must start above train_operators, got {test_operators}")
    if test_per_count < 0:
        raise ValueError(f"test_per_count must be >= 0, got {test_per_count}")

    def key(p: LogicPair) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (p.left, p.right)

    out = unique_splits(lambda r: random_pair(r, r.randint(lo, hi)), sizes, seed, key=key)
    test: list[LogicPair] = []
    for count in range(tlo, thi + 1):
        test += unique_splits(lambda r, c=count: random_pair(r, c), {"test": test_per_count},
                              seed * 1000 + count, key=key)["test"]
    out["test"] = test
    return out


class LogicTask(SyntheticTask):
    name = "logic"
    summary = "Bowman et al. 2014 logical inference, 6 vars, 7 relations; train <=6 ops, test 7-12"
    size = "generated: 20k/2k/6x500"

    def default_stats(self) -> DatasetStats:
        splits = logic_splits()
        vocab = {t for ps in splits.values() for p in ps for t in (*p.left, *p.right)}
        counts: dict[str, int] = {r: 0 for r in RELATIONS}
        for p in splits["train"]:
            counts[p.relation] += 1
        return DatasetStats(
            self.name,
            [split_stats(n, [p.left + p.right for p in ps]) for n, ps in splits.items()],
            len(vocab),
            unit="tokens (both formulas)",
            extra={"train relations": " ".join(f"{r}:{c}" for r, c in counts.items())},
        )
