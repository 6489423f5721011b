"""Typed actions: the JSON schema built from a real table, the checks a reply passes, and the
SQL it compiles to, on the tables the real builder makes of three formats (an Apache log, a
CSV, JSON lines). A compiled action must give the same rows in DuckDB as the query written by
hand, and its cell must run in the real locked-down worker.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_once, exec_cell, product_worker
from jsonschema import Draft202012Validator

from rlm.input.source import open_source
from rlm.input.tablevalues import VOCABULARY
from rlm.run.actions import Action, ParseError
from rlm.run.typed import (
    action_schema,
    compile_sql,
    describe_actions,
    left_out,
    quoted_part,
    to_action,
    with_conditions,
    with_quoted,
)
from rlm.run.typed.columns import NUMBER, Column
from rlm.run.typed.describe import examples
from rlm.run.typed.placeholders import literal_parts
from rlm.run.typed.vocabulary import AGGREGATES, ASKS, MAX_FILTERS
from rlm.text.sqltext import sql_name, sql_value

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    "apache": ROOT / "fixtures" / "access.log",
    "csv": ROOT / "fixtures" / "data" / "seaborn" / "taxis.csv",
    "jsonl": ROOT / "fixtures" / "data" / "elastic" / "nginxplus_json_logs",
}
FORMATS = list(FILES)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[dict[str, Any], Any]]]:
    """Each format's table description, built once, and a read-only DuckDB connection to it."""
    cache = tmp_path_factory.mktemp("typed-cache")
    out = {}
    for name, path in FILES.items():
        table = open_source(str(path), cache_dir=str(cache)).profile.table
        assert table is not None, f"no table was built for {path}"
        con = duckdb.connect(table["path"], read_only=True)
        con.execute("SET TimeZone = 'UTC'")  # as the worker's sql() connection has it
        out[name] = (table, con)
    yield out
    for _, con in out.values():
        con.close()


def _rows(con: Any, query: str) -> list[tuple[Any, ...]]:
    """The rows of a query, floats rounded: two sums of the same doubles may differ in the last bit."""
    return [
        tuple(round(v, 6) if isinstance(v, float) else v for v in row)
        for row in con.execute(query).fetchall()
    ]


def _branches(schema: dict[str, Any], after: bool = False) -> dict[str, dict[str, Any]]:
    """The schema's branches by the ops they take: those of a column's own values, or (`after`)
    those of a value read after a text, where the two differ."""
    out = {}
    for branch in schema["anyOf"]:
        op = branch["properties"]["op"]
        if ("after" in branch["required"]) != after and op.get("enum", [op.get("const")])[0] in AGGREGATES:
            continue
        for name in op.get("enum", [op.get("const")]):
            out[name] = branch
    return out


# --------------------------------------------------------------------------- the schema


def _expected_columns(name: str, table: dict[str, Any]) -> list[str]:
    """The columns an action may name, found independently: the table's own for a log or a CSV;
    for JSON lines, the records' scalar keys and the scalar fields of their objects."""
    if name != "jsonl":
        return [n for n, _ in table["columns"]]
    first = json.loads(FILES[name].read_text().splitlines()[0])
    out = ["line_no", "line"]
    for key, value in first.items():
        if isinstance(value, dict):
            out += [f"{key}.{k}" for k, v in value.items() if isinstance(v, int | float | str | bool)]
        elif not isinstance(value, list):
            out.append(key)
    return out


@pytest.mark.parametrize("name", FORMATS)
def test_the_schema_names_exactly_the_tables_columns(tables: dict, name: str) -> None:
    table, _ = tables[name]
    schema = action_schema(table)
    Draft202012Validator.check_schema(schema)
    branches = _branches(schema)
    expected = _expected_columns(name, table)
    assert branches["count_distinct"]["properties"]["column"]["enum"] == expected
    assert branches["rows"]["properties"]["columns"]["items"]["enum"] == expected
    numbers = branches["sum"]["properties"]["column"]["enum"]
    assert numbers == _expected_numbers(name, table)
    # a total, an average and each extreme: a branch each, held to its own phrase (ASKS)
    for op in ("sum", "avg", "min", "max"):
        assert branches[op]["properties"]["op"] == {"const": op}
        assert branches[op]["properties"]["asks"] == {"const": ASKS[op]}
    assert "line" not in numbers and all(n in expected for n in numbers)
    # a value read after a text: of the text columns where values follow words (the lead-ins the
    # table found), `after` required for a total or extreme; none offered where there are none
    texts = [n for n, t in table["columns"] if t == "VARCHAR" and n in table["lead_ins"]]
    offered = _branches(schema, after=True)
    for op in ("top", "count_distinct"):
        assert ("after" in offered[op]["properties"]) == bool(texts), (op, texts)
    assert ("sum" in offered and "min" in offered) == bool(texts), texts
    if texts:
        assert offered["sum"] is offered["min"] and offered["sum"]["required"][-2:] == ["column", "after"]
        assert offered["sum"]["properties"]["column"]["enum"] == texts
    groups = [b["properties"] for b in schema["anyOf"] if b["properties"]["op"] == {"const": "group"}]
    assert groups[0]["by"]["enum"] == expected and "bucket" not in groups[0]
    assert all(g["column"]["enum"] == numbers for g in groups)
    if name == "jsonl":  # no time column: no time buckets offered
        assert len(groups) == 1
    else:
        times = [n for n, t in table["columns"] if t.startswith("TIMESTAMP")]
        assert len(groups) == 2 and groups[1]["by"]["enum"] == times
        assert groups[1]["bucket"]["enum"] == ["minute", "hour", "day", "month", "hour_of_day"]


# Number columns of the fixtures' tables that name or code each row: never a total's column.
_CODES = {"line_no", "status", "pid", "src_port", "port"}


def _expected_numbers(name: str, table: dict[str, Any]) -> list[str]:
    """The columns of amounts, found independently: by DuckDB type, or by the JSON records'
    values; never line_no (a line's position) nor an id or a code."""
    if name != "jsonl":
        return [n for n, t in table["columns"] if t in ("BIGINT", "INTEGER", "DOUBLE") and n not in _CODES]
    first = json.loads(FILES[name].read_text().splitlines()[0])
    flat: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return [
        k
        for k, v in flat.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in _CODES
    ]


@pytest.mark.parametrize("name", ["apache", "csv"])
def test_a_column_known_whole_takes_only_its_values(tables: dict, name: str) -> None:
    table, con = tables[name]
    filters = _branches(action_schema(table))["count"]["properties"]["where"]["items"]["anyOf"]
    whole = {b["properties"]["column"]["const"]: b for b in filters if "const" in b["properties"]["column"]}
    listed = {c: v for c, v in table["values"].items() if len(v) < VOCABULARY}
    assert listed and set(whole) == set(listed)
    for column, branch in whole.items():
        held = {
            r[0]
            for r in con.execute(
                f'SELECT DISTINCT "{column}" FROM log WHERE "{column}" IS NOT NULL'
            ).fetchall()
        }
        # and "" where some rows hold none of them (rlm.run.typed.empties)
        (empty,) = con.execute(f'SELECT count(*) FILTER (WHERE "{column}" IS NULL) FROM log').fetchone()
        assert set(branch["properties"]["value"]["enum"]) == held | ({""} if empty else set())
        assert branch["properties"]["cmp"]["enum"] == ["=", "!="]
        # `=` on it is no longer open to any value
        open_eq = [
            b
            for b in filters
            if b["properties"]["cmp"]["enum"] == ["=", "!="] and "enum" in b["properties"]["column"]
        ]
        assert all(column not in b["properties"]["column"]["enum"] for b in open_eq)


_GRAMMAR_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "anyOf",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
}


