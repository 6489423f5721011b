"""How long a row took, offered as a column where the question asks (rlm.run.typed.spans):
the seconds between the table's time columns, against Python's own reading of the file, and
through the CLI with the real worker."""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ask_typed_once, run_typed

from rlm.input.source import open_source
from rlm.run.typed.columns import NUMBER, table_columns
from rlm.run.typed.describe import describe_actions
from rlm.run.typed.seconds import in_seconds
from rlm.run.typed.spans import asks_a_span, with_spans

_TIMES = ("submitted", "started", "finished")


def _write_jobs(path: Path, rows: int = 3000, extra_time: bool = False) -> list[dict[str, Any]]:
    """A CSV of build jobs: each submitted, started and finished at its own times."""
    rng = random.Random(5)
    base = dt.datetime(2026, 3, 2, 8, 0, 0)
    out = []
    for i in range(rows):
        submitted = base + dt.timedelta(seconds=rng.randint(0, 86_400))
        started = submitted + dt.timedelta(seconds=rng.randint(0, 900))
        finished = started + dt.timedelta(seconds=rng.randint(5, 7_200))
        row = {"job": f"job-{i:05d}", "queue": rng.choice(["linux", "mac", "win"]), "submitted": submitted,
               "started": started, "finished": finished}  # fmt: skip
        if extra_time:
            row["archived"] = finished + dt.timedelta(days=1)
        out.append(row)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(out[0]))
        writer.writeheader()
        for row in out:
            writer.writerow({k: v.strftime("%Y-%m-%d %H:%M:%S") if isinstance(v, dt.datetime) else v
                             for k, v in row.items()})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    directory = tmp_path_factory.mktemp("spans")
    path = directory / "jobs.csv"
    rows = _write_jobs(path)
    table = open_source(str(path), cache_dir=str(directory / "cache")).profile.table
    assert table is not None
    return path, rows, table


@pytest.mark.parametrize(
    "question",
    [
        "How long did the slowest build run, start to finish?",
        "Which job took the most time after it started?",
        "Mean duration of a mac job?",
        "Give finished minus started for job-00012.",
        "Which queue has the shortest waits?",
    ],
)
def test_words_about_a_length_of_time_ask_for_the_seconds_between_times(question: str) -> None:
    assert asks_a_span(question)


@pytest.mark.parametrize(
    "question",
    [
        "How many jobs started after 10:00?",
        "Which queue has the most jobs?",
        "Name the win queue's latest job submitted.",
        "Which jobs log 'took too long' in their output?",  # a line's text, quoted
    ],
)
def test_other_questions_are_not_offered_the_seconds(question: str) -> None:
    assert not asks_a_span(question)


def test_the_seconds_between_each_pair_of_times_are_number_columns_where_asked(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]],
) -> None:
    _, rows, table = jobs
    assert not [c for c in table_columns(table).columns if c.span is not None]  # not asked: not offered
    asked = with_spans(table, "Which job took the longest from start to finish?")
    spans = {c.name: c for c in table_columns(asked).columns if c.span is not None}
    assert sorted(spans) == [
        "seconds_started_to_finished",
        "seconds_submitted_to_finished",
        "seconds_submitted_to_started",
    ]
    assert all(c.kind == NUMBER for c in spans.values())
    assert '"seconds_started_to_finished" = finished - started' in describe_actions(asked)

    took = {r["job"]: (r["finished"] - r["started"]).total_seconds() for r in rows}
    longest = max(took.values())
    assert run_typed({"op": "max", "column": "seconds_started_to_finished"}, asked)[1] == [(longest,)]
    _, top = run_typed(
        {"op": "rows", "columns": ["job", "seconds_started_to_finished"], "order_by": "seconds_started_to_finished",
         "take": "last", "k": 1},
        asked,
    )  # fmt: skip
    [(_, job, seconds)] = top
    assert seconds == longest == took[job]
    over = sum(1 for r in rows if (r["started"] - r["submitted"]).total_seconds() > 600)
    count = {"op": "count", "where": [{"column": "seconds_submitted_to_started", "cmp": ">", "value": 600}]}
    assert run_typed(count, asked)[1] == [(over,)]
    mac = [s for r in rows if r["queue"] == "mac" for s in [(r["finished"] - r["started"]).total_seconds()]]
    _, [(average,)] = run_typed(
        {"op": "avg", "column": "seconds_started_to_finished",
         "where": [{"column": "queue", "cmp": "=", "value": "mac"}]},
        asked,
    )  # fmt: skip
    assert average == pytest.approx(sum(mac) / len(mac))


def test_a_table_of_more_times_or_one_is_offered_none(tmp_path: Path) -> None:
    path = tmp_path / "jobs4.csv"
    _write_jobs(path, rows=200, extra_time=True)
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    asked = with_spans(table, "Which job took the longest?")
    assert not [c for c in table_columns(asked).columns if c.span is not None]
    log = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"  # one time column
    one = open_source(str(log), cache_dir=str(tmp_path / "cache")).profile.table
    assert one is not None
    assert not [c for c in table_columns(with_spans(one, "how long did it take?")).columns if c.span]


