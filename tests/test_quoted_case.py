"""A text the question quotes is the log's own: where the input writes it in the quote's case,
rlm's added condition matches it in that case (rlm.run.typed.quoted, `contains_as_written`), and
lines that hold it in another case inside another message are not counted."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import FIXTURES, ask_typed_cli, ask_typed_once, latest_trace, run_typed

from rlm.run.typed.check import check_action, said_filter
from rlm.run.typed.columns import table_columns

AUTH = FIXTURES / "auth.log"


def test_a_quote_the_input_writes_as_quoted_is_matched_in_its_case(tmp_path: Path) -> None:
    lines = AUTH.read_text().splitlines()
    as_written = sum("Invalid user" in line for line in lines)
    any_case = sum("invalid user" in line.lower() for line in lines)
    assert as_written < any_case  # the input writes it in both cases: the test can tell them apart
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": str(as_written)}),
        json.dumps({"answer": str(as_written), "citations": ["F1"]}),
    ]
    question = 'How many entries quote "Invalid user <name>" here?'
    proc, stub = ask_typed_cli(AUTH, question, replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{as_written}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'Invalid user' as written" in told and str(as_written) in told, told[-800:]
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert 'regexp_matches("line", \\\'Invalid' in code and "(?i)" not in code and "lower(" not in code, code


def test_a_quote_the_input_writes_only_in_another_case_is_matched_in_any(tmp_path: Path) -> None:
    lines = AUTH.read_text().splitlines()
    any_case = sum("failed password" in line.lower() for line in lines)
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": str(any_case)}),
        json.dumps({"answer": str(any_case), "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(AUTH, "How many entries quote 'FAILED PASSWORD' here?", replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{any_case}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'FAILED PASSWORD'" in told and "as written" not in told, told[-800:]


def test_the_model_may_send_the_condition_back_as_it_was_shown(tmp_path: Path) -> None:
    """The cmp is rlm's own, never offered; an action that carries it is checked and said."""
    from rlm.input.source import open_source

    table = open_source(str(AUTH), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    where = [{"column": "line", "cmp": "contains_as_written", "value": "Invalid user"}]
    checked = check_action({"op": "count", "where": where}, table_columns(table))
    assert [said_filter(f) for f in checked.where] == ["line contains as written 'Invalid user'"]
    assert not re.search(r"contains_as_written", json.dumps(_offered(table)))


def _offered(table: dict) -> dict:
    from rlm.run.typed import action_schema

    return action_schema(table)


OPENSTACK = FIXTURES / "data" / "loghub" / "OpenStack_2k.log"


def test_a_word_in_capitals_before_the_lines_asked_about_is_their_condition(tmp_path: Path) -> None:
    """The HTTP method of a request is inside the message (no column of its own): a count of the
    lines the question names by it is of the lines that write it."""
    posts = sum(bool(re.search(r"(?<![A-Za-z0-9_])POST(?![A-Za-z0-9_])", line)) for line in OPENSTACK.open())
    assert 0 < posts < 2000
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": str(posts)}),
        json.dumps({"answer": str(posts), "citations": ["F1"]}),
    ]
    proc, stub = ask_typed_cli(
        OPENSTACK, "How many POST requests did the API servers write down?", replies, cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{posts}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'POST' as written" in told, told[-800:]


def test_which_words_in_capitals_name_the_lines_asked_about(tmp_path: Path) -> None:
    from rlm.input.source import open_source
    from rlm.run.typed.quoted import kind_words

    table = open_source(str(OPENSTACK), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    assert kind_words("What share of POST calls took over a second?", table) == ["POST"]
    # Not before the lines asked about, negated, a value a column lists, or inside a quote.
    assert kind_words("Report the IP alone, in UTC.", table) == []
    assert kind_words("Count the entries that are not POST requests.", table) == []
    assert kind_words("How many INFO lines are there?", table) == []
    assert kind_words("How many 'POST requests' are there?", table) == []


def test_a_marker_beside_a_quoted_line_leaves_the_line_as_the_condition(tmp_path: Path) -> None:
    """Two quotes, one of them where a value is read (`the 'len:' values`): the other names the
    lines, and rlm keeps the average to them (before, two quotes named no condition at all)."""
    sizes = [
        float(re.search(r"len: ([0-9]+)", line)[1])  # type: ignore[index]
        for line in OPENSTACK.open()
        if "status: 404" in line
    ]
    mean = sum(sizes) / len(sizes)
    everywhere = [float(m[1]) for line in OPENSTACK.open() if (m := re.search(r"len: ([0-9]+)", line))]
    assert abs(mean - sum(everywhere) / len(everywhere)) > 1  # the condition changes the figure
    shown = f"{mean:.6f}"[:9]
    question = "Over the entries with 'status: 404', what do the 'len:' values average?"
    proc, stub = ask_typed_once(OPENSTACK, question, {"op": "avg", "column": "<len>"}, shown, cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'status: 404'" in told and shown in told, told[-800:]
    assert proc.returncode == 0 and proc.stdout == f"{shown}\n", proc.stderr


PROXIFIER = FIXTURES / "data" / "loghub" / "Proxifier_2k.log"
_AS_READ = r"bytes\s+(?:\([^()]*\)\s+)?received,\s+lifetime"


def test_a_quoted_line_holds_the_lines_that_add_an_aside_between_its_words(tmp_path: Path) -> None:
    """The proxy writes `13833013 bytes (13.1 MB) received` on half its lines: the question's
    quote leaves the aside out, and those lines are of the lines it names all the same."""
    lines = PROXIFIER.read_text().splitlines()
    as_read = sum(bool(re.search(_AS_READ, line)) for line in lines)
    assert sum("bytes received, lifetime" in line for line in lines) < as_read
    question = "How many proxy entries report 'N bytes received, lifetime' for a connection?"
    proc, stub = ask_typed_once(PROXIFIER, question, {"op": "count"}, str(as_read), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'bytes received, lifetime'" in told and f"{as_read}" in told, told[-800:]
    assert proc.returncode == 0 and proc.stdout == f"{as_read}\n", proc.stderr


def test_words_as_written_are_matched_in_their_case_with_an_aside_between_them(tmp_path: Path) -> None:
    from rlm.input.source import open_source

    table = open_source(str(PROXIFIER), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    lines = PROXIFIER.read_text().splitlines()
    for cmp, value, expected in [
        ("contains", "BYTES RECEIVED, LIFETIME", sum(bool(re.search(_AS_READ, x)) for x in lines)),
        ("contains_as_written", "bytes received, lifetime", sum(bool(re.search(_AS_READ, x)) for x in lines)),
        ("contains_as_written", "BYTES RECEIVED, LIFETIME", 0),
        (
            "contains",
            "bytes sent,",
            sum(bool(re.search(r"bytes\s+(?:\([^()]*\)\s+)?sent,", x)) for x in lines),
        ),
    ]:
        _, rows = run_typed({"op": "count", "where": [{"column": "line", "cmp": cmp, "value": value}]}, table)
        assert rows == [(expected,)], (cmp, value)
