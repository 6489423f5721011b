"""Rows that hold no value of a listed column (a CSV's empty field, NULL in the table): a filter
`= ""` keeps them, `!= ""` the others, and a ranking that leaves them out says how many it left
(rlm.run.typed.empties)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import ask_typed_cli, ask_typed_once, run_typed

from rlm.input.source import open_source
from rlm.run.typed.columns import table_columns
from rlm.run.typed.measure import with_asked_measure
from rlm.run.typed.vocabulary import EMPTY

SHELVES = ["oak", "pine", "", "oak", "birch", "", "oak", "pine", "", "birch", "oak"]


def _stock(tmp_path: Path) -> Path:
    path = tmp_path / "stock.csv"
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["sku", "shelf", "count"])
        for n, shelf in enumerate(SHELVES, start=1):
            out.writerow([f"S{n:03d}", shelf, n * 3])
    return path


def _table(path: Path, tmp_path: Path) -> dict:
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    return table


def test_a_listed_column_with_empty_rows_offers_the_empty_value(tmp_path: Path) -> None:
    table = _table(_stock(tmp_path), tmp_path)
    shelf = next(c for c in table_columns(table).columns if c.name == "shelf")
    assert shelf.values is not None and shelf.values[-1] == EMPTY
    assert set(shelf.values[:-1]) == {s for s in SHELVES if s}
    full = next(c for c in table_columns(table).columns if c.name == "sku")
    assert full.values is None or EMPTY not in full.values  # every row holds one


@pytest.mark.parametrize(
    ("cmp", "want"), [("=", SHELVES.count("")), ("!=", len(SHELVES) - SHELVES.count(""))]
)
def test_a_filter_on_the_empty_value_keeps_the_rows_that_hold_none(
    tmp_path: Path, cmp: str, want: int
) -> None:
    table = _table(_stock(tmp_path), tmp_path)
    _, rows = run_typed({"op": "count", "where": [{"column": "shelf", "cmp": cmp, "value": ""}]}, table)
    assert rows == [(want,)]
    _, skus = run_typed(
        {"op": "rows", "columns": ["sku"], "where": [{"column": "shelf", "cmp": "=", "value": ""}]}, table
    )
    assert [s for _, s in skus] == [f"S{n:03d}" for n, s in enumerate(SHELVES, start=1) if not s]


def test_the_cli_says_what_a_ranking_left_out_and_the_filter_that_keeps_it(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a ranking of shelves leaves out the rows that have
    none; the model is told how many and the filter, and its count with that filter is the answer."""
    path = _stock(tmp_path)
    none = SHELVES.count("")
    replies = [
        json.dumps({"op": "top", "column": "shelf", "k": 5}),
        json.dumps({"op": "count", "where": [{"column": "shelf", "cmp": "=", "value": ""}]}),
        json.dumps({"op": "final", "answer": str(none)}),
        json.dumps({"answer": str(none)}),
    ]
    proc, stub = ask_typed_cli(path, "How many items sit on no shelf at all?", replies, cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"Note: {none} of the rows this query kept hold no shelf" in told, told[-800:]
    assert '{"column": "shelf", "cmp": "=", "value": ""}' in told
    assert f"count\n-----\n{none}\n" in stub.requests[2]["body"]["messages"][-1]["content"]
    assert proc.returncode == 0 and proc.stdout == f"{none}\n", proc.stderr


def test_rows_the_question_says_hold_no_value_are_queried_whatever_the_model_ranked(tmp_path: Path) -> None:
    """ "whose sub-region is blank", "no intermediate-region": rlm runs the rows (or their count)
    that hold none, where the model ranked the column's values; through the CLI and the worker."""
    iso = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "iso3166" / "all.csv"
    with iso.open(newline="") as fh:
        records = list(csv.DictReader(fh))
    blank = sorted(r["alpha-2"] for r in records if not r["sub-region"])
    none = sum(1 for r in records if not r["intermediate-region"])
    assert blank and 0 < none < len(records)
    ranked = {"op": "top", "column": "sub-region", "k": 1}
    question = "List by alpha-2 the countries with a blank sub-region."
    proc, stub = ask_typed_once(iso, question, ranked, ",".join(blank), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{','.join(blank)}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "the rows whose sub-region is empty, with their alpha-2" in told
    assert all(f"| {code} " in told or f"| {code}\n" in told for code in blank), told
    table = open_source(str(iso), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    counted = with_asked_measure(
        "Count the countries with no intermediate-region.", json.dumps(ranked), table
    )
    assert counted is not None and counted[0]["op"] == "count"
    _, rows = run_typed(counted[0], table)
    assert rows == [(none,)]
    # a column named beside "no" that says nothing of empty rows is left alone
    assert with_asked_measure("The sub-region listing the most countries?", json.dumps(ranked), table) is None
    assert with_asked_measure("Is there no region named Atlantis?", json.dumps(ranked), table) is None