def _keywords(node: Any, found: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _keywords(item, found)
    elif isinstance(node, dict):
        for key, value in node.items():
            found.add(key)
            if key == "properties":
                for field in value.values():
                    _keywords(field, found)
            elif key not in ("enum", "const", "required"):
                _keywords(value, found)
        if "properties" in node:
            assert node.get("additionalProperties") is False and node.get("type") == "object"


@pytest.mark.parametrize("name", FORMATS)
def test_the_schema_keeps_to_what_llama_cpp_compiles_to_a_grammar(tables: dict, name: str) -> None:
    found: set[str] = set()
    schema = action_schema(tables[name][0])
    _keywords(schema, found)
    assert found <= _GRAMMAR_KEYWORDS, found - _GRAMMAR_KEYWORDS
    assert len(json.dumps(schema, separators=(",", ":"))) < 24_000  # compiled by the server every turn


# --------------------------------------------------------------------------- the schema and the checks agree

GOOD = {
    "apache": [
        {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]},
        {"op": "count", "where": [{"column": "status", "cmp": ">=", "value": 500}]},
        {
            "op": "top",
            "column": "path",
            "k": 50,
            "where": [{"column": "agent", "cmp": "contains", "value": "bot"}],
        },
        {"op": "group", "by": "ts", "bucket": "minute", "agg": "max", "column": "bytes", "order": "most"},
        {"op": "rows", "columns": ["ts", "ip"], "order_by": "bytes", "take": "last"},
        {"op": "grep", "pattern": "x", "max_matches": 5, "ignore_case": True},
        {"op": "peek", "start": 3, "length": 100},
        {"op": "final", "answer": "35"},
    ],
    "csv": [
        {"op": "avg", "column": "fare", "where": [{"column": "payment", "cmp": "!=", "value": "cash"}]},
        {"op": "max", "column": "pickup"},
        {"op": "count", "where": [{"column": "pickup_zone", "cmp": "starts_with", "value": "Upper"}]},
    ],
    "jsonl": [
        {"op": "sum", "column": "connections.accepted"},
        {"op": "count", "where": [{"column": "address", "cmp": "=", "value": "206.251.255.64"}]},
    ],
}
BAD = {
    "apache": [
        ({"op": "top", "column": "nope"}, "no column 'nope'; the columns are: line_no, line, ip, "),
        ({"op": "count", "where": [{"column": "nope", "cmp": "=", "value": 1}]}, "no column 'nope'"),
        ({"op": "sum", "column": "path"}, "sum needs a number column; 'path' is text (VARCHAR)"),
        (
            {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 500}]},
            "no line has status 500; status holds only: 200, 301, 304, 404, 206",
        ),
        (
            {"op": "count", "where": [{"column": "status", "cmp": "contains", "value": "40"}]},
            "'contains' works on text",
        ),
        (
            {"op": "count", "where": [{"column": "path", "cmp": ">", "value": "a"}]},
            "'path' is text; compare it with",
        ),
        (
            {"op": "group", "by": "status", "bucket": "hour"},
            "bucket needs a time or date column; 'status' is number",
        ),
        (
            {"op": "group", "by": "ip", "agg": "sum", "column": "path"},
            "agg sum needs a number column; 'path' is text",
        ),
        ({"op": "count", "column": "ip"}, '"count" takes only: asks, op, where; not "column"'),
        ({"op": "top", "column": "ip", "k": 0}, '"k" must be at least 1'),
        ({"op": "median", "column": "bytes"}, "unknown op 'median'; the ops are: count, count_distinct"),
        ({"op": "rows", "columns": []}, '"columns" must be a list of column names'),
        ({"op": "count", "where": [{"column": "ip", "cmp": "=", "value": "1"}] * 5}, "at most 4 filters"),
    ],
    "csv": [
        (
            {"op": "count", "where": [{"column": "color", "cmp": "=", "value": "blue"}]},
            "color holds only: 'yellow', 'green'",
        ),
        ({"op": "avg", "column": "pickup"}, "avg needs a number column; 'pickup' is time (TIMESTAMP)"),
    ],
    "jsonl": [
        (
            {"op": "sum", "column": "connections"},
            "'connections' holds fields; name one of them: connections.accepted",
        ),
        ({"op": "group", "by": "timestamp", "bucket": "day"}, "the time or date columns are: (none)"),
    ],
}


# What the grammar's subset cannot say (how a time is written) only the checks refuse.
CHECKS_ONLY = [
    (
        {"op": "count", "where": [{"column": "pickup", "cmp": ">=", "value": "2019-03-05T10:00:00+02:00"}]},
        "'pickup' holds times without a time zone (TIMESTAMP); give the time without one",
    ),
    (
        {"op": "count", "where": [{"column": "pickup", "cmp": ">=", "value": "yesterday"}]},
        "'yesterday' is not a time 'pickup' can compare; a time is written like",
    ),
    (
        {"op": "count", "where": [{"column": "fare", "cmp": ">", "value": "a lot"}]},
        "'fare' is a number column (DOUBLE); give a number, not 'a lot'",
    ),
]


@pytest.mark.parametrize("name", FORMATS)
def _said(action: dict) -> dict:
    """The action as the schema has the model write it: what is asked first (ASKS)."""
    op = action.get("op")
    return {"asks": ASKS[op], **action} if isinstance(op, str) and op in ASKS else action


@pytest.mark.parametrize("name", FORMATS)
def test_the_schema_has_what_is_asked_said_first_and_holds_the_op_to_it(tables: dict, name: str) -> None:
    table, _ = tables[name]
    schema = action_schema(table)
    validator = Draft202012Validator(schema)
    for branch in schema["anyOf"]:
        assert next(iter(branch["properties"])) == "asks" and "asks" in branch["required"]
    top = {"op": "top", "column": _expected_columns(name, table)[0]}
    assert validator.is_valid(_said(top))
    assert not validator.is_valid(top)  # the grammar has it said
    assert not validator.is_valid({**_said(top), "asks": ASKS["rows"]})  # and the op is the phrase's
    # The checks take an action with or without it (a server without grammars), the same way.
    assert to_action(json.dumps(top), table) == to_action(json.dumps(_said(top)), table)


@pytest.mark.parametrize("name", FORMATS)
def test_the_schema_and_the_checks_accept_the_same_good_actions(tables: dict, name: str) -> None:
    table, _ = tables[name]
    validator = Draft202012Validator(action_schema(table))
    good = GOOD[name] + [action for _, action in examples(table)]
    for action in good:
        errors = list(validator.iter_errors(_said(action)))
        assert not errors, (action, errors[0].message)
        assert isinstance(to_action(json.dumps(action), table), Action), action
        assert isinstance(to_action(json.dumps(_said(action)), table), Action), action


@pytest.mark.parametrize("name", FORMATS)
def test_the_schema_and_the_checks_refuse_the_same_bad_actions_saying_why(tables: dict, name: str) -> None:
    table, _ = tables[name]
    validator = Draft202012Validator(action_schema(table))
    for action, says in BAD[name]:
        assert not validator.is_valid(_said(action)), action
        result = to_action(json.dumps(action), table)
        assert isinstance(result, ParseError) and says in result.message, (action, result)
    if name == "csv":
        for action, says in CHECKS_ONLY:
            result = to_action(json.dumps(action), table)
            assert isinstance(result, ParseError) and says in result.message, (action, result)


def test_an_unknown_column_is_told_with_the_columns_there_are(tables: dict) -> None:
    table, _ = tables["apache"]
    result = to_action('{"op": "count_distinct", "column": "client"}', table)
    names = ", ".join(n for n, _ in table["columns"])
    assert isinstance(result, ParseError)
    assert result.message == f"no column 'client'; the columns are: {names}"


