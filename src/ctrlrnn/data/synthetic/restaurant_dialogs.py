"""Restaurant-booking dialogs built like the bAbI dialog tasks (Bordes and Weston, 2017).

Two kinds, both generated from a seed:

* ``api-calls`` — tasks 1-2: the bot gathers four slots (cuisine, location, party size, price
  range) and issues ``api_call``; with probability ``update_prob`` the user then changes one
  or two slots and the bot issues the updated call.
* ``full`` — the form of task 5, tasks 1-4 in one dialog: after the (last) API call its
  results follow as knowledge-base lines (task 3's input), the bot proposes the matching
  restaurants from the highest rated down until the user accepts one (task 3), then gives the
  phone number or address asked for (task 4). The knowledge base is fixed (seeded apart from
  the dialogs), so a restaurant's name, rating and details are the same in every split; a
  call returns the restaurants with a free table, a random subset of those that match.

Task 3's proposal is decided by ratings printed many utterances earlier, among restaurants
already rejected, and task 4's answer copies a value from one knowledge-base line: the
long-range memory that the CARNN paper (5.1, Figure 5) credits CARNN with. Because the free
restaurants differ from dialog to dialog, the proposals cannot be learnt from the API call
alone: the model must read the results. bAbI prints seven
attributes per restaurant; these dialogs print the three that a response can depend on (the
other four repeat the API call's values), which keeps the histories short enough to train on
CPUs.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass

from ctrlrnn.data.loaders.babi_dialog import Dialog
from ctrlrnn.data.source import SyntheticTask
from ctrlrnn.data.stats import DatasetStats, split_stats
from ctrlrnn.data.synthetic.common import unique_splits

CUISINES = ("british", "french", "indian", "italian", "spanish")
LOCATIONS = ("bombay", "london", "madrid", "paris", "rome")
PARTY_SIZES = ("two", "four", "six", "eight")
PRICES = ("cheap", "moderate", "expensive")
SLOTS = ("cuisine", "location", "party", "price")
VALUES = {"cuisine": CUISINES, "location": LOCATIONS, "party": PARTY_SIZES, "price": PRICES}
ASK = {
    "cuisine": "any preference on a type of cuisine",
    "location": "where should it be",
    "party": "how many people would be in your party",
    "price": "which price range are looking for",
}
MENTION = {
    "cuisine": ("with {} food", "with {} cuisine"),
    "location": ("in {}",),
    "party": ("for {} people", "for {}"),
    "price": ("in a {} price range",),
}
ANSWER = {
    "cuisine": ("{}", "{} food please"),
    "location": ("{}", "{} please"),
    "party": ("{}", "we will be {}"),
    "price": ("{}", "i love {} food"),
}
UPDATE = {
    "cuisine": "actually i would prefer {} food",
    "location": "instead could it be in {}",
    "party": "actually i would prefer for {} people",
    "price": "actually i would prefer a {} price range",
}
GREETINGS = ("hello", "hi", "good morning")
SILENCE = "<silence>"
LOOKING = "ok let me look into some options for you"
ANYTHING_ELSE = "sure is there anything else to update"
#: how bAbI words an API call (tasks 1-2), a proposal (task 3) and the information asked
#: for (task 4)
API_CALL_PREFIX = "api_call"
PROPOSE_PREFIX = "what do you think of this option:"
INFO_PREFIX = "here it is"
PROPOSE = PROPOSE_PREFIX + " {}"
REJECT = ("no this does not work for me", "do you have something else", "no i don't like that")
ACCEPT = ("let's do it", "that looks great")
RESERVE = "great let me do the reservation"
INFO_ASK = {
    "phone": ("may i have the phone number of the restaurant", "what is the phone number"),
    "address": ("can you provide the address", "do you have its address"),
}
INFO_GIVE = INFO_PREFIX + " {}"
DIALOG_KINDS = ("api-calls", "full")

#: the knowledge base's seed: one fixed table of restaurants for every split and task seed
KB_SEED = 2017
#: how many restaurants the knowledge base holds for one (cuisine, location, price)
KB_RESTAURANTS = (4, 8)
#: how many of them a call returns (those with a free table)
FREE_RESTAURANTS = (2, 4)


@dataclass(frozen=True)
class Restaurant:
    """One knowledge-base entry; its phone and address are tokens of their own."""

    name: str
    rating: int

    @property
    def phone(self) -> str:
        return f"{self.name}_phone"

    @property
    def address(self) -> str:
        return f"{self.name}_address"

    def facts(self) -> list[str]:
        """The knowledge-base lines printed after the API call, as bAbI writes them."""
        return [f"{self.name} R_phone {self.phone}", f"{self.name} R_address {self.address}",
                f"{self.name} R_rating {self.rating}"]


@functools.cache
def knowledge_base() -> dict[tuple[str, str, str], tuple[Restaurant, ...]]:
    """Every (cuisine, location, price)'s restaurants, highest rated first (ratings 1-8,
    distinct within one key, so the order of proposals is never tied)."""
    rng = random.Random(KB_SEED)
    out = {}
    for cuisine, location, price in itertools.product(CUISINES, LOCATIONS, PRICES):
        ratings = sorted(rng.sample(range(1, 9), rng.randint(*KB_RESTAURANTS)), reverse=True)
        out[(cuisine, location, price)] = tuple(
            Restaurant(f"resto_{location}_{price}_{cuisine}_{r}stars", r) for r in ratings)
    return out


def _api_call_turns(rng: random.Random, update_prob: float
                    ) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Tasks 1-2: the turns up to the last API call, and the goal that call books."""
    goal = {s: rng.choice(VALUES[s]) for s in SLOTS}
    stated = [s for s in SLOTS if rng.random() < 0.5]
    rng.shuffle(stated)
    parts = [rng.choice(MENTION[s]).format(goal[s]) for s in stated]
    request = " ".join([rng.choice(("can you book a table", "may i have a table", "i'd like to "
                                    "book a table")), *parts])
    turns: list[tuple[str, str]] = [(rng.choice(GREETINGS), "hello what can i help you with "
                                     "today"), (request, "i'm on it")]
    user = SILENCE
    for slot in (s for s in SLOTS if s not in stated):
        turns.append((user, ASK[slot]))
        user = rng.choice(ANSWER[slot]).format(goal[slot])
    turns.append((user, LOOKING))

    def call() -> str:
        return " ".join([API_CALL_PREFIX, *(goal[s] for s in SLOTS)])

    turns.append((SILENCE, call()))
    if rng.random() < update_prob:
        for slot in rng.sample(SLOTS, rng.choice((1, 2))):
            goal[slot] = rng.choice([v for v in VALUES[slot] if v != goal[slot]])
            turns.append((UPDATE[slot].format(goal[slot]), ANYTHING_ELSE))
        turns.append(("no", LOOKING))
        turns.append((SILENCE, call()))
    return turns, goal


