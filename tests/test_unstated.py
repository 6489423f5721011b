"""A value a query keeps to that the question names in no way (rlm.run.typed.conditions.unstated):
a condition the model made up. The model is told, and an answer from it is in doubt; a value the
question names, in its own words or as the parse writes it, or one an earlier ranking found (a
second step), is neither."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from conftest import FIXTURES, ask_typed_cli, ask_typed_once

from rlm.input.source import open_source
from rlm.run.typed import unstated

AUTH = FIXTURES / "auth.log"


def _top_of(where: list[dict], answer: str) -> list[str]:
    action = {"op": "top", "column": "src_ip", "k": 3, "where": where}
    return [
        json.dumps(action),
        json.dumps({"op": "final", "answer": answer}),
        json.dumps({"answer": answer, "citations": ["F1"]}),
    ]


def test_a_value_the_question_does_not_state_is_told_and_in_doubt(tmp_path: Path) -> None:
    table = open_source(str(AUTH), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        query = "SELECT src_ip FROM log WHERE user = 'root' GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
        [(first,)] = con.execute(query).fetchall()
    root = [{"column": "user", "cmp": "=", "value": "root"}]
    proc, stub = ask_typed_cli(
        AUTH,
        "Which address failed to sign in most often? The address alone.",
        _top_of(root, first),
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "kept only user = 'root', which the question does not state" in proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        "Note: your action kept only the rows where user = 'root', which the question does not state" in told
    )
    # Named by the question, the same query's answer is printed.
    named = tmp_path / "named"
    named.mkdir()
    proc, _ = ask_typed_cli(
        AUTH,
        "Which address failed most often to sign in as root? The address alone.",
        _top_of(root, first),
        cwd=named,
    )
    assert proc.returncode == 0 and proc.stdout == f"{first}\n", proc.stderr


def test_which_values_a_question_states(tmp_path: Path) -> None:
    table = open_source(str(AUTH), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None

    def kept(question: str, column: str, value: str, found: frozenset[str] = frozenset()) -> list[str]:
        action = {"op": "count", "where": [{"column": column, "cmp": "=", "value": value}]}
        return unstated(question, json.dumps(action), table, set(found))

    # The question's own word for the parse's value, or the value as written: stated.
    assert kept("How many failures to log in were there?", "event", "failed_password") == []
    assert kept("Count the sessions opened.", "event", "session_opened") == []
    # No word of it: made up. Unless an earlier ranking found it (the second of two steps).
    assert kept("How many logins failed from that address?", "user", "admin") == ["user = 'admin'"]
    assert kept("How many logins failed for that account?", "user", "admin", frozenset({"admin"})) == []
    # A number is compared, not named: left alone.
    assert kept("Count every line.", "pid", "24200") == []


def test_a_value_left_out_that_the_question_does_not_state_is_made_up_too(tmp_path: Path) -> None:
    """`program != 'sshd'` keeps only the other programs' lines, a condition as made up as an
    `=` on a value the question never names; one it names ("other than sshd") is not."""
    table = open_source(str(AUTH), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    action = {"op": "count", "where": [{"column": "program", "cmp": "!=", "value": "sshd"}]}
    made_up = unstated("Count the entries about a closed connection.", json.dumps(action), table, set())
    assert made_up == ["program != 'sshd'"]
    assert unstated("How many lines from programs other than sshd?", json.dumps(action), table, set()) == []


def test_an_address_the_question_does_not_write_is_made_up(tmp_path: Path) -> None:
    """An address has no word to name it by: a query that keeps to one the question never
    writes (the log's first address, added to a count of one hour) is told and in doubt."""
    table = open_source(str(FIXTURES / "access.log"), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    action = {"op": "count", "where": [{"column": "ip", "cmp": "=", "value": "83.149.9.216"}]}
    hour = "How many requests came in during the 12 o'clock hour?"
    assert unstated(hour, json.dumps(action), table, set()) == ["ip = '83.149.9.216'"]
    assert unstated("How many requests did 83.149.9.216 send?", json.dumps(action), table, set()) == []
    assert unstated(hour, json.dumps(action), table, {"83.149.9.216"}) == []  # a second step's


def test_made_up_filters_give_their_place_to_the_line_the_question_quotes(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a count whose four filters the question states in no
    way leaves no room for the line it quotes; those filters give their place to it, the model
    is told which, and the count is that of the lines Python finds writing the quote."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "OpenStack_2k.log"
    want = sum(1 for x in log.read_text().splitlines() if "status: 200" in x)
    made_up = [
        {"column": "level", "cmp": "!=", "value": "WARNING"},
        {"column": "component", "cmp": "!=", "value": "nova.compute.manager"},
        {"column": "component", "cmp": "!=", "value": "nova.virt.libvirt.imagecache"},
        {"column": "logfile", "cmp": "!=", "value": "nova-compute.log.1.2017-05-16_13:55:31"},
    ]
    sent = {"op": "count", "where": made_up}
    question = "Count the lines that write 'status: 200' in them."
    proc, stub = ask_typed_once(log, question, sent, str(want), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'status: 200'" in told and "(in place of level != 'WARNING';" in told, told[-900:]
    assert f"\n{want}\n" in told
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr


def test_a_filters_copies_give_their_place_to_the_line_the_question_quotes(tmp_path: Path) -> None:
    """One filter written four times leaves no room either: its copies give their place to the
    quoted line, the model told, and the count is Python's over the raw lines."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "OpenStack_2k.log"
    want = sum(1 for x in log.read_text().splitlines() if " INFO " in x and "status: 200" in x)
    info = {"column": "level", "cmp": "=", "value": "INFO"}
    sent = {"op": "count", "where": [info, info, info, info]}
    question = "How many INFO lines write 'status: 200'?"
    proc, stub = ask_typed_once(log, question, sent, str(want), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "(in place of a copy of level = 'INFO')" in told and f"\n{want}\n" in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
