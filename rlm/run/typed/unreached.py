"""What a question names that only the table's nested parts hold, which no typed query reads.

A JSON record's objects are offered one level down (`connections.idle`: rlm.run.typed.columns);
a field deeper than that, or inside a list (`pools.<name>.members[].health`), is held in the
table and read by no op of the typed vocabulary. A question about such a field gets a query of
what can be read, and its answer is of another thing, grounded in that query's rows and
wrong. Where the question
names a field only those parts hold, and no column offered has that word in its name, the
answer is in doubt.
"""

from __future__ import annotations

import re
from typing import Any

from rlm.run.typed.asked import name_words, singular
from rlm.run.typed.columns import struct_fields, table_columns
from rlm.run.typed.placeholders import unquoted
from rlm.run.typed.vocabulary import ROW_NOUNS

__all__ = ["unreached_doubt", "unreached_named"]

# Words too common in a question to say which field it means.
_TOO_COMMON = ROW_NOUNS | frozenset(
    "name type value count total number id key data info status kind size first last next previous "
    "passed failed current".split()
)
_MIN_LETTERS = 4


def _inner(duckdb_type: str) -> str:
    """A list's element type (`STRUCT(...)[]` -> `STRUCT(...)`); any other type as it is."""
    text = duckdb_type.strip()
    while text.endswith("[]"):
        text = text[:-2].strip()
    return text


def _all_names(duckdb_type: str, out: set[str]) -> None:
    """Every field name inside a type, at any depth, lists' elements included."""
    for name, inner in struct_fields(_inner(duckdb_type)) or []:
        out.add(name)
        _all_names(inner, out)


def _held_only_deeper(table: dict[str, Any]) -> set[str]:
    """What no offered column reads, by name: the fields of a list, of an object inside
    an object, and columns left out; as single words (singular, lower case)."""
    offered = table_columns(table)
    reached = {word for name in offered.names() for word in name_words(name)}
    names: set[str] = set()
    for pair in table.get("columns") or []:
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            continue
        name, typ = str(pair[0]), str(pair[1])
        if offered.named(name) is None and name not in offered.nested:
            names.add(name)
        for field, inner in struct_fields(_inner(str(typ))) or []:
            if typ.strip().endswith("]") or offered.named(f"{name}.{field}") is None:
                names.add(field)
            _all_names(inner, names)
    words = {form for n in names for w in name_words(n) for form in _forms(w)}
    reached_forms = {form for w in reached for form in _forms(w)}
    return {w for w in words if len(w) >= _MIN_LETTERS and w not in reached_forms and w not in _TOO_COMMON}


def _forms(word: str) -> set[str]:
    """A word as written and as singular (`caches`: `caches`, `cach`, `cache`), lower case."""
    lower = word.lower()
    return {lower, singular(lower), lower[:-1] if lower.endswith("s") else lower}


def unreached_named(question: str, table: dict[str, Any]) -> list[str]:
    """The fields the question names that only the table's nested parts hold (see the module's
    doc), in the question's order; [] where it names none."""
    deeper = _held_only_deeper(table)
    if not deeper:
        return []
    said = re.findall(r"[A-Za-z]+", unquoted(question))
    return list(dict.fromkeys(singular(w) for w in said if _forms(w) & deeper))


def unreached_doubt(question: str, table: dict[str, Any]) -> str | None:
    """The doubt of any answer a typed query gives the question, where it names fields only the
    table's nested parts hold (unreached_named); None where it names none."""
    named = unreached_named(question, table)
    if not named:
        return None
    return (
        f"reads none of {', '.join(named)}, which the question names: the table holds them only "
        "inside lists or objects within objects, which no typed query reads"
    )
