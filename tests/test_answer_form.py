"""An answer that is one date or time is written in the form the question states, and only
then: nothing is invented, nothing else is touched. Through the CLI, over a real HTTP model
server, the user sees the answer in the asked form and a line on stderr saying so."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from conftest import ask_typed_cli, latest_trace, run_cli, write_script
from openai_stub import OpenAIStub

from rlm.run.answer_form import in_asked_form


@pytest.mark.parametrize(
    ("question", "answer", "expected"),
    [
        ("Answer in the form YYYY-MM-DD HH (24-hour).", "2015-05-19 19:00", "2015-05-19 19"),
        ("Answer in the form YYMMDD HH, e.g. 081109 21.", "2008-11-10 10:00", "081110 10"),
        ("Which minute? Answer as HH:MM.", "2015-05-17 12:10:33", "12:10"),
        ("Give it as YYYY-MM-DD.", " 2016-09-29 02:04:11 ", "2016-09-29"),
        ("Answer as DD/MM/YYYY HH:MM:SS", "2015-10-18T18:06:01", "18/10/2015 18:06:01"),
        # A month's short name, a day without its zero: as syslog writes a date, in letters or by example.
        ("Which day? Write it in syslog's Mon D form.", "2026-07-07", "Jul 7"),
        ("Which date was busiest? Give it like 09/Mar/2019.", "2019-03-14 00:00", "14/Mar/2019"),
        ("Which date had the most? (e.g. Aug 3)", "2019-03-14", "Mar 14"),
    ],
)
def test_an_answer_that_holds_every_part_the_form_asks_for_is_written_in_it(
    question: str, answer: str, expected: str
) -> None:
    formed = in_asked_form(question, answer)
    assert formed is not None and formed.answer == expected and formed.was == answer.strip()


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Answer in the form YYYY-MM-DD HH:MM:SS.", "2015-10-18 18:00"),  # no seconds: none invented
        ("Answer as HH:MM:SS.", "12:10"),
        ("Answer in the form YYYY-MM-DD HH:MM:SS,mmm.", "2015-10-18 18:06:01,840"),  # a fraction asked
        ("Answer in the form YYYY-MM-DD HH.", "2015-05-19 19"),  # already in it
        ("Answer in the form YYYY-MM-DD HH.", "around 2015-05-19 19:00"),  # not one value alone
        ("Answer in the form YYYY-MM-DD HH.", "2015-05-19 19:00\n2015-05-20 08:00"),
        ("Answer in the form YYYY-MM-DD HH.", "2015-13-19 19:00"),  # not a real date
        ("How many requests? Answer with the number only.", "2015-05-19 19:00"),  # no form stated
        ("From YYYY-MM-DD to DD/MM/YYYY?", "2015-05-19"),  # two forms: which one is meant is not known
        ("Answer as hh:mm.", "2015-05-19 19:00"),  # hh may be a 12-hour clock
        (None, "2015-05-19 19:00"),
        ("Which date? Answer like Jun 14.", "Jun 14"),  # already in it
        ("Which date? e.g. Jun 14, or like 15/Jun/2015", "2015-05-17"),  # two examples of two forms
        ("Which month was busiest? e.g. May.", "2015-05-17"),  # a month alone is no date's form
    ],
)
def test_anything_else_is_left_as_it_is(question: str | None, answer: str) -> None:
    assert in_asked_form(question or "", answer) is None


def test_the_cli_prints_the_answer_in_the_form_the_question_asks_and_says_so(
    tmp_path: Path, apache_log: Path
) -> None:
    hours = Counter(
        datetime.strptime(m[1], "%d/%b/%Y:%H").strftime("%Y-%m-%d %H")
        for line in apache_log.read_text().splitlines()
        if '" 200 ' in line and (m := re.search(r"\[(\d\d/\w\w\w/\d{4}:\d\d)", line))
    )
    (busiest, _), (second, _) = hours.most_common(2)
    assert hours[busiest] > hours[second]
    as_printed = f"{busiest}:00"  # how a group per hour prints its key
    action = {
        "op": "group",
        "by": "ts",
        "bucket": "hour",
        "k": 1,
        "where": [{"column": "status", "cmp": "=", "value": 200}],
    }
    replies = [
        json.dumps(action),
        json.dumps({"op": "final", "answer": as_printed}),
        json.dumps({"answer": as_printed, "citations": ["F1"]}),
    ]
    question = "During which hour were the most 200 responses logged? Answer in the form YYYY-MM-DD HH."
    with OpenAIStub(replies) as stub:
        proc = run_cli(
            ["ask", str(apache_log), question, "-m", "openai/stub", "--api-base", stub.api_base,
             "--protocol", "typed", "--json", "--strict"],
            cwd=tmp_path,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == busiest and doc["grounded"] is True
    assert as_printed in stub.requests[1]["body"]["messages"][-1]["content"]  # the query's own row
    said = f"the answer is written in the form the question asks (YYYY-MM-DD HH): '{as_printed}'"
    assert said in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["synthesis"]["answer"] == busiest and any(said in w for w in trace["warnings"])


def test_a_plain_call_answer_is_written_in_the_asked_form_too(tmp_path: Path) -> None:
    """`--mode plain` (the baseline arm of `rlm eval`) gets the same rewriting, so the two modes
    are scored alike."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"
    first = re.search(r"\[(\d\d/\w\w\w/\d{4}:\d\d:\d\d)", log.read_text())
    assert first is not None
    stamp = datetime.strptime(first[1], "%d/%b/%Y:%H:%M")
    model = write_script(tmp_path / "s.json", {"default": f"Answer: {stamp:%Y-%m-%d %H:%M}"})
    question = "When was the first request logged? Answer in the form YYYY-MM-DD HH."
    proc = run_cli(["ask", str(log), question, "-m", model, "--mode", "plain"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{stamp:%Y-%m-%d %H}\n"
    assert f"written in the form the question asks (YYYY-MM-DD HH): '{stamp:%Y-%m-%d %H:%M}'" in proc.stderr
    assert latest_trace(tmp_path)["answer"] == f"{stamp:%Y-%m-%d %H}"


@pytest.mark.parametrize(
    ("question", "answer", "expected"),
    [
        ("Which hosts restarted? One per line.", "web-1, web-2, db-3", "web-1\nweb-2\ndb-3"),
        ("List the users, one name per line.", "alice, bob, and carol", "alice\nbob\ncarol"),
        ("Which hosts restarted? One per line.", "web-1\nweb-2", None),  # already one per line
        ("Which hosts restarted? One per line.", "web-1", None),  # one item
        ("Which hosts restarted?", "web-1, web-2", None),  # no line form asked
        ("Which hosts restarted? One per line.", "web-1, , web-2", None),  # an empty item: not a plain list
    ],
)
def test_a_list_on_one_line_is_put_one_item_per_line_where_asked(
    question: str, answer: str, expected: str | None
) -> None:
    formed = in_asked_form(question, answer)
    assert (formed.answer if formed else None) == expected
    if formed is not None:
        assert formed.form == "one per line" and formed.was == answer


def test_the_cli_prints_a_list_one_item_per_line_where_the_question_asks(
    tmp_path: Path, apache_log: Path
) -> None:
    """A synthesis that writes the rows' values on one line: stdout has them one per line, and
    stderr says the answer was rewritten; each item is grounded by the query's rows."""
    methods = sorted(
        {
            m[1]
            for line in apache_log.read_text().splitlines()
            if (m := re.search(r'"([A-Z]+) [^"]*" 200 ', line))
        }
    )
    assert len(methods) >= 2
    one_line = ", ".join(methods)
    replies = [
        json.dumps(
            {
                "op": "group",
                "by": "method",
                "k": 20,
                "where": [{"column": "status", "cmp": "=", "value": 200}],
            }
        ),
        json.dumps({"op": "final", "answer": one_line}),
        json.dumps({"answer": one_line, "citations": ["F1"]}),
    ]
    question = "Which request methods got a 200 response? List them one per line."
    proc, _ = ask_typed_cli(apache_log, question, replies, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "".join(f"{m}\n" for m in methods)
    assert f"the answer is written in the form the question asks (one per line): '{one_line}'" in proc.stderr


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("/10.10.34.13:3888", "10.10.34.13"),  # a peer written as the log writes it
        ("/10.0.0.1:1\n10.0.0.2:80", "10.0.0.1\n10.0.0.2"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("10.10.34.13", None),  # the address as it is
        ("2001:db8::1", None),
        ("host 10.0.0.1:80", None),  # a sentence: its wording is the synthesis's
        ("/10.0.0.1:1\n10.0.0.2", None),  # one item already bare: left as it is
    ],
)
def test_an_address_written_with_a_port_or_slash_is_the_address_alone_where_an_ip_is_asked(
    answer: str, expected: str | None
) -> None:
    from rlm.run.answer_kind import as_asked

    formed = as_asked("Which peer IP connected most? IP only.", answer)
    assert (formed.answer if formed else None) == expected
    assert as_asked("Which peer connected most?", answer) is None  # no address asked


def test_where_the_question_asks_for_the_port_too_only_the_slash_goes() -> None:
    """ "which peer ip:port": the port is asked, and kept."""
    from rlm.run.answer_kind import as_asked

    formed = as_asked("Which peer ip:port connected most?", "/10.0.0.1:3888")
    assert formed is not None and formed.answer == "10.0.0.1:3888"
    assert as_asked("Which peer ip:port connected most?", "10.0.0.1:3888") is None  # as asked already
    formed = as_asked("Which peer IP connected most? IP only.", "/10.0.0.1:3888")
    assert formed is not None and formed.answer == "10.0.0.1"


def test_a_plain_call_answer_with_a_port_is_printed_as_the_address_asked(tmp_path: Path) -> None:
    """Through the CLI (a plain call, one model reply): the user asked for the IP only."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"
    ip = log.read_text().split(" ", 1)[0]
    model = write_script(tmp_path / "s.json", {"default": f"Answer: /{ip}:443"})
    proc = run_cli(
        ["ask", str(log), "Which client IP came first? IP only.", "-m", model, "--mode", "plain"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout == f"{ip}\n", proc.stderr
    assert f"(the IP address alone): '/{ip}:443' as the model wrote it" in proc.stderr


@pytest.mark.parametrize(
    ("question", "answer", "expected"),
    [
        ("What is the mean fare? Rounded to 2 decimals.", "13.091380597014925", "13.09"),
        ("Give the share to two decimal places.", "33.33333%", "33.33%"),
        ("Round the average to 1 decimal.", "-2.25", "-2.3"),  # half away from zero
        ("What is it, rounded to the nearest whole number?", "41.5", "42"),
        ("The mean, two decimals.", "7.123", "7.12"),
        ("Round to 3 decimals.", "12.5", None),  # fewer decimals than asked: as written
        ("What is the mean fare?", "13.091380597014925", None),  # no rounding asked
        ("Round to 2 decimals.", "about 13.0913", None),  # not one number alone
    ],
)
def test_a_number_is_rounded_to_the_decimals_the_question_asks(
    question: str, answer: str, expected: str | None
) -> None:
    formed = in_asked_form(question, answer)
    assert (formed.answer if formed else None) == expected


def test_the_cli_prints_an_average_rounded_as_asked_and_says_so(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the model's final copies the query's average with
    every digit; the printed answer is rounded to the two decimals asked, and stderr says so."""
    taxis = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "seaborn" / "taxis.csv"
    with taxis.open(newline="") as fh:
        fares = [float(row["fare"]) for row in csv.DictReader(fh) if row["fare"]]
    average = sum(fares) / len(fares)
    replies = [
        json.dumps({"op": "avg", "column": "fare"}),
        json.dumps({"op": "final", "answer": repr(average)}),
        json.dumps({"answer": repr(average), "citations": ["F1"]}),
    ]
    proc, _ = ask_typed_cli(
        taxis, "What is the mean fare of all trips? Rounded to 2 decimals.", replies, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{average:.2f}\n"
    assert "the answer is written in the form the question asks (rounded to 2 decimals)" in proc.stderr
