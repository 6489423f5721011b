"""A found text column of fewer than 40 values is listed whole (rlm.input.tablevalues), so a
value a question states of it is a condition rlm adds; and a name-like value stated only inside
a longer name is no condition (rlm.run.typed.conditions)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from conftest import ask_typed_once

from rlm.input.source import open_source
from rlm.run.typed import with_question_conditions

COUNTRIES = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "iso3166" / "all.csv"


def _holds(*_: object, **__: object) -> bool:
    return True


def test_a_column_of_more_values_than_a_category_but_few_is_listed_whole(tmp_path: Path) -> None:
    with COUNTRIES.open(newline="") as fh:
        regions = {r["sub-region"] for r in csv.DictReader(fh) if r["sub-region"]}
    assert 12 < len(regions) < 40
    table = open_source(str(COUNTRIES), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    assert {v for v, _ in table["values"]["sub-region"]} == regions


def test_a_name_inside_a_longer_one_adds_no_condition(tmp_path: Path) -> None:
    path = tmp_path / "places.csv"
    path.write_text("place,region\n" + "".join(f"p{i},{r}\n" for i, r in enumerate(["Asia", "Europe"] * 5)))
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    action = json.dumps({"op": "count"})
    assert (
        with_question_conditions("How many places lie in the Central Asia group?", action, table, _holds)
        is None
    )
    added = with_question_conditions("How many places lie in Asia?", action, table, _holds)
    assert added is not None and added[1] == ["region = 'Asia'"]


def test_the_cli_keeps_a_list_to_the_sub_region_the_question_names(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the rows the model is shown are those of the
    sub-region, not of the region whose name is its last word."""
    with COUNTRIES.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    want = sorted(r["alpha-3"] for r in rows if r["sub-region"] == "Southern Europe")
    others = [r["alpha-3"] for r in rows if r["region"] == "Europe" and r["sub-region"] != "Southern Europe"]
    assert want and others
    question = "Which alpha-3 codes belong to Southern Europe? One comma-separated line."
    sent = {"op": "rows", "columns": ["alpha-3"], "k": 50}
    proc, stub = ask_typed_once(COUNTRIES, question, sent, ", ".join(want), cwd=tmp_path)
    assert proc.returncode == 0 and sorted(proc.stdout.strip().split(", ")) == want, proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "sub-region = 'Southern Europe'" in told and "region = 'Europe'" not in told
    assert all(code in told for code in want) and not any(code in told for code in others)


def test_the_column_a_later_sentence_lists_is_the_one_asked_for(tmp_path: Path) -> None:
    from rlm.run.typed.asked import asked_column
    from rlm.run.typed.columns import table_columns

    table = open_source(str(COUNTRIES), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    cols = table_columns(table)
    assert asked_column("Which entries are Polynesian? List the alpha-3 codes.", table, cols) == "alpha-3"
    assert asked_column("List the three-letter (alpha-3) codes of Polynesia.", table, cols) == "alpha-3"
    assert asked_column("Which entries are Polynesian?", table, cols) is None


def test_a_quoted_name_inside_a_longer_one_adds_no_condition(tmp_path: Path) -> None:
    path = tmp_path / "places.csv"
    path.write_text("place,region\n" + "".join(f"p{i},{r}\n" for i, r in enumerate(["Asia", "Europe"] * 5)))
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    question = "How many places lie in the 'Central Asia' group?"
    # No line writes the quote, so it is no condition of its own either.
    assert (
        with_question_conditions(question, json.dumps({"op": "count"}), table, lambda *_, **__: False) is None
    )


def test_the_cli_lists_the_column_asked_of_the_rows_of_the_value_stated(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a model that counts the rows of each sub-region is
    shown the codes asked for, of the sub-region the question states."""
    with COUNTRIES.open(newline="") as fh:
        want = sorted(r["alpha-3"] for r in csv.DictReader(fh) if r["sub-region"] == "Polynesia")
    assert len(want) > 3
    question = "Which entries belong to 'Polynesia'? List the alpha-3 codes, comma-separated."
    sent = {"op": "group", "by": "sub-region"}
    proc, stub = ask_typed_once(COUNTRIES, question, sent, ", ".join(want), cwd=tmp_path)
    assert proc.returncode == 0 and sorted(proc.stdout.strip().split(", ")) == want, proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "top alpha-3, the values the question asks for, instead of sub-region" in told
    assert "sub-region = 'Polynesia'" in told and all(f"{code} " in told for code in want)
