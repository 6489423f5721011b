"""The measure a question's words ask for, where a typed query computes another one
(rlm.run.typed.measure): an average asked and a sum sent, the fewest asked and the most common
sent, the largest value asked and its most common values sent."""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_cli, ask_typed_once, latest_trace

from rlm.input.source import open_source
from rlm.run.doubts import doubt_clause, measure_doubt
from rlm.run.typed import compile_sql
from rlm.run.typed.fields import read_fields, sample_lines, with_quoted_fields
from rlm.run.typed.measure import measure_left_out, with_asked_measure

TAXIS = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "seaborn" / "taxis.csv"
ACCESS = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"


@pytest.fixture(scope="module")
def taxis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    table = open_source(str(TAXIS), cache_dir=str(tmp_path_factory.mktemp("measure-cache"))).profile.table
    assert table is not None
    yield table


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    with TAXIS.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(action: dict[str, Any], table: dict[str, Any]) -> list[tuple[Any, ...]]:
    with duckdb.connect(table["path"], read_only=True) as con:
        return con.execute(compile_sql(action, table)).fetchall()


def _changed(
    question: str, action: dict[str, Any], table: dict[str, Any]
) -> tuple[dict[str, Any], str] | None:
    return with_asked_measure(question, json.dumps(action), table)


