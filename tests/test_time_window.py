"""The time window a question states, added to a typed query that has none (rlm.run.typed.window):
both sides of a range or a whole day, in the forms questions write dates and clocks, on each
kind of time column, a whole month, and two clocks on a date and a time-of-day column; one side
alone, a zone left unsaid on a zoned column, or two time columns, never. Each clock hour over all days."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_once, latest_trace

from rlm.input.logformats import assumed_year
from rlm.input.source import open_source
from rlm.run.typed import compile_sql
from rlm.run.typed.check import Problem, check_action
from rlm.run.typed.columns import table_columns
from rlm.run.typed.fields import Sample, sample_lines
from rlm.run.typed.measure import with_asked_measure
from rlm.run.typed.schema import action_schema
from rlm.run.typed.window import LINE_ZONE_KEY, with_line_zone, with_window

ROOT = Path(__file__).resolve().parent.parent
ACCESS = ROOT / "fixtures" / "access.log"
LINUX = ROOT / "fixtures" / "data" / "loghub" / "Linux_2k.log"
TAXIS = ROOT / "fixtures" / "data" / "seaborn" / "taxis.csv"
ZOOKEEPER = ROOT / "fixtures" / "data" / "loghub" / "Zookeeper_2k.log_structured.csv"
WINDOWS = ROOT / "fixtures" / "data" / "loghub" / "Windows_2k.log_structured.csv"
COUNT: dict[str, Any] = {"op": "count"}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, dict[str, Any]]]:
    cache = tmp_path_factory.mktemp("window-cache")
    out = {}
    for path in (ACCESS, LINUX, TAXIS, ZOOKEEPER, WINDOWS):
        table = open_source(str(path), cache_dir=str(cache)).profile.table
        assert table is not None
        out[path] = table
    yield out


def _count(action: dict[str, Any], table: dict[str, Any]) -> int:
    with duckdb.connect(table["path"], read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")  # as the worker's sql() connection has it
        row = con.execute(compile_sql(action, table)).fetchone()
    assert row is not None
    return int(row[0])


def _access_times() -> list[datetime]:
    """Each request's time, read here from the raw lines (all of this log's are +0000)."""
    stamps = re.findall(r"\[(\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2}) \+0000\]", ACCESS.read_text())
    return [datetime.strptime(s, "%d/%b/%Y:%H:%M:%S") for s in stamps]


def _syslog_times() -> list[tuple[str, str]]:
    """(month day, clock) of each syslog line, whatever its tag (`syslogd 1.4.1: restart.` too):
    `("Jul 17", "04:10:59")`."""
    form = r"^(\w{3}) +(\d+) (\d\d:\d\d:\d\d) "
    return [(f"{m[1]} {int(m[2])}", m[3]) for m in re.finditer(form, LINUX.read_text(), re.M)]


@pytest.mark.parametrize(
    ("question", "first", "last"),
    [
        ("Requests between 17/May/2015:10:05:00 and 10:47:30 +0000: a count?", "10:05:00", "10:47:30"),
        ("From 2015-05-17 10:05 UTC to 10:47 UTC, count the requests.", "10:05:00", "10:47:59"),
        (
            "Count requests from May 17, 2015 10:05 (UTC) until 10:48, that minute excluded.",
            "10:05:00",
            "10:47:59",
        ),
        # no "from" nor "between": a clock to a clock on the date written
        (
            "Over the span 17/May/2015 10:05:00 to 10:47:30 (+0000), the request count is?",
            "10:05:00",
            "10:47:30",
        ),
    ],
)
def test_a_range_of_clocks_on_a_day_counts_the_lines_inside_it(
    tables: dict[Path, dict[str, Any]], question: str, first: str, last: str
) -> None:
    """Each way of writing a range on the zoned access log: the count is the one Python finds,
    the end taken in at its own precision (a minute stated holds its seconds) or left out where
    the question says so."""
    table = tables[ACCESS]
    windowed = with_window(question, COUNT, table)
    assert windowed is not None, question
    low = datetime.fromisoformat(f"2015-05-17 {first}")
    high = datetime.fromisoformat(f"2015-05-17 {last}")
    want = sum(1 for t in _access_times() if low <= t <= high)
    assert 0 < want < len(_access_times())
    assert _count(windowed[0], table) == want
    assert windowed[1][0].startswith("ts >= '2015-05-17 10:05")


@pytest.mark.parametrize(
    "question",
    [
        "Count the requests from 22:45:00 on 17 May 2015 until 01:10:00 on 18 May 2015 UTC.",
        "Requests between 22:45:00 (UTC) on May 17, 2015 and 01:10:00 on May 18, 2015: a count?",
        "How many requests from 2015-05-17 22:45:00 UTC through 2015-05-18 01:10:00?",
    ],
)
def test_a_range_over_midnight_takes_each_side_on_its_own_date(
    tables: dict[Path, dict[str, Any]], question: str
) -> None:
    """Each clock with its date written after it: the end is on the next day, not on the
    start's (a window that ended before it began matched no line)."""
    table = tables[ACCESS]
    windowed = with_window(question, COUNT, table)
    assert windowed is not None, question
    low, high = datetime(2015, 5, 17, 22, 45), datetime(2015, 5, 18, 1, 10)
    want = sum(1 for t in _access_times() if low <= t <= high)
    assert 0 < want and _count(windowed[0], table) == want, windowed[1]


