"""Tags of a finding or a question, without a model call: nouns, field names, numbers, times.

What a memory and a later question share makes the memory relevant to it
(rlm.memory.relevance weighs which tags count for how much). Tags are
lower-cased words of three letters or more that are not common English,
identifiers (`src_ip`, `status`), numbers and IP addresses as written, times
(`14:02`) and their hour (`h14`), and dates.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"\d{1,3}(?:\.\d{1,3}){3}"  # an IPv4 address
    r"|\d{4}-\d{2}-\d{2}"  # a date
    r"|\d{1,2}:\d{2}(?::\d{2})?"  # a time
    r"|\d+(?:[.,]\d+)*"  # a number
    r"|[A-Za-z_][A-Za-z0-9_]*"  # a word or an identifier
)
STOP_WORDS = frozenset(
    """the and for are was were with that this from what which when where who how many much
    does did has have had not any all per each one two into than then them they their there
    its can could would should will about after before between over under more most less least
    line lines file log logs give list show number count total answer value values times time
    only also some such other same very just like each every""".split()
)


def tags_of(text: str) -> set[str]:
    """The tags of a text (see the module's docstring)."""
    found: set[str] = set()
    for token in _TOKEN.findall(text):
        low = token.lower()
        if low[0].isdigit():
            found.add(low.replace(",", ""))
            if ":" in low:
                found.add(f"h{int(low.split(':')[0]):02d}")
        elif len(low) >= 3 and low not in STOP_WORDS:
            found.add(low)
    return found


# What a question names rather than asks: quoted text, anything with a digit (404, 10.0.0.7, 14:02,
# 500s), a path, an identifier with an underscore, a capitalised word not opening a sentence.
_ENTITY = re.compile(
    r"\"([^\"]+)\"|'([^']+)'|(/[\w./-]+)|([\w.:/-]*\d[\w.:/-]*)|\b([A-Za-z]+_\w+)\b"
    r"|(?<![.?!]\s)(?<!^)\b([A-Z][A-Za-z]+)\b"
)


def entities_of(question: str) -> set[str]:
    """The tags of what a question names: quoted text, numbers, IPs, times, paths, identifiers
    (src_ip) and capitalised names (Googlebot). The run's routing and the memory's relevance both
    read a question this way."""
    entities: set[str] = set()
    for found in _ENTITY.finditer(question):
        entities |= tags_of(next(g for g in found.groups() if g is not None))
    return entities
