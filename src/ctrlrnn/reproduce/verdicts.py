"""The one rule every claim of the results pages is judged by (stated on the summary page).

For a claim "A beats B" with the seed results of both arms (means ``mA``, ``mB``, standard
deviations ``sA``, ``sB`` over seeds, the gap ``mA - mB`` counted positive in the claimed
direction):

1. **not run** — an arm has no result;
2. **no signal** — both means are on the useless side of the experiment's usefulness level
   (chance plus 20% of it for a classification, BLEU 1 for translation): neither model
   learned enough for an ordering to mean anything;
3. **baseline below paper level — no verdict** — where our setting is the paper's (same task
   and size), B is the paper's baseline and reaches less than 90% of the paper's number for it
   (for a lower-is-better metric: more than paper / 0.9): the baseline was not trained
   properly, so beating it says nothing;
4. **reproduced** — the gap is larger than the combined spread ``sA + sB``;
5. **same direction, within spread** — the gap is positive but not larger than the spread;
6. **opposite** — the gap is negative and larger than the spread;
7. **opposite, within spread** — the gap is negative (or zero) but not larger than the spread.

Where either arm has a single seed, its spread is unknown: the verdict says "one seed" (the
direction of the gap alone) instead of judging it against a spread.

No verdict is stronger than **early** on runs that have not converged: where a seed of either
arm stopped at its step or epoch cap, diverged, or did not record how it stopped (rather than by
its patience on the validation split), rules 4-7 give way to *early: same direction* or *early:
opposite*, the direction of the gap alone. A model still improving at its cap can overtake, so
neither an ordering nor its spread is settled.
Speed claims use the same words, judged per measured cell (:func:`speed_verdict`).
"""

from __future__ import annotations

import math
import statistics

NOT_RUN = "not run"
NO_SIGNAL = "no signal"
BASELINE_LOW = "baseline below paper level — no verdict"
REPRODUCED = "reproduced"
SAME_WITHIN = "same direction, within spread"
OPPOSITE = "opposite"
OPPOSITE_WITHIN = "opposite, within spread"
SAME_ONE_SEED = "same direction, one seed"
OPPOSITE_ONE_SEED = "opposite, one seed"
EARLY_SAME = "early: same direction"
EARLY_OPPOSITE = "early: opposite"
#: how a run must have stopped for its verdicts to be more than *early*
CONVERGED = "patience"

#: how far beyond the chance level a mean must be to count as learned, relative to it
CHANCE_MARGIN = 0.2
#: the fraction of the paper's number the baseline must reach for a verdict
PAPER_LEVEL = 0.9
#: BLEU below which a translation model is unusable
USEFUL_BLEU = 1.0
#: how much slower than its baseline a layer may be and still count as "as fast" (timing noise)
SPEED_TOLERANCE = 0.05

RULE = [
    "Every claim \"A beats B\" is judged by one rule, from the test results of both arms over "
    "seeds (the gap counted positive in the claimed direction; the spread is the sum of the "
    "two standard deviations):",
    "",
    f"- **{NOT_RUN}**: an arm has no result;",
    f"- **{NO_SIGNAL}**: both arms are on the useless side of the experiment's usefulness "
    f"level (chance plus {CHANCE_MARGIN:.0%} of it for a classification, BLEU "
    f"{USEFUL_BLEU:g} for translation);",
    f"- **{BASELINE_LOW}**: where our setting is the paper's, B is the paper's baseline and "
    f"reaches less than {PAPER_LEVEL:.0%} of the paper's number for it;",
    f"- **{REPRODUCED}**: the gap is larger than the spread;",
    f"- **{SAME_WITHIN}**: the gap is positive but within the spread;",
    f"- **{OPPOSITE}**: the gap is negative and larger than the spread;",
    f"- **{OPPOSITE_WITHIN}**: the gap is negative (or zero) but within the spread;",
    "- where either arm has a single seed, its spread is unknown, and the verdict says *one "
    "seed* (the direction of the gap alone);",
    f"- **{EARLY_SAME}** / **{EARLY_OPPOSITE}**: a seed of either arm has not converged. It "
    "stopped at its step or epoch cap, diverged, or did not record how it stopped. Only the "
    "direction of the gap is said, whatever the spread: no verdict on such runs is stronger "
    "than *early*.",
    "",
    "Speed claims use the same words, per measured cell: *reproduced* when the claim holds in "
    f"every cell (\"as fast as\": within {SPEED_TOLERANCE:.0%}), *opposite* when it fails in "
    "every cell, *mixed* otherwise, with the count.",
]


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def useless(mean: float, level: float, higher_is_better: bool) -> bool:
    """Whether ``mean`` is on the useless side of ``level``."""
    return mean <= level if higher_is_better else mean >= level


