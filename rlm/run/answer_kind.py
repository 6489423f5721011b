"""The kind of value a question asks for (an IP address, a name, a number, a time of day), and
whether an answer is one.

A small model answers what it last saw: the host column's top value for "from which IP
address", the count of countries for "give the names", a date for "which second (HH:MM:SS)".
Such an answer is wrong on its face, yet it used to be said as confidently as a right one. What
is asked is read from the answer-form words questions use everywhere ("how many", "the integer
only", "which IP", "just the IP address", a stated `HH:MM:SS`), never from a question's subject;
where the words say nothing, or ask for two kinds, nothing is asked. A typed node refuses a
final that does not fit once (rlm.run.node), and a run's answer that still does not is in doubt
(rlm.run.doubts): low confidence, exit 1 under --strict.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlm.run.answer_form import Formed, asked_parts, in_asked_form

__all__ = [
    "IP",
    "NAME",
    "NUMBER",
    "TIME_OF_DAY",
    "Asked",
    "as_asked",
    "asked_kind",
    "columns_of_kind",
    "echoed",
    "misfit",
    "misfit_note",
    "unasked_time",
    "wrong_kinds",
]

IP, NAME, NUMBER, TIME_OF_DAY = "an IP address", "a name", "a number", "a time of day"

# Words that ask for a number: a count, an amount, a rounding. Each is an instruction about the
# answer, not a subject ("the number of requests" asks one; "a request number" is a column name).
_NUMBER_WORDS = re.compile(
    r"\bhow (?:many|much|long)\b|\b(?:an? |the )?(?:integer|whole number)\b|\bnumber only\b"
    r"|\b(?:just|only) (?:the |a )?(?:count|number|total)\b|\bcount only\b|\bround(?:ed)? to\b"
    r"|\bdecimal places?\b|\bas a number\b|\bwhat (?:is|was) the (?:total|sum|mean|average|median|"
    r"(?:largest|smallest|highest|lowest|maximum|minimum)(?: \w+)?) (?:of|in|for|amount|value|number|N)\b",
    re.IGNORECASE,
)
# Words that ask for an IP address: which/what (client, remote, source ...) IP, the IP (address) only.
_IP = r"IP(?:v[46])?(?: address(?:es)?|s)?"
_IP_WORDS = re.compile(
    rf"\b(?:which|what)(?: \w+){{0,2}} {_IP}\b|\b(?:give|reply with|answer with|respond with|return|list|name)"
    rf"(?: \w+){{0,3}} {_IP}\b|\b{_IP} (?:only|alone|exactly)\b",
    re.IGNORECASE,
)
# Words that ask for names: give / list / answer with (the program ...) name(s), the name only,
# a name written as one word with what it names (username, hostname, filename).
_NAME_WORDS = re.compile(
    r"\b(?:give|list|reply with|answer with|respond with|return)(?: \w+){0,3} (?:user|host|file)?names?\b"
    r"|\b(?:user|host|file)?names? (?:only|exactly|alone)\b",
    re.IGNORECASE,
)
_LETTER = re.compile(r"[^\W\d_]")
_DATE_BEFORE = re.compile(r"(?:\b[A-Za-z]|\bMon|\bMMM|\bMmm)[ ./-]?$")
# A number in digits, or in the words a count is said in ("none", "two").
_DIGIT = re.compile(
    r"\d|\b(?:none|zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b", re.IGNORECASE
)
_TOKENS = re.compile(r"[\s,;()'\"<>=]+")  # what an address in a sentence is written between
_CLOCK = re.compile(r"(?<!\d)\d{1,2}:\d{2}(?!\d)")  # a time of day: hours and minutes at least


@dataclass(frozen=True)
class Asked:
    kind: str  # IP, NAME, NUMBER or TIME_OF_DAY
    words: str  # the question's words that ask for it


def asked_kind(question: str) -> Asked | None:
    """The one kind of value the question's answer-form words ask for; None for none or several.
    A stated time form with an hour and no date (`HH:MM:SS`, no date letters just before it) asks for
    a time of day."""
    found: dict[str, str] = {}
    if m := _NUMBER_WORDS.search(question):
        found[NUMBER] = m.group(0)
    if m := _IP_WORDS.search(question):
        found[IP] = m.group(0)
    if m := _NAME_WORDS.search(question):
        found[NAME] = m.group(0)
    parts = asked_parts(question)
    if parts is not None and "hour" in parts[1] and not parts[1] & {"year", "month", "day"}:
        # A date's letters right before the form are part of it ("Mon D HH:MM:SS").
        if not _DATE_BEFORE.search(question[: question.find(parts[0])]):
            found[TIME_OF_DAY] = parts[0]
    if len(found) != 1:
        return None
    kind, words = found.popitem()
    return Asked(kind, words)


def _items(answer: str) -> list[str]:
    """The answer's values: one per line, or separated by commas when on one line."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if len(lines) == 1 and "," in lines[0]:
        return [part.strip() for part in lines[0].split(",") if part.strip()]
    return lines


def _is_ip(token: str) -> bool:
    host = token.strip("[].")  # brackets, or a sentence's full stop
    if host.count(":") == 1 and "." in host:  # 10.0.0.1:8080: an address with its port
        host = host.split(":", 1)[0]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _holds(kind: str, item: str) -> bool:
    """Whether the item holds a value of the kind anywhere: `35 requests` holds a number, an IP
    address alone none (its digits are a name: the first step of "find the address, then count
    its requests" answered as if it were the last)."""
    if kind == NUMBER:
        return _DIGIT.search(" ".join(t for t in _TOKENS.split(item) if not _is_ip(t))) is not None
    if kind == IP:
        return any(_is_ip(token) for token in _TOKENS.split(item))
    return _CLOCK.search(item) is not None


