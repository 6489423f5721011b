"""The examples a question gives state no condition (rlm.run.typed.examples_given): an answer's
form shown by a quoted example is no text the lines must hold, and an example's date and hours
are no window of the query."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

from conftest import FIXTURES, ask_typed_cli, latest_trace

from rlm.run.typed.examples_given import without_examples

ACCESS = FIXTURES / "access.log"


def _days() -> Counter[str]:
    stamps = (line.split("[", 1)[1].split(":", 1)[0] for line in ACCESS.open())
    return Counter(datetime.strptime(s, "%d/%b/%Y").strftime("%Y-%m-%d") for s in stamps)


def test_an_example_of_the_answers_form_is_no_condition_of_the_lines(tmp_path: Path) -> None:
    """The example is a day the log writes (so a quote of it would be held by lines), not the
    busiest: read as a condition, the group per day would hold that day alone."""
    (day, n), (other, _), *_ = sorted(_days().items(), key=lambda dn: (-dn[1], dn[0]))
    as_logged = lambda d: datetime.strptime(d, "%Y-%m-%d").strftime("%d/%b/%Y")  # noqa: E731
    replies = [
        json.dumps({"op": "group", "by": "ts", "bucket": "day", "k": 1}),
        json.dumps({"op": "final", "answer": day}),
        json.dumps({"answer": day, "citations": ["F1"]}),
    ]
    question = (
        f"Which date carried the heaviest traffic? Reply as the log writes a date, like '{as_logged(other)}'."
    )
    proc, stub = ask_typed_cli(ACCESS, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{as_logged(day)}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "rlm added it" not in told and f"{n}" in told, told[-800:]
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert as_logged(other) not in code, code


def test_an_examples_date_and_hours_are_no_window_of_the_query(tmp_path: Path) -> None:
    """The model counts one hour it found; the question's example of an hour (another day) does
    not replace the model's window."""
    hours = Counter(line.split("[", 1)[1][:14] for line in ACCESS.open())  # 17/May/2015:10
    hour = max(sorted(hours), key=lambda h: hours[h])
    start = datetime.strptime(hour, "%d/%b/%Y:%H")
    window = [
        {"column": "ts", "cmp": ">=", "value": start.strftime("%Y-%m-%d %H:00:00")},
        {"column": "ts", "cmp": "<", "value": start.strftime("%Y-%m-%d %H:59:59")},
    ]
    replies = [
        json.dumps({"op": "count", "where": window}),
        json.dumps({"op": "final", "answer": str(hours[hour])}),
        json.dumps({"answer": str(hours[hour]), "citations": ["F1"]}),
    ]
    question = (
        "Take the busiest clock hour of the log (a single day and hour, for example 20 May 2015 from "
        "08:00 to 08:59). How many requests fall in it? Only the count."
    )
    proc, stub = ask_typed_cli(ACCESS, question, replies, cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "2015-05-20" not in told, told[-800:]
    assert f"count\n-----\n{hours[hour]}\n" in told or f"{hours[hour]}" in told, told[-800:]


def test_which_clauses_are_examples() -> None:
    blank = without_examples
    assert "Jan 9" not in blank("Reply with month and day, like 'Jan 9'.")
    assert "2016" not in blank("one period (e.g. 2 March 2016 08:00-08:59) with most lines")
    assert "GET" not in blank("Which methods, such as GET, appear? List them.")
    # A quote after "like" that names the lines asked about stays, as does what follows a clause.
    kept = "How many lines like 'Accepted publickey for <user>' are there?"
    assert blank(kept) == kept
    named = "Count the lines such as 'Accepted publickey for <user>' here."
    assert blank(named) == named
    assert "after 14:00" in blank("Count them (for instance a retry); only those after 14:00.")