def useful_level(chance: float | None, metric: str, useful: float | None = None
                 ) -> float | None:
    """The usefulness level of a metric in its stored units: ``useful`` if given, else chance
    plus :data:`CHANCE_MARGIN` of it, else BLEU :data:`USEFUL_BLEU` for ``bleu``."""
    if useful is not None:
        return useful
    if chance is not None:
        return chance * (1.0 + CHANCE_MARGIN)
    if metric == "bleu":
        return USEFUL_BLEU
    return None


def paper_level(mean: float, paper: float, higher_is_better: bool) -> float:
    """Our mean as a fraction of the paper's number (inverted for lower-is-better metrics, so
    1.0 is the paper's level and less is worse)."""
    if higher_is_better:
        return mean / paper if paper else math.nan
    return paper / mean if mean else math.nan


def all_converged(stop_reasons: list[str | None]) -> bool:
    """Whether runs that stopped for ``stop_reasons`` (their summaries' ``stop_reason``) all
    converged: every one stopped by its patience (:data:`CONVERGED`)."""
    return bool(stop_reasons) and all(r == CONVERGED for r in stop_reasons)


def verdict(better: list[float], worse: list[float], higher_is_better: bool, *,
            useful: float | None = None, baseline_paper: float | None = None,
            converged: bool = True) -> str:
    """The verdict of "``better`` beats ``worse``" (seed values, in the same units as
    ``useful`` and ``baseline_paper``); ``baseline_paper``: the paper's number for the worse
    arm where our setting is the paper's (``None``: no baseline check); ``converged``: whether
    every run of both arms converged (else the verdict is at most *early*)."""
    if not better or not worse:
        return NOT_RUN
    mb, sb = mean_std(better)
    mw, sw = mean_std(worse)
    if useful is not None and useless(mb, useful, higher_is_better) and useless(
            mw, useful, higher_is_better):
        return NO_SIGNAL
    if baseline_paper is not None and paper_level(mw, baseline_paper,
                                                  higher_is_better) < PAPER_LEVEL:
        return BASELINE_LOW
    gap = (mb - mw) if higher_is_better else (mw - mb)
    if not converged:
        return EARLY_SAME if gap > 0 else EARLY_OPPOSITE
    if min(len(better), len(worse)) < 2:
        return SAME_ONE_SEED if gap > 0 else OPPOSITE_ONE_SEED
    spread = sb + sw
    if gap > spread:
        return REPRODUCED
    if gap > 0:
        return SAME_WITHIN
    if -gap > spread:
        return OPPOSITE
    return OPPOSITE_WITHIN


def speed_verdict(holds: list[bool], what: str = "cells") -> str:
    """The verdict of a speed claim measured in several cells, or for several arms
    (``holds``: per cell or arm; ``what``: which, for the *mixed* count)."""
    if not holds:
        return NOT_RUN
    if all(holds):
        return REPRODUCED
    if not any(holds):
        return OPPOSITE
    return f"mixed ({sum(holds)} of {len(holds)} {what})"
