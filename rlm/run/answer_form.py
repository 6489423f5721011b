"""An answer written in the form the question asks for: one date or time, or a list one per line.

Questions about logs state the form of a time they want with the usual letters
(`YYYY-MM-DD HH`, `HH:MM`); a small model's synthesis writes the value as its query printed
it ("2015-05-19 19:00" from a group per hour), and a script that compares strings gets it
wrong although the value is right. What is done depends on the question's stated form alone:
the answer is rewritten only when it is exactly one date or time that holds every part the
form asks for (nothing is invented: an hour is never given minutes it did not have), and the
run says so where the user sees it.

A question that asks for a number rounded to some decimals ("rounded to 2 decimals", "3
decimal places", "the nearest whole number") gets that number so rounded (half away from zero),
where the answer is exactly one number written with more decimals than asked: a synthesis
copies the query's `0.7954582484725047` as often as it rounds it.

A question that asks for a list "one per line" is read by a script line by line; a synthesis
often writes the items on one line, separated by commas. Such an answer is put one item per
line, and the run says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

__all__ = ["Formed", "asked_parts", "in_asked_form"]

# `hh` is left out: in many conventions it is a 12-hour clock, which an answer does not say.
# `Mon` is a month's short name and `D` a day without its leading zero, as syslog writes a date.
_TOKEN = r"(?:YYYY|YY|MM|DD|HH|mm|SS|ss|Mon|D)"
# Two or more of the letters' tokens, joined by a separator or nothing: "YYYY-MM-DD HH", "YYMMDD HH", "HH:MM".
_FORM = re.compile(rf"(?<![A-Za-z]){_TOKEN}(?:[-/: T.]?{_TOKEN})+")
# After a form: a letter (not a form at all) or a fraction of a second (",mmm", ".SSS"), which
# asks for more than the letters before it say: the form is not taken.
_FORM_GOES_ON = re.compile(r"[A-Za-z]|[.,][A-Za-z]")
_PER_LINE = re.compile(
    r"\bone (?:\w+ )?(?:per|a|on each) line\b|\beach on (?:a|its own) line\b", re.IGNORECASE
)
_PIECES = re.compile(rf"{_TOKEN}|[-/: T.]")
# A date given by example with its month's name ("e.g. 'Jun 14'", "like 17/May/2015"): its form.
_MONTH_NAMES = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_EXAMPLE = re.compile(
    rf"\b(?:e\.g\.|eg|for example|for instance|like|such as)[,:]?\s*['\"“]?"
    rf"((?:\d{{1,2}}[ /-])?{_MONTH_NAMES}(?:[ /-]\d{{1,2}})?(?:,?[ /-]\d{{4}})?)(?![\w:])"
)
# One date-time as queries print them: a date, then optionally an hour, minutes, seconds and a fraction.
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2})(?::(\d{2})(?::(\d{2})(?:[.,]\d+)?)?)?)?")
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?")
# The parts a date-time holds, in the order _DATETIME's groups give them; the directive of each letter.
_ORDER = ["year", "month", "day", "hour", "minute", "second"]
_DIRECTIVE = {
    "YYYY": "%Y",
    "YY": "%y",
    "DD": "%d",
    "HH": "%H",
    "mm": "%M",
    "SS": "%S",
    "ss": "%S",
    "Mon": "%b",
    "D": "%-d",  # glibc and BSD strftime alike
}


@dataclass(frozen=True)
class Formed:
    answer: str  # the answer in the asked form
    form: str  # the form as the question wrote it
    was: str  # the answer as it was written

    @property
    def note(self) -> str:
        """What the run says of it (stderr, the trace): `was` as repr() writes it, so a control
        character in a list's items shows escaped."""
        return f"the answer is written in the form the question asks ({self.form}): {self.was!r} as the model wrote it"


def _strftime(form: str) -> tuple[str, set[str]] | None:
    """The strftime pattern of a written form and the parts it asks for; MM is minutes after an
    hour, a month otherwise. None when a part is asked twice."""
    out, parts, after_hour = [], set[str](), False
    for piece in _PIECES.findall(form):
        if piece == "MM" and after_hour:
            directive, part = "%M", "minute"
        elif piece == "MM":
            directive, part = "%m", "month"
        elif piece in _DIRECTIVE:
            directive = _DIRECTIVE[piece]
            part = {
                "%Y": "year",
                "%y": "year",
                "%d": "day",
                "%-d": "day",
                "%b": "month",
                "%H": "hour",
                "%M": "minute",
                "%S": "second",
            }[directive]
        else:
            out.append(piece)
            continue
        if part in parts:
            return None
        parts.add(part)
        after_hour = after_hour or part == "hour"
        out.append(directive)
    return "".join(out), parts


