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