def make_dialog(rng: random.Random, update_prob: float = 0.5, kind: str = "api-calls"
                ) -> Dialog:
    """One dialog of ``kind`` (see the module docstring); it ends with thanks.

    Task 1: a greeting; a request that states a random subset of the four slots in random
    order; the bot asks for each missing slot in a fixed order (the user answering,
    ``<silence>`` before the first question); then ``api_call CUISINE LOCATION PARTY PRICE``.
    Task 2, with probability ``update_prob``: the user changes one or two slots, the bot asks
    whether anything else should change, then issues the updated call. ``full`` goes on with
    tasks 3-4: the call's results (two to four free restaurants of the matching ones, in a
    random order), proposals from the highest rated until the user accepts one (uniformly the
    first to the last), and zero to two requests for its phone number or address.
    """
    if kind not in DIALOG_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(DIALOG_KINDS)}, got {kind!r}")
    turns, goal = _api_call_turns(rng, update_prob)
    if kind == "api-calls":
        return Dialog(turns=[*turns, ("thank you", "you're welcome")])
    matching = knowledge_base()[(goal["cuisine"], goal["location"], goal["price"])]
    shown = rng.sample(matching, rng.randint(*FREE_RESTAURANTS))
    found = sorted(shown, key=lambda r: -r.rating)
    knowledge = [fact for r in shown for fact in r.facts()]
    knowledge_at = len(turns)
    accepted = rng.randrange(len(found))
    user = SILENCE
    for restaurant in found[:accepted]:
        turns.append((user, PROPOSE.format(restaurant.name)))
        user = rng.choice(REJECT)
    chosen = found[accepted]
    turns.append((user, PROPOSE.format(chosen.name)))
    turns.append((rng.choice(ACCEPT), RESERVE))
    for info in rng.sample(("phone", "address"), rng.randint(0, 2)):
        turns.append((rng.choice(INFO_ASK[info]), INFO_GIVE.format(getattr(chosen, info))))
    turns.append(("thank you", "you're welcome"))
    return Dialog(turns=turns, knowledge=knowledge,
                  knowledge_turns=[knowledge_at] * len(knowledge))


def dialog_splits(sizes: dict[str, int], seed: int, update_prob: float = 0.5,
                  kind: str = "api-calls") -> dict[str, list[Dialog]]:
    """Distinct synthetic dialogs (by their turns and knowledge) dealt into disjoint splits."""
    return unique_splits(lambda rng: make_dialog(rng, update_prob, kind), sizes, seed,
                         key=lambda d: (tuple(d.turns), tuple(d.knowledge)))


class RestaurantDialogsTask(SyntheticTask):
    """The generated dialogs in ``ctrlrnn data list``: task 5's form, as ``carnn-dialog``
    trains on them in its full mode (``task.dialogs=full``)."""

    name = "babi-like"
    summary = "restaurant dialogs in bAbI task 5's form (CARNN 5.1)"
    size = "generated: 1k/100/100"

    def default_stats(self) -> DatasetStats:
        splits = dialog_splits({"train": 1000, "valid": 100, "test": 100}, 0, kind="full")
        words = {w for ds in splits.values() for d in ds for turn in d.turns
                 for w in " ".join(turn).split()}
        words |= {w for ds in splits.values() for d in ds for line in d.knowledge
                  for w in line.split()}
        responses = {bot for ds in splits.values() for d in ds for _, bot in d.turns}
        return DatasetStats(
            self.name, [split_stats(n, [d.turns for d in ds]) for n, ds in splits.items()],
            len(words), unit="turns",
            extra={"candidate responses": str(len(responses)),
                   "knowledge base": f"{sum(map(len, knowledge_base().values()))} restaurants"})
