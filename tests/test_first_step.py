"""The first of a question's two steps, run by rlm where the model's query skips it
(rlm.run.typed.firststep): the key the first sentence ranks for, kept to by the second query."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_cli, ask_typed_once, run_typed

from rlm.input.source import open_source
from rlm.run.runner import text_pattern
from rlm.run.typed.firststep import first_step, onto_first_step

DATA = Path(__file__).resolve().parent.parent / "fixtures"
TAXIS = DATA / "data" / "seaborn" / "taxis.csv"
AUTH = DATA / "auth.log"


def _table(path: Path, cache: Path) -> dict[str, Any]:
    table = open_source(str(path), cache_dir=str(cache)).profile.table
    assert table is not None
    return table


@pytest.fixture(scope="module")
def taxis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield _table(TAXIS, tmp_path_factory.mktemp("first-step"))


@pytest.fixture(scope="module")
def trips() -> list[dict[str, str]]:
    with TAXIS.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _helpers(path: Path, table: dict[str, Any]) -> tuple[Any, Any]:
    """What the worker gives a run, over the same file and table: holds_text and first_rows."""
    text = path.read_text(errors="replace")

    def holds(part: str, whole: bool = False, case: bool = False) -> bool:
        return re.search(text_pattern(part, whole), text, 0 if case else re.IGNORECASE) is not None

    def rows(query: str) -> list[list[str]]:
        with duckdb.connect(table["path"], read_only=True) as con:
            return [[str(c) for c in r] for r in con.execute(query).fetchall()[:5]]

    return holds, rows


def test_the_first_sentences_condition_is_kept_to_by_its_ranking(
    taxis: dict[str, Any], trips: list[dict[str, str]]
) -> None:
    """A value a column lists, stated in the first sentence, holds for the ranking: the zone with
    the most cash rides, not the one with the most rides."""
    question = "Find the pickup zone with the most cash rides. How many of its rides had a tip?"
    cash = Counter(t["pickup_zone"] for t in trips if t["payment"] == "cash" and t["pickup_zone"])
    everyone = Counter(t["pickup_zone"] for t in trips if t["pickup_zone"])
    assert cash.most_common(1)[0][0] != everyone.most_common(1)[0][0]
    step = first_step(question, taxis, *_helpers(TAXIS, taxis))
    assert step is not None and step.value == cash.most_common(1)[0][0]
    assert step.conditions == ("payment = 'cash'",)


def test_a_first_sentence_with_a_kind_of_row_no_condition_states_is_not_read(taxis: dict[str, Any]) -> None:
    """ "late" names rows no column lists: ranking every ride would find the wrong zone."""
    question = "Find the pickup zone with the most late rides. How many of its rides had a tip?"
    assert first_step(question, taxis, *_helpers(TAXIS, taxis)) is None


def test_a_question_in_one_step_has_no_first_step(taxis: dict[str, Any]) -> None:
    question = "Which pickup zone has the most rides?"
    assert first_step(question, taxis, *_helpers(TAXIS, taxis)) is None


def test_a_tie_on_top_finds_no_key(tmp_path: Path) -> None:
    path = tmp_path / "tied.csv"
    path.write_text("city,amount\nOslo,1\nOslo,2\nLima,3\nLima,4\nRome,5\n")
    table = _table(path, tmp_path / "cache")
    question = "Find the city with the most rows. What is the total amount of its rows?"
    assert first_step(question, table, *_helpers(path, table)) is None


def test_the_second_query_is_kept_to_the_key_and_gives_that_keys_figure(
    taxis: dict[str, Any], trips: list[dict[str, str]]
) -> None:
    question = "Take the dropoff zone with the most rides. How many of its rides were paid in cash?"
    zone, _ = Counter(t["dropoff_zone"] for t in trips if t["dropoff_zone"]).most_common(1)[0]
    step = first_step(question, taxis, *_helpers(TAXIS, taxis))
    assert step is not None
    sent = {"op": "count", "where": [{"column": "payment", "cmp": "=", "value": "cash"}]}
    kept = onto_first_step(question, json.dumps(sent), step, taxis)
    assert kept is not None and f"dropoff_zone = {zone!r} is added to where" in kept[1]
    _, rows = run_typed(kept[0], taxis)
    assert rows == [(sum(1 for t in trips if t["dropoff_zone"] == zone and t["payment"] == "cash"),)]
    # The model's own first step, and a query already on a key, are left as sent.
    ranking = {"op": "top", "column": "dropoff_zone", "k": 3}
    assert onto_first_step(question, json.dumps(ranking), step, taxis) is None
    other = {"op": "count", "where": [{"column": "dropoff_zone", "cmp": "=", "value": "Astoria"}]}
    assert onto_first_step(question, json.dumps(other), step, taxis) is None


def test_the_cli_answers_the_second_step_of_the_key_rlm_found(tmp_path: Path) -> None:
    """Through the CLI, the real worker and a model that skips the first step: the count the
    model is shown is of the top address's failed logins for root, and it is told why."""
    lines = AUTH.read_text().splitlines()
    failing = [m[1] for x in lines if "Failed password" in x and (m := re.search(r"from (\S+) port", x))]
    top, _ = Counter(failing).most_common(1)[0]
    want = sum(
        1
        for x in lines
        if "Failed password" in x and f"from {top} port" in x and re.search(r"for root from", x)
    )
    assert 0 < want < sum(1 for x in lines if "Failed password for root from" in x)
    question = (
        "Find the source IP with the most 'Failed password' lines. How many of its failed logins "
        "were for the user root? Just the number."
    )
    sent = {"op": "count", "where": [{"column": "user", "cmp": "=", "value": "root"}]}
    proc, stub = ask_typed_once(AUTH, question, sent, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"src_ip = {top!r} is added to where" in told and re.search(rf"\b{want}\b", told)


def test_the_row_a_first_sentence_asks_for_by_a_largest_value_is_found(
    taxis: dict[str, Any], trips: list[dict[str, str]]
) -> None:
    """ "the ride with the biggest tip": the row of the largest tip, by its line number; kept to
    by a total of another column, which is then that row's value."""
    question = "Find the ride with the biggest tip. What was its fare? Just the number."
    tips = sorted((float(t["tip"]), k) for k, t in enumerate(trips))
    assert tips[-1][0] > tips[-2][0]
    step = first_step(question, taxis, *_helpers(TAXIS, taxis))
    assert step is not None and step.column.name == "line_no" and step.by == "tip"
    sent = {"op": "sum", "column": "fare"}
    kept = onto_first_step(question, json.dumps(sent), step, taxis)
    assert kept is not None
    _, rows = run_typed(kept[0], taxis)
    assert rows == [(float(trips[tips[-1][1]]["fare"]),)]
    # The model's own ordering by the tip is its first step: left as sent.
    own = {"op": "rows", "columns": ["fare"], "order_by": "tip", "take": "last", "k": 1}
    assert onto_first_step(question, json.dumps(own), step, taxis) is None


def test_the_row_that_lasted_longest_is_found_by_the_time_between_its_times(
    taxis: dict[str, Any], trips: list[dict[str, str]]
) -> None:
    from datetime import datetime

    from rlm.run.typed.spans import with_spans

    question = "Find the ride that lasted the longest. Which dropoff zone did it end in?"
    took = sorted(
        (datetime.fromisoformat(t["dropoff"]) - datetime.fromisoformat(t["pickup"]), k)
        for k, t in enumerate(trips)
    )
    assert took[-1][0] > took[-2][0]
    table = with_spans(taxis, question)
    step = first_step(question, table, *_helpers(TAXIS, table))
    assert step is not None and step.column.name == "line_no"
    kept = onto_first_step(question, json.dumps({"op": "top", "column": "dropoff_zone"}), step, table)
    assert kept is not None
    _, rows = run_typed(kept[0], table)
    assert rows == [(trips[took[-1][1]]["dropoff_zone"], 1)]


def test_a_row_sentence_that_names_no_column_or_more_is_not_read(taxis: dict[str, Any]) -> None:
    for question in (
        "Find the ride with the biggest surcharge. What was its fare?",  # no such column
        "Find the ride with the biggest tip on a rainy night. What was its fare?",  # rows unstated
    ):
        assert first_step(question, taxis, *_helpers(TAXIS, taxis)) is None, question


def test_the_cli_answers_of_the_row_rlm_found(tmp_path: Path, trips: list[dict[str, str]]) -> None:
    """Through the CLI and the real worker: a model that lists the first ride's fare is shown the
    fare of the ride of the biggest tip, and told why."""
    best = max(trips, key=lambda t: float(t["tip"]))
    want = best["fare"].removesuffix(".0")
    assert trips[0]["fare"] != best["fare"]
    question = "Find the ride with the biggest tip. What was its fare? Just the number."
    sent = {"op": "rows", "columns": ["fare"], "k": 1}
    proc, stub = ask_typed_once(TAXIS, question, sent, want, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        "(the row of the largest tip)" in told
        and "line_no = " in told
        and f"| {best['fare']}\n(1 row" in told
    )


def test_a_query_that_reads_nothing_of_the_column_asked_is_of_the_rows_value_instead(
    taxis: dict[str, Any], trips: list[dict[str, str]]
) -> None:
    """One row found: a count per hour of it says nothing of its zone; the zone is shown."""
    from datetime import datetime

    from rlm.run.typed.spans import with_spans

    question = "Find the ride that lasted the longest. What was its dropoff_zone?"
    longest = max(
        trips, key=lambda t: datetime.fromisoformat(t["dropoff"]) - datetime.fromisoformat(t["pickup"])
    )
    table = with_spans(taxis, question)
    step = first_step(question, table, *_helpers(TAXIS, table))
    assert step is not None
    hourly = {"op": "group", "by": "pickup", "bucket": "hour", "k": 1}
    kept = onto_first_step(question, json.dumps(hourly), step, table)
    assert kept is not None and "the query is of that row's dropoff_zone" in kept[1]
    _, rows = run_typed(kept[0], table)
    assert [r[1] for r in rows] == [longest["dropoff_zone"]]


def test_a_group_in_its_keys_order_is_no_first_step_of_the_models(taxis: dict[str, Any]) -> None:
    question = "Take the dropoff zone with the most rides. How many of its rides were paid in cash?"
    step = first_step(question, taxis, *_helpers(TAXIS, taxis))
    assert step is not None
    keyed = {"op": "group", "by": "dropoff_zone", "order": "key", "k": 1}
    kept = onto_first_step(question, json.dumps(keyed), step, taxis)
    assert kept is not None and kept[0]["where"] == [
        {"column": "dropoff_zone", "cmp": "=", "value": step.value}
    ]


ACCESS = DATA / "access.log"


def test_the_cli_answers_of_the_key_whose_amount_adds_up_highest(tmp_path: Path) -> None:
    """ "the <column> that ... the most <amount>": the key whose total of that amount is largest
    column, not of lines. Through the CLI, the real worker and a model that counts every line,
    the count it is shown is of that key's requests."""
    totals: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for x in ACCESS.read_text().splitlines():
        m = re.match(r'(\S+) .*" \d{3} (\d+|-) ', x)
        if m:
            totals[m[1]] += int(m[2]) if m[2] != "-" else 0
            lines[m[1]] += 1
    (top, most), (_, second) = totals.most_common(2)
    assert most > second and top != lines.most_common(1)[0][0]  # not the address of the most lines
    table = _table(ACCESS, tmp_path / "cache")
    holds, rows = _helpers(ACCESS, table)
    question = "Find the ip that received most bytes overall. What is its number of requests?"
    step = first_step(question, table, holds, rows)
    assert step is not None and step.column.name == "ip" and step.value == top, step
    # A kind of row the question names that no condition states is not read.
    assert (
        first_step("Find the ip receiving most bytes from crawlers. Then its requests?", table, holds, rows)
        is None
    )
    proc, stub = ask_typed_once(ACCESS, question, {"op": "count"}, str(lines[top]), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"ip = {top!r} is added to where" in told and re.search(rf"\b{lines[top]}\b", told), told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{lines[top]}\n", proc.stderr


def test_the_second_query_sent_again_after_a_refused_final_is_the_one_rlm_ran(tmp_path: Path) -> None:
    """A final of the wrong kind is refused, and the model sends its count again: that is the
    count rlm ran, kept to the key the first step found (shown again as a repeat), not the
    count of every row, and the figure is taken."""
    lines = AUTH.read_text().splitlines()
    failing = [m[1] for x in lines if "Failed password" in x and (m := re.search(r"from (\S+) port", x))]
    top, _ = Counter(failing).most_common(1)[0]
    want = sum(1 for x in lines if "Failed password for root from" in x and f"from {top} port" in x)
    question = (
        "Find the source IP with the most 'Failed password' lines. How many of its failed logins "
        "were for the user root? Just the number."
    )
    sent = json.dumps({"op": "count", "where": [{"column": "user", "cmp": "=", "value": "root"}]})
    replies = [
        sent,
        json.dumps({"op": "final", "answer": top}),  # an address where a number is asked: refused
        sent,
        json.dumps({"op": "final", "answer": str(want)}),
        json.dumps({"answer": str(want)}),
    ]
    proc, stub = ask_typed_cli(AUTH, question, replies, cwd=tmp_path)
    assert "final refused" in stub.requests[2]["body"]["messages"][-1]["content"]
    again = stub.requests[3]["body"]["messages"][-1]["content"]
    assert "not run: you already ran exactly this at step 1" in again and re.search(rf"\b{want}\b", again)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr


def test_the_cli_answers_a_named_field_of_the_record_rlm_found(tmp_path: Path) -> None:
    """ "What is <column> ..." with no article names the column asked: a model that groups the
    records by another column is shown the named column of the record of the largest value."""
    path = DATA / "data" / "elastic" / "nginxplus_json_logs"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    most = max(r["connections"]["idle"] for r in records)
    (record,) = [r for r in records if r["connections"]["idle"] == most]
    want = str(record["ssl"]["handshakes"])
    question = "Look up the entry of the largest connections.idle. What is ssl.handshakes there? Number only."
    sent = {"op": "group", "by": "nginx_version", "order": "most", "k": 1}
    proc, stub = ask_typed_once(path, question, sent, want, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    first_row = told.split("\n")[3]  # after the tag, the header and its rule
    assert [cell.strip() for cell in first_row.split("|")][1:] == [want, str(most)], told


def test_one_verb_before_an_amount_is_read_but_not_before_a_count_of_rows(tmp_path: Path) -> None:
    """ "the ip that pulled the most bytes": the amount says what is ranked, whatever the verb.
    Before a count of rows a verb may say which rows, and the sentence is not read."""
    totals: Counter[str] = Counter()
    for x in ACCESS.read_text().splitlines():
        m = re.match(r'(\S+) .*" \d{3} (\d+|-) ', x)
        if m:
            totals[m[1]] += int(m[2]) if m[2] != "-" else 0
    (top, most), (_, second) = totals.most_common(2)
    assert most > second
    table = _table(ACCESS, tmp_path / "cache")
    holds, rows = _helpers(ACCESS, table)
    step = first_step(
        "First find the ip that pulled the most bytes. Then how many requests did it make?",
        table,
        holds,
        rows,
    )
    assert step is not None and step.value == top, step
    for sentence in (
        "First find the ip that fetched the most requests.",
        "First find the ip that quickly pulled the most bytes.",
    ):
        assert first_step(f"{sentence} Then how many bytes did it get?", table, holds, rows) is None, sentence


def test_an_aside_on_how_the_amount_is_totalled_names_no_kind_of_row(tmp_path: Path) -> None:
    totals: Counter[str] = Counter()
    for x in ACCESS.read_text().splitlines():
        m = re.match(r'(\S+) .*" \d{3} (\d+|-) ', x)
        if m:
            totals[m[1]] += int(m[2]) if m[2] != "-" else 0
    table = _table(ACCESS, tmp_path / "cache")
    holds, rows = _helpers(ACCESS, table)
    then = " Then how many requests did it make?"
    aside = "First find the ip that pulled the most bytes (each size added, a dash as nought)."
    step = first_step(aside + then, table, holds, rows)
    assert step is not None and step.value == totals.most_common(1)[0][0], step
    # an aside that names a kind of row is still read, and the sentence is not
    assert (
        first_step(
            "First find the ip that pulled the most bytes (from crawlers only)." + then, table, holds, rows
        )
        is None
    )
