"""The typed actions told to the model: each op and its fields, with one example per shape
written on this table's own columns and values (small models copy an example's shape, so
each shape gets one, and a column the table does not have is never shown)."""

from __future__ import annotations

import json
from typing import Any

from rlm.run.actions import Action
from rlm.run.typed.columns import DATE, NUMBER, TEXT, TIME, TableColumns, table_columns
from rlm.run.typed.compile import to_action
from rlm.run.typed.fields import ADDRESS_TEMPLATE, SHAPE_TEMPLATES, QuotedField, names_a_field, read_fields
from rlm.run.typed.spans import offered_unit
from rlm.run.typed.vocabulary import ASKS, DEFAULT_K, MAX_FILTERS, MAX_K

__all__ = ["describe_actions", "example_cells", "examples"]


def _pick(*candidates: list[str]) -> str | None:
    """The first name of the first list that has one."""
    for names in candidates:
        if names:
            return names[0]
    return None


def _filter_example(cols: TableColumns, fields: list[QuotedField]) -> dict[str, Any]:
    """A filter of the count example: on a value of the line the question quotes where it has
    one (a small model otherwise never filters on those values: `N > 30` is then its own to
    write), else on a value of the table's own columns."""
    for field in fields:
        if field.seen is not None and field.number:
            return {"column": field.name, "cmp": ">", "value": _number(field.seen)}
    for field in fields:
        if field.seen is not None:
            return {"column": field.name, "cmp": "=", "value": field.seen}
    for column in cols.columns:
        if column.values:
            return {"column": column.name, "cmp": "=", "value": column.values[0]}
    number = _pick(cols.amounts())
    if number is not None:
        return {"column": number, "cmp": ">", "value": 0}
    return {"column": "line", "cmp": "contains", "value": "error"}


def _number(text: str) -> int | float:
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() else value


