"""The JSON schema of one typed action, built from the input's table.

A server that takes a schema (llama.cpp's `json_schema`) holds the model's reply to it by a
grammar: the model can only name the table's real columns, a numeric aggregate only of a
number column, a time bucket only beside a time column, and a `=` or `!=` filter on a
column whose whole set of values is known only with one of those values. The schema keeps
to what llama.cpp's json-schema-to-grammar takes (type, properties, required,
additionalProperties false, enum, const, anyOf, array items with minItems/maxItems,
integer minimum/maximum: no $ref, no oneOf, no patternProperties), and stays small: the
server compiles it every turn, so ops of one shape share one branch.
"""

from __future__ import annotations

from typing import Any

from rlm.run.actionspec import GREP_MAX_MATCHES
from rlm.run.typed.columns import BOOL, DATE, NUMBER, TEXT, TIME, TableColumns, table_columns
from rlm.run.typed.vocabulary import (
    AGGREGATES,
    ASKS,
    BUCKETS,
    DAY_BUCKETS,
    EQUALITY,
    MAX_FILTERS,
    MAX_K,
    MAX_PEEK_LINES,
    MAX_ROW_COLUMNS,
    ORDERING,
    ORDERS,
    TAKES,
    TEXT_MATCH,
)

__all__ = ["action_schema"]

_STRING: dict[str, Any] = {"type": "string"}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _op(*ops: str) -> dict[str, Any]:
    return {"const": ops[0]} if len(ops) == 1 else {"enum": list(ops)}


def _asking(branch: dict[str, Any]) -> dict[str, Any]:
    """The branch with "asks" first: what a question asks for that its op gives (ASKS). The
    grammar writes an object's properties in order, so the model says what is asked before it
    names the op, and the op is then held to that branch's (a branch of ops that answer
    different asks, such as a number read out of text, takes each of theirs)."""
    op = branch["properties"]["op"]
    phrases = list(dict.fromkeys(ASKS[o] for o in op.get("enum", [op.get("const")])))
    asks = {"const": phrases[0]} if len(phrases) == 1 else {"enum": phrases}
    return {
        **branch,
        "properties": {"asks": asks, **branch["properties"]},
        "required": ["asks", *branch["required"]],
    }