def _value(answer: str) -> tuple[datetime, set[str]] | None:
    """The one date or time the whole answer is, and the parts it holds; None otherwise."""
    text = answer.strip()
    if m := _DATETIME.fullmatch(text):
        numbers = [int(g) if g is not None else None for g in m.groups()]
        held = {part for part, n in zip(_ORDER, numbers, strict=True) if n is not None}
        year, month, day, hour, minute, second = (n or 0 for n in numbers)
        return datetime(year, month or 1, day or 1, hour, minute, second), held
    if t := _TIME.fullmatch(text):
        clock = [int(g) if g is not None else None for g in t.groups()]
        held = {"hour", "minute"} | ({"second"} if clock[2] is not None else set())
        hour, minute, second = (n or 0 for n in clock)
        return datetime(1900, 1, 1, hour, minute, second), held
    return None


def _example_form(question: str) -> str | None:
    """The form of the one date the question gives as an example with its month's name (`Jun 14`
    is `Mon D`, `07/Jun/2015` is `DD/Mon/YYYY`); None for none, or several forms."""
    forms = set()
    for m in _EXAMPLE.finditer(question):
        example = m.group(1)
        if not re.search(r"\d", example):
            continue  # a month alone is no date
        form = re.sub(_MONTH_NAMES, "Mon", example)
        form = re.sub(r"\d{4}", "YYYY", form)
        forms.add(re.sub(r"\b0\d\b|\b\d{1,2}\b", lambda d: "DD" if d.group(0).startswith("0") else "D", form))
    return forms.pop() if len(forms) == 1 else None


def _stated_form(question: str) -> str | None:
    """The one date/time form the question states, in letters or by an example of a date with its
    month's name; None for none or several."""
    matches = list(_FORM.finditer(question))
    forms = {m.group(0) for m in matches}
    if not forms:
        return _example_form(question)
    if len(forms) != 1 or any(_FORM_GOES_ON.match(question, m.end()) for m in matches):
        return None
    return forms.pop()


def asked_parts(question: str) -> tuple[str, set[str]] | None:
    """The one date/time form the question states and the parts it asks for (year ... second)."""
    form = _stated_form(question)
    pattern = _strftime(form) if form is not None else None
    return None if form is None or pattern is None else (form, pattern[1])


def _one_per_line(question: str, answer: str) -> Formed | None:
    """A list written on one line, separated by commas, put one item per line where the question
    asks for that: a script reads lines. An item that itself holds a comma is cut in two, which
    the note says where the user sees it."""
    text = answer.strip()
    if not _PER_LINE.search(question) or "\n" in text or "," not in text:
        return None
    items = [part.strip() for part in text.split(",")]
    if items and items[-1].startswith("and "):
        items[-1] = items[-1][len("and ") :].strip()
    if len(items) < 2 or not all(items):
        return None
    return Formed("\n".join(items), "one per line", text)


_DIGIT_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
# The decimals a question asks a number rounded to.
_ROUNDED = re.compile(
    r"\bround(?:ed|ing)?\b[^.?!\d]{0,30}?\bto\s+(\d|zero|one|two|three|four|five|six)\s+"
    r"(?:decimal(?:\s+(?:places?|digits?))?s?|d\.?p\.?|places?|digits?\s+after)"
    r"|\b(\d|one|two|three|four|five|six)\s+(?:decimal\s+(?:places?|digits?)|decimals)\b"
    r"|\bround(?:ed|ing)?\b[^.?!\d]{0,30}?\bto\s+the\s+nearest\s+(whole\s+number|integer)\b",
    re.IGNORECASE,
)
_ONE_NUMBER = re.compile(r"\s*(-?\d+\.\d+)\s*(%?)\s*")


def _rounded(question: str, answer: str) -> Formed | None:
    """One number written with more decimals than the question asks it rounded to, so rounded."""
    asked = _ROUNDED.search(question)
    number = _ONE_NUMBER.fullmatch(answer)
    if asked is None or number is None:
        return None
    said = asked.group(1) or asked.group(2)
    places = 0 if said is None else int(said) if said.isdigit() else _DIGIT_WORDS[said.lower()]
    digits, percent = number.groups()
    if len(digits.split(".")[1]) <= places:
        return None
    value = Decimal(digits).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    form = f"rounded to {places} decimal{'s' if places != 1 else ''}"
    return Formed(f"{value}{percent}", form, answer.strip())


def in_asked_form(question: str, answer: str | None) -> Formed | None:
    """The answer written in the form the question states: one date/time form, one item per line,
    or a number rounded to the decimals asked. None when the question states none (or several date forms), the answer is not one
    date or time (a list on one line), lacks a part the form asks for, or is already in that form."""
    if not answer:
        return None
    if (lines := _one_per_line(question, answer)) is not None:
        return lines
    if (rounded := _rounded(question, answer)) is not None:
        return rounded
    form = _stated_form(question)
    pattern = _strftime(form) if form is not None else None
    try:
        found = _value(answer)
    except ValueError:  # not a real date (month 13): left as it is
        return None
    if form is None or pattern is None or found is None:
        return None
    (strftime, asked), (value, held) = pattern, found
    if not asked <= held:
        return None  # the form asks for a part the answer does not hold: nothing is invented
    written = value.strftime(strftime)
    return None if written == answer.strip() else Formed(written, form, answer.strip())