def test_a_sum_where_the_question_asks_an_average_becomes_the_average_of_the_same_rows(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    cash = {"column": "payment", "cmp": "=", "value": "cash"}
    sent = {"asks": "a total", "op": "sum", "column": "fare", "where": [cash]}
    changed = _changed("For the cash rides, what is the mean of the fare paid?", sent, taxis)
    assert changed is not None
    query, change = changed
    assert change == "avg instead of sum"
    assert query == {"asks": "an average", "op": "avg", "column": "fare", "where": [cash]}
    want = statistics.mean(float(r["fare"]) for r in rows if r["payment"] == "cash")
    assert _run(query, taxis)[0][0] == pytest.approx(want)
    # In a group: the average of each group, its order and size kept.
    grouped = {"op": "group", "by": "color", "agg": "sum", "column": "tip", "order": "most", "k": 1}
    changed = _changed("Which cab colour tips best on average?", grouped, taxis)
    assert changed == (
        {"asks": changed[0]["asks"], **grouped, "agg": "avg"},
        "avg instead of sum in each group",
    )


@pytest.mark.parametrize(
    "question",
    [
        "What is the sum of the fares, and the average?",  # both asked: the model's choice stands
        "What do the fares of cash rides add up to?",  # no aggregate word
        "What does a fare of zero mean for a ride?",  # "mean" the verb
        "Across every ride, what is the largest total?",  # `total` is a column: the sum is asked of nothing
    ],
)
def test_a_sum_stays_where_the_question_does_not_ask_an_average_alone(
    question: str, taxis: dict[str, Any]
) -> None:
    assert _changed(question, {"op": "sum", "column": "fare"}, taxis) is None


def test_a_column_named_like_an_aggregate_is_not_the_question_s_word(taxis: dict[str, Any]) -> None:
    """`total` is a column of the table: a question asking the average of it asks an average."""
    changed = _changed(
        "What is the average of total over all rides?", {"op": "sum", "column": "total"}, taxis
    )
    assert changed is not None and changed[0]["op"] == "avg"


def test_top_where_the_fewest_is_asked_becomes_a_group_least_first(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    sent = {"op": "top", "column": "pickup_borough", "k": 3}
    changed = _changed("Which pickup borough saw the fewest rides?", sent, taxis)
    assert changed is not None
    query, change = changed
    assert query["op"] == "group" and query["order"] == "least" and "least first" in change
    counts = Counter(r["pickup_borough"] for r in rows if r["pickup_borough"])
    rarest = min(counts.items(), key=lambda kv: kv[1])
    assert _run(query, taxis)[0] == rarest
    # "at least" is a threshold, and "most" beside "least" leaves the choice to the model.
    assert _changed("Which boroughs had at least one ride?", sent, taxis) is None
    assert _changed("Which borough has the most rides, and which the least?", sent, taxis) is None
    ordered = {"op": "group", "by": "payment", "order": "most", "k": 1}
    assert _changed("Which payment kind is the rarest?", ordered, taxis) == (
        {"asks": changed[0]["asks"], **ordered, "order": "least"},
        "least first instead of most",
    )
    # Ordered by the key where the most is asked: most first, unless each group's figure is asked.
    keyed = {"op": "group", "by": "pickup_borough", "order": "key", "k": 1}
    most = _changed("Name the borough where the most rides began.", keyed, taxis)
    assert (
        most is not None
        and most[0]["order"] == "most"
        and most[1] == "most first instead of in the order of the key"
    )
    assert _run(most[0], taxis)[0] == max(counts.items(), key=lambda kv: kv[1])
    assert _changed("How many rides had each borough, and which the most?", keyed, taxis) is None


def test_top_of_a_number_where_its_largest_or_smallest_is_asked_becomes_max_or_min(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    sent = {"op": "top", "column": "tolls", "k": 5}
    largest = _changed("What is the largest toll charged on one ride?", sent, taxis)
    assert largest is not None and largest[0]["op"] == "max"
    assert _run(largest[0], taxis)[0][0] == pytest.approx(max(float(r["tolls"]) for r in rows))
    smallest = _changed("What was the smallest distance driven?", {"op": "top", "column": "distance"}, taxis)
    assert smallest is not None and smallest[0] == {
        "asks": smallest[0]["asks"],
        "op": "min",
        "column": "distance",
    }
    # A count ranked, a text column, both ends asked, an average asked: not a value's extreme.
    assert _changed("Which toll amount has the largest number of rides?", sent, taxis) is None
    assert (
        _changed("Which zone has the highest traffic?", {"op": "top", "column": "pickup_zone"}, taxis) is None
    )
    assert _changed("What are the highest and the lowest tolls?", sent, taxis) is None
    assert _changed("Which toll is highest on average?", sent, taxis) is None


def test_a_sum_where_the_longest_or_largest_is_asked_becomes_the_extreme_of_the_same_value(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    cash = {"column": "payment", "cmp": "=", "value": "cash"}
    sent = {"op": "sum", "column": "distance", "where": [cash]}
    changed = _changed("What was the longest trip paid in cash?", sent, taxis)
    assert changed is not None and changed[1] == "max instead of sum"
    want = max(float(r["distance"]) for r in rows if r["payment"] == "cash")
    assert _run(changed[0], taxis)[0][0] == pytest.approx(want)
    shortest = _changed("And the shortest one?", sent, taxis)
    assert shortest is not None and shortest[0]["op"] == "min"
    # A value read after a text is summed the same way, and becomes its extreme the same way.
    after = {"op": "sum", "column": "line", "after": "fare", "where": [cash]}
    read = _changed("What was the longest one?", after, taxis)
    assert read is not None and read[0]["op"] == "max" and read[0]["after"] == "fare"
    # A total asked: the sum stays. Another number column named: the extreme is of that one.
    assert _changed("What is the largest total distance?", sent, taxis) is None
    tip = _changed("What is the largest tip paid in cash?", sent, taxis)
    assert tip is not None and (tip[0]["op"], tip[0]["column"], tip[0]["where"]) == ("max", "tip", [cash])


def test_a_sum_where_an_extreme_number_of_a_value_is_asked_becomes_its_max(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    # One total is never the highest of anything: "the biggest number of passengers" on a sum of
    # `passengers` asks for its largest value, rows kept.
    cash = {"column": "payment", "cmp": "=", "value": "cash"}
    sent = {"op": "sum", "column": "passengers", "where": [cash]}
    changed = _changed("On a cash ride, what was the biggest number of passengers aboard?", sent, taxis)
    assert changed is not None and changed[1] == "max instead of sum"
    want = max(int(r["passengers"]) for r in rows if r["payment"] == "cash")
    assert _run(changed[0], taxis)[0][0] == want
    fewest = _changed("And the lowest number of passengers on one ride?", sent, taxis)
    assert fewest is not None and fewest[0]["op"] == "min"
    # A total asked, or a "which" ranking its groups: the sum is not the extreme's to change.
    assert _changed("What was the biggest number of passengers in total?", sent, taxis) is None
    assert _changed("Which payment saw the biggest number of passengers?", sent, taxis) is None


def test_a_count_over_a_bound_on_a_number_where_its_largest_is_asked_becomes_its_max(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """The model counts the rides whose tip passes a bound it made up; the question asks for the
    largest tip of the card payments: the max of tip over the same rows."""
    card = {"column": "payment", "cmp": "=", "value": "credit card"}
    sent = {"op": "count", "where": [card, {"column": "tip", "cmp": ">", "value": 5}]}
    changed = _changed("What is the largest tip paid by credit card?", sent, taxis)
    assert changed is not None and changed[1] == "max of tip instead of a count"
    assert (changed[0]["op"], changed[0]["column"], changed[0]["where"]) == ("max", "tip", sent["where"])
    want = max(float(r["tip"]) for r in rows if r["payment"] == "credit card")
    assert _run(changed[0], taxis)[0][0] == pytest.approx(want)
    below = {"op": "count", "where": [{"column": "tip", "cmp": "<", "value": 5}]}
    smallest = _changed("What was the lowest tip left?", below, taxis)
    assert smallest is not None and smallest[0]["op"] == "min"
    # A bound that changes the extreme, no bound on a number, two of them, no extreme asked: the count stays.
    assert (
        _changed("What was the lowest tip left?", {"op": "count", "where": [sent["where"][1]]}, taxis) is None
    )
    assert (
        _changed("What is the largest tip paid by credit card?", {"op": "count", "where": [card]}, taxis)
        is None
    )
    two = {"op": "count", "where": [sent["where"][1], {"column": "fare", "cmp": "<", "value": 9}]}
    assert _changed("What is the largest tip?", two, taxis) is None
    assert _changed("How many rides tipped over 5?", sent, taxis) is None


def test_a_list_cut_at_one_where_a_list_is_asked_gets_the_default_k(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """A top-1 of the dropoff zones where the question asks for a list of them: the default k,
    the rows and column kept; a k the model chose above one, or no list asked, stays."""
    staten = {"column": "dropoff_borough", "cmp": "=", "value": "Staten Island"}
    sent = {"op": "top", "column": "dropoff_zone", "k": 1, "where": [staten]}
    for question in ("List the dropoff zones of rides ending on Staten Island.", "Zones, one per line?"):
        changed = _changed(question, sent, taxis)
        assert changed is not None and changed[1] == "a list (k 10 instead of 1)", question
        assert {**changed[0], "asks": None} == {**sent, "k": 10, "asks": None}
    want = {r["dropoff_zone"] for r in rows if r["dropoff_borough"] == "Staten Island" and r["dropoff_zone"]}
    assert 1 < len(want) <= 10
    assert {row[0] for row in _run(_changed("List them.", sent, taxis)[0], taxis)} == want  # type: ignore[index]
    assert _changed("List the dropoff zones.", {**sent, "k": 3}, taxis) is None
    assert _changed("Which dropoff zone is the busiest on Staten Island?", sent, taxis) is None
    group = {"op": "group", "by": "dropoff_zone", "k": 1}
    assert _changed("list the zones by rides", group, taxis) is not None


def test_a_query_sent_again_as_written_is_in_doubt_and_said_so(taxis: dict[str, Any]) -> None:
    question = "What is the average tip?"
    assert measure_left_out(question, json.dumps({"op": "sum", "column": "tip"}), taxis) == [
        "avg instead of sum"
    ]
    assert measure_left_out(question, json.dumps({"op": "avg", "column": "tip"}), taxis) == []
    assert measure_left_out(question, json.dumps({"op": "grep", "pattern": "x"}), taxis) == []
    clause = doubt_clause([measure_doubt("avg instead of sum"), "payment = 'cash'"])
    assert clause == (
        "has no filter on payment = 'cash', which the question names and computes other than the "
        "question's words ask for (avg instead of sum)"
    )


def test_a_count_of_rows_for_distinct_values_or_text_for_a_comparison_is_in_doubt(
    taxis: dict[str, Any],
) -> None:
    """Told and in doubt, not rewritten: which values are distinct, or which number to compare,
    is not something the model's query says."""
    distinct = "How many distinct pickup zones are there?"
    assert measure_left_out(distinct, json.dumps({"op": "count"}), taxis) == [
        "a count of distinct values, not of rows"
    ]
    assert (
        measure_left_out(distinct, json.dumps({"op": "count_distinct", "column": "pickup_zone"}), taxis) == []
    )
    compared = "How many rides were picked up in a zone with a number over 250 in its name?"
    text = {"op": "count", "where": [{"column": "pickup_zone", "cmp": "contains", "value": "250"}]}
    assert measure_left_out(compared, json.dumps(text), taxis) == [
        "a comparison with 250, not text holding '250'"
    ]
    number = {"op": "count", "where": [{"column": "fare", "cmp": ">", "value": 250}]}
    assert measure_left_out(compared, json.dumps(number), taxis) == []
    assert measure_left_out("How many zones hold 250 in their name?", json.dumps(text), taxis) == []


def test_the_cli_runs_the_average_the_question_asks_and_tells_the_model(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """Through the CLI and the real worker: the model's sum runs as an average, the model is told,
    and its answer from that result is grounded (exit 0 under --strict)."""
    mean = statistics.mean(float(r["tip"]) for r in rows if r["color"] == "green")
    want = round(mean, 2)
    question = "What is the mean tip on green cabs? Two decimals."
    sent = {"op": "sum", "column": "tip", "where": [{"column": "color", "cmp": "=", "value": "green"}]}
    replies = [
        json.dumps(sent),
        json.dumps({"op": "final", "answer": f"{want}"}),
        json.dumps({"answer": f"{want}", "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(TAXIS, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "avg instead of sum" in shown and f"{mean:.12f}"[:8] in shown, shown[-800:]
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert "avg(" in code.lower() and "sum(" not in code.lower()


def test_the_cli_withholds_an_answer_from_the_sum_sent_again_as_written(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """The model insists on its sum: it runs as written, and the answer from it is in doubt:
    --strict exits 1 with nothing on stdout, and says why."""
    total = round(sum(float(r["tip"]) for r in rows), 2)
    sent = json.dumps({"op": "sum", "column": "tip"})
    replies = [
        sent,
        sent,
        json.dumps({"op": "final", "answer": f"{total}"}),
        json.dumps({"answer": f"{total}", "citations": ["F2"]}),
    ]
    proc, _ = ask_typed_cli(TAXIS, "What is the average tip over all rides?", replies, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert "avg instead of sum" in proc.stderr, proc.stderr


def test_the_cli_lists_what_a_top_one_cut_where_a_list_is_asked(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """Through the CLI and the real worker: a top-1 where the question asks for a list runs with
    the default k, the model is shown every item, and its list is printed one per line."""
    want = sorted(
        {r["dropoff_zone"] for r in rows if r["dropoff_borough"] == "Staten Island" and r["dropoff_zone"]}
    )
    question = "Which dropoff zones did rides ending in Staten Island go to? One per line."
    where = [{"column": "dropoff_borough", "cmp": "=", "value": "Staten Island"}]
    answer = ", ".join(want)
    replies = [
        json.dumps({"op": "top", "column": "dropoff_zone", "k": 1, "where": where}),
        json.dumps({"op": "final", "answer": answer}),
        json.dumps({"answer": answer, "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(TAXIS, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.splitlines() == want, proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "a list (k 10 instead of 1)" in shown and all(zone in shown for zone in want)
    assert "LIMIT 10" in latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]


def test_the_cli_withholds_a_count_of_rows_where_distinct_values_are_asked(tmp_path: Path) -> None:
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": "6433"}),
        json.dumps({"answer": "6433", "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(TAXIS, "How many distinct pickup zones are there?", replies, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "computes other than the question's words ask for (a count of distinct values, not of rows)" in (
        proc.stderr
    )
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "a count of distinct values, not of rows, and this query computes something else" in told


def test_a_bound_compares_as_the_question_states_its_number(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """`> 4` where the question says "4 miles or longer" becomes `>= 4` (and each wording its own
    comparison), the rows counted then those the words name; a bound already as stated, or a
    number the question states two ways, stays."""

    def bound(cmp: str) -> dict[str, Any]:
        return {"op": "count", "where": [{"column": "distance", "cmp": cmp, "value": 4}]}

    for question, sent, want in [
        ("Rides of 4 miles or longer: how many were there?", ">", ">="),
        ("How many rides went no less than 4 miles?", ">", ">="),
        ("Rides that went at most 4 miles, how many?", "<", "<="),
        ("Count the rides longer than 4 miles.", ">=", ">"),
        ("How many rides went under 4 miles?", "<=", "<"),
    ]:
        changed = _changed(question, bound(sent), taxis)
        assert changed is not None, question
        assert changed[0]["where"] == bound(want)["where"], question
        assert changed[1] == f"distance {want} 4 as the question states, instead of {sent}"
    assert _changed("Rides of 4 miles or longer: how many were there?", bound(">="), taxis) is None
    assert _changed("Longer than 4 miles, or 4 miles or longer: how many?", bound(">"), taxis) is None
    at_least = sum(1 for r in rows if float(r["distance"]) >= 4)
    fixed = _changed("Rides of 4 miles or longer: how many were there?", bound(">"), taxis)
    assert fixed is not None and _run(fixed[0], taxis) == [(at_least,)]
    assert at_least != sum(1 for r in rows if float(r["distance"]) > 4)


def test_a_list_of_every_value_is_not_cut_at_a_small_k(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """ "List every ..." with a top 5: the largest k, so that no item is left out; without
    "every" or "all", a k the model chose stays."""
    queens = {"column": "pickup_borough", "cmp": "=", "value": "Queens"}
    sent = {"op": "top", "column": "dropoff_borough", "k": 2, "where": [queens]}
    changed = _changed("List every dropoff borough of rides from Queens, one per line.", sent, taxis)
    assert changed is not None and changed[1] == "a list of every value (k 50 instead of 2)"
    want = {r["dropoff_borough"] for r in rows if r["pickup_borough"] == "Queens" and r["dropoff_borough"]}
    assert len(want) > 2 and {row[0] for row in _run(changed[0], taxis)} == want
    assert _changed("List the dropoff boroughs of rides from Queens.", sent, taxis) is None


@pytest.mark.parametrize(
    ("question", "told"),
    [
        ("Add up the tip of the rides from Queens.", "a total of a value, not a count of rows"),
        ("What is the mean tip of the rides from Queens?", "an average of a value, not a count of rows"),
        (
            "Which ride from Queens had the longest distance? Its pickup zone.",
            "the longest value, not a count of rows",
        ),
        (
            "List the ones from Queens, one per line: their pickup zones.",
            "a list of values, not a count of rows",
        ),
    ],
)
def test_a_count_of_rows_where_a_value_or_a_list_is_asked_is_in_doubt(
    taxis: dict[str, Any], question: str, told: str
) -> None:
    """A count, a top (the most common) or a group counting rows, where the question asks for a
    total, an average, the extreme of a value or a list: told and in doubt; not where it asks
    how many."""
    queens = [{"column": "pickup_borough", "cmp": "=", "value": "Queens"}]
    assert measure_left_out(question, json.dumps({"op": "count", "where": queens}), taxis) == [told]
    if "list" not in question.lower():
        top = {"op": "top", "column": "pickup_zone", "where": queens}
        assert told in measure_left_out(question, json.dumps(top), taxis)
    how_many = "How many rides from Queens had the longest distances, in total?"
    assert measure_left_out(how_many, json.dumps({"op": "count", "where": queens}), taxis) == []
    summed = {"op": "sum", "column": "tip", "where": queens}
    assert measure_left_out("Add up the tip of the rides from Queens.", json.dumps(summed), taxis) == []


def test_the_cli_runs_the_bound_the_question_states_and_withholds_a_count_where_a_total_is_asked(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """Through the CLI and the real worker: the model's `>` runs as the `>=` the question states,
    and its answer from that is printed; a count of rows sent where a total is asked is said to
    the model, and the answer from it is withheld under --strict (exit 1)."""
    want = sum(1 for r in rows if float(r["tip"]) >= 5)
    bound = {"op": "count", "where": [{"column": "tip", "cmp": ">", "value": 5}]}
    replies = [
        json.dumps(bound),
        json.dumps({"op": "final", "answer": str(want)}),
        json.dumps({"answer": str(want), "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(TAXIS, "How many rides got a tip of 5 or higher?", replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "tip >= 5 as the question states, instead of >" in shown and str(want) in shown
    rides = len(rows)
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": str(rides)}),
        json.dumps({"answer": str(rides), "citations": ["F1"]}),
    ]
    (tmp_path / "total").mkdir()
    proc, stub = ask_typed_cli(TAXIS, "Add up the tips over all rides.", replies, cwd=tmp_path / "total")
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "a total of a value, not a count of rows" in proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "a total of a value, not a count of rows, and this query computes something else" in told


def test_count_as_a_noun_of_what_is_read_does_not_ask_for_a_count(taxis: dict[str, Any]) -> None:
    """ "The exact cent count" is what each row holds, and "add up" asks for its total: a count of
    rows is told; "count the rows" asks for one. A count of distinct values where their list is
    asked is told too."""
    count = json.dumps({"op": "count"})
    assert measure_left_out("Add up the tips (use the exact cent count). Total?", count, taxis) == [
        "a total of a value, not a count of rows"
    ]
    assert measure_left_out("Count the rides, then add up nothing else.", count, taxis) == []
    distinct = json.dumps({"op": "count_distinct", "column": "pickup_zone"})
    assert measure_left_out("Which pickup zones are there? One per line.", distinct, taxis) == [
        "the list of pickup_zone's values (top, k 50), not a count of them"
    ]
    assert measure_left_out("How many pickup zones are there? List them too.", distinct, taxis) == []


def test_a_bound_on_a_number_of_lines_becomes_min_count_and_every_value_that_passes_is_shown(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """ "N or more rides", "at least N times", "more than N trips": a top, a count of distinct
    values or a group counting lines keeps only the values on that many lines (more than N is N+1),
    every one shown; a bound on a number column the question names ("at least 4 passengers") is
    a filter's, not this, and a filter already comparing a number with it is left alone."""
    zones = Counter(r["pickup_zone"] for r in rows if r["pickup_zone"])
    top = {"op": "top", "column": "pickup_zone", "k": 5}
    for question, least in [
        ("Which pickup zones had 100 or more rides? One per line.", 100),
        ("List the pickup zones seen at least 100 times.", 100),
        ("Which pickup zones had more than 99 trips?", 100),
    ]:
        changed = _changed(question, top, taxis)
        assert changed is not None, question
        assert changed[0] == {
            "asks": "which value appears on the most lines",
            **top,
            "k": 50,
            "min_count": least,
        }
        assert changed[1] == f"only values on at least {least} lines (min_count {least})"
        assert {row[0] for row in _run(changed[0], taxis)} == {z for z, n in zones.items() if n >= 100}
    distinct = {"op": "count_distinct", "column": "pickup_zone"}
    changed = _changed("How many pickup zones had 100 or more rides?", distinct, taxis)
    assert changed is not None and _run(changed[0], taxis) == [(sum(1 for n in zones.values() if n >= 100),)]
    five = {"column": "passengers", "cmp": ">=", "value": 5}
    riders = _changed("Which pickup zones had rides of at least 4 passengers?", top, taxis)
    assert riders is not None and "min_count" not in riders[0]  # the bound is the column's
    assert riders[1] == "passengers >= 4 as the question states, added to where"
    counted = {**top, "where": [five]}
    assert _changed("Which pickup zones had rides with at least 5 riders?", counted, taxis) is None


def test_a_count_where_the_question_asks_which_values_of_one_column_becomes_their_top(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """A count of rows where the question asks "which <things>" of one column (the column with the
    most of its name's words among those asked, `pickup_zone` over `pickup`) becomes a top of it
    over the same rows; a list asked, with every value. Not where it asks how many, or a total, or
    where no column or two fit, or the count is of one value of that column."""
    queens = [{"column": "pickup_borough", "cmp": "=", "value": "Queens"}]
    count = {"op": "count", "where": queens}
    changed = _changed("Which pickup zone of the rides from Queens is the busiest?", count, taxis)
    assert changed is not None and changed[1] == "top pickup_zone instead of a count of rows"
    want = Counter(r["pickup_zone"] for r in rows if r["pickup_borough"] == "Queens" and r["pickup_zone"])
    assert _run(changed[0], taxis)[0] == min(want.items(), key=lambda kv: (-kv[1], kv[0]))
    listed = _changed("List the pickup zones of the rides from Queens, one per line.", count, taxis)
    assert listed is not None and listed[0]["k"] == 50 and {r[0] for r in _run(listed[0], taxis)} == set(want)
    for question in [
        "How many rides from Queens went to which pickup zone?",
        "Which pickup zones add up the largest sum of fares?",
        "Which rides from Queens had a cash payment?",
        "Which borough saw the most rides from Queens?",
    ]:
        assert _changed(question, count, taxis) is None, question
    one = {"op": "count", "where": [{"column": "payment", "cmp": "=", "value": "cash"}]}
    assert _changed("Which payment: were there rides paid in cash?", one, taxis) is None


def test_a_top_of_another_column_than_the_one_asked_becomes_a_top_of_it(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """A top of one column where the question asks which values of another becomes a top of the
    one asked, over the same rows; not where it asks how many, an extreme, or a total, nor where
    the asked column is one the query filters on."""
    cash = [{"column": "payment", "cmp": "=", "value": "cash"}]
    sent = {"op": "top", "column": "pickup_borough", "k": 3, "where": cash}
    changed = _changed("Which dropoff zone do the cash rides end in most often?", sent, taxis)
    assert changed is not None
    assert changed[1] == "top dropoff_zone, the values the question asks for, instead of pickup_borough"
    want = Counter(r["dropoff_zone"] for r in rows if r["payment"] == "cash" and r["dropoff_zone"])
    assert _run(changed[0], taxis)[0] == min(want.items(), key=lambda kv: (-kv[1], kv[0]))
    for question in [
        "How many cash rides ended in which dropoff zone?",
        "Which dropoff zone had the longest cash ride?",
        "Which payment do the cash rides use most?",
    ]:
        assert _changed(question, sent, taxis) is None, question


def test_an_ip_asked_goes_to_the_one_column_of_addresses(tmp_path: Path) -> None:
    """ "Which client IP" on an access log: its one column of addresses, though none is named so."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"
    table = open_source(str(log), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    count = {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    changed = _changed("Which client IP got the most not-found replies? IP only.", count, table)
    assert changed is not None and changed[0]["column"] == "ip" and changed[0]["where"] == count["where"]


def test_the_cli_lists_the_values_on_at_least_the_lines_stated(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """Through the CLI and the real worker: a count sent where the question asks which values of a
    column are on N or more lines runs as their top with min_count N, the model is shown every
    one of them and told why, and its list is printed one per line."""
    zones = Counter(r["dropoff_zone"] for r in rows if r["dropoff_zone"])
    want = sorted(z for z, n in zones.items() if n >= 150)
    assert 2 <= len(want) < 50
    question = "Which dropoff zones had 150 or more rides? One per line."
    proc, stub = ask_typed_once(TAXIS, question, {"op": "count"}, "\n".join(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.splitlines() == want, proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "top dropoff_zone instead of a count of rows" in shown and all(zone in shown for zone in want)
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert "HAVING count(*) >= 150" in code and "LIMIT 50" in code


def test_the_value_beside_the_largest_of_a_named_number_is_read_from_its_rows(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """ "Which <column> goes with the highest <number>": a count, a top or the number's own max becomes
    the rows of its largest (smallest) values with the asked column beside them; not where no
    column is asked, two numbers are named, or a total is asked."""
    dearest = max(rows, key=lambda r: float(r["fare"]))
    cheapest = min(rows, key=lambda r: float(r["fare"]))
    for sent in ({"op": "count"}, {"op": "top", "column": "pickup_zone"}, {"op": "max", "column": "fare"}):
        changed = _changed("Which pickup zone did the trip of highest fare start in?", sent, taxis)
        assert changed is not None, sent
        assert changed[1] == "the rows of the largest fare, with their pickup_zone"
        first = _run(changed[0], taxis)[0]  # a tie: any of the rows of that fare
        tied = {r["pickup_zone"] for r in rows if float(r["fare"]) == float(dearest["fare"])}
        assert first[2] == float(dearest["fare"]) and first[1] in tied
    least = _changed("What was the dropoff borough for a trip of lowest fare?", {"op": "count"}, taxis)
    assert least is not None
    assert _run(least[0], taxis)[0][2] == float(cheapest["fare"])
    for question in [
        "What is the highest fare paid?",
        "Which pickup zone saw both the highest fare and the longest distance?",
        "Which pickup zone got the largest total of fare?",
    ]:
        assert _changed(question, {"op": "count"}, taxis) is None, question


def test_a_bound_stated_beside_a_number_column_is_its_filter(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """ "4 or more passengers", "a tip over 10", "fare of at most 3": a bound beside a number
    column's name that the query leaves out is added to its filters; a sum of that column where
    the question asks how many becomes the count of those rows. Not where the query already has
    a filter on the column, or the number is beside no column's name."""
    many = sum(1 for r in rows if int(r["passengers"]) >= 4)
    summed = _changed(
        "Count the trips with 4 or more passengers aboard.", {"op": "sum", "column": "passengers"}, taxis
    )
    assert (
        summed is not None
        and summed[1] == "a count of the rows where passengers >= 4, not a sum of passengers"
    )
    assert _run(summed[0], taxis) == [(many,)]
    tipped = _changed(
        "Which payment type comes first among trips with a tip over 10?",
        {"op": "top", "column": "payment"},
        taxis,
    )
    want = Counter(r["payment"] for r in rows if float(r["tip"]) > 10 and r["payment"])
    assert tipped is not None and dict(_run(tipped[0], taxis)) == dict(want)
    own = {"op": "count", "where": [{"column": "passengers", "cmp": ">", "value": 3}]}
    assert _changed("Count the trips with 4 or more passengers aboard.", own, taxis) is None
    assert _changed("Count the trips, at least 4 of them, paid with cash.", {"op": "count"}, taxis) is None


def test_a_number_column_named_by_its_words_is_the_value_whose_largest_is_asked(tmp_path: Path) -> None:
    """ "The most idle connections" names `connections.idle` by its words, and "what is its
    requests.current" the column asked for: the query becomes the rows of the largest idle count,
    that column beside it, and their first row is Python's record of the largest. "The number of"
    before such a name asks for the value, not for a count of rows."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "elastic" / "nginxplus_json_logs"
    table = open_source(str(path), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    most = max(r["connections"]["idle"] for r in records)
    currents = {r["requests"]["current"] for r in records if r["connections"]["idle"] == most}
    sent = {"op": "group", "by": "nginx_version", "k": 1}
    for question in (
        "Take the record whose idle connections are the largest: what is its requests.current value?",
        "Of the records, the one holding the greatest number of idle connections: what was its requests.current?",
    ):
        changed = _changed(question, sent, table)
        assert changed is not None, question
        assert changed[0]["order_by"] == "connections.idle" and changed[0]["columns"][0] == "requests.current"
        first = _run(changed[0], table)[0]
        assert first[2] == most and first[1] in currents


def test_the_cli_withholds_distinct_whole_lines_where_values_inside_them_are_asked(tmp_path: Path) -> None:
    """Each line writes its own time: a count of distinct whole lines is nearly the count of the
    lines, not of the codes written inside them. The model is told of `after`, and --strict
    withholds the answer; where the question asks for distinct lines, nothing is told."""
    log = tmp_path / "jobs.log"
    log.write_text(
        "".join(
            f"2026-03-01 10:{i // 60:02d}:{i % 60:02d} job-{i} ended with code=E{100 + i % 6}\n"
            for i in range(240)
        )
    )
    action = {
        "op": "count_distinct",
        "column": "line",
        "where": [{"column": "line", "cmp": "contains", "value": "ended"}],
    }
    proc, stub = ask_typed_once(
        log, "How many different codes do the jobs end with?", action, "240", cwd=tmp_path
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "240" in told and "not whole lines" in told and '"after" reads the value' in told
    assert (
        measure_left_out("How many distinct lines end a job?", json.dumps(action), _table(log, tmp_path))
        == []
    )


def _table(path: Path, cache: Path) -> dict[str, Any]:
    table = open_source(str(path), cache_dir=str(cache / "cache")).profile.table
    assert table is not None
    return table


def test_the_cli_counts_the_sizes_other_than_the_one_stated(tmp_path: Path) -> None:
    """ "other than N" is `!= N`: the model's `> N` is changed, the model told, and the count is
    Python's over the raw lines."""
    sizes = [
        int(m[1]) for m in (re.search(r'" \d{3} (\d+) "', x) for x in ACCESS.read_text().splitlines()) if m
    ]
    common = Counter(sizes).most_common(1)[0][0]
    want = sum(1 for s in sizes if s != common)
    assert 0 < want != sum(1 for s in sizes if s > common)
    sent = {"op": "count", "where": [{"column": "bytes", "cmp": ">", "value": common}]}
    question = f"How many responses sent anything but {common} bytes of body?"
    proc, stub = ask_typed_once(ACCESS, question, sent, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"bytes != {common} as the question states, instead of >" in told and str(want) in told


def test_the_cli_holds_a_text_the_question_says_a_message_begins_with_to_its_start(tmp_path: Path) -> None:
    """A message said to start with 'X': a model's `contains 'X'` also counts the lines that
    repeat X further on; it is made `starts_with`, the model told, and the count is Python's."""
    log = tmp_path / "backup.log"
    lines = []
    for i in range(300):
        text = (
            f"Backup failed for disk {i % 7}"
            if i % 3 == 0
            else f"summary: Backup failed for disk {i % 7} earlier"
            if i % 3 == 1
            else f"Backup done for disk {i % 7}"
        )
        lines.append(f"Mar  4 10:{i // 60:02d}:{i % 60:02d} store backupd[{400 + i % 9}]: {text}")
    log.write_text("\n".join(lines) + "\n")
    want = sum(1 for x in lines if x.split("]: ", 1)[1].startswith("Backup failed"))
    contained = sum(1 for x in lines if "Backup failed" in x)
    assert 0 < want < contained
    table = _table(log, tmp_path)
    column = "message" if ["message", "VARCHAR"] in table["columns"] else "line"
    sent = {"op": "count", "where": [{"column": column, "cmp": "contains", "value": "Backup failed"}]}
    question = "Count the entries whose message text begins with 'Backup failed'."
    proc, stub = ask_typed_once(log, question, sent, str(want), cwd=tmp_path)
    assert column == "message" and proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "message starts_with 'Backup failed' as the question states, instead of contains" in told
    assert (
        with_asked_measure("Which entries talk of 'Backup failed'? A count.", json.dumps(sent), table) is None
    )


OPENSTACK = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "OpenStack_2k.log"


def test_which_line_wrote_the_largest_number_of_a_quoted_line_is_read_from_its_rows(tmp_path: Path) -> None:
    """A group per hour sent where the question asks which thing goes with the largest number
    its quoted line reads: rlm runs the rows of that number, largest first, and the answer is
    read from them (before, the counts per hour said nothing of which line it was)."""
    read = [
        (int(m[2]), m[1])
        for m in re.finditer(r"\[(req-[0-9a-f-]+) .*status: 200 len: (\d+) ", OPENSTACK.read_text())
    ]
    most, which = max(read)
    assert sum(1 for n, _ in read if n == most) == 1
    question = "Which request drew the longest reply, by its 'status: 200 len: N'? Its req- id, please."
    sent = {"op": "group", "by": "ts", "bucket": "hour"}
    proc, stub = ask_typed_once(OPENSTACK, question, sent, which, cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "the rows of the largest N" in told, told[-900:]
    assert re.search(rf"{which} .* \| {most}\.0\n", told) and "| N\n" in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{which}\n", proc.stderr


def test_a_column_named_at_the_end_of_a_sentence_is_named(taxis: dict[str, Any]) -> None:
    """A full stop after a column's name ends the sentence, not a dotted name: the number named
    there is the one whose largest row is read, the asked value beside it."""
    question = "Look up the trip paying the biggest tip. Which fare did it pay?"
    changed = with_asked_measure(question, json.dumps({"op": "max", "column": "tip"}), taxis)
    assert changed is not None and changed[0]["op"] == "rows", changed
    assert changed[0]["columns"] == ["fare", "tip"] and changed[0]["order_by"] == "tip"
    with duckdb.connect(taxis["path"], read_only=True) as con:
        rows = con.execute(compile_sql(changed[0], taxis)).fetchall()
    assert "120.0" in map(str, rows[0]), rows  # the largest tip's fare, first


HADOOP = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Hadoop_2k.log"


def test_the_latest_time_asked_is_the_max_of_the_time_not_a_count_per_hour(tmp_path: Path) -> None:
    """A count of lines per hour says in which hour, not when: where the latest time is asked,
    rlm runs the latest of the rows the query kept."""
    stamps = [line[:19] for line in HADOOP.read_text().splitlines() if " WARN " in line]
    latest = max(stamps)
    question = "At what time was the latest WARN line written? Give HH:MM:SS."
    sent = {
        "op": "group",
        "by": "ts",
        "bucket": "hour",
        "where": [{"column": "level", "cmp": "=", "value": "WARN"}],
    }
    proc, stub = ask_typed_once(HADOOP, question, sent, latest[11:], cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "max of ts (the latest), not a count per hour" in told and latest in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{latest[11:]}\n", proc.stderr
    # Both ends of a span asked, or the busiest hour: left as sent.
    table = open_source(str(HADOOP), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    span = "How long passed from the earliest WARN line to the latest?"
    assert with_asked_measure(span, json.dumps(sent), table) is None
    assert with_asked_measure("Which hour logged most WARN lines?", json.dumps(sent), table) is None


def test_a_word_a_quoted_line_names_its_number_by_is_no_total_asked(tmp_path: Path) -> None:
    """`total = N` in a quoted line: "total" in the question names that number, as a column's
    name would, and asks for no sum. A sum sent where the greatest is asked becomes its max,
    the model told, and the answer is the largest of the values Python reads from the lines."""
    log = tmp_path / "batches.log"
    lines = []
    for i in range(400):
        if i % 4 == 0:
            lines.append(
                f"2026-03-04 10:{i // 60:02d}:{i % 60:02d} INFO worker-{i % 5} batch done: total = {(i * 37) % 991}, wait = {i % 13}"
            )
        else:
            lines.append(f"2026-03-04 10:{i // 60:02d}:{i % 60:02d} DEBUG worker-{i % 5} polling queue {i}")
    log.write_text("\n".join(lines) + "\n")
    values = [int(m[1]) for m in (re.search(r"total = (\d+),", x) for x in lines) if m]
    want = max(values)
    assert sum(values) != want
    question = "Batch lines say 'batch done: total = N, wait = ...'. What is the greatest total of any batch? Only the figure."
    sent = {"op": "sum", "column": "N"}
    proc, stub = ask_typed_once(log, question, sent, str(want), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "max instead of sum" in told and f"{want}.0" in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    # Asked for the sum of that number, it stays a sum.
    summed = "Batch lines say 'batch done: total = N, wait = ...'. Sum N across all batches."
    table = with_quoted_fields(_table(log, tmp_path), summed, lambda: sample_lines(str(log)))
    assert "N" in [f.name for f in read_fields(table)]
    assert with_asked_measure(summed, json.dumps(sent), table) is None
    greatest = with_quoted_fields(_table(log, tmp_path), question, lambda: sample_lines(str(log)))
    assert with_asked_measure(question, json.dumps(sent), greatest) == (
        {"asks": "the highest, largest or latest value", "op": "max", "column": "N"},
        "max instead of sum",
    )


def test_a_bound_on_a_number_the_question_writes_after_its_column_name_is_that_value(tmp_path: Path) -> None:
    """ "port 8443" names one port: the model's `port > 8443` is made `=`, the model told, and
    the count is Python's; a number the question compares ("port 8443 or above") stays a bound."""
    conns = tmp_path / "conns.csv"
    rows = [
        (f"10.0.{i % 7}.{i % 50}", (8443, 8443, 9000, 443)[i % 4] + (i % 3 == 0) * (i % 4 == 2))
        for i in range(500)
    ]
    conns.write_text("client,port\n" + "".join(f"{c},{p}\n" for c, p in rows))
    want = sum(1 for _, p in rows if p == 8443)
    assert 0 < want != sum(1 for _, p in rows if p > 8443)
    sent = {"op": "count", "where": [{"column": "port", "cmp": ">", "value": 8443}]}
    question = "How many connections reached the service on port 8443?"
    proc, stub = ask_typed_once(conns, question, sent, str(want), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "port = 8443, the value the question names, instead of >" in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    table = _table(conns, tmp_path)
    for bounded in (
        "How many connections used port 8443 and above?",
        "How many used a port after port 8443?",
    ):
        assert with_asked_measure(bounded, json.dumps(sent), table) is None, bounded


def test_a_group_given_a_column_and_no_aggregate_totals_it_in_each_group(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    """`column` with no `agg` (the grammar lets a model leave it out) is the column's total in
    each group, not a refusal the model met again each step; an average asked still becomes one."""
    sent = {"op": "group", "by": "color", "column": "fare", "k": 5}
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["color"]] = totals.get(r["color"], 0.0) + float(r["fare"])
    got = {color: total for color, _, total in _run(sent, taxis)}
    assert got.keys() == totals.keys()
    assert all(got[c] == pytest.approx(totals[c]) for c in totals)
    averaged = _changed("Which cab colour has the best fare on average?", sent, taxis)
    assert averaged is not None and averaged[0]["agg"] == "avg"


def test_a_measure_of_a_number_the_question_does_not_name_moves_onto_the_one_it_names(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    sent = {"op": "avg", "column": "passengers"}
    changed = _changed("What is the mean tip across all rides? Round to 2 places.", sent, taxis)
    assert changed is not None and changed[0]["column"] == "tip" and changed[0]["op"] == "avg"
    assert "instead of passengers" in changed[1]
    want = statistics.fmean(float(r["tip"]) for r in rows)
    assert _run(changed[0], taxis)[0][0] == pytest.approx(want)
    # a group's total moves too, its groups kept; and the measure the words ask is read after
    group = {"op": "group", "by": "payment", "agg": "sum", "column": "passengers", "k": 3}
    moved = _changed("Average tip for each payment type?", group, taxis)
    assert moved is not None and (moved[0]["column"], moved[0]["agg"]) == ("tip", "avg")


def test_a_named_number_that_bounds_the_rows_or_two_named_leave_the_measure_alone(
    taxis: dict[str, Any],
) -> None:
    total = {"op": "sum", "column": "total"}
    # the question bounds distance: the rows are of it, the total is of the money
    bounded = {**total, "where": [{"column": "distance", "cmp": ">", "value": 5}]}
    assert _changed("How much did rides longer than distance 5 bring in, in total?", bounded, taxis) is None
    # two number columns named: which is measured is not the question's one word
    assert (
        _changed("Sum the tip and the fare of every ride.", {"op": "sum", "column": "passengers"}, taxis)
        is None
    )
    # the column measured is the one named
    assert _changed("What is the total of tip?", {"op": "sum", "column": "tip"}, taxis) is None


def test_a_groups_total_by_another_column_than_the_one_asked_is_by_the_one_asked(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    sent = {"op": "group", "by": "payment", "agg": "sum", "column": "tip", "k": 1}
    question = "Of the card-paid trips, which dropoff_zone collects the highest total tip?"
    changed = _changed(question, sent, taxis)
    assert changed is not None and changed[0]["by"] == "dropoff_zone" and changed[0]["agg"] == "sum"
    assert "instead of by payment" in changed[1]
    # not where the group is by the column asked, or the question asks of no column
    assert _changed(question, {**sent, "by": "dropoff_zone"}, taxis) is None
    assert _changed("What is the highest total tip of a payment kind?", sent, taxis) is None


def test_the_cli_totals_per_value_asked_over_the_rows_the_question_states(
    tmp_path: Path, rows: list[dict[str, str]]
) -> None:
    """Through the CLI: the group moves onto the column asked, and the condition the question
    states on the column the model had grouped by is added to it."""
    totals: Counter[str] = Counter()
    for r in rows:
        if r["payment"] == "cash" and r["dropoff_zone"]:
            totals[r["dropoff_zone"]] += round(float(r["fare"]) * 100)
    (best, most), (_, second) = totals.most_common(2)
    assert most > second
    assert best != max(
        {r["dropoff_zone"] for r in rows if r["dropoff_zone"]},
        key=lambda z: sum(float(r["fare"]) for r in rows if r["dropoff_zone"] == z),
    )
    sent = {"op": "group", "by": "payment", "agg": "sum", "column": "fare", "k": 1}
    question = "Among rides paid in cash, which dropoff_zone has the highest total fare?"
    proc, stub = ask_typed_once(TAXIS, question, sent, best, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{best}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert told.split("\n")[3].split("|")[0].strip() == best, told


def test_a_min_count_the_question_does_not_state_is_dropped(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    sent = {
        "op": "group",
        "by": "pickup_zone",
        "min_count": 400,
        "where": [{"column": "color", "cmp": "=", "value": "green"}],
    }
    question = "Green cabs only: the pickup_zone they leave from most?"
    changed = _changed(question, sent, taxis)
    assert changed is not None and "min_count" not in changed[0] and changed[0]["where"] == sent["where"]
    assert _run(sent, taxis) == []  # the number made up leaves every zone out
    want = Counter(r["pickup_zone"] for r in rows if r["color"] == "green" and r["pickup_zone"]).most_common(
        1
    )[0]
    assert _run(changed[0], taxis)[0] == want
    # stated, in digits or in words, it stays
    assert (
        _changed("Green cabs only: each pickup_zone they leave from 400 or more times?", sent, taxis) is None
    )
    assert _changed("Each pickup_zone with at least five rides?", {**sent, "min_count": 5}, taxis) is None


def test_a_measure_of_the_number_after_a_quoted_text_is_read_after_it(tmp_path: Path) -> None:
    """ "the number that comes after 'took'": a count of the lines that hold the text becomes the
    total (or largest) of that number, rows kept; through the CLI and the worker."""
    spark = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Spark_2k.log"
    taken = [int(m[1]) for line in spark.read_text().splitlines() if (m := re.search(r"took (\d+)", line))]
    assert len(taken) > 1
    holds = {"column": "message", "cmp": "contains", "value": "broadcast variable"}
    question = "Across the broadcast variable reads, sum the figure written after 'took'. Just the total."
    proc, stub = ask_typed_once(
        spark, question, {"op": "count", "where": [holds]}, str(sum(taken)), cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{sum(taken)}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert re.search(rf"\n{sum(taken)}(?:\.0)?\s", told) and "the sum of " in told, told
    table = open_source(str(spark), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    largest = _changed("What is the largest value after 'took'?", {"op": "count"}, table)
    assert largest is not None and _run(largest[0], table)[0][0] == max(taken)
    # no quoted text after the words: nothing to read
    assert _changed("Total the broadcast variable reads.", {"op": "count", "where": [holds]}, table) is None


def test_a_sum_where_how_many_lines_are_asked_becomes_their_count(
    taxis: dict[str, Any], rows: list[dict[str, str]]
) -> None:
    cash = {"column": "payment", "cmp": "=", "value": "cash"}
    sent = {"op": "sum", "column": "fare", "where": [cash]}
    changed = _changed("How many trips were settled in cash?", sent, taxis)
    assert changed is not None and changed[0]["op"] == "count" and changed[0]["where"] == [cash]
    assert _run(changed[0], taxis) == [(sum(r["payment"] == "cash" for r in rows),)]
    # the column summed named, or a total asked: the sum stays
    assert _changed("How many dollars of fare did cash trips bring?", sent, taxis) is None
    assert _changed("How many dollars in total did cash trips bring?", sent, taxis) is None
