"""The text a question says a value is written after, inside a line: `uid=`, `elapsed:`, `>>>`.

Questions about logs ask for a value a message writes after a fixed text: "the uid= value",
"the 'elapsed:' value", "a figure following '>>>'", "the '[session: ...]' tags". The table's parse
has no column of it, and a small model ranks or totals the nearest column it has instead (the
syslog's host where the message's rhost was asked, a log file's name where an instance's id
was): on blind18's traces, five of its questions. Such a text is a marker, and the value after
it becomes a column of its own (rlm.run.typed.fields), which a query of another column is then
moved onto (rlm.run.typed.measure).

A marker is taken only where the question's own form says a value follows it, never by what
the marker says:

- a key written with its `=` outside quotes (`rhost=`, `uid=`);
- a quoted text ending in an ellipsis, brackets closing after it or not (`'[session: ...]'`,
  `'Patch_KB...'`): the ellipsis stands for what varies, and nothing in the quote names it;
- a quoted text followed by the word value(s) or field, or preceded by "after", "following"
  or "value of" (`the 'elapsed:' value`, `the figure after '>>>'`).

A quote that only names lines (`lines with 'warning:'`) is no marker: it is the lines' condition
(rlm.run.typed.quoted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlm.run.typed.placeholders import PLACEHOLDER

__all__ = ["VALUE", "Marker", "marker_quotes", "question_markers"]

_MIN_FIXED = 3  # characters a marker needs to fit few lines (`id=` matches inside too many words)
_MAX_MARKER = 60
_ELLIPSIS = re.compile(r"^(?P<before>.*?)\s*(?:\.{2,}|…)\s*(?P<after>[\]\)}>'\"]*)\s*$", re.S)
_KEY = re.compile(r"(?<![\w.=-])([A-Za-z_][\w.-]{1,40}=)(?=[\s),.;:]|$)")
_QUOTE = re.compile(r"(?<!\w)'([^'\n]{1,60})'(?!\w)|\"([^\"\n]{1,60})\"|“([^”\n]{1,60})”")
_SIGNS = ("=", ":", "#")
_VALUE_AFTER_QUOTE = re.compile(r"^\s*(?:values?|fields?|numbers?)\b", re.I)
_VALUE_BEFORE_QUOTE = re.compile(r"\b(?:after|following|value\s+of|values\s+of)\s*$", re.I)
# A value written after a marker: one token of the characters ids, numbers, hosts, paths and
# addresses are written in; a closing bracket, a quote, a space or a comma ends it, but not a
# comma of thousands (`1,200`). RE2 has no lookahead: the digits after such a comma are matched.
VALUE = r"([\w.:/@+%-]+(?:,[0-9]{3}[\w.:/@+%-]*)*)"


@dataclass(frozen=True)
class Marker:
    """A fixed text a value is written after, and what closes the value (a bracket), if anything."""

    text: str
    closing: str = ""
    lead: str = ""  # the letters the value begins with, glued to the text (`KB` of `Patch_KB...`)

    @property
    def name(self) -> str:
        """The value's column name, from the marker's letters (`rhost=` -> `<rhost>`)."""
        core = self.text.strip(" =:#[](){}<>'\"-")
        return f"<{core}>" if core and len(core) <= 40 else f"<after {self.text.strip()}>"

    @property
    def template(self) -> str:
        """The marker with its value, as a quoted line with a placeholder reads (`rhost=<rhost>`)."""
        space = " " if self.text.endswith(_SIGNS[1:]) else ""
        return f"{self.text}{space}{self.name}{self.closing}"

    @property
    def head(self) -> str:
        """The fixed text before the value: the marker without the letters the value begins with."""
        return self.text[: len(self.text) - len(self.lead)]


def _quoted_marker(quote: str, before: str, after: str) -> Marker | None:
    """The marker a quote holds, by the form of the quote and the words around it. A quote with
    a placeholder before its end (`Took N seconds`, `rhost=<host>`) is a quoted line, whose
    placeholders are fields of their own (rlm.run.typed.fields)."""
    ended = _ELLIPSIS.match(quote)
    text = ended.group("before") if ended else quote.strip()
    if not text or PLACEHOLDER.search(text):
        return None
    closing = ended.group("after")[:1] if ended else ""
    # `'[session: ...]'`, `'uid: ...'`, `'KB...'`: a value in brackets, after a key's sign, or
    # glued to the text. Not `'Accepted key for ...'`: any text may follow the words.
    if ended and (closing or text.endswith(_SIGNS) or not quote[len(text)].isspace()):
        # Letters glued to the ellipsis after a separator begin the value: `Patch_KB...` asks for
        # `KB2552343`, as the lines write it, not the digits after it.
        glued = (
            re.search(r"(?<=[^A-Za-z0-9])[A-Za-z][A-Za-z0-9]*$", text)
            if not quote[len(text)].isspace()
            else None
        )
        return Marker(text, closing, glued.group(0) if glued else "")
    if _VALUE_AFTER_QUOTE.match(after) or _VALUE_BEFORE_QUOTE.search(before):
        return Marker(text)
    return None


def marker_quotes(question: str) -> list[str]:
    """The texts the question quotes that are markers (`the 'elapsed:' values`): a value follows
    them, and they name no lines of their own beside another quote (rlm.run.typed.quoted)."""
    return [
        quote
        for m in _QUOTE.finditer(question)
        for quote in [next(g for g in m.groups() if g is not None)]
        if _quoted_marker(quote, question[: m.start()], question[m.end() :]) is not None
    ]


def question_markers(question: str) -> list[Marker]:
    """The markers of a question (see the module's doc), in order, each once."""
    found: list[Marker] = []
    outside = question
    for m in _QUOTE.finditer(question):
        quote = next(g for g in m.groups() if g is not None)
        outside = outside.replace(m.group(0), " ")
        marker = _quoted_marker(quote, question[: m.start()], question[m.end() :])
        if marker is not None:
            found.append(marker)
    found += [Marker(m.group(1)) for m in _KEY.finditer(outside)]
    kept: list[Marker] = []
    for marker in found:
        fixed = re.sub(r"\s", "", marker.text)
        if _MIN_FIXED <= len(fixed) <= _MAX_MARKER and marker.text not in {k.text for k in kept}:
            kept.append(marker)
    return kept
