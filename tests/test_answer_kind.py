"""An answer of another kind than the question's words ask for (a host name where an IP address
is asked, a word where a count is) is refused once at the node, and in doubt if it stays: low
confidence, and --strict withholds it. Through the CLI, the real worker and a real HTTP model
server for the run's behaviour; the detection itself on questions written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ask_typed_cli, latest_trace

from rlm.input.source import open_source
from rlm.run.answer_kind import (
    IP,
    NAME,
    NUMBER,
    TIME_OF_DAY,
    asked_kind,
    columns_of_kind,
    echoed,
    misfit,
    misfit_note,
    unasked_time,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
AUTH = FIXTURES / "auth.log"


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How many sessions were closed by the server?", NUMBER),
        ("What is the total of the bytes column for POSTs? Just the number.", NUMBER),
        ("Mean latency of the slow calls, rounded to 2 decimal places?", NUMBER),
        ("Which client IP sent the most requests?", IP),
        ("Name the busiest peer. Give the IP address only.", IP),
        ("When did the first restart happen? Answer as HH:MM:SS.", TIME_OF_DAY),
        ("Which teams played in May? Give the team names, one per line.", NAME),
        ("Which region sold least? The region name only.", NAME),
        ("Which account started the cron job? The username alone.", NAME),  # a name in one word
        ("On which machine did the cron job start? Give its hostname.", NAME),
        ("Which path was requested most often?", None),  # nothing about the answer's kind
        ("When was the first error? Answer as 'Mon D HH:MM:SS'.", None),  # a date's letters before the form
        (
            "At what day did it start? Answer as YYYY-MM-DD HH:MM.",
            None,
        ),  # a date and a time: not a time of day
        (
            "Which IP failed most, and when did it first fail? Give that time as HH:MM.",
            None,
        ),  # two kinds asked
    ],
)
def test_the_kind_asked_is_read_from_the_answer_form_words(question: str, kind: str | None) -> None:
    asked = asked_kind(question)
    assert (asked.kind if asked else None) == kind


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Which client IP sent the most requests?", "web-07", False),
        ("Which client IP sent the most requests?", "It was 10.1.2.3.", True),
        ("Which client IP sent the most requests?", "10.1.2.3:8080", True),
        ("Which client IP sent the most requests?", "[2001:db8::7]", True),
        ("Which client IPs sent a POST? One per line.", "10.1.2.3\nweb-07", False),  # every item
        ("Which client IPs sent a POST? One per line.", "10.1.2.3, 10.1.2.4", True),
        ("How many sessions were closed?", "1,204 sessions", True),
        ("How many sessions were closed?", "none", True),
        ("How many sessions were closed?", "sshd", False),
        ("How many sessions did the busiest peer open?", "10.1.2.3", False),  # its address, not its count
        ("How many sessions did the busiest peer open?", "10.1.2.3 opened 41", True),
        ("When did it restart? Answer as HH:MM:SS.", "2017-06-09", False),
        ("When did it restart? Answer as HH:MM:SS.", "2017-06-09 20:11:08", True),
        ("Which teams played? Give the team names.", "7", False),  # a count where names are asked
        ("Which users logged in? List the user names.", "0\n1234\nadmin", True),  # a name may be digits
        ("Which account started the cron job? The username alone.", "1", False),  # the count of its rows
        ("Which account started the cron job? The username alone.", "svc-backup", True),
    ],
)
def test_an_answer_misfits_when_an_item_holds_no_value_of_the_kind(
    question: str, answer: str, fits: bool
) -> None:
    asked = asked_kind(question)
    assert asked is not None
    wrong = misfit(asked, answer)
    assert (wrong is None) == fits
    if wrong is not None:
        note = misfit_note(asked, wrong)
        assert wrong in answer and asked.kind in note and asked.words in note and repr(wrong) in note


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (AUTH, ["src_ip"]),
        (FIXTURES / "access.log", ["ip"]),
        (FIXTURES / "data" / "seaborn" / "taxis.csv", []),
        (FIXTURES / "data" / "elastic" / "nginxplus_json_logs", ["address"]),
    ],
)
def test_the_table_names_its_columns_of_ip_addresses(path: Path, expected: list[str], tmp_path: Path) -> None:
    table = open_source(str(path), cache_dir=str(tmp_path)).profile.table
    assert table is not None and columns_of_kind(IP, table) == expected
    assert columns_of_kind(NUMBER, table) == []


def _ops(request: dict[str, Any]) -> set[str]:
    """The ops the grammar of a request to the model server offers."""
    schema = request["body"]["response_format"]["json_schema"]["schema"]
    return {
        n
        for b in schema["anyOf"]
        for n in b["properties"]["op"].get("enum", [b["properties"]["op"].get("const")])
    }


QUESTION = "There was a single accepted SSH login. Which IP address did it come from? The IP only."
ACCEPTED = next(line for line in AUTH.read_text().splitlines() if "Accepted password" in line)
ADDRESS = ACCEPTED.split(" from ", 1)[1].split()[0]


def test_a_final_of_the_wrong_kind_is_refused_once_and_the_model_told_where_to_look(tmp_path: Path) -> None:
    replies = [
        json.dumps({"op": "rows", "columns": ["host"], "k": 1}),
        json.dumps({"op": "final", "answer": "LabSZ"}),  # the host field's value: no address
        json.dumps(
            {
                "op": "top",
                "column": "src_ip",
                "k": 1,
                "where": [{"column": "event", "cmp": "=", "value": "accepted_password"}],
            }
        ),
        json.dumps({"op": "final", "answer": ADDRESS}),
        json.dumps({"answer": ADDRESS, "citations": ["F2"]}),
    ]
    proc, stub = ask_typed_cli(AUTH, QUESTION, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{ADDRESS}\n", (proc.returncode, proc.stdout, proc.stderr)
    # The turn after the refusal offers no final in its grammar; the one after the next query does.
    assert ["final" in _ops(stub.requests[i]) for i in (1, 2, 3)] == [True, False, True]
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused" in told and "an IP address" in told and "src_ip" in told, told[-600:]
    assert "LabSZ" not in told.rsplit("final refused", 1)[1]  # the model's answer is not quoted back
    trace = latest_trace(tmp_path)
    assert trace["synthesis"]["doubts"] == [] and trace["answer"] == ADDRESS


def test_a_final_of_the_wrong_kind_after_one_more_query_is_taken_and_withheld_under_strict(
    tmp_path: Path,
) -> None:
    final = json.dumps({"op": "final", "answer": "LabSZ"})
    accepted = {"column": "event", "cmp": "=", "value": "accepted_password"}
    replies = [
        json.dumps({"op": "rows", "columns": ["host"], "k": 1}),
        final,
        json.dumps({"op": "rows", "columns": ["host"], "k": 1, "where": [accepted]}),
        final,  # after one more query: taken as it is
        json.dumps({"answer": "LabSZ", "citations": ["F2"]}),
    ]
    proc, _ = ask_typed_cli(AUTH, QUESTION, replies, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert "the answer is not of the kind asked" in proc.stderr and "'LabSZ' holds none" in proc.stderr, (
        proc.stderr
    )
    trace = latest_trace(tmp_path)
    assert trace["status"] == "withheld"
    assert any("an IP address" in d for d in trace["synthesis"]["doubts"])


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Which task never finished? Its id only.", "2017-06-09 20:00", False),
        ("Which users logged in? One per line.", "2015-05-17\n2015-05-18", False),
        ("Which task never finished? Its id only.", "task_0042", True),
        ("Which hour was the busiest?", "2015-05-17 10:00", True),  # a time asked
        ("When did the first error come?", "10:05:03", True),
        ("What happened on 2015-05-17 most?", "2015-05-17", True),  # a time named: it may be the answer
        ("Which task never finished? Its id only.", "2017-06-09 20:00 and task_1", True),  # not a time alone
    ],
)
def test_an_answer_that_is_a_time_misfits_a_question_asking_about_none(
    question: str, answer: str, fits: bool
) -> None:
    assert (unasked_time(question, answer) is None) is fits


def test_a_time_answered_where_none_is_asked_is_refused_once(tmp_path: Path) -> None:
    """The model answers with the hour its query grouped by; the question asks which path: the
    final is refused once, and the path found after the next query is the answer."""
    log = FIXTURES / "access.log"
    paths = [line.split('"')[1].split()[1] for line in log.read_text().splitlines()]
    busiest = max(sorted(set(paths)), key=paths.count)
    replies = [
        json.dumps({"op": "group", "by": "ts", "bucket": "hour", "k": 1}),
        json.dumps({"op": "final", "answer": "2015-05-17 10:00"}),
        json.dumps({"op": "top", "column": "path", "k": 1}),
        json.dumps({"op": "final", "answer": busiest}),
        json.dumps({"answer": busiest, "citations": ["F2"]}),
    ]
    proc, stub = ask_typed_cli(log, "Which path did clients fetch most often?", replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", (proc.returncode, proc.stdout, proc.stderr)
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: your answer is a date or time, and the question asks about none." in told
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == []


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Within the EMEA group, which team filed the most tickets? Name only.", "EMEA", False),
        ("For host web-7, which process restarted most?", "'web-7'.", False),
        ("Within the EMEA group, which team filed the most tickets? Name only.", "EMEA Sales", True),
        ("Which is more common, GET or POST?", "GET", True),  # a choice the question offers
        ("How many requests got a 404 in the 10 minutes after 10:00?", "10", True),  # a count, by chance
        ("How many requests did 10.0.0.1 make in total?", "10.0.0.1", False),
        ("Is there any request from 10.0.0.1? yes or no", "yes", True),
    ],
)
def test_an_answer_that_is_a_value_the_question_states_misfits(
    question: str, answer: str, fits: bool
) -> None:
    assert (echoed(question, answer) is None) is fits


def test_an_answer_the_question_states_is_refused_once(tmp_path: Path) -> None:
    """The model answers with the borough its query filtered on; the question asks which zone."""
    taxis = FIXTURES / "data" / "seaborn" / "taxis.csv"
    with taxis.open(newline="") as fh:
        zones = [
            r["dropoff_zone"]
            for r in csv.DictReader(fh)
            if r["dropoff_borough"] == "Manhattan" and r["dropoff_zone"]
        ]
    busiest = max(sorted(set(zones)), key=zones.count)
    manhattan = [{"column": "dropoff_borough", "cmp": "=", "value": "Manhattan"}]
    replies = [
        json.dumps({"op": "count", "where": manhattan}),
        json.dumps({"op": "final", "answer": "Manhattan"}),
        json.dumps({"op": "top", "column": "dropoff_zone", "k": 1, "where": manhattan}),
        json.dumps({"op": "final", "answer": busiest}),
        json.dumps({"answer": busiest, "citations": ["F2"]}),
    ]
    question = "For trips that ended in Manhattan, which dropoff zone was the busiest?"
    proc, stub = ask_typed_cli(taxis, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", (proc.returncode, proc.stdout, proc.stderr)
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: your answer is a value the question itself states" in told
