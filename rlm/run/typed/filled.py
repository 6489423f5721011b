"""A key the rows a query keeps never fill, moved onto the value the question's quoted line reads.

A parse fills a column on the lines it was written for: `src_ip` on sshd's messages, none on
ftpd's. A question that quotes another program's line (`connection from <ip> (<host>)`) and asks
which address, or how many, gets from a small model a ranking of that column over the quoted
lines: no row, or a distinct count of none, though the quoted field (`<ip>`, rlm.run.typed.fields)
reads the very value from each of them.

Where the query ranks, groups or counts the distinct values of a column that no row it keeps
fills, and the one quoted field of that column's kind fills some, rlm runs it on the field
instead and says so, as for a measure the question's words ask for (rlm.run.typed.measure).
Its kind: an address where the column holds addresses (rlm.run.answer_kind.columns_of_kind) and
the field's value seen in the first lines is one; else the field's name is a word of the
column's (`<user>` for `user`). Which rows lack the value is read from the table (one query of
two counts), never guessed from the question's words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rlm.run.answer_kind import IP, columns_of_kind
from rlm.run.typed.asked import name_words, singular
from rlm.run.typed.columns import Column, table_columns
from rlm.run.typed.compile import checked_query, condition_sql
from rlm.run.typed.fields import QuotedField, read_fields

__all__ = ["onto_filled_field"]

_ADDRESS = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_KEYED = ("top", "count_distinct", "group")


def _same_kind(key: Column, field: QuotedField, addresses: list[str]) -> bool:
    """Whether a quoted field holds values of the kind `key` does (see the module's doc)."""
    if key.name in addresses:
        return field.seen is not None and _ADDRESS.fullmatch(field.seen) is not None
    named = {singular(w.lower()) for w in re.findall(r"[A-Za-z]+", field.name)}
    return bool(named) and named <= set(name_words(key.name))


def onto_filled_field(
    content: str, table: dict[str, Any], counts: Callable[[str], list[int] | None]
) -> tuple[dict[str, Any], str] | None:
    """The typed query in `content` with its key moved onto the quoted field of its kind, where no
    row it keeps fills the key and some fill the field (`counts` runs the probe: the whole numbers
    of its first row, None when it cannot), and what changed; None otherwise."""
    sent = checked_query(content, table)
    if sent is None:
        return None
    action, checked = sent
    if checked.op not in _KEYED or checked.bucket:
        return None
    cols = table_columns(table)
    key = checked.by if checked.op == "group" else checked.column
    if key is None or key.quoted is not None or checked.after is not None:
        return None
    addresses = columns_of_kind(IP, table)
    fields = [
        f
        for f in read_fields(table)
        if not f.counted and not f.number and _same_kind(key, f, addresses) and f.name in cols.names()
    ]
    if len(fields) != 1:
        return None
    field = next(c for c in cols.columns if c.name == fields[0].name)
    where = " AND ".join(condition_sql(f) for f in checked.where)
    probe = f"SELECT count({key.expr}), count({field.expr}) FROM log" + (f" WHERE {where}" if where else "")
    found = counts(probe)
    if found is None or len(found) != 2 or found[0] != 0 or found[1] == 0:
        return None
    slot = "by" if checked.op == "group" else "column"
    query = {k: v for k, v in action.items() if k != "asks"}
    return {**query, slot: field.name}, (
        f"{field.name}, read from the lines the question quotes, instead of {key.name}, "
        "which no row the query kept holds"
    )