def test_a_whole_day_and_a_range_of_days(tables: dict[Path, dict[str, Any]]) -> None:
    table = tables[ACCESS]
    times = _access_times()
    day = with_window("Count the requests on 18/May/2015 (+0000).", COUNT, table)
    assert day is not None and _count(day[0], table) == sum(1 for t in times if t.day == 18)
    days = with_window("Requests between 2015-05-17 and 2015-05-18 UTC, how many?", COUNT, table)
    assert days is not None and _count(days[0], table) == len(times)


def test_a_year_less_syslog_date_takes_the_year_its_table_gives(tables: dict[Path, dict[str, Any]]) -> None:
    """`Jul 17` on a syslog (whose lines carry no year): the table's year; a clock range on it too."""
    table = tables[LINUX]
    lines = _syslog_times()
    busiest = max(sorted({d for d, _ in lines}), key=lambda d: sum(1 for x, _ in lines if x == d))
    day = with_window(f"Lines on {busiest}: count them.", COUNT, table)
    assert day is not None and _count(day[0], table) == sum(1 for d, _ in lines if d == busiest)
    clocks = sorted(c for d, c in lines if d == busiest)
    low, high = clocks[len(clocks) // 4][:5], clocks[3 * len(clocks) // 4][:5]
    question = f"How many lines between {low} and {high} on {busiest}?"
    ranged = with_window(question, COUNT, table)
    want = sum(1 for d, c in lines if d == busiest and low <= c[:5] <= high)
    assert ranged is not None and _count(ranged[0], table) == want and 0 < want < len(clocks)


@pytest.mark.parametrize(
    ("path", "question"),
    [
        (ACCESS, "Count requests after 17/May/2015:13:07:00 +0000."),  # one side alone
        (ACCESS, "Requests between 10:05 and 10:40 on 2015-05-17: a count?"),  # no zone said, none known
        (ACCESS, "Which hour was busiest? Give it like 17/May/2015:10:00:00 +0000."),  # a form, no window
        (LINUX, "Which second had most lines? Answer as e.g. 15:16:01 to 15:16:02."),  # an example
        (TAXIS, "How many rides between 2019-03-05 and 2019-03-07?"),  # a pickup or a dropoff time?
    ],
)
def test_no_window_is_added_where_the_question_does_not_state_one_plainly(
    tables: dict[Path, dict[str, Any]], path: Path, question: str
) -> None:
    assert with_window(question, COUNT, tables[path]) is None


def test_a_query_that_reads_a_time_already_or_has_no_room_is_left_as_sent(
    tables: dict[Path, dict[str, Any]],
) -> None:
    table = tables[ACCESS]
    question = "Count the requests on 18/May/2015 (+0000)."
    grouped = {"op": "group", "by": "ts", "bucket": "hour"}
    assert with_window(question, grouped, table) is None
    own = {"op": "count", "where": [{"column": "ts", "cmp": ">", "value": "2015-05-18 00:00:00+00:00"}]}
    assert with_window(question, own, table) is None
    full = {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 200}] * 3}
    assert with_window("Requests between 2015-05-17 and 2015-05-18 UTC?", full, table) is None


