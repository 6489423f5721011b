"""How much an earlier run's memory bears on a new question, without a model call.

A memory is offered only when the question needs it: relevance is a threshold,
not only an order. What a question and a memory share counts by what it says
about the file:

- an anchor (ANCHOR_WEIGHT): what the question names rather than asks (a number,
  an IP, a time and its hour, a date, a path, quoted text, an identifier such as
  `src_ip`, a capitalised name such as Googlebot), and a column name or a common
  value of the file's parsed table (`status`, `404`, `GET`);
- a plain word of the question (WORD_WEIGHT): "requests", "failed", compared
  without a plural's -s; several are needed to make one anchor, since words that
  fit every question about a file ("requests" of an access log) say little;
- the question's shape (SHAPE_WEIGHT: count, which-most, list, time), the same
  as the memory's question: it adds to what is shared, never makes relevance on
  its own (two counts of different things are not related).

A memory is offered when its relevance reaches THRESHOLD: one anchor, or a few
words and the same shape. A memory sharing nothing scores zero and is never
offered, however good its standing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rlm.memory.tags import STOP_WORDS, entities_of, tags_of

ANCHOR_WEIGHT = 1.0
WORD_WEIGHT = 0.35  # three shared words make one anchor
SHAPE_WEIGHT = 0.5
THRESHOLD = 1.0

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A question's shape, first match wins: "which IP made the most" is which-most, not list.
_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "which-most",
        re.compile(
            r"\b(?:most|least|top|highest|lowest|busiest|largest|smallest|biggest|common|frequent"
            r"|maximum|minimum|max|min)\b",
            re.I,
        ),
    ),
    ("count", re.compile(r"\bhow (?:many|much|often)\b|\bnumber of\b|\bcount\b|\btotal\b|\bsum\b", re.I)),
    (
        "time",
        re.compile(
            r"\bwhen\b|\bwhat time\b|\bat what\b|\b(?:first|last|earliest|latest)\b|\bdate\b|\bhour\b"
            r"|\b\d{1,2}:\d{2}\b",
            re.I,
        ),
    ),
    ("list", re.compile(r"^\s*(?:list|name|show|give)\b|\bwhich\b|\bwhat are\b|\ball\b|\bdistinct\b", re.I)),
)


@dataclass(frozen=True)
class FileTerms:
    """What the input's parsed table tells about its questions: its column names and the common
    values of its columns, lower-cased (empty for a file without a table)."""

    columns: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()

    @classmethod
    def of(cls, columns: Iterable[str], values: Mapping[str, Iterable[object]]) -> FileTerms:
        """From column names and {column: common values}. A name or value that is a common word of
        every question ("line", "time") is no anchor: it is in the tags' stop list."""
        names = {c.lower() for c in columns if c and c.lower() not in STOP_WORDS}
        found = {" ".join(str(v).lower().split()) for vs in values.values() for v in vs}
        return cls(frozenset(names), frozenset(v for v in found if 2 <= len(v) <= 80 and v not in STOP_WORDS))


@dataclass(frozen=True)
class Relevance:
    """One memory's relevance to a question: the score and what made it."""

    score: float
    anchors: tuple[str, ...]
    words: tuple[str, ...]
    same_shape: bool

    @property
    def offered(self) -> bool:
        return self.score >= THRESHOLD


@dataclass(frozen=True)
class QuestionTerms:
    """A question as relevance reads it."""

    anchors: frozenset[str]
    words: frozenset[str]
    shape: str | None


def shape_of(question: str) -> str | None:
    """count, which-most, list or time; None for a question of none of these shapes."""
    for name, pattern in _SHAPES:
        if pattern.search(question):
            return name
    return None


def question_terms(question: str, file: FileTerms) -> QuestionTerms:
    """The anchors, plain words and shape of a question about a file with these terms."""
    anchors = entities_of(question)
    for word in _words(question) | tags_of(question):
        column = _column(word, file)
        if column or word in file.values:
            anchors.add(column or word)
    anchors |= {v for v in file.values if _mentions(question, v)}
    plain = {_stem(w) for w in tags_of(question) if w[0].isalpha() and not {w, _stem(w)} & anchors}
    return QuestionTerms(frozenset(anchors), frozenset(plain), shape_of(question))


def relevance(asked: QuestionTerms, memory_question: str, memory_text: str, file: FileTerms) -> Relevance:
    """How much a memory (the question it answered and its finding) bears on `asked`."""
    about = f"{memory_question}\n{memory_text}"
    terms = tags_of(about) | {c for w in _words(about) if (c := _column(w, file))}
    shared_anchors = sorted(
        a for a in asked.anchors if a in terms or (a in file.values and _mentions(about, a))
    )
    stems = {_stem(t) for t in terms if t[0].isalpha()}
    shared_words = sorted(asked.words & stems)
    score = ANCHOR_WEIGHT * len(shared_anchors) + WORD_WEIGHT * len(shared_words)
    same = asked.shape is not None and asked.shape == shape_of(memory_question)
    if score > 0 and same:
        score += SHAPE_WEIGHT
    return Relevance(round(score, 3), tuple(shared_anchors), tuple(shared_words), same)


def _words(text: str) -> set[str]:
    """Every word of a text, lower-cased, short ones included (a column may be named `ip`)."""
    return {w.lower() for w in _WORD.findall(text)}


def _column(word: str, file: FileTerms) -> str | None:
    """The column a word names, itself or in the plural ("paths" names `path`)."""
    for name in (word, _stem(word)):
        if name in file.columns:
            return name
    return None


def _mentions(text: str, value: str) -> bool:
    """Whether a text names a table value as a whole word (a value of several words, too)."""
    return re.search(rf"(?<![\w.]){re.escape(value)}(?![\w])", text, re.I) is not None


def _stem(word: str) -> str:
    """A word without a plural's -s, so "request" and "requests" are one word."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