def examples(table: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(the op and what it takes, an example action) for each shape of op, on this table's columns;
    where the question quotes a line with values in it (rlm.run.typed.fields), on those values.

    A small model copies an example's column whatever the question asks: given the values of the
    quoted line as columns and told of them, it still ranked or totalled the table's nearest
    column (a host field, a pid) in 47 of 52 first actions on the development sets' questions
    that quote such lines. An example on the quoted line's own value is one written for the
    question, so a copy of it is no doubt (example_cells)."""
    every = table_columns(table).columns
    own = tuple(c for c in every if c.quoted is None and c.span is None)
    cols = TableColumns(own, {})
    quoted_text = _pick([c.name for c in every if c.quoted is not None and c.kind == TEXT])
    quoted_number = _pick([c.name for c in every if c.quoted is not None and c.kind == NUMBER])
    # An entity: a text column whose values are not listed whole (many of them); the raw line
    # only when the table parsed no text column.
    text = [n for n in cols.names(TEXT) if n != "line"]
    entity = _pick([c.name for c in cols.columns if c.name in text and c.values is None], text, ["line"])
    fractional = [
        c.name
        for c in cols.columns
        if c.kind == NUMBER and c.type.upper().split("(")[0] in ("DOUBLE", "FLOAT", "REAL", "DECIMAL")
    ]
    measures = [c.name for c in cols.columns if c.amount and c.values is None]
    number = quoted_number or _pick(fractional, measures)
    when = _pick(cols.names(TIME), cols.names(DATE))
    category = quoted_text or _pick([c.name for c in cols.columns if c.values])
    entity = quoted_text or entity
    assert entity is not None
    out: list[tuple[str, dict[str, Any]]] = [
        ("count", {"op": "count", "where": [_filter_example(cols, read_fields(table))]}),
        ("count_distinct", {"op": "count_distinct", "column": entity}),
        ("top (most common values)", {"op": "top", "column": entity, "k": 5}),
    ]
    if number is not None:
        # Each with its own example: shown a sum alone, the model wrote a sum where an average
        # was asked, and the most common value where the largest was (first actions on the
        # development sets' questions that quote such a number: 2 of 7 sums, 3 of 19 tops).
        out += [
            ("sum", {"op": "sum", "column": number}),
            ("avg", {"op": "avg", "column": number}),
            ("min|max", {"op": "max", "column": number}),
        ]
    if when is not None:
        out.append(("group per minute|hour|day|month", {"op": "group", "by": when, "bucket": "hour"}))
    # Lines per value: an aggregate shown here was copied where the most lines were asked, so
    # it is named, not shown.
    aggregates = ", or agg sum|avg|min|max of a column" if number else ""
    out.append(
        (
            f"group per value (lines per value{aggregates}; order most|least|key)",
            {"op": "group", "by": category or entity},
        )
    )
    if quoted_number is not None:
        # The lines with the largest value of the quoted line's number, whole: what else they
        # say (the instance, the task) is what a question about the slowest one asks for.
        rows = {"op": "rows", "columns": [quoted_text or "line", quoted_number], "order_by": quoted_number}
    else:
        rows = {"op": "rows", "columns": [n for n in (when, entity) if n is not None][:2]}
    out.append(("rows (first|last k; order_by)", {**rows, "take": "last", "k": 3}))
    out += [
        ("grep (Python regex)", {"op": "grep", "pattern": "[Ee]rror"}),
        ("peek", {"op": "peek", "start": 1, "length": 20}),
        ("final", {"op": "final", "answer": "..."}),
    ]
    return out


def example_cells(table: dict[str, Any]) -> frozenset[str]:
    """The cells the example queries (count ... rows) compile to on this table: a model's query
    that compiles to one of them is the example copied, not written for its question (on the
    development sets' traces 22 of 23 such answers were wrong)."""
    cells = set()
    for _, example in examples(table):
        if names_a_field(example, table) and example["op"] != "count":
            continue  # on the value of the line the question quotes: written for the question
        # (a count's filter value is the example's, whichever column it is on)
        action = to_action(json.dumps(example), table)
        if isinstance(action, Action) and action.name == "execute":
            cells.add(str(action.args["code"]))
    return frozenset(cells)


def describe_actions(table: dict[str, Any]) -> str:
    """The system prompt's lines on the typed actions: one JSON object a turn, the ops, their fields."""
    lines = ["One JSON action a turn, one of:"]
    for what, action in examples(table):
        # Each begins by saying what the question asks for, as the schema has it.
        said = {"asks": ASKS[action["op"]], **action}
        lines.append(f"{what} {json.dumps(said, separators=(',', ':'), ensure_ascii=False)}")
    lines.append(
        f'"where": up to {MAX_FILTERS} filters, all must hold; cmp = != < <= > >= contains starts_with '
        '(text, any case); time "YYYY-MM-DD hh:mm" (a day alone: whole day). '
        f"k 1-{MAX_K}, default {DEFAULT_K}. "
        '"min_count": N (top, count_distinct, group): only values on N or more lines.'
    )
    quoted = [c for c in table_columns(table).columns if c.quoted is not None]
    if quoted:
        # The values of the lines the question quotes, as columns (rlm.run.typed.fields), and
        # the address a line holds.
        told = "; ".join(
            f'"{c.name}" ({c.kind}) holds the last IP address of each line'
            if c.quoted == ADDRESS_TEMPLATE
            else f'"{c.name}" ({c.kind}) holds the first {c.name.strip("<>").upper()} of each line'
            if c.quoted in SHAPE_TEMPLATES
            else f'"{c.name}" ({c.kind}) is the {c.name} of each line "{c.quoted}"'
            for c in quoted
        )
        shapes = {ADDRESS_TEMPLATE, *SHAPE_TEMPLATES}
        source = (
            "the lines the question quotes" if any(c.quoted not in shapes for c in quoted) else "raw lines"
        )
        lines.append(f"Columns from {source}, empty on other lines: {told}.")
    spans = [(c.name, c.span) for c in table_columns(table).columns if c.span is not None]
    if spans:
        told = "; ".join(f'"{name}" = {end} - {start}' for name, (start, end) in spans)
        unit = offered_unit(table) or "seconds"
        lines.append(f"{unit.capitalize()} between a row's times (number): {told}.")
    # What each shape of question asks for, in the words questions use: a small model otherwise
    # reaches for the first example (a count) whatever was asked.
    lines.append(
        "Choose by the question: how many -> count; how many different -> count_distinct; which value "
        "appears most often -> top; which value, hour or day has the most or fewest lines, or the largest or "
        "smallest total or average -> group, order most|least; which line has the largest value, or the "
        "first or last -> rows; words in raw lines -> grep or line contains. "
        "Put each condition the question states in where. Two steps are fine: find a value, then filter on it."
    )
    return "\n".join(lines)