def test_the_cli_adds_the_window_and_tells_the_model(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a count sent with no time runs with the window the
    question states, the model is told what was added, and the right count is printed."""
    low, high = datetime(2015, 5, 17, 11, 30), datetime(2015, 5, 17, 13, 5, 30)
    want = sum(1 for t in _access_times() if low <= t <= high)
    assert 0 < want < len(_access_times())
    question = "Count the requests that came between 17/May/2015:11:30:00 and 13:05:30 (+0000)."
    proc, stub = ask_typed_once(ACCESS, question, COUNT, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "ts >= '2015-05-17 11:30:00+00:00'" in shown and str(want) in shown
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    # the zoned column compares in UTC, as the worker's connection reads it
    # the end taken in to its whole second
    assert (
        "\"ts\" >= \\'2015-05-17 11:30:00\\' AND date_trunc(\\'second\\', \"ts\") <= \\'2015-05-17 13:05:30\\'"
        in code
    )


def test_a_zone_left_unsaid_is_the_one_the_lines_write_their_times_in(
    tables: dict[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The access log writes every time at +0000: a question that states no zone reads its clock,
    and the window is added at that zone. Lines in two zones, or none, give no zone, and no window."""
    table = tables[ACCESS]
    zoned = with_line_zone(table, lambda: sample_lines(str(ACCESS)))
    assert zoned[LINE_ZONE_KEY] == "+00:00"
    windowed = with_window("Requests between 10:05 and 10:40 on 2015-05-17: a count?", COUNT, zoned)
    low, high = datetime(2015, 5, 17, 10, 5), datetime(2015, 5, 17, 10, 40, 59)
    assert windowed is not None and _count(windowed[0], zoned) == sum(
        1 for t in _access_times() if low <= t <= high
    )
    lines = ACCESS.read_text().splitlines()[:4]
    mixed = [lines[0], lines[1].replace("+0000]", "-0700]"), *lines[2:]]
    assert LINE_ZONE_KEY not in with_line_zone(table, lambda: Sample(mixed, whole=True))
    assert LINE_ZONE_KEY not in with_line_zone(tables[LINUX], lambda: sample_lines(str(LINUX)))


def test_the_cli_reads_a_clock_in_the_logs_own_zone(tmp_path: Path) -> None:
    """Through the CLI: a day the question names with no zone is the log's own day."""
    want = sum(1 for t in _access_times() if t.day == 18)
    question = "Count the requests logged on 2015-05-18."
    proc, stub = ask_typed_once(ACCESS, question, COUNT, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "ts >= '2015-05-18 00:00:00+00:00'" in shown and str(want) in shown


def test_a_window_the_query_writes_otherwise_is_replaced_by_the_stated_one(
    tables: dict[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Two clocks and no date, on a syslog: the model's own filters on the time column, its last
    second left out (`<` where the question's end is taken in), are replaced by the stated window
    on the date they are on; the count is Python's. A query whose filters are the window already,
    or that has none (with_window adds it), is not changed here; nor one on a date the question
    does not fix and the query's filters do not agree on."""
    table = tables[LINUX]
    lines = _syslog_times()
    busiest = max(sorted({d for d, _ in lines}), key=lambda d: sum(1 for x, _ in lines if x == d))
    clocks = sorted(c for d, c in lines if d == busiest)
    low, high = clocks[len(clocks) // 4], clocks[3 * len(clocks) // 4]  # a line is written at `high`
    day = datetime.strptime(f"{busiest} {assumed_year(table['note'])}", "%b %d %Y").date().isoformat()
    sent = {
        "op": "count",
        "where": [
            {"column": "ts", "cmp": ">=", "value": f"{day} {low}"},
            {"column": "ts", "cmp": "<", "value": f"{day} {high}"},
        ],
    }
    question = f"How many lines were written from {low} to {high}? Just the number."
    changed = with_asked_measure(question, json.dumps(sent), table)
    assert changed is not None
    assert changed[1] == (
        f"ts >= '{day} {low}' and ts <= '{day} {high}' as the question states, "
        f"instead of ts >= '{day} {low}' and ts < '{day} {high}'"
    )
    want = sum(1 for d, c in lines if d == busiest and low <= c <= high)
    assert _count(changed[0], table) == want and want > _count(sent, table)
    assert with_asked_measure(question, json.dumps(changed[0]), table) is None
    assert with_asked_measure(question, json.dumps(COUNT), table) is None
    other_day = {"column": "ts", "cmp": "<", "value": "2026-01-02 00:00:00"}
    two_days = {"op": "count", "where": [{**sent["where"][0]}, other_day]}
    assert with_asked_measure(question, json.dumps(two_days), table) is None


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_whole_month_named_is_that_month(tables: dict[Path, dict[str, Any]]) -> None:
    """ "in <month> <year>" on a CSV's date column, and "during <month>" with no year on a syslog
    (the year its table gives): from the month's first day to the next one's; the counts are
    Python's. A month with a day after it is a day, not a month."""
    zoo = tables[ZOOKEEPER]
    months = Counter(r["Date"][:7] for r in _csv_rows(ZOOKEEPER))
    assert len(months) > 1
    first = min(months)  # a month that is not all of the file's rows
    name = datetime.strptime(first, "%Y-%m").strftime("%B %Y")
    windowed = with_window(f"Count the log rows written in {name}.", COUNT, zoo)
    assert windowed is not None and _count(windowed[0], zoo) == months[first] < sum(months.values())
    linux = tables[LINUX]
    by_month = Counter(d.split()[0] for d, _ in _syslog_times())
    june = with_window("Lines logged during June: how many?", COUNT, linux)
    assert june is not None and _count(june[0], linux) == by_month["Jun"] < sum(by_month.values())
    assert with_window("Lines on June 20: a count?", COUNT, linux) != june


def _windows_clocks() -> tuple[str, str, str, int]:
    """A date of the Windows CSV, two clocks on it a quarter and three quarters through its rows,
    and the rows from the first clock to the second, both taken in, counted here."""
    rows = _csv_rows(WINDOWS)
    day = Counter(r["Date"] for r in rows).most_common(1)[0][0]
    clocks = sorted(r["Time"] for r in rows if r["Date"] == day)
    low, high = clocks[len(clocks) // 4][:5], clocks[3 * len(clocks) // 4][:5]  # minutes
    want = sum(1 for r in rows if r["Date"] == day and low <= r["Time"][:5] <= high)
    assert 0 < want < len(clocks)
    return day, low, high, want


def test_two_clocks_on_a_day_filter_a_date_column_and_a_time_of_day_column(
    tables: dict[Path, dict[str, Any]],
) -> None:
    """A CSV with a `Date` and a `Time` of day: a range of two clocks on one date is the date and
    the clocks, the last minute taken in whole; the model's own `!=` on both ends (a range it
    could not write) is replaced by it. The counts are Python's."""
    table = tables[WINDOWS]
    day, low, high, want = _windows_clocks()
    question = f"Count rows of {day} whose Time is from {low} through {high}."
    windowed = with_window(question, COUNT, table)
    assert windowed is not None and _count(windowed[0], table) == want
    assert windowed[1] == [f"Date = '{day}'", f"Time >= '{low}'", f"Time <= '{high}'"]
    ends = [{"column": "Time", "cmp": "!=", "value": v} for v in (low, high)]
    sent = {"op": "count", "where": [{"column": "Date", "cmp": "=", "value": day}, *ends]}
    changed = with_asked_measure(question, json.dumps(sent), table)
    assert changed is not None and _count(changed[0], table) == want != _count(sent, table)
    other = {**sent, "where": [*sent["where"][:1], {"column": "Time", "cmp": "!=", "value": "00:00:01"}]}
    assert with_asked_measure(question, json.dumps(other), table) is None  # `!=` of its own


def test_a_time_of_day_column_is_compared_in_order(tables: dict[Path, dict[str, Any]]) -> None:
    """The schema offers < <= > >= on a time-of-day column; a clock written without its leading
    zero or its seconds compares as the times do, `<=` taking its last minute in whole."""
    table = tables[WINDOWS]
    ordered = [
        b["properties"]
        for b in action_schema(table)["anyOf"]
        if b["properties"].get("op") == {"const": "count"}
    ][0]["where"]["items"]["anyOf"]
    assert any(
        "Time" in b["properties"]["column"].get("enum", []) and ">=" in b["properties"]["cmp"]["enum"]
        for b in ordered
    )
    rows = _csv_rows(WINDOWS)
    action = {"op": "count", "where": [{"column": "Time", "cmp": "<=", "value": "4:31"}]}
    assert _count(action, table) == sum(1 for r in rows if r["Time"][:5] <= "04:31")
    with pytest.raises(Problem, match="times of day"):
        check_action(
            {"op": "count", "where": [{"column": "Time", "cmp": ">", "value": "noon"}]}, table_columns(table)
        )


def test_a_clock_hour_over_all_days_groups_every_days_hour_together(
    tables: dict[Path, dict[str, Any]],
) -> None:
    """A group per hour where the question asks for an hour of any day counts each hour 0-23
    over every day; the busiest is Python's, and a group per hour is left as sent where the
    question asks for the busiest hour as a period."""
    table = tables[ACCESS]
    hours = Counter(t.hour for t in _access_times())
    assert len({t.date() for t in _access_times()}) > 1
    sent = {"op": "group", "by": "ts", "bucket": "hour", "k": 1}
    question = "Requests by clock hour, 0 to 23, all days together: which hour is busiest?"
    changed = with_asked_measure(question, json.dumps(sent), table)
    assert changed is not None and changed[0]["bucket"] == "hour_of_day"
    with duckdb.connect(table["path"], read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        rows = con.execute(compile_sql(changed[0], table)).fetchall()
    assert rows == [hours.most_common(1)[0]] and hours.most_common(2)[1][1] < rows[0][1]
    assert with_asked_measure("Which hour saw most requests?", json.dumps(sent), table) is None


def test_the_cli_writes_the_range_the_model_could_not(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a count sent with `!=` on both clocks of a range runs
    as the range, the model is told, and the right count is printed."""
    day, low, high, want = _windows_clocks()
    question = f"Rows of {day} with a Time from {low} through {high}: give the count alone."
    ends = [{"column": "Time", "cmp": "!=", "value": v} for v in (low, high)]
    sent = {"op": "count", "where": [{"column": "Date", "cmp": "=", "value": day}, *ends]}
    proc, stub = ask_typed_once(WINDOWS, question, sent, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"Time >= '{low}'" in shown and str(want) in shown


def test_the_cli_counts_per_the_period_the_answers_form_asks_for(tmp_path: Path) -> None:
    """A form with minutes (`YYYY-MM-DD HH:MM`) asks for a minute: a group per hour is counted per
    minute, the model told, and the busiest minute Python finds is printed. A group per the
    period the form asks for, or a form with no period (seconds), is left as sent."""
    minutes = Counter(t.strftime("%Y-%m-%d %H:%M") for t in _access_times())
    (busiest, n), (_, second) = minutes.most_common(2)
    assert n > second
    question = "Which minute of the log holds most requests? Reply as YYYY-MM-DD HH:MM."
    per_hour = {"op": "group", "by": "ts", "bucket": "hour", "k": 1}
    proc, stub = ask_typed_once(ACCESS, question, per_hour, busiest, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "bucket minute, the period the answer's form asks for, instead of hour" in told
    assert f"{busiest} | {n}" in told
    table = open_source(str(ACCESS), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    per_minute = {**per_hour, "bucket": "minute"}
    assert with_asked_measure(question, json.dumps(per_minute), table) is None
    seconds = "Which second was busiest? Give it as HH:MM:SS."
    assert with_asked_measure(seconds, json.dumps(per_hour), table) is None


def test_the_models_own_bounds_of_the_stated_window_give_way_to_the_stated_ones(
    tables: dict[Path, dict[str, Any]],
) -> None:
    """The question states an end taken in ("through 10:05:17"); the model wrote the same minutes
    with the end left out. Its two bounds give way to the stated ones, the count is Python's;
    bounds of other minutes, or the window as stated, are left alone."""
    table = tables[ACCESS]
    question = "Starting 17/May/2015 10:05:00 through 10:05:17 (+0000), what is the count of hits?"

    def bounded(low: tuple[str, str], high: tuple[str, str]) -> dict[str, Any]:
        return {"op": "count", "where": [{"column": "ts", "cmp": c, "value": v} for c, v in (low, high)]}

    start = (">=", "2015-05-17 10:05:00+00:00")
    windowed = with_window(question, bounded(start, ("<", "2015-05-17 10:05:17+00:00")), table)
    assert windowed is not None
    low, high = datetime(2015, 5, 17, 10, 5), datetime(2015, 5, 17, 10, 5, 17)
    want = sum(1 for t in _access_times() if low <= t <= high)
    assert _count(windowed[0], table) == want
    assert sum(1 for t in _access_times() if t == high) > 0  # the end bound matters here
    assert windowed[1][-1].endswith("(in place of your own bounds on ts)")  # the model is told
    assert with_window(question, bounded(start, ("<=", "2015-05-17 10:05:17+00:00")), table) is None
    assert with_window(question, bounded(start, ("<", "2015-05-17 10:06:00+00:00")), table) is None
