"""The fixed parts of a log line written with placeholders for what varies.

Questions quote the lines they mean with `<ip>`, `N`, `...` where the values go, and a small
model copies such a text whole into a `contains` filter, where it matches no line (blind10's
traces: two counts of 0). Split at its placeholders, the text is its fixed parts, each of
which the line holds; a part with too few letters matches too much to be kept.
"""

from __future__ import annotations

import functools
import re

__all__ = ["ASIDES", "PLACEHOLDER", "as_read", "literal_parts", "quoted_texts", "unquoted"]

# What stands for a varying part inside a quoted line: <ip>, ..., a lone capital (N, X), one
# written against its unit as logs write numbers (`timeout of Nms`, `Ns`, `N%`), and the words
# questions use for a field's value.
_UNIT = r"(?:ns|us|µs|ms|s|sec|secs|min|h|B|kb|KB|kB|mb|MB|gb|GB)\b|%"
PLACEHOLDER = re.compile(
    rf"<[^<>]*>|\.{{2,}}|…|\b(?:[A-Z]|NAME|NUM|NUMBER|VALUE|ID|IP|HOST|USER)\b|\b[NXT](?={_UNIT})"
)
# A text a question quotes: in single quotes (not an apostrophe inside a word), double or curly.
_QUOTED = re.compile(r"(?<!\w)'([^'\n]{2,160})'(?!\w)|\"([^\"\n]{2,160})\"|“([^”\n]{2,160})”")
_MIN_LETTERS = 3  # a part shorter than this matches too much to be a condition
_EDGES = " \t,;:.-=[](){}\"'"
ASIDES = r"\s+(?:[(\[][^()\[\]]*[)\]]\s+)*"  # between two words: `(1.16 KB) ` and the like
_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")


def as_read(text: str) -> str:
    """Fixed text as a pattern (RE2 and Python alike): its characters as written, any run of
    spaces as one or more, and between two of its words any asides in brackets the line adds: a
    question quotes a line as it reads, and leaves out `(1.16 KB)` of `N bytes (1.16 KB) sent`.
    Only bracketed asides, never any words: `N bytes received` would then read the bytes sent
    before them on the same line."""
    words = re.split(r"\s+", text)
    out = [_SPECIAL.sub(r"\\\1", words[0])]
    for before, word in zip(words, words[1:], strict=False):
        out += [ASIDES if before and word else r"\s+", _SPECIAL.sub(r"\\\1", word)]
    return "".join(out)


def literal_parts(text: str) -> list[str]:
    """The fixed parts of `text` in order, around its placeholders, each with enough letters to
    match on; `[text]` when it has no placeholder; [] when no part is left."""
    pieces = PLACEHOLDER.split(text)
    if len(pieces) == 1:
        return [text]
    return [
        p for p in (piece.strip(_EDGES) for piece in pieces) if sum(ch.isalpha() for ch in p) >= _MIN_LETTERS
    ]


def quoted_texts(question: str) -> list[str]:
    """The texts a question quotes, in order."""
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(question)]


def unquoted(question: str) -> str:
    """The question without the texts it quotes: a quoted line's words are the line's, not its own."""
    return functools.reduce(lambda text, quote: text.replace(quote, " "), quoted_texts(question), question)