def test_the_cli_ranks_rows_by_how_long_they_took(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], tmp_path: Path
) -> None:
    """Through the CLI and the real worker: the model orders the jobs by the seconds between two
    of their times, and its answer, read from that observation, is printed."""
    path, rows, _ = jobs
    took = {r["job"]: (r["finished"] - r["started"]).total_seconds() for r in rows}
    job, seconds = max(took.items(), key=lambda kv: (kv[1], kv[0]))
    action = {"op": "rows", "columns": ["job", "queue", "seconds_started_to_finished"],
              "order_by": "seconds_started_to_finished", "take": "last", "k": 1}  # fmt: skip
    proc, stub = ask_typed_once(
        path, "Which job ran the longest once started? Its id only.", action, job, cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{job}\n", proc.stderr
    prompt = json.dumps(stub.requests[0]["body"]["messages"])
    assert "seconds_started_to_finished" in prompt
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert job in shown and str(int(seconds)) in shown, shown


@pytest.mark.parametrize(
    "question, value, seconds",
    [
        ("How many jobs took over 45 minutes once started?", 45, 2700),
        ("How many jobs took under 1.5 hours from start to finish?", 1.5, 5400),
        ("Count the jobs that lasted at least 2-hour stretches.", 2, 7200),
    ],
)
def test_a_length_of_time_the_question_gives_in_minutes_or_hours_is_compared_in_seconds(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], question: str, value: float, seconds: int
) -> None:
    _, _, table = jobs
    sent = {"op": "count", "where": [{"column": "seconds_started_to_finished", "cmp": ">", "value": value}]}
    made = in_seconds(question, json.dumps(sent), with_spans(table, question))
    assert made is not None
    action, told = made
    assert (
        action["where"][0]["value"] == seconds and told == f"{value:g} {told.split()[1]} is {seconds} seconds"
    )


@pytest.mark.parametrize(
    "question, value",
    [
        ("How many jobs took over 2700 seconds once started?", 2700),  # seconds already
        ("How many jobs took over 45 minutes once started?", 2700),  # made seconds by the model
        ("Among the 40 longest-running jobs, count those on mac.", 40),  # a number, not a length of time
    ],
)
def test_a_number_not_given_in_another_unit_of_time_is_left_as_written(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], question: str, value: int
) -> None:
    _, _, table = jobs
    sent = {"op": "count", "where": [{"column": "seconds_started_to_finished", "cmp": ">", "value": value}]}
    assert in_seconds(question, json.dumps(sent), with_spans(table, question)) is None


def test_the_cli_counts_rows_that_took_longer_than_the_minutes_the_question_gives(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], tmp_path: Path
) -> None:
    """Through the CLI and the real worker: the model's condition has the question's 45 for its
    minutes; the count run is of the jobs over 2,700 seconds, and the model is told why."""
    path, rows, _ = jobs
    over = sum(1 for r in rows if (r["finished"] - r["started"]).total_seconds() > 2700)
    action = {"op": "count", "where": [{"column": "seconds_started_to_finished", "cmp": ">", "value": 45}]}
    proc, stub = ask_typed_once(
        path, "How many jobs took over 45 minutes once started?", action, str(over), cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{over}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"{over}" in shown and "45 minutes is 2700 seconds" in shown, shown


@pytest.mark.parametrize(
    "question, unit",
    [
        ("What is the mean duration of a mac job, in minutes?", "minutes"),
        ("How many hours did the longest job run?", "hours"),
        ("How long did jobs take on average (days)?", "days"),
        ("How many jobs took over 45 minutes once started?", "seconds"),  # a condition's unit
        ("How long did the slowest job take?", "seconds"),
    ],
)
def test_the_time_between_times_is_offered_in_the_unit_the_answer_is_asked_in(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], question: str, unit: str
) -> None:
    _, _, table = jobs
    spans = [c.name for c in table_columns(with_spans(table, question)).columns if c.span is not None]
    assert f"{unit}_started_to_finished" in spans and len(spans) == 3


def test_the_cli_averages_in_the_minutes_the_question_asks_and_compares_hours_as_minutes(
    jobs: tuple[Path, list[dict[str, Any]], dict[str, Any]], tmp_path: Path
) -> None:
    """Through the CLI and the real worker: asked for an average in minutes, the span column is
    in minutes, its average Python's over the same rows; a condition the question gives in hours
    is made minutes, and the model is told."""
    path, rows, _ = jobs
    took = [(r["finished"] - r["started"]).total_seconds() / 60 for r in rows]
    over = [t for t in took if t > 60]
    column = "minutes_started_to_finished"
    action = {"op": "avg", "column": column, "where": [{"column": column, "cmp": ">", "value": 1}]}
    question = (
        "For jobs that ran longer than 1 hour once started, what was their average run time in minutes?"
    )
    expected = sum(over) / len(over)
    proc, stub = ask_typed_once(path, question, action, f"{expected:.4f}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "1 hour is 60 minutes" in shown, shown
    printed = re.search(r"avg minutes_started_to_finished\n-+\n([\d.]+)\n", shown)
    assert printed is not None and float(printed.group(1)) == pytest.approx(expected), shown
    assert (
        '"minutes_started_to_finished" = finished - started'
        in stub.requests[0]["body"]["messages"][0]["content"]
    )
