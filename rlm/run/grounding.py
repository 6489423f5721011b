"""Grounding: is each value of an answer held by the evidence the synthesis was shown?

An answer is grounded when every value it states is found in an entry the
synthesis prompt showed (a finding, a memory, an observation), as shown there:
a figure cut from a finding before the prompt does not ground anything.
Numbers are looked up by value (`1,873`, `1873` and `1873.0` are one value; an
answer of `12.35` is held by `12.3456`, a rounding of it); addresses, times,
dates, paths, names and each item of a list by their normalised text (case and
runs of white space do not count). A value the question itself states is not
required to be found (`how many 404s`: a `404` in the answer is the question's).

The same lookup picks the finding that holds the draft's values, so the synthesis
is shown first the evidence that settled the question (rlm.run.synthesis).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

# A plain number: 1873, 1,873, 438281483, -3, 12.5 (not part of an address, a time or a word).
# A plural ("404s") is the number.
_END = r"(?!(?!s\b)[\w:]|\.\d)"
_NUMBER = re.compile(rf"(?<![\w.:/-])-?(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?{_END}")
# Anything with a digit that is not a plain number: 10.0.0.7, 14:02:33, 2015-05-17, v1.2.3, /a/b2.
_TOKEN = re.compile(r"[^\s,;()\[\]{}\"'`]+")
# What a value is not: the words that hold a sentence together.
_STOP = frozenset(
    "a an and are as at be by for from has have in is it its of on or than that the then there these "
    "this those to was were which with".split()
)
_NO_VALUE = frozenset({"yes", "no", "true", "false", "none", "unknown"})
_SHORT_NAME_WORDS = 4  # an item of at most this many words is a name, looked up whole
_LIST_ITEM_WORDS = 2  # words of a piece between commas that make a line a list ("Costa Rica, Peru")


@dataclass(frozen=True)
class Grounding:
    """What the evidence shown holds of an answer."""

    grounded: bool | None  # None: the answer states no value to look up (yes, no)
    supporting: list[str] = field(default_factory=list)  # ids of the entries holding its values, most first
    missing: list[str] = field(default_factory=list)  # its values that no entry shown holds

    def to_dict(self) -> dict[str, Any]:
        return {"grounded": self.grounded, "supporting": self.supporting, "missing": self.missing}


def normalised(text: str) -> str:
    """Text as values are compared: case folded, white space runs as one space, quotes dropped."""
    return " ".join(text.casefold().replace("`", " ").replace('"', " ").split())


def _decimal(text: str) -> Decimal | None:
    try:
        return abs(Decimal(text.replace(",", "")))
    except InvalidOperation:
        return None


def numbers_in(text: str) -> set[Decimal]:
    """The plain numbers a text states, by value."""
    return {d for n in _NUMBER.findall(text) if (d := _decimal(n)) is not None}


def _places(number: Decimal) -> int:
    exponent = number.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _holds_number(value: Decimal, held: set[Decimal]) -> bool:
    """Whether `held` has `value`, or a more precise figure it is a rounding of (12.35 of 12.3456,
    12 of 12.4; an integer is held only by itself)."""
    if value in held:
        return True
    places = _places(value)
    quantum = Decimal(1).scaleb(-places)
    for h in held:
        if _places(h) > places:
            try:
                if h.quantize(quantum, rounding=ROUND_HALF_UP) == value:
                    return True
            except InvalidOperation:  # too many digits to round
                continue
    return False


@dataclass(frozen=True)
class _Value:
    text: str  # as the answer states it
    number: Decimal | None  # looked up by value when set, else by normalised text
    # A value made of several (a sentence, "root (42 attempts)"): held when it is held whole or
    # when each of these is.
    parts: tuple[_Value, ...] = ()


def _single(text: str) -> _Value | None:
    plain = text.strip().strip(".:;!?()").strip()
    key = normalised(plain)
    if not key or key in _NO_VALUE or key in _STOP:
        return None
    return _Value(plain, _decimal(plain) if _NUMBER.fullmatch(plain) else None)


def _parts(item: str) -> tuple[_Value, ...]:
    """An item's figures and its name-like tokens (a digit, a capital inside or after its first
    letter, a path, an address, an identifier); the words around them are no value."""
    found = [v for n in _NUMBER.findall(item) if (v := _single(n)) is not None]
    for token in _TOKEN.findall(_NUMBER.sub(" ", item)):
        word = token.strip(".:;!?()")
        if re.search(r"\d|[/_@]|\w\.\w|[a-z][A-Z]", word):
            if (v := _single(word)) is not None:
                found.append(v)
    return tuple(found)


_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _items(line: str) -> list[str]:
    """A line's items: the line, or the pieces of a list written on it (`GET, HEAD and POST`:
    each piece a word or two, a comma and a space between, or `AQ,TW`; `1,873` is one number)."""
    item = line.strip().lstrip("-*\u2022").strip()
    # `AQ,TW`: a list with no space after its commas, unless a number's digit groups.
    if "," in item and " " not in item and not _GROUPED.fullmatch(item):
        pieces = item.split(",")
        return pieces if all(pieces) else [item]
    pieces = [p.strip() for p in item.split(", ")]
    if pieces and pieces[-1].startswith("and "):
        pieces[-1] = pieces[-1][len("and ") :]
    if len(pieces) < 2 or not all(0 < len(p.split()) <= _LIST_ITEM_WORDS for p in pieces):
        return [item]
    return pieces


def values_of(answer: str) -> list[_Value]:
    """The values an answer states: each item of a list (one a line, or a few words between
    commas) once; an item of a few words is looked up whole, or else by its parts."""
    values: dict[str, _Value] = {}
    for item in (i for line in answer.splitlines() for i in _items(line)):
        single = _single(item)
        if single is None:
            continue
        if single.number is None and (len(item.split()) > 1 or not _TOKEN.fullmatch(item)):
            single = _Value(single.text, None, _parts(item))
            if len(item.split()) > _SHORT_NAME_WORDS and not single.parts:
                continue  # a sentence naming no value: nothing in it to look up
        values.setdefault(normalised(single.text), single)
    return list(values.values())


_Holds = tuple[set[Decimal], str]  # a text's numbers, and the text normalised


def _held(value: _Value, entry: _Holds, asked: _Holds | None = None) -> bool:
    """Whether `entry` holds `value`: whole, or each of its parts (a part the question states,
    `asked`, needs no entry)."""
    numbers, text = entry
    if value.number is not None:
        return _holds_number(value.number, numbers)
    key = normalised(value.text)
    if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", text) is not None:
        return True
    parts = [p for p in value.parts if asked is None or not _held(p, asked)]
    return bool(parts) and all(_held(p, entry) for p in parts)


# The line a query's echo ends with when it returned one row (rlm.sandbox.worker.sql_result):
# its 1 is the shape of every single-value result, never evidence of an answer of 1 (a model
# answered 1 where its count said 0, and the footer held it). Anywhere in a text, not only on a
# line of its own: a memory is shown on one line, and its footer had grounded an answer of 1.
# The LIMIT note after it holds parentheses of its own (`count(*)`).
_ONE_ROW = re.compile(r"\(1 row(?:;(?:[^()\n]|\([^()\n]*\))*)?\)")


def _holds(text: str) -> _Holds:
    text = _ONE_ROW.sub(" ", text)
    return numbers_in(text), normalised(text)


def ground(answer: str, shown: dict[str, str], question: str = "") -> Grounding:
    """Whether every value of `answer` is held by an entry of `shown` (id -> text as shown).

    A value the question states needs no entry, as long as some other value of the answer has
    one: an answer held by nothing but the question is not grounded.
    """
    values = values_of(answer)
    if not values:
        return Grounding(None)
    entries = {ref: _holds(text) for ref, text in shown.items()}
    question_holds = _holds(question)
    held_by: dict[str, int] = {}
    missing: list[str] = []
    asked: list[str] = []
    for value in values:
        holders = [ref for ref, entry in entries.items() if _held(value, entry, question_holds)]
        if not holders:
            (asked if _held(value, question_holds) else missing).append(value.text)
        for ref in holders:
            held_by[ref] = held_by.get(ref, 0) + 1
    if not held_by:
        missing += asked
    order = list(shown)
    supporting = sorted(held_by, key=lambda ref: (-held_by[ref], order.index(ref)))
    return Grounding(not missing, supporting, missing)


def values_counter(draft: str | None) -> Callable[[str], int]:
    """How many of the draft's values a text holds, as a function (the draft is read once, then
    every line of a long output is asked)."""
    values = values_of(draft) if draft else []

    def count(text: str) -> int:
        if not values:
            return 0
        entry = _holds(text)  # the text read once, whatever the number of values
        return sum(_held(v, entry) for v in values)

    return count
