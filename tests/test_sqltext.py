"""SQL quoting: a name or value taken from a file reaches DuckDB as data, whatever it holds."""

from __future__ import annotations

import duckdb
import pytest

from rlm.text.sqltext import sql_name, sql_string, sql_value

HOSTILE = [
    "plain",
    "with space",
    'quote"inside',
    "it's",
    'x"; DROP TABLE t; --',
    "a'); DROP TABLE t; --",
    "back\\slash",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_name_and_value_round_trip_through_duckdb(text: str) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({sql_name(text)} VARCHAR)")
    con.execute(f"INSERT INTO t VALUES ({sql_string(text)}), ('other')")
    rows = con.execute(
        f"SELECT {sql_name(text)} FROM t WHERE {sql_name(text)} = {sql_value(text)}"
    ).fetchall()
    assert rows == [(text,)]
    assert [c[0] for c in con.execute("SELECT * FROM t").description] == [text]
    assert con.execute("SELECT count(*) FROM t").fetchone() == (2,)  # nothing was dropped


def test_values_compare_as_sql_would() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (ok BOOLEAN, n INTEGER, x DOUBLE, d DATE)")
    con.execute("INSERT INTO t VALUES (true, 404, 1.5, '2015-05-18'), (false, 200, 2.5, '2015-05-19')")
    assert sql_value(True) == "true" and sql_value(404) == "404"
    where = f"ok = {sql_value(True)} AND n = {sql_value(404)} AND x = {sql_value(1.5)} AND d = {sql_value('2015-05-18')}"
    assert con.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone() == (1,)