def test_what_is_unambiguous_is_taken_as_meant(tables: dict) -> None:
    table, _ = tables["apache"]
    # "404" for a number, "get" for the one value GET, a k past the maximum brought down to it
    sql = compile_sql(
        {
            "op": "top",
            "column": "ip",
            "k": 500,
            "where": [
                {"column": "status", "cmp": "=", "value": "404"},
                {"column": "method", "cmp": "=", "value": "get"},
            ],
        },
        table,
    )
    assert '"status" = 404 AND "method" = \'GET\'' in sql and sql.endswith("LIMIT 50")
    with pytest.raises(ValueError, match="is not a query"):
        compile_sql({"op": "peek", "start": 1}, table)


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"op": "count"}\n```',
        'I will count the lines.\n{"op": "count"}\nThat is all.',
        '[{"op": "count"}]',
    ],
)
def test_a_reply_with_fences_or_words_around_its_json_is_read(tables: dict, reply: str) -> None:
    action = to_action(reply, tables["apache"][0])
    assert isinstance(action, Action) and action.name == "execute"
    assert action.args["code"] == "result = sql('SELECT count(*) AS \"count\" FROM log')\nprint(result)"


def test_a_reply_that_is_not_one_json_action_is_told_so(tables: dict) -> None:
    table, _ = tables["apache"]
    for reply, says in [
        ("", "your reply was empty"),
        ("count the 404s", "no JSON object in your reply"),
        ('{"op": "count",}', "not valid JSON"),
        ('{"op": "count", "where": [{"column": "ip", "cmp": "=", "value": "1"}]', "not valid JSON"),
        ('{"column": "ip"}', 'missing "op"'),
    ]:
        result = to_action(reply, table)
        assert isinstance(result, ParseError) and says in result.message, (reply, result)


def test_grep_peek_and_final_are_the_existing_actions(tables: dict) -> None:
    table, _ = tables["apache"]
    assert to_action('{"op": "grep", "pattern": " 404 "}', table) == Action(
        "grep", {"pattern": " 404 ", "max_matches": 50, "ignore_case": False}
    )
    assert to_action('{"op": "peek", "start": 7}', table) == Action(
        "peek", {"start": 7, "length": 20, "unit": "lines"}
    )
    assert to_action('{"op": "final", "answer": "35"}', table) == Action("final", {"answer": "35"})
    empty = to_action('{"op": "grep", "pattern": ""}', table)
    assert isinstance(empty, ParseError) and "must not be empty" in empty.message


def test_top_of_a_time_column_is_refused_with_the_group_that_counts_per_period(tables: dict) -> None:
    """`top` of a timestamp counts lines per exact second; asked for a busiest period, the model
    is shown the `group` per bucket, and that action, sent as shown, runs."""
    table, con = tables["apache"]
    refused = to_action('{"op": "top", "column": "ts", "k": 3}', table)
    assert isinstance(refused, ParseError)
    assert "to the second" in refused.message
    shown = re.search(r"\{.*?\}", refused.message)
    assert shown is not None
    assert isinstance(to_action(shown.group(0), table), Action)
    hours = _rows(con, compile_sql(json.loads(shown.group(0)), table))
    by_hand = _rows(
        con,
        "SELECT date_trunc('hour', ts) AS h, count(*) AS n FROM log GROUP BY 1 ORDER BY n DESC, h LIMIT 3",
    )
    assert [row[-1] for row in hours[:3]] == [row[1] for row in by_hand]
    assert str(by_hand[0][0])[:13] in str(hours[0])
    # Other columns keep their most common values.
    assert isinstance(to_action('{"op": "top", "column": "ip", "k": 3}', table), Action)


@pytest.mark.parametrize("name", FORMATS)
def test_the_first_turns_schema_has_every_op_but_final(tables: dict, name: str) -> None:
    table, _ = tables[name]
    full, first = action_schema(table), action_schema(table, answering=False)
    ops = [set(_branches(schema)) for schema in (full, first)]
    assert "final" in ops[0] and ops[1] == ops[0] - {"final"}
    assert [b for b in full["anyOf"] if b not in first["anyOf"]] == [full["anyOf"][-1]]


def test_the_one_line_a_question_quotes_is_its_literal_part(tables: dict) -> None:
    table, _ = tables["apache"]
    assert quoted_part("How many lines hold 'Googlebot/2.1'?", table) == "Googlebot/2.1"
    assert (
        quoted_part('Count the "Googlebot/2.1 (+http://<url>)" requests', table) == "Googlebot/2.1 (+http://"
    )
    assert quoted_part("Which IP sent 'N bytes to <host>' most?", table) == "bytes to"
    # Two quotes may be alternatives or a comparison; a column's name or listed value is not a
    # line; a negated quote is no condition to add; a quote of placeholders holds no text.
    assert quoted_part("Lines with 'Googlebot' or 'bingbot'?", table) is None
    assert quoted_part("The most common 'path'?", table) is None
    assert quoted_part("How many 'GET' requests?", table) is None
    assert quoted_part("How many requests not from 'Googlebot'?", table) is None
    assert quoted_part("How many 'N.N.N.N - <x>' lines?", table) is None
    assert quoted_part("How many lines hold Googlebot?", table) is None


def test_a_text_written_with_placeholders_is_its_fixed_parts() -> None:
    assert literal_parts("rhost=<host>  user=root") == ["rhost", "user=root"]
    assert literal_parts("close, N bytes sent, M bytes received") == ["close", "bytes sent", "bytes received"]
    assert literal_parts("Connection closed by ...") == ["Connection closed by"]
    assert literal_parts("Failed password") == ["Failed password"]  # no placeholder: as written
    assert literal_parts("<ip> - N") == []  # nothing fixed to match on


def test_a_contains_filter_written_with_placeholders_matches_the_lines_holding_each_part(
    tmp_path: Path,
) -> None:
    """A model that copies a quoted line whole into `contains` (placeholders and all) gets the
    lines that hold each of its fixed parts, not none: counted here by Python on the raw lines."""
    table = open_source(str(_AUTH), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    written = "Failed password for invalid user <user> from <ip> port N ssh2"
    parts = ["Failed password for invalid user", "from", "port", "ssh2"]
    assert literal_parts(written) == parts
    lines = _AUTH.read_text(encoding="utf-8").splitlines()
    by_python = sum(all(p.lower() in line.lower() for p in parts) for line in lines)
    assert 0 < by_python < len(lines) and not any(written.lower() in line.lower() for line in lines)
    action = {"op": "count", "where": [{"column": "line", "cmp": "contains", "value": written}]}
    con = duckdb.connect(table["path"], read_only=True)
    try:
        assert _rows(con, compile_sql(action, table)) == [(by_python,)]
    finally:
        con.close()


def test_a_number_in_a_text_filter_is_matched_whole(tables: dict) -> None:
    """`contains` a number keeps the texts that hold it whole, not as the end
    of a longer run of digits or letters (a hex id, a bigger number), and an address not as the
    start of a longer one: counted here by Python over the raw paths and addresses."""
    table, con = tables["apache"]
    paths = con.execute("SELECT path FROM log WHERE path IS NOT NULL").fetchall()
    ips = [ip for (ip,) in con.execute("SELECT ip FROM log").fetchall()]

    def whole(needle: str, text: str, inside: str) -> bool:
        return re.search(rf"(?<![{inside}]){re.escape(needle)}(?![{inside}])", text.lower()) is not None

    numbers = Counter(n for (p,) in paths for n in set(re.findall(r"\d{3,}", p)))
    # A number some paths hold alone and others inside a longer token: the two counts differ.
    needle = next(
        n
        for n, _ in numbers.most_common()
        if 0 < sum(whole(n, p, "0-9a-z") for (p,) in paths) < sum(n in p.lower() for (p,) in paths)
    )
    action = {"op": "count", "where": [{"column": "path", "cmp": "contains", "value": needle}]}
    assert _rows(con, compile_sql(action, table)) == [(sum(whole(needle, p, "0-9a-z") for (p,) in paths),)]
    # An address that begins a longer one (`a.b.c.1` of `a.b.c.15`) keeps its own lines only.
    prefix = next(
        a for a in sorted(set(ips)) if any(b != a and b.startswith(a) and b[len(a)].isdigit() for b in ips)
    )
    action = {"op": "count", "where": [{"column": "ip", "cmp": "contains", "value": prefix}]}
    assert _rows(con, compile_sql(action, table)) == [(sum(whole(prefix, ip, "0-9") for ip in ips),)]
    assert sum(whole(prefix, ip, "0-9") for ip in ips) < sum(prefix in ip for ip in ips)
    # A text that neither starts nor ends with a digit is a plain `contains`, as before.
    action = {"op": "count", "where": [{"column": "path", "cmp": "contains", "value": "/images/"}]}
    assert _rows(con, compile_sql(action, table)) == [(sum("/images/" in p.lower() for (p,) in paths),)]


def test_a_glob_in_a_text_filter_fits_the_texts_it_stands_for(tables: dict) -> None:
    """A `*` a model copies from a question's glob (`/presentations/*/images`, `Mozilla/5.0*`)
    stands for any run of text, in `contains`, `starts_with` and `=`: counted against Python's
    reading of the same column."""
    table, con = tables["apache"]
    paths = [p for (p,) in con.execute("SELECT path FROM log WHERE path IS NOT NULL").fetchall()]
    agents = [a for (a,) in con.execute("SELECT agent FROM log WHERE agent IS NOT NULL").fetchall()]
    cases = [
        (
            "path",
            "contains",
            "/presentations/*/images",
            sum("/presentations/" in p.lower() and "/images" in p.lower() for p in paths),
        ),
        ("path", "starts_with", "/blog/*", sum(p.startswith("/blog/") for p in paths)),
        ("agent", "=", "Mozilla/5.0*", sum(a.lower().startswith("mozilla/5.0") for a in agents)),
    ]
    for column, cmp, value, by_python in cases:
        assert 0 < by_python < len(paths), (column, value)
        action = {"op": "count", "where": [{"column": column, "cmp": cmp, "value": value}]}
        assert _rows(con, compile_sql(action, table)) == [(by_python,)], (column, cmp, value)