def misfit(asked: Asked, answer: str | None) -> str | None:
    """The first item of the answer (a line, or a comma's piece of one line) that holds no value
    of the asked kind at all; None when every item holds one (its wording is the synthesis's
    business), or without an answer."""
    if not answer or not answer.strip():
        return None
    if asked.kind == NAME:  # a name may be digits ("0", a user); names with no letter at all are a count
        return None if _LETTER.search(answer) else answer.strip().splitlines()[0]
    return next((item for item in _items(answer) if not _holds(asked.kind, item)), None)


def _address_of(item: str, *, port: bool = False) -> str | None:
    """The one address an item of one word writes with more around it (`/10.0.0.1:3888`, a
    peer's port and slash): the address alone, or with `port` (the question asks for one) the
    address and its port; None for an address as it is, or anything else."""
    if _TOKENS.search(item) or not _is_ip(item.strip("/")):
        return None
    host = item.strip("/").strip("[].")
    if not port:
        host = host.split(":", 1)[0] if host.count(":") == 1 and "." in host else host
    return host if host != item else None


_PORT = re.compile(r"\bports?\b", re.IGNORECASE)  # "ip:port", "host and port": the port is asked too


def as_asked(question: str, answer: str | None) -> Formed | None:
    """The answer in the form the question asks for (rlm.run.answer_form.in_asked_form), or,
    where it asks for IP addresses, each item an address written with a port or a slash around
    it as the address alone: "the IP only" is not an address and port (where the question asks
    for a port too, "ip:port", only the slash goes)."""
    if (formed := in_asked_form(question, answer)) is not None or not answer:
        return formed
    asked = asked_kind(question)
    if asked is None or asked.kind != IP:
        return None
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    port = _PORT.search(question) is not None
    bare = [_address_of(line, port=port) for line in lines]
    if not lines or not all(bare):
        return None
    said = "the IP address and port alone" if port else "the IP address alone"
    return Formed("\n".join(b for b in bare if b), said, answer.strip())


# Words by which a question asks about time, or names one (then a time may well be its answer).
_TIME_WORDS = re.compile(
    r"\b(?:when|time|times|timestamps?|dates?|dated|days?|daily|hours?|hourly|minutes?|seconds?|months?|"
    r"monthly|years?|weeks?|weekly|weekdays?|periods?|moment|earliest|latest|first|last|"
    r"since|until|ago|duration|long|clock|o'clock|yyyy|hh|mm|am|pm|utc|gmt|jan|feb|mar|apr|may|jun|"
    r"jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july|august|september|october|november|"
    r"december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{4}-\d{2}|\d{1,2}:\d{2})\b",
    re.IGNORECASE,
)
# A date, a date and time of day, or a time of day as queries print them, and nothing else.
_A_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}(?::\d{2}(?::\d{2}(?:\.\d+)?)?)?)?|\d{1,2}:\d{2}(?::\d{2})?"
)


def unasked_time(question: str, answer: str | None) -> str | None:
    """Why an answer that is nothing but dates or times does not fit a question that asks about
    no time and names none: a small model answers with the period its last query grouped by
    (an hour's bucket where an id was asked). None when it fits, or there is no answer."""
    if not answer or not answer.strip() or _TIME_WORDS.search(question):
        return None
    items = _items(answer)
    if not items or not all(_A_TIME.fullmatch(item) for item in items):
        return None
    return f"the answer is a time ({items[0]!r}), and the question asks for none"


def misfit_note(asked: Asked, item: str) -> str:
    """The misfit in words for the user (stderr, the trace, --json's doubts)."""
    return f"the question asks for {asked.kind} ({asked.words!r}), and {item!r} holds none"


# Words that offer the answer among values the question states ("GET or POST", "which of").
_CHOICE = re.compile(r"\bor\b|\bwhich of\b|\beither\b|\bvs\.?\b|\bversus\b", re.IGNORECASE)


def echoed(question: str, answer: str | None) -> str | None:
    """Why an answer that is a value the question itself states does not fit: a question asks
    for what it does not know, and a small model gives back the value its query filtered on
    (the group the question names as where to look). Not where the question offers a choice
    ("GET or POST"), nor a number of one or two digits, which a count may share with the
    question by chance. None when it fits (no development set's expected answer is such a value
    but "yes")."""
    if not answer or _CHOICE.search(question):
        return None
    value = answer.strip().rstrip(".").strip("'\"`")
    if (
        "\n" in value
        or len(value) < 2
        or value.lower() in ("yes", "no")
        or re.fullmatch(r"-?\d{1,2}(?:\.\d+)?", value)
    ):
        return None
    if not re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", question, re.IGNORECASE):
        return None
    return f"the answer ({value!r}) is a value the question itself states"


def wrong_kinds(question: str, answer: str | None) -> list[str]:
    """How the answer is not of the kind the question asks for, in words (misfit_note,
    unasked_time, echoed): [] when it fits."""
    asked = asked_kind(question)
    wrong = misfit(asked, answer) if asked is not None else None
    notes = [misfit_note(asked, wrong)] if asked is not None and wrong is not None else []
    return notes + [n for n in (unasked_time(question, answer), echoed(question, answer)) if n is not None]


def columns_of_kind(kind: str, table: Mapping[str, Any] | None) -> list[str]:
    """The table's columns that hold values of the kind (its text columns of IP addresses, found
    as it was built: rlm.input.tablevalues.address_columns): where a model should look instead."""
    held = (table or {}).get("addresses") if kind == IP else None
    # Only names of the table's own columns: a cached description is data, and this goes to the prompt.
    own = {c[0] for c in (table or {}).get("columns") or [] if isinstance(c, list | tuple) and c}
    return [n for n in held if isinstance(n, str) and n in own] if isinstance(held, list) else []