def _count(at_most: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": at_most}


# No maximum: llama.cpp writes a bounded integer's grammar digit by digit (check.py caps it).
_MIN_COUNT: dict[str, Any] = {"type": "integer", "minimum": 1}


def _filter(cols: TableColumns) -> dict[str, Any]:
    """One filter {column, cmp, value}: a branch per column whose values are known whole (=, !=
    take only those), then `=`/`!=` on the others, `<`... on numbers and times, and text matches."""
    scalar: list[dict[str, Any]] = [_STRING, {"type": "number"}]
    if cols.names(BOOL):
        scalar.append({"type": "boolean"})
    value: dict[str, Any] = {"anyOf": scalar}
    branches = []
    for column in cols.columns:
        if column.values is not None:
            branches.append(
                _object(
                    {
                        "column": {"const": column.name},
                        "cmp": {"enum": list(EQUALITY)},
                        "value": {"enum": list(column.values)},
                    },
                    ["column", "cmp", "value"],
                )
            )
    open_ones = [c.name for c in cols.columns if c.values is None]
    ordered = cols.ordered()
    for names, cmps, val in (
        (open_ones, EQUALITY, value),
        (ordered, ORDERING, value),
        (cols.names(TEXT), TEXT_MATCH, _STRING),
    ):
        if names:
            branches.append(
                _object(
                    {"column": {"enum": names}, "cmp": {"enum": list(cmps)}, "value": val},
                    ["column", "cmp", "value"],
                )
            )
    return {"type": "array", "items": {"anyOf": branches}, "maxItems": MAX_FILTERS}


def _group(
    by: list[str], buckets: tuple[str, ...], numbers: list[str], k: dict[str, Any], where: dict[str, Any]
) -> dict[str, Any]:
    """A `group` branch: per value of `by`, or per one of `buckets` of it when there are some."""
    properties: dict[str, Any] = {"op": _op("group"), "by": {"enum": by}}
    required = ["op", "by"]
    if buckets:
        properties["bucket"] = {"enum": list(buckets)}
        required.append("bucket")
    if numbers:
        properties.update({"agg": {"enum": list(AGGREGATES)}, "column": {"enum": numbers}})
    properties.update({"order": {"enum": list(ORDERS)}, "k": k, "min_count": _MIN_COUNT, "where": where})
    return _object(properties, required)


def action_schema(table: dict[str, Any], *, answering: bool = True) -> dict[str, Any]:
    """The JSON schema of one action object on this table: an anyOf branch per shape of op (ops
    of one shape share one; `group` per value and per time bucket are two).

    Without `answering`, no `final`: the schema of a turn before anything was looked at, where a
    final is refused (a small model otherwise sent the refused final again, turn after turn)."""
    cols = table_columns(table)
    where = _filter(cols)
    every = {"enum": cols.names()}
    # Amounts: a line's number is its position, an id or a code names a row, never summed nor
    # averaged (a line's min or max is the first or last line of a match).
    numbers = cols.amounts()
    extremes = cols.names(NUMBER, TIME, DATE)
    k = _count(MAX_K)
    # `after`: the value written right after a text, offered where the table found free text
    # (its columns that write values after words: lead_ins); check.py holds it to a text column.
    texts = [n for n in cols.names(TEXT) if n in (table.get("lead_ins") or {})]
    after = {"after": _STRING} if texts else {}
    branches = [
        _object({"op": _op("count"), "where": where}, ["op"]),
        _object(
            {"op": _op("count_distinct"), "column": every, **after, "min_count": _MIN_COUNT, "where": where},
            ["op", "column"],
        ),
        _object(
            {"op": _op("top"), "column": every, **after, "k": k, "min_count": _MIN_COUNT, "where": where},
            ["op", "column"],
        ),
    ]
    # A total or an extreme of a number column, or of the number written after a text.
    # Each op its own branch, so that the phrase said first (ASKS) holds the op to it.
    for op, of in (("sum", numbers), ("avg", numbers), ("min", extremes), ("max", extremes)):
        if of:
            branches.append(
                _object({"op": _op(op), "column": {"enum": of}, "where": where}, ["op", "column"])
            )
    if texts:
        branches.append(
            _object(
                {"op": _op(*AGGREGATES), "column": {"enum": texts}, "after": _STRING, "where": where},
                ["op", "column", "after"],
            )
        )
    # Per value of any column; per time bucket of a time column (a DATE by day or month only).
    branches.append(_group(cols.names(), (), numbers, k, where))
    for kinds, buckets in ((TIME,), BUCKETS), ((DATE,), DAY_BUCKETS):
        if cols.names(*kinds):
            branches.append(_group(cols.names(*kinds), buckets, numbers, k, where))
    branches += [
        _object(
            {
                "op": _op("rows"),
                "columns": {"type": "array", "items": every, "minItems": 1, "maxItems": MAX_ROW_COLUMNS},
                "order_by": every,
                "take": {"enum": list(TAKES)},
                "k": k,
                "where": where,
            },
            ["op", "columns"],
        ),
        _object(
            {
                "op": _op("grep"),
                "pattern": _STRING,
                "max_matches": _count(GREP_MAX_MATCHES),
                "ignore_case": {"type": "boolean"},
            },
            ["op", "pattern"],
        ),
        _object(
            {"op": _op("peek"), "start": {"type": "integer", "minimum": 1}, "length": _count(MAX_PEEK_LINES)},
            ["op", "start"],
        ),
    ]
    if answering:
        branches.append(_object({"op": _op("final"), "answer": _STRING}, ["op", "answer"]))
    return {"anyOf": [_asking(b) for b in branches]}
