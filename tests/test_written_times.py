"""A time compared to the table's `ts` as the file's own lines write it (rlm.run.typed.written).

The counts expected here are read from the raw lines by Python's own date parsing, not through
the table: a line's time as it starts the line, the same form the model was given.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import ask_typed_once, run_typed

from rlm.input.source import open_source
from rlm.run.actions import ParseError
from rlm.run.typed import to_action
from rlm.run.typed.window import table_window

LOGHUB = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub"


def _table(name: str, cache: Path) -> dict[str, Any]:
    table = open_source(str(LOGHUB / name), cache_dir=str(cache)).profile.table
    assert table is not None
    return table


def _times(name: str, width: int, form: str) -> list[datetime]:
    """Each line's time, as its first `width` characters write it."""
    lines = (LOGHUB / name).read_text(encoding="utf-8", errors="replace").splitlines()
    return [datetime.strptime(line[:width], form) for line in lines if line.strip()]


# (file, the time's width at the start of a line, its form, a day as the lines write it, that day,
#  a whole time as the lines write it)
CASES = [
    ("HDFS_2k.log", 13, "%y%m%d %H%M%S", "081110", "2008-11-10", "081110 215734"),
    ("Spark_2k.log", 17, "%y/%m/%d %H:%M:%S", "17/06/09", "2017-06-09", "17/06/09 20:11:11"),
    ("Hadoop_2k.log", 23, "%Y-%m-%d %H:%M:%S,%f", "2015-10-18", "2015-10-18", "2015-10-18 18:04:08,500"),
]


@pytest.mark.parametrize(("name", "width", "form", "day_written", "day", "moment_written"), CASES)
def test_a_day_and_a_time_as_the_lines_write_them_count_what_the_lines_hold(
    tmp_path: Path, name: str, width: int, form: str, day_written: str, day: str, moment_written: str
) -> None:
    table = _table(name, tmp_path)
    times = _times(name, width, form)
    on_day = sum(t.strftime("%Y-%m-%d") == day for t in times)
    assert on_day > 0
    _, rows = run_typed({"op": "count", "where": [{"column": "ts", "cmp": "=", "value": day_written}]}, table)
    assert rows == [(on_day,)]
    # a bound at a whole time, to the second or to the fraction the lines write
    cut = datetime.strptime(moment_written, form)
    after = sum(t >= cut for t in times)
    assert 0 < after < len(times)
    _, rows = run_typed(
        {"op": "count", "where": [{"column": "ts", "cmp": ">=", "value": moment_written}]}, table
    )
    assert rows == [(after,)]


def test_a_syslog_time_takes_the_year_the_table_took(tmp_path: Path) -> None:
    table = _table("Linux_2k.log", tmp_path)
    lines = (LOGHUB / "Linux_2k.log").read_text(encoding="utf-8").splitlines()
    on_day = sum(" ".join(line.split()[:2]) == "Jun 14" for line in lines)
    assert 0 < on_day < len(lines)
    _, rows = run_typed({"op": "count", "where": [{"column": "ts", "cmp": "=", "value": "Jun 14"}]}, table)
    assert rows == [(on_day,)]
    _, rows = run_typed(
        {"op": "count", "where": [{"column": "ts", "cmp": "<", "value": "Jun 14 15:16:02"}]}, table
    )
    assert rows == [(1,)]  # the first line alone, at 15:16:01 on the file's first day


def test_the_forms_are_the_formats_own_not_guessed(tmp_path: Path) -> None:
    """A six-digit value is a day only where the lines write days so; the syslog's day is not
    read in the HDFS table, nor the HDFS form in the syslog's, and the refusal still says how a
    time is written."""
    hdfs, syslog = _table("HDFS_2k.log", tmp_path), _table("Linux_2k.log", tmp_path)
    for value, table in (("Nov 10", hdfs), ("081110", syslog)):
        action = {"op": "count", "where": [{"column": "ts", "cmp": "=", "value": value}]}
        refused = to_action(json.dumps(action), table)
        assert isinstance(refused, ParseError) and "is not a time 'ts' can compare" in refused.message, (
            refused
        )


def test_through_the_cli_a_count_on_the_lines_own_day(tmp_path: Path) -> None:
    log = tmp_path / "HDFS_2k.log"
    shutil.copy(LOGHUB / "HDFS_2k.log", log)
    on_day = sum(line.startswith("081111 ") for line in log.read_text().splitlines())
    action = {"op": "count", "where": [{"column": "ts", "cmp": "=", "value": "081111"}]}
    proc, stub = ask_typed_once(
        log, "Count what was logged on the file's last day.", action, str(on_day), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(on_day)
    # the model was shown the count, not a refusal
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "is not a time" not in shown and str(on_day) in shown


def test_a_day_the_question_writes_as_the_lines_do_is_its_window(tmp_path: Path) -> None:
    """ "with date 081111": the question's day in the lines' own form bounds the count, in place
    of a time the model made of it, and where the model left the time out; through the CLI."""
    log = tmp_path / "HDFS_2k.log"
    shutil.copy(LOGHUB / "HDFS_2k.log", log)
    lines = log.read_text().splitlines()
    want = sum(line.startswith("081111 ") and " INFO " in line for line in lines)
    assert 0 < want < sum(" INFO " in line for line in lines)
    question = "Count the INFO lines dated 081111. Number only."
    info = {"column": "level", "cmp": "=", "value": "INFO"}
    made_up = {"column": "ts", "cmp": "=", "value": "2008-11-11 08:11:00"}
    for sent in ({"op": "count", "where": [info, made_up]}, {"op": "count", "where": [info]}):
        proc, stub = ask_typed_once(log, question, sent, str(want), cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
        shown = stub.requests[1]["body"]["messages"][-1]["content"]
        assert f"count\n-----\n{want}\n" in shown, shown
    # a number of six digits that is no date of the lines' form bounds nothing
    table = _table("HDFS_2k.log", tmp_path)
    assert table_window("How many lines have pid 081111?", table) is None
    assert table_window("How many lines name block 1234 on that day?", table) is None


def test_a_bound_at_a_whole_second_takes_in_the_fractions_the_lines_write(tmp_path: Path) -> None:
    """`<= 18:03:55` takes in `18:03:55,999` (the lines write milliseconds), as `<= 18:06` takes
    in every second of that minute; a bound written with its fraction compares as written."""
    table = _table("Hadoop_2k.log", tmp_path)
    times = _times("Hadoop_2k.log", 23, "%Y-%m-%d %H:%M:%S,%f")
    end = datetime(2015, 10, 18, 18, 3, 55)
    inside = sum(t < datetime(2015, 10, 18, 18, 3, 56) for t in times)
    assert inside > sum(t <= end for t in times)  # lines inside that second, after its start
    for value in ("2015-10-18 18:03:55", "2015-10-18 18:03:55,999"):
        _, rows = run_typed({"op": "count", "where": [{"column": "ts", "cmp": "<=", "value": value}]}, table)
        assert rows == [(inside,)], value
    _, rows = run_typed(
        {"op": "count", "where": [{"column": "ts", "cmp": "<=", "value": "2015-10-18 18:03:55,001"}]}, table
    )
    assert rows == [(sum(t <= datetime(2015, 10, 18, 18, 3, 55, 1000) for t in times),)]