def test_a_quoted_part_is_added_only_where_the_query_has_no_text_filter_and_room() -> None:
    top = {"op": "top", "column": "ip", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    assert with_quoted(top, "Googlebot")["where"][-1] == {
        "column": "line",
        "cmp": "contains",
        "value": "Googlebot",
    }
    agent = {"column": "agent", "cmp": "contains", "value": "bot"}
    assert with_quoted({**top, "where": [agent]}, "Googlebot") is None
    full = [{"column": "status", "cmp": "!=", "value": n} for n in range(MAX_FILTERS)]
    assert with_quoted({**top, "where": full}, "Googlebot") is None


# --------------------------------------------------------------------------- compiled SQL = SQL by hand

SAME_ROWS = {
    "apache": [
        (
            {
                "op": "count",
                "where": [
                    {"column": "status", "cmp": ">=", "value": 400},
                    {"column": "method", "cmp": "=", "value": "GET"},
                ],
            },
            "SELECT count(*) FROM log WHERE status >= 400 AND method = 'GET'",
        ),
        (
            {
                "op": "count",
                "where": [
                    {"column": "ts", "cmp": ">=", "value": "2015-05-17 12:00"},
                    {"column": "ts", "cmp": "<", "value": "2015-05-17 13:00"},
                ],
            },
            "SELECT count(*) FROM log WHERE ts >= TIMESTAMPTZ '2015-05-17 12:00:00+00' AND ts < TIMESTAMPTZ '2015-05-17 13:00:00+00'",
        ),
        (
            # a time with its zone, and a time as the log writes it: the same instant in UTC
            {
                "op": "count",
                "where": [
                    {"column": "ts", "cmp": ">=", "value": "2015-05-17T14:00:00+02:00"},
                    {"column": "ts", "cmp": "<", "value": "[17/May/2015:13:30:00 +0000]"},
                ],
            },
            "SELECT count(*) FROM log WHERE ts >= TIMESTAMPTZ '2015-05-17 12:00:00+00' "
            "AND ts < TIMESTAMPTZ '2015-05-17 13:30:00+00'",
        ),
        (
            {"op": "count", "where": [{"column": "ts", "cmp": "<=", "value": "2015-05-17 10:05"}]},
            "SELECT count(*) FROM log WHERE ts < TIMESTAMPTZ '2015-05-17 10:06:00+00'",
        ),
        (
            {"op": "count", "where": [{"column": "ts", "cmp": "=", "value": "2015-05-18"}]},
            "SELECT count(*) FROM log WHERE CAST(ts AS DATE) = DATE '2015-05-18'",
        ),
        (
            {
                "op": "count_distinct",
                "column": "ip",
                "where": [{"column": "status", "cmp": "=", "value": 404}],
            },
            "SELECT count(DISTINCT ip) FROM log WHERE status = 404",
        ),
        (
            {
                "op": "top",
                "column": "path",
                "k": 5,
                "where": [{"column": "agent", "cmp": "contains", "value": "GoogleBot"}],
            },
            "SELECT path, count(*) AS n FROM log WHERE path IS NOT NULL AND lower(agent) LIKE '%googlebot%' "
            "GROUP BY path ORDER BY n DESC, path LIMIT 5",
        ),
        (
            {"op": "sum", "column": "bytes", "where": [{"column": "status", "cmp": "=", "value": 200}]},
            "SELECT sum(bytes) FROM log WHERE status = 200",
        ),
        ({"op": "avg", "column": "bytes"}, "SELECT avg(bytes) FROM log"),
        ({"op": "max", "column": "ts"}, "SELECT max(ts) FROM log"),
        (
            {"op": "group", "by": "ts", "bucket": "hour", "k": 50},
            "SELECT strftime(date_trunc('hour', ts), '%Y-%m-%d %H:00') AS h, count(*) AS n FROM log "
            "WHERE ts IS NOT NULL GROUP BY h ORDER BY n DESC, h LIMIT 50",
        ),
        (
            {"op": "group", "by": "status", "agg": "sum", "column": "bytes"},
            "SELECT status, count(*), sum(bytes) AS s FROM log WHERE status IS NOT NULL GROUP BY status "
            "ORDER BY s DESC NULLS LAST, status LIMIT 20",
        ),
        (
            {
                "op": "rows",
                "columns": ["ts", "path"],
                "take": "last",
                "k": 3,
                "where": [{"column": "status", "cmp": "=", "value": 404}],
            },
            "SELECT line_no, ts, path FROM log WHERE status = 404 ORDER BY line_no DESC LIMIT 3",
        ),
        (
            # min_count: only the values on that many lines or more
            {"op": "top", "column": "ip", "k": 50, "min_count": 50},
            "SELECT ip, count(*) AS n FROM log WHERE ip IS NOT NULL GROUP BY ip HAVING count(*) >= 50 "
            "ORDER BY n DESC, ip LIMIT 50",
        ),
        (
            {
                "op": "count_distinct",
                "column": "ip",
                "min_count": 20,
                "where": [{"column": "status", "cmp": "=", "value": 200}],
            },
            "SELECT count(*) FROM (SELECT ip FROM log WHERE status = 200 AND ip IS NOT NULL GROUP BY ip "
            "HAVING count(*) >= 20)",
        ),
    ],
    "csv": [
        (
            {
                "op": "count",
                "where": [
                    {"column": "pickup_borough", "cmp": "=", "value": "Queens"},
                    {"column": "payment", "cmp": "=", "value": "cash"},
                ],
            },
            "SELECT count(*) FROM log WHERE pickup_borough = 'Queens' AND payment = 'cash'",
        ),
        (
            {"op": "count", "where": [{"column": "pickup", "cmp": "=", "value": "2019-03-05"}]},
            "SELECT count(*) FROM log WHERE CAST(pickup AS DATE) = DATE '2019-03-05'",
        ),
        (
            {"op": "count", "where": [{"column": "pickup", "cmp": ">", "value": "2019-03-30"}]},
            "SELECT count(*) FROM log WHERE pickup >= TIMESTAMP '2019-03-31 00:00:00'",
        ),
        (
            {
                "op": "count_distinct",
                "column": "pickup_zone",
                "where": [{"column": "color", "cmp": "=", "value": "green"}],
            },
            "SELECT count(DISTINCT pickup_zone) FROM log WHERE color = 'green'",
        ),
        (
            {
                "op": "top",
                "column": "dropoff_zone",
                "k": 3,
                "where": [{"column": "pickup_borough", "cmp": "=", "value": "Manhattan"}],
            },
            "SELECT dropoff_zone, count(*) AS n FROM log WHERE dropoff_zone IS NOT NULL AND pickup_borough = 'Manhattan' "
            "GROUP BY dropoff_zone ORDER BY n DESC, dropoff_zone LIMIT 3",
        ),
        (
            {
                "op": "sum",
                "column": "tip",
                "where": [{"column": "payment", "cmp": "=", "value": "credit card"}],
            },
            "SELECT sum(tip) FROM log WHERE payment = 'credit card'",
        ),
        ({"op": "avg", "column": "fare"}, "SELECT avg(fare) FROM log"),
        (
            # the header line and the rides with no payment have none: NULL is never a value
            {
                "op": "top",
                "column": "payment",
                "k": 50,
                "where": [{"column": "color", "cmp": "!=", "value": "green"}],
            },
            "SELECT payment, count(*) AS n FROM log WHERE payment IS NOT NULL AND color <> 'green' "
            "GROUP BY payment ORDER BY n DESC, payment LIMIT 50",
        ),
        (
            {"op": "group", "by": "pickup", "bucket": "day", "k": 50},
            "SELECT strftime(CAST(pickup AS DATE), '%Y-%m-%d') AS d, count(*) AS n FROM log "
            "WHERE pickup IS NOT NULL GROUP BY d ORDER BY n DESC, d LIMIT 50",
        ),
        (
            {"op": "group", "by": "payment", "agg": "avg", "column": "tip", "order": "least"},
            "SELECT payment, count(*), avg(tip) AS a FROM log WHERE payment IS NOT NULL GROUP BY payment "
            "ORDER BY a ASC NULLS LAST, payment LIMIT 20",
        ),
        (
            {"op": "group", "by": "dropoff_borough", "min_count": 100},
            "SELECT dropoff_borough, count(*) AS n FROM log WHERE dropoff_borough IS NOT NULL GROUP BY 1 "
            "HAVING count(*) >= 100 ORDER BY n DESC, dropoff_borough LIMIT 20",
        ),
        (
            {"op": "rows", "columns": ["pickup", "fare"], "order_by": "fare", "take": "last", "k": 3},
            "SELECT line_no, pickup, fare FROM log ORDER BY fare DESC NULLS LAST, line_no DESC LIMIT 3",
        ),
    ],
    "jsonl": [
        (
            {
                "op": "count",
                "where": [
                    {"column": "address", "cmp": "=", "value": "206.251.255.64"},
                    {"column": "pid", "cmp": ">", "value": 64856},
                ],
            },
            "SELECT count(*) FROM log WHERE address = '206.251.255.64' AND pid > 64856",
        ),
        ({"op": "count_distinct", "column": "pid"}, "SELECT count(DISTINCT pid) FROM log"),
        (
            {"op": "top", "column": "pid", "k": 3},
            "SELECT pid, count(*) AS n FROM log WHERE pid IS NOT NULL GROUP BY pid ORDER BY n DESC, pid LIMIT 3",
        ),
        (
            {"op": "top", "column": "address", "k": 5, "min_count": 2},
            "SELECT address, count(*) AS n FROM log WHERE address IS NOT NULL GROUP BY address "
            "HAVING count(*) >= 2 ORDER BY n DESC, address LIMIT 5",
        ),
        ({"op": "max", "column": "connections.accepted"}, "SELECT max(connections.accepted) FROM log"),
        ({"op": "avg", "column": "requests.current"}, 'SELECT avg(requests."current") FROM log'),
        (
            {"op": "group", "by": "pid", "agg": "max", "column": "connections.active"},
            "SELECT pid, count(*), max(connections.active) AS m FROM log WHERE pid IS NOT NULL GROUP BY pid "
            "ORDER BY m DESC NULLS LAST, pid LIMIT 20",
        ),
        (
            {"op": "rows", "columns": ["timestamp", "requests.total"], "take": "last", "k": 2},
            'SELECT line_no, "timestamp", requests.total FROM log ORDER BY line_no DESC LIMIT 2',
        ),
    ],
}


@pytest.mark.parametrize("name", FORMATS)
def test_compiled_actions_give_the_rows_of_the_sql_written_by_hand(tables: dict, name: str) -> None:
    table, con = tables[name]
    for action, by_hand in SAME_ROWS[name]:
        compiled = compile_sql(action, table)
        expected = _rows(con, by_hand)
        assert expected and expected != [(0,)] and expected != [(None,)], by_hand  # a check that can tell
        assert _rows(con, compiled) == expected, (action, compiled)
        # deterministic: the same action, the same text
        assert compile_sql(json.loads(json.dumps(action)), table) == compiled


def test_a_value_with_quotes_survives_into_the_query(tables: dict) -> None:
    table, _ = tables["apache"]
    value = 'it\'s "odd" \\ and\nnew'
    action = {"op": "count", "where": [{"column": "path", "cmp": "=", "value": value}]}
    result = to_action(json.dumps(action), table)
    assert isinstance(result, Action) and result.name == "execute"
    tree = ast.parse(result.args["code"])
    assert [type(node) for node in tree.body] == [ast.Assign, ast.Expr]
    call = tree.body[0].value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "sql"
    query = ast.literal_eval(call.args[0])
    assert query == compile_sql(action, table)
    # The query finds exactly the row that holds the value: a table of its own, with that path.
    with duckdb.connect() as con:
        con.execute("CREATE TABLE log AS SELECT 1 AS line_no, ? AS path UNION ALL SELECT 2, 'it'", [value])
        assert con.execute(query).fetchall() == [(1,)]


# --------------------------------------------------------------------------- the model's lines


@pytest.mark.parametrize("name", FORMATS)
def test_the_description_has_an_example_of_each_shape_on_this_tables_columns(tables: dict, name: str) -> None:
    table, _ = tables[name]
    text = describe_actions(table)
    assert len(text) < 2000, len(text)  # about 500 tokens of a 4,096-token window (sum, avg, max each shown)
    shown = [json.loads(line[line.index("{") :]) for line in text.splitlines()[1:-2]]
    assert [_said(a) for _, a in examples(table)] == shown
    ops = {a["op"] for a in shown}
    assert {"count", "count_distinct", "top", "sum", "group", "rows", "grep", "peek", "final"} <= ops
    names = {n for n, _ in table["columns"]} | set(_expected_columns(name, table))
    for action in shown:
        named = [action.get("column"), action.get("by"), *action.get("columns", [])]
        named += [f["column"] for f in action.get("where", [])]
        assert all(n in names for n in named if n is not None), action
        assert isinstance(to_action(json.dumps(action), table), Action), action


def test_a_table_of_plain_lines_still_has_every_shape_it_can(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("".join(f"note {i % 7} written freely\n" for i in range(300)))
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None and [n for n, _ in table["columns"]] == ["line_no", "line"]
    validator = Draft202012Validator(action_schema(table))
    shown = [a for _, a in examples(table)]
    assert {a["op"] for a in shown} == {
        "count",
        "count_distinct",
        "top",
        "group",
        "rows",
        "grep",
        "peek",
        "final",
    }
    for action in shown:
        assert validator.is_valid(_said(action)), action
        assert isinstance(to_action(json.dumps(action), table), Action), action
    with duckdb.connect(table["path"], read_only=True) as con:
        top = _rows(con, compile_sql({"op": "top", "column": "line", "k": 2}, table))
    assert top == [("note 0 written freely", 43), ("note 1 written freely", 43)]


# --------------------------------------------------------------------------- in the real worker


def test_a_compiled_cell_runs_in_the_real_worker() -> None:
    base = Path(tempfile.mkdtemp(prefix="rlm-typed-"))
    try:
        os.chmod(base, 0o755)  # the worker drops root to nobody
        data = base / "access.log"
        shutil.copy(FILES["apache"], data)
        os.chmod(data, 0o644)
        sandbox = product_worker(data, base / "cache")
        try:
            table = open_source(str(data), cache_dir=str(base / "cache")).profile.table
            assert table is not None
            for action, says in [
                ({"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}, "35"),
                ({"op": "top", "column": "method"}, "GET    | 1993"),
            ]:
                cell = to_action(json.dumps(action), table)
                assert isinstance(cell, Action) and cell.name == "execute"
                kind, reply = exec_cell(sandbox, cell.args["code"], wall=20, cpu=5)
                assert kind == "reply" and reply["error"] is None, reply
                assert says in reply["output"], reply["output"]
        finally:
            sandbox.kill()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _listed_condition(table: dict[str, Any]) -> tuple[str, Any] | None:
    """A column the table lists whole and one of its values a question would state as a condition."""
    for column, counted in (table.get("values") or {}).items():
        for value, _ in counted:
            text = str(value)
            if len(text) >= 3 and (any(c.isalpha() for c in text) or int(text) >= 100):
                return column, value
    return None


def _condition_case(table: dict[str, Any], name: str) -> tuple[str, Any, str, str, str, dict] | None:
    """(column, value, another text column, a question naming the value, the condition as told,
    a query of the other column with no filter) on this format's table; None for JSON lines."""
    found = _listed_condition(table)
    if found is None:
        assert name == "jsonl", "the access log and the CSV list a status and a colour"
        return None
    column, value = found
    other = next(c for c, t in table["columns"] if t == "VARCHAR" and c not in (column, "line"))
    question = f"How many different {other} values are there on the lines with {value}?"
    said = f"{column} = {value!r}" if isinstance(value, str) else f"{column} = {value}"
    return column, value, other, question, said, {"op": "count_distinct", "column": other}


@pytest.mark.parametrize("name", FORMATS)
def test_a_value_the_question_names_and_the_query_leaves_out_is_found(tables: dict, name: str) -> None:
    table, _ = tables[name]
    case = _condition_case(table, name)
    if case is None:
        return
    column, value, other, question, said, plain = case
    assert left_out(question, json.dumps(plain), table) == [said]
    assert left_out(question.upper(), json.dumps(plain), table) == [said]  # any case
    # With a filter on that column, or on the value in another: nothing left out.
    on_it = {**plain, "where": [{"column": column, "cmp": "=", "value": value}]}
    assert left_out(question, json.dumps(on_it), table) == []
    in_line = {**plain, "where": [{"column": "line", "cmp": "contains", "value": str(value)}]}
    assert left_out(question, json.dumps(in_line), table) == []
    # Ranking that column compares its values: naming one is no condition.
    ranked = {"op": "top", "column": column, "k": 3}
    assert left_out(question, json.dumps(ranked), table) == []
    # Not named, named inside another word, or not a query: nothing.
    assert left_out(f"How many different {other} values are there?", json.dumps(plain), table) == []
    assert left_out(f"How many on lines with x{value}x?", json.dumps(plain), table) == []
    assert left_out(question, json.dumps({"op": "grep", "pattern": str(value)}), table) == []
    assert left_out(question, "not an action", table) == []


def test_a_time_of_day_column_is_offered_as_the_text_it_is_written_as(tmp_path: Path) -> None:
    """DuckDB reads a CSV's `HH:MM:SS` column as TIME, which no op took: the column was left out
    of the schema. Offered as its text, its most common value is the time as the file writes it."""
    import csv
    from collections import Counter

    path = ROOT / "fixtures" / "data" / "loghub" / "Spark_2k.log_structured.csv"
    table = open_source(str(path), cache_dir=str(tmp_path)).profile.table
    assert table is not None and ["Time", "TIME"] in table["columns"]
    assert "Time" in _branches(action_schema(table))["top"]["properties"]["column"]["enum"]
    with path.open(newline="") as fh:
        counts = Counter(row["Time"] for row in csv.DictReader(fh))
    (busiest, most), (_, second) = counts.most_common(2)
    assert most > second
    with duckdb.connect(table["path"], read_only=True) as con:
        top = con.execute(compile_sql({"op": "top", "column": "Time", "k": 1}, table)).fetchall()
        same = con.execute(
            compile_sql({"op": "count", "where": [{"column": "Time", "cmp": "=", "value": busiest}]}, table)
        ).fetchall()
    assert top == [(busiest, most)] and same == [(most,)]


def test_a_time_the_question_states_and_the_query_ignores_is_left_out(tables: dict) -> None:
    """Told and in doubt, never added: whether after or before is meant is the question's to say."""
    table, _ = tables["apache"]
    time_column = next(n for n, t in table["columns"] if t.startswith("TIMESTAMP"))
    counted = {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    question = "How many 404s were logged from 2015-05-17 10:05 to 10:35?"
    assert left_out(question, json.dumps(counted), table) == [f"{time_column} at 2015-05-17 10:05 and 10:35"]
    # A filter on the time, a count per hour, a time only in a quoted line or given as a form's example: none.
    bounded = {
        **counted,
        "where": [*counted["where"], {"column": time_column, "cmp": ">=", "value": "2015-05-17 10:05"}],
    }
    assert left_out(question, json.dumps(bounded), table) == []
    per_hour = {"op": "group", "by": time_column, "bucket": "hour", "where": counted["where"]}
    assert left_out(question, json.dumps(per_hour), table) == []
    assert left_out('How many 404 lines read "took 10:05"?', json.dumps(counted), table) == []
    assert left_out("When were most 404s sent? Answer as in e.g. 10:05.", json.dumps(counted), table) == []


@pytest.mark.parametrize("name", FORMATS)
def test_a_plain_condition_left_out_is_added_to_the_query(tables: dict, name: str) -> None:
    table, con = tables[name]
    case = _condition_case(table, name)
    if case is None:
        return
    column, value, other, question, said, plain = case
    on_it = {**plain, "where": [{"column": column, "cmp": "=", "value": value}]}
    added = with_conditions(question, json.dumps(plain), table)
    assert added is not None and added[1] == [said]
    assert added[0] == on_it
    assert _rows(con, compile_sql(added[0], table)) == _rows(
        con,
        f"SELECT count(DISTINCT {sql_name(other)}) FROM log WHERE {sql_name(column)} = {sql_value(value)}",
    )
    # Nothing to add: the filter is there, or the question does not name the value.
    assert with_conditions(question, json.dumps(on_it), table) is None
    assert with_conditions(f"How many different {other} values are there?", json.dumps(plain), table) is None
    # A value excluded just before it keeps every other value's rows; a looser negation, or no
    # room left for a filter, is not plain.
    off = {**plain, "where": [{"column": column, "cmp": "!=", "value": value}]}
    for excluding in (f"lines other than {value}", f"lines that are not {value}"):
        asked = f"How many different {other} values are there on {excluding}?"
        assert with_conditions(asked, json.dumps(plain), table) == (off, [said.replace(" = ", " != ", 1)])
    without = f"How many different {other} values are there on lines without any {value}?"
    assert with_conditions(without, json.dumps(plain), table) is None
    full = {
        **plain,
        "where": [{"column": "line", "cmp": "contains", "value": f"x{n}"} for n in range(MAX_FILTERS)],
    }
    assert with_conditions(question, json.dumps(full), table) is None
    assert left_out(question, json.dumps(full), table) == [said]  # told, and doubted, instead


@pytest.mark.parametrize("name", FORMATS)
def test_a_word_value_leading_a_hyphenated_compound_is_stated(tables: dict, name: str) -> None:
    """ "VALUE-rows" states a word's value, as "VALUE rows" does; "VALUE-free" takes it back, and
    a value ending in a digit is not stated by the start of a longer hyphenated one."""
    table, _ = tables[name]
    case = _condition_case(table, name)
    if case is None:
        return
    column, value, other, _, said, plain = case
    action = json.dumps(plain)
    compound = f"How many different {other} values are there on {value}-tagged lines?"
    taken_back = f"How many different {other} values are there on {value}-free lines?"
    longer = f"How many different {other} values are there on {value}-7 lines?"
    if str(value)[-1:].isalpha():
        assert left_out(compound, action, table) == [said]
        assert left_out(taken_back, action, table) == []
    else:
        assert left_out(compound, action, table) == []
    assert left_out(longer, action, table) == []


def test_a_value_two_columns_list_is_not_added_for_either(tables: dict) -> None:
    table, _ = tables["csv"]
    listed: dict[str, list[str]] = {}
    for column, counted in (table.get("values") or {}).items():
        for value, _ in counted:
            listed.setdefault(str(value), []).append(column)
    shared = next(v for v, cols in listed.items() if len(cols) > 1 and len(v) >= 3 and not v.isdigit())
    question = f"How many trips were there in {shared}?"
    plain = json.dumps({"op": "count"})
    assert with_conditions(question, plain, table) is None  # the question may mean either
    assert left_out(question, plain, table)  # told, and doubted, instead


def test_a_value_two_columns_list_goes_to_the_one_the_question_s_words_name(tables: dict) -> None:
    """The word nearest the value that begins as a word of one column's name and of no other's
    (`picked` and `pickup_...`) names that column: its condition is added, and the count is
    that column's. Both named, each value goes to its own; a word both names share tells nothing."""
    table, con = tables["csv"]
    listed: dict[str, list[str]] = {}
    for column, counted in (table.get("values") or {}).items():
        for value, _ in counted:
            listed.setdefault(str(value), []).append(column)
    pairs = [(v, cols) for v, cols in listed.items() if len(cols) == 2 and len(v) >= 3 and not v.isdigit()]
    (first, (a, b)), (second, _) = pairs[0], next(p for p in pairs[1:] if set(p[1]) == set(pairs[0][1]))
    word_a, word_b = (c.split("_")[0] for c in (a, b))
    assert word_a[:4] != word_b[:4], (a, b)
    plain = json.dumps({"op": "count"})
    named = with_conditions(f"How many rows have {word_b} set, and {word_a} in {first}?", plain, table)
    assert named is not None and named[1] == [f"{a} = {first!r}"]
    assert _rows(con, compile_sql(named[0], table)) == _rows(
        con, f"SELECT count(*) FROM log WHERE {sql_name(a)} = {sql_value(first)}"
    )
    both = with_conditions(f"How many went from {word_a} {first} to {word_b} {second}?", plain, table)
    assert both is not None and sorted(both[1]) == sorted([f"{a} = {first!r}", f"{b} = {second!r}"])
    shared_word = a.split("_")[-1]  # e.g. the `borough` of both names
    if shared_word == b.split("_")[-1]:
        assert with_conditions(f"How many rows have the {shared_word} {first}?", plain, table) is None


def test_a_value_with_underscores_is_named_by_its_words(tmp_path: Path) -> None:
    table = open_source(str(ROOT / "fixtures" / "auth.log"), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    joined = [
        (column, value)
        for column, counted in (table.get("values") or {}).items()
        for value, _ in counted
        if isinstance(value, str) and "_" in value.strip("_")
    ]
    assert joined, "the auth log lists a kind of event written with underscores"
    column, value = joined[0]
    plain = json.dumps({"op": "count_distinct", "column": "host"})
    spoken = value.replace("_", " ")
    assert left_out(f"How many hosts had a {spoken}?", plain, table) == [f"{column} = {value!r}"]
    assert left_out(f"How many hosts had a {spoken.replace(' ', '')}?", plain, table) == []
    # A filter on the raw line's words is a filter on that condition.
    worded = json.dumps(
        {**json.loads(plain), "where": [{"column": "line", "cmp": "contains", "value": spoken}]}
    )
    assert left_out(f"How many hosts had a {spoken}?", worded, table) == []


@pytest.mark.parametrize("name", ["apache", "csv"])
def test_a_total_of_line_numbers_is_refused_in_words(tables: dict, name: str) -> None:
    table, _ = tables[name]
    for action in (
        {"op": "sum", "column": "line_no"},
        {"op": "group", "by": "line", "agg": "avg", "column": "line_no"},
    ):
        refused = to_action(json.dumps(action), table)
        assert isinstance(refused, ParseError) and "line_no is a line's position" in refused.message
    assert isinstance(
        to_action(json.dumps({"op": "max", "column": "line_no"}), table), Action
    )  # the last line


def test_a_total_of_ids_or_codes_is_refused_and_never_offered(tmp_path: Path, tables: dict) -> None:
    """A process id, a port or a status names or codes its row: a total or an average of it is
    refused in words that name the amounts there are, neither the schema nor the prompt's
    examples offer one, and its extremes and filters stay open."""
    auth = open_source(str(_AUTH), cache_dir=str(tmp_path)).profile.table
    apache, _ = tables["apache"]
    for table, column in ((auth, "pid"), (auth, "src_port"), (apache, "status")):
        assert table is not None
        for action in (
            {"op": "sum", "column": column},
            {"op": "avg", "column": column},
            {"op": "group", "by": "line", "agg": "sum", "column": column},
        ):
            refused = to_action(json.dumps(action), table)
            assert isinstance(refused, ParseError), action
            assert f"{column} is an id or a code of each row" in refused.message
        assert isinstance(to_action(json.dumps({"op": "max", "column": column}), table), Action)
        where = [{"column": column, "cmp": ">", "value": 1}]
        assert isinstance(to_action(json.dumps({"op": "count", "where": where}), table), Action)
        branches = _branches(action_schema(table))
        summed = branches["sum"]["properties"]["column"]["enum"] if "sum" in branches else []
        assert column not in summed
        assert all(
            action.get("column") != column
            for op, action in examples(table)
            if action.get("op") in ("sum", "avg")
        )
    refused = to_action(json.dumps({"op": "sum", "column": "status"}), apache)
    assert isinstance(refused, ParseError) and "amounts: bytes;" in refused.message
    # What a name's last word says: a count of statuses is an amount, an event's id is not.
    names = {"status_count": True, "EventId": False, "requests.total": True, "bytes": True, "Pid": False}
    assert {n: Column(n, "BIGINT", NUMBER, sql_name(n)).amount for n in names} == names


# --------------------------------------------------------------------------- a value read after a text

_AUTH = ROOT / "fixtures" / "auth.log"
_HDFS = ROOT / "fixtures" / "data" / "loghub" / "HDFS_2k.log"


def _after_in_raw_lines(path: Path, marker: str, number: bool) -> list[str]:
    """What follows `marker` (any case) in each raw line's message (its text after the header's
    first ": ", as both formats write it), found here by Python's re: a number (commas dropped),
    else the token up to a space, a comma or a bracket, a closing full stop or colon cut. Lines
    with nothing there give nothing."""
    token = r"\s*(-?\d[\d,]*(?:\.\d+)?)" if number else r"\s*([^\s,;'\"()<>\[\]{}]+)"
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        message = line.split(": ", 1)[-1]
        m = re.search(re.escape(marker) + token, message, re.IGNORECASE)
        if m and (value := m.group(1).replace(",", "") if number else m.group(1).rstrip(".:")):
            found.append(value)
    return found


@pytest.mark.parametrize("path", [_AUTH, _HDFS])
def test_a_value_read_after_a_text_is_what_the_raw_lines_write_there(tmp_path: Path, path: Path) -> None:
    """`after` on a free-text column: the most common value, the distinct count, and a total and
    the extremes of the number written after a lead-in the table found, each the same as Python's
    re finds in the raw lines."""
    table = open_source(str(path), cache_dir=str(tmp_path)).profile.with_table().table
    assert table is not None and table["lead_ins"], table.get("lead_ins")
    column = next(iter(table["lead_ins"]))
    con = duckdb.connect(table["path"], read_only=True)
    try:
        for marker in table["lead_ins"][column]:
            words = _after_in_raw_lines(path, marker.strip(), number=False)
            numbers = [float(v) for v in _after_in_raw_lines(path, marker.strip(), number=True)]
            assert words, marker  # a lead-in is written before values
            top = con.execute(
                compile_sql({"op": "top", "column": column, "after": marker, "k": 3}, table)
            ).fetchall()
            counts = sorted((-words.count(w), w) for w in set(words))[:3]
            assert top == [(w, -n) for n, w in counts], marker
            distinct = {"op": "count_distinct", "column": column, "after": marker}
            assert con.execute(compile_sql(distinct, table)).fetchall() == [(len(set(words)),)]
            for op, want in (
                ("sum", sum(numbers) if numbers else None),
                ("min", min(numbers, default=None)),
                ("max", max(numbers, default=None)),
            ):
                got = con.execute(
                    compile_sql({"op": op, "column": column, "after": marker}, table)
                ).fetchall()
                assert got[0][1] == len(numbers) and got[0][0] == pytest.approx(want), (marker, op)
    finally:
        con.close()


def test_after_is_held_to_a_text_column_and_a_few_words(tables: dict) -> None:
    table, _ = tables["apache"]
    for action, told in (
        ({"op": "top", "column": "bytes", "after": "x"}, "\"after\" needs a text column; 'bytes' is number"),
        (
            {"op": "sum", "column": "path", "after": ""},
            '"after" must be the text written just before the value',
        ),
        ({"op": "top", "column": "path", "after": "x" * 61}, '"after" takes at most 60 characters'),
        ({"op": "count", "after": "page="}, '"count" takes only: asks, op, where; not "after"'),
    ):
        problem = to_action(json.dumps(action), table)
        assert isinstance(problem, ParseError) and told in problem.message, (action, problem)
    # a total of a text column is refused unless a value is read out of it
    plain = to_action(json.dumps({"op": "sum", "column": "path"}), table)
    assert isinstance(plain, ParseError) and "needs a number column" in plain.message
    assert isinstance(to_action(json.dumps({"op": "max", "column": "path", "after": "page="}), table), Action)


def test_min_count_is_taken_by_the_ops_that_count_lines_per_value_only(tables: dict) -> None:
    """`min_count` is in the schema's top, count_distinct and group branches, and nowhere else;
    the checks refuse it elsewhere, and below 1, saying so."""
    table, _ = tables["csv"]
    branches = _branches(action_schema(table))
    taking = {op for op, branch in branches.items() if "min_count" in branch["properties"]}
    assert taking == {"top", "count_distinct", "group"}
    for bad, said in [
        ({"op": "count", "min_count": 5}, '"count" takes only'),
        ({"op": "top", "column": "payment", "min_count": 0}, '"min_count" must be at least 1'),
        ({"op": "group", "by": "payment", "min_count": "many"}, '"min_count" must be a whole number'),
    ]:
        result = to_action(json.dumps(bad), table)
        assert isinstance(result, ParseError) and said in result.message, bad


def test_a_filter_compares_two_columns_of_a_kind_where_its_value_names_the_other(tables: dict) -> None:
    """`tip > tolls`, `dropoff > pickup`: the value names another column of the same kind (a time
    with a time or date), and the rows are those SQL written by hand gives; a column of another
    kind, or text matching, is refused as a value that is no number."""
    table, con = tables["csv"]
    for action, by_hand in [
        (
            {"op": "count", "where": [{"column": "tip", "cmp": ">", "value": "tolls"}]},
            "SELECT count(*) FROM log WHERE tip > tolls",
        ),
        (
            {
                "op": "count",
                "where": [
                    {"column": "total", "cmp": "<", "value": "fare"},
                    {"column": "tip", "cmp": ">", "value": 0},
                ],
            },
            "SELECT count(*) FROM log WHERE total < fare AND tip > 0",
        ),
        (
            {"op": "max", "column": "fare", "where": [{"column": "dropoff", "cmp": ">=", "value": "pickup"}]},
            "SELECT max(fare) FROM log WHERE dropoff >= pickup",
        ),
    ]:
        expected = _rows(con, by_hand)
        assert _rows(con, compile_sql(action, table)) == expected, action
    assert (
        _rows(
            con,
            compile_sql({"op": "count", "where": [{"column": "tip", "cmp": ">", "value": "tolls"}]}, table),
        )[0][0]
        > 0
    )
    for bad in [
        {"op": "count", "where": [{"column": "tip", "cmp": ">", "value": "pickup"}]},
        {"op": "count", "where": [{"column": "tip", "cmp": ">", "value": "tip"}]},
    ]:
        result = to_action(json.dumps(bad), table)
        assert isinstance(result, ParseError) and "give a number" in result.message, bad


def test_the_cli_runs_a_comparison_of_two_columns_in_the_worker(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the count of rows where one number column is above
    another, as Python counts them in the CSV, is what the model is shown and what is printed."""
    import csv

    with FILES["csv"].open(newline="") as fh:
        want = sum(1 for r in csv.DictReader(fh) if float(r["tip"] or 0) > float(r["tolls"] or 0))
    action = {"op": "count", "where": [{"column": "tip", "cmp": ">", "value": "tolls"}]}
    question = "On how many rides did the tip come to more than the tolls? Just the number."
    proc, stub = ask_typed_once(FILES["csv"], question, action, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    assert str(want) in stub.requests[1]["body"]["messages"][-1]["content"]


def test_a_value_joined_by_or_is_no_plain_condition(tables: dict) -> None:
    """Beside another value of its column ("404 or 304"), a value is a condition of two values:
    told, never added as one `=`. Beside a word that is no value of it ("HEAD or other"),
    the question keeps both ways, and names no condition at all."""
    table, _ = tables["apache"]
    plain = {"op": "count_distinct", "column": "ip"}
    both = "How many different ip values are there on lines with 404 or 304?"
    assert with_conditions(both, json.dumps(plain), table) is None
    assert left_out(both, json.dumps(plain), table) != []
    assert (
        with_conditions("How many different ip values on lines with 404?", json.dumps(plain), table)
        is not None
    )
    either = "How many different ip values sent HEAD or other requests?"
    assert left_out(either, json.dumps(plain), table) == []
    assert with_conditions(either, json.dumps(plain), table) is None
