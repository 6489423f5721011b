"""The values a quoted line's placeholders stand for, as columns of the typed actions: named as
the question writes them, of the kind the input's lines show, read from the raw lines by a
pattern of the quoted text; compiled queries on them give what Python finds on the raw file,
and through the CLI a model's action on one runs in the real worker."""

from __future__ import annotations

import csv
import json
import re
import statistics
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_once, latest_trace
from openai_stub import OpenAIStub

from rlm.input.source import open_source
from rlm.run.actions import Action
from rlm.run.runner import text_pattern
from rlm.run.typed import action_schema, compile_sql, describe_actions, to_action, with_question_conditions
from rlm.run.typed.describe import example_cells, examples
from rlm.run.typed.fields import (
    MAX_FIELDS,
    Sample,
    quoted_fields,
    read_fields,
    sample_lines,
    with_quoted_fields,
)
from rlm.run.typed.quoted import quoted_left_out

LOGHUB = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub"
LINUX = LOGHUB / "Linux_2k.log"
OPENSTACK = LOGHUB / "OpenStack_2k.log"
SESSIONS = "session opened for user <user> by (uid=N)"
TOOK = "Took N seconds to deallocate network for instance"


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, dict[str, Any]]]:
    cache = tmp_path_factory.mktemp("fields-cache")
    out = {}
    for path in (LINUX, OPENSTACK):
        table = open_source(str(path), cache_dir=str(cache)).profile.table
        assert table is not None
        out[path] = table
    yield out


def _rows(action: dict[str, Any], table: dict[str, Any]) -> list[tuple[Any, ...]]:
    with duckdb.connect(table["path"], read_only=True) as con:
        return con.execute(compile_sql(action, table)).fetchall()


def _fielded(table: dict[str, Any], question: str, path: Path) -> dict[str, Any]:
    return with_quoted_fields(table, question, lambda: sample_lines(str(path)))


def test_each_named_placeholder_of_a_quoted_text_is_a_field_of_the_kind_its_lines_show() -> None:
    sample = Sample(LINUX.read_text().splitlines(), whole=True)
    fields = quoted_fields(f'Whose "{SESSIONS}" lines are most common?', ["line", "host"], sample)
    assert [(f.name, f.number) for f in fields] == [("<user>", False), ("N", True)]
    pattern = re.compile(fields[0].pattern)
    found = [m for m in map(pattern.search, sample.lines) if m]
    assert found and found[0][1] == "cyrus" and found[0][2] == "0"
    # In angle brackets but numbers in every line it fits: a number.
    numeric = quoted_fields(f'"{SESSIONS.replace("uid=N", "uid=<uid>")}"', ["line"], sample)
    assert [(f.name, f.number) for f in numeric] == [("<user>", False), ("<uid>", True)]
    # No line of the first ones fits: the kind is read from how it is written; where those
    # lines are the whole input, the text is no line of it and gives no column.
    quote = "'lease renewed for <client> after T ms'"
    unseen = quoted_fields(quote, ["line"], Sample(sample.lines[:100]))
    assert [(f.name, f.number) for f in unseen] == [("<client>", False), ("T", True)]
    assert quoted_fields(quote, ["line"], sample) == []
    assert quoted_fields("'on Mon D at HH:MM'", ["line"], sample) == []
    # Nothing fixed but a comma: it would fit any line with one.
    assert quoted_fields("'<first ip>,<second ip>'", ["line"], Sample(["a,b", "1.2.3.4,5.6.7.8"])) == []
    # `...` names nothing; a name the table has is not offered twice; at most MAX_FIELDS.
    assert quoted_fields("'Connection from ... closed'", ["line"]) == []
    assert [f.name for f in quoted_fields(f"'{SESSIONS}'", ["line", "N"])] == ["<user>"]
    many = "'" + " ".join(f"k{i}=<v{i}>" for i in range(MAX_FIELDS + 3)) + "'"
    assert len(quoted_fields(many, ["line"])) == MAX_FIELDS


@pytest.mark.timeout(60)
def test_a_crafted_line_cannot_stall_the_reading_of_a_fields_kind() -> None:
    """The input's lines are read by RE2 (linear), not a backtracking engine: a quote with
    several `...` over a long line that almost fits (Python's `re` took 53 s on 4 KB of it) is
    passed at once, and the value of the line that fits is read."""
    crafted = "ab" * 5_000 + " c d"
    question = "How many 'a ... b ... c ... d ... end=<v>' lines?"
    [field] = quoted_fields(question, ["line"], Sample([crafted, "a b c d end=7"]))
    assert field.name == "<v>" and field.number  # 7, read from the line that fits


def test_a_number_against_its_unit_and_a_quote_worded_shorter_than_its_lines_give_fields(
    tables: dict[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """`Nms` is a number followed by its unit, as logs write it; a quote that leaves out words
    its lines have between its own (`N bytes received` of `N bytes (1.63 KB) received`) still
    reads them, and the sum over a real file is what Python finds on its raw lines."""
    pauses = ["gc pause 12ms (young)", "gc pause 7ms (old)", "served in 3s", "load at 91%"]
    sample = Sample(pauses, whole=True)
    [pause] = quoted_fields("Longest 'gc pause Nms' seen?", ["line"], sample)
    assert pause.number and [re.search(pause.pattern, x)[1] for x in pauses[:2]] == ["12", "7"]  # type: ignore[index]
    assert [f.name for f in quoted_fields("'served in Ns', 'load at X%'", ["line"], sample)] == ["N", "X"]
    proxifier = LOGHUB / "Proxifier_2k.log"
    raw = proxifier.read_text().splitlines()
    wanted = sum(int(m[1]) for m in (re.search(r"(\d+) bytes (?:\([^)]*\) )?received", x) for x in raw) if m)
    table = open_source(str(proxifier), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    table = _fielded(table, "What do the 'N bytes received' figures add up to?", proxifier)
    assert [f.name for f in read_fields(table)] == ["N"]
    assert _rows({"op": "sum", "column": "N"}, table) == [(wanted,)] and wanted > 0


def test_a_name_the_question_writes_that_only_raw_lines_hold_is_added_as_their_condition(
    tmp_path: Path,
) -> None:
    """A program named outside the quotes (`Dropbox.exe`), where the parse has no column for
    it: the model's total over every line gets `line contains` it, and the sum is that of its
    lines; a query sent again as written is in doubt; a negated name, or two, add nothing."""
    proxifier = LOGHUB / "Proxifier_2k.log"
    raw = proxifier.read_text().splitlines()
    sent = r"(\d+) bytes (?:\([^)]*\) )?sent"
    wanted = sum(int(m[1]) for m in (re.search(sent, x) for x in raw if "Dropbox.exe" in x) if m)
    every = sum(int(m[1]) for m in (re.search(sent, x) for x in raw) if m)
    table = open_source(str(proxifier), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    question = "What did Dropbox.exe send in all, by its 'N bytes sent' figures?"
    table = _fielded(table, question, proxifier)
    model = json.dumps({"op": "sum", "column": "N"})

    def holds(text: str, whole: bool = False) -> bool:  # the worker's grep, on the raw lines
        return any(re.search(text_pattern(text, whole), x, re.IGNORECASE) for x in raw)

    added = with_question_conditions(question, model, table, holds)
    assert added is not None and added[1] == ["line contains 'Dropbox.exe'"]
    assert _rows(added[0], table) == [(wanted,)] and 0 < wanted < every
    assert quoted_left_out(question, model, table, holds) == ["line contains 'Dropbox.exe'"]
    assert quoted_left_out(question, json.dumps(added[0]), table, holds) == []
    for other in (
        "What did programs other than Dropbox.exe send, by 'N bytes sent'?",
        "Did Dropbox.exe or chrome.exe send more, by 'N bytes sent'?",
        "What did nothing.exe send, by 'N bytes sent'?",
        "What did Dropbox.ex send, by 'N bytes sent'?",  # in the file only inside a longer name
    ):
        assert with_question_conditions(other, model, _fielded(table, other, proxifier), holds) is None


def test_queries_on_fields_give_what_python_finds_on_the_raw_lines(
    tables: dict[Path, dict[str, Any]],
) -> None:
    raw = LINUX.read_text().splitlines()
    users = Counter(
        m[1] for m in (re.search(r"session opened for user (\S+) by \(uid=(\d+)\)", x) for x in raw) if m
    )
    table = _fielded(tables[LINUX], f"Which user has the most '{SESSIONS}' lines?", LINUX)
    top = _rows({"op": "top", "column": "<user>", "k": 3}, table)
    assert top == sorted(users.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert _rows({"op": "count_distinct", "column": "<user>"}, table) == [(len(users),)]
    # Rows of a field are the lines its text fits, not NULLs of every other line.
    first = _rows({"op": "rows", "columns": ["<user>"], "k": 2}, table)
    wanted = [i + 1 for i, x in enumerate(raw) if "session opened for user" in x][:2]
    assert [r[0] for r in first] == wanted and all(r[1] for r in first)

    lines = OPENSTACK.read_text().splitlines()
    took = [
        float(m[1]) for m in (re.search(r"Took (\S+) seconds to deallocate network", x) for x in lines) if m
    ]
    table = _fielded(tables[OPENSTACK], f"What is the mean of N in '{TOOK}'?", OPENSTACK)
    [(mean,)] = _rows({"op": "avg", "column": "N"}, table)
    assert mean == pytest.approx(statistics.mean(took))
    slow = _rows({"op": "count", "where": [{"column": "N", "cmp": ">", "value": 0.3}]}, table)
    assert slow == [(sum(1 for t in took if t > 0.3),)]
    [(line_no, longest)] = _rows(
        {"op": "rows", "columns": ["N"], "order_by": "N", "take": "last", "k": 1}, table
    )
    assert (
        longest == max(took)
        and f"Took {lines[line_no - 1].split('Took ')[1].split()[0]}" == f"Took {longest:g}"
    )


def test_a_whole_number_read_from_lines_is_ranked_as_the_lines_write_it(
    tables: dict[Path, dict[str, Any]],
) -> None:
    """A number field is a DOUBLE (a later line may write `2.5`); as the key of a ranking or a
    group a whole value shows as written (`0`, not `0.0`), which is what a model copies into
    its answer. A value with a fraction keeps it."""
    raw = LINUX.read_text().splitlines()
    uids = Counter(
        m[1] for m in (re.search(r"session opened for user \S+ by \(uid=(\d+)\)", x) for x in raw) if m
    )
    table = _fielded(tables[LINUX], f"Which uid has the most '{SESSIONS}' lines?", LINUX)
    ranked = sorted(uids.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert _rows({"op": "top", "column": "N", "k": 3}, table) == ranked
    grouped = _rows({"op": "group", "by": "N", "k": 3}, table)
    assert [(key, n) for key, n in grouped] == ranked
    assert all("." not in key for key, _ in ranked)

    lines = OPENSTACK.read_text().splitlines()
    took = Counter(
        m[1] for m in (re.search(r"Took (\S+) seconds to deallocate network", x) for x in lines) if m
    )
    table = _fielded(tables[OPENSTACK], f"Which N in '{TOOK}' comes up most?", OPENSTACK)
    keys = [key for key, _ in _rows({"op": "top", "column": "N", "k": 50}, table)]
    assert keys and all(float(key) in {float(t) for t in took} for key in keys)
    assert any("." in key for key in keys)


def test_fields_are_offered_by_the_schema_told_and_shown_in_examples_no_copy_doubts(
    tables: dict[Path, dict[str, Any]],
) -> None:
    question = f"Which user has the most '{SESSIONS}' lines?"
    table = _fielded(tables[LINUX], question, LINUX)
    assert [f.name for f in read_fields(table)] == ["<user>", "N"]
    schema = json.dumps(action_schema(table))
    assert '"<user>"' in schema and '"N"' in schema
    told = describe_actions(table)
    assert f'"<user>" (text) is the <user> of each line "{SESSIONS}"' in told
    assert '"N" (number)' in told
    shown = {e["op"]: e for _, e in examples(table)}
    assert shown["top"]["column"] == shown["count_distinct"]["column"] == "<user>"
    assert shown["sum"]["column"] == "N"
    assert shown["rows"]["order_by"] == "N" and shown["rows"]["columns"] == ["<user>", "N"]
    # The count filters on a value of the quoted line, one its lines hold (uid=0 on most of them).
    assert shown["count"]["where"] == [{"column": "N", "cmp": ">", "value": 0}]
    # An example on the quoted line's value is written for the question: its copy is no doubt;
    # but the count's filter value is the example's, on whatever column: its copy is one.
    copied = to_action(json.dumps(shown["top"]), table)
    assert isinstance(copied, Action) and copied.args["code"] not in example_cells(table)
    counted = to_action(json.dumps(shown["count"]), table)
    assert isinstance(counted, Action) and counted.args["code"] in example_cells(table)
    plain = {e["op"]: e for _, e in examples(tables[LINUX])}
    assert plain["top"]["column"] != "<user>" and example_cells(tables[LINUX])
    # A query on a field is of the quoted lines already: no `line contains` is added to it.
    assert (
        with_question_conditions(
            question, json.dumps({"op": "top", "column": "<user>"}), table, lambda *_: True
        )
        is None
    )
    added = with_question_conditions(question, json.dumps({"op": "count"}), table, lambda *_: True)
    assert added is not None and added[1] == ["line contains 'session opened for user' as written"]
    # Nothing quoted, nothing read: the table as it was, and the input is not sampled.
    untouched = with_quoted_fields(tables[LINUX], "which host logs most?", lambda: pytest.fail("sampled"))
    assert untouched is tables[LINUX]


def _ask_typed(
    path: Path, question: str, action: dict[str, Any], answer: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], OpenAIStub]:
    """`rlm ask --protocol typed --strict` through the CLI, a model that sends `action`, then
    `final` with `answer`: the process and the model server (its requests)."""
    return ask_typed_once(path, question, action, answer, cwd=tmp_path)


def test_a_models_action_on_a_field_runs_through_the_cli_in_the_worker(tmp_path: Path) -> None:
    raw = LINUX.read_text().splitlines()
    users = Counter(m[1] for m in (re.search(r"session opened for user (\S+) by", x) for x in raw) if m)
    (busiest, times), (second, next_times) = sorted(users.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
    question = f"Which account has the most '{SESSIONS}' lines? Answer with the name only."
    proc, stub = _ask_typed(LINUX, question, {"op": "top", "column": "<user>", "k": 3}, busiest, tmp_path)
    # The file's two busiest accounts tie: the name ranked first by its letters is in doubt, and
    # --strict withholds it.
    assert times == next_times
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert f"ranked '{busiest}' first in a tie with '{second}' ({times} each)" in proc.stderr
    first = stub.requests[0]["body"]
    assert '"<user>"' in json.dumps(first["response_format"]["json_schema"]["schema"])
    assert "Columns from the lines the question quotes" in first["messages"][0]["content"]
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"{busiest}" in shown and str(times) in shown and "rlm added" not in shown, shown[-600:]
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert "regexp_extract" in code


def test_a_name_only_raw_lines_hold_is_added_to_the_models_total_through_the_cli(tmp_path: Path) -> None:
    """The model totals the quoted number over every line; rlm adds the program the question
    names (found by the worker's grep), tells the model, and the total shown is that program's."""
    proxifier = LOGHUB / "Proxifier_2k.log"
    raw = proxifier.read_text().splitlines()
    sent = [re.search(r"(\d+) bytes (?:\([^)]*\) )?sent", x) for x in raw if "Dropbox.exe" in x]
    wanted = sum(int(m[1]) for m in sent if m)
    question = (
        "How many bytes did Dropbox.exe send in all, by its 'N bytes sent' figures? Answer with the number."
    )
    proc, stub = _ask_typed(proxifier, question, {"op": "sum", "column": "N"}, str(wanted), tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{wanted}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"{wanted:,}" in shown or str(wanted) in shown, shown[-600:]
    assert "line contains 'Dropbox.exe'" in shown, shown[-600:]


ZOOKEEPER = LOGHUB / "Zookeeper_2k.log"
_LAST_ADDRESS = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d])(?!\.\d)")


def _last_addresses(lines: list[str], holding: str) -> Counter[str]:
    """The last IPv4 address of each line that holds `holding`, counted, found here by Python."""
    found = (_LAST_ADDRESS.findall(line) for line in lines if holding in line)
    return Counter(each[-1] for each in found if each)


def test_an_ip_asked_where_no_column_holds_one_is_read_from_each_line(tmp_path: Path) -> None:
    """Where the question asks for an IP address and the table has no column of them, the last
    address of each raw line is a field `<ip>` (a line's prefix names a listener before its
    message names the peer); its top is Python's count of the same. Not where no IP is asked,
    nor where the table has a column of addresses."""
    table = open_source(str(ZOOKEEPER), cache_dir=str(tmp_path)).profile.table
    assert table is not None
    question = "New sessions: which peer IP address opened the most of them? Just the address."
    fielded = _fielded(table, question, ZOOKEEPER)
    assert [f.name for f in read_fields(fielded)] == ["<ip>"]
    holding = "attempting to establish new session"
    where = [{"column": "line", "cmp": "contains", "value": holding}]
    want = _last_addresses(ZOOKEEPER.read_text().splitlines(), holding)
    assert len(want) > 3 and "0.0.0.0" not in want
    rows = _rows({"op": "top", "column": "<ip>", "k": 50, "where": where}, fielded)
    assert dict(rows) == dict(want)
    assert "last IP address of each line" in describe_actions(fielded)
    assert _fielded(table, "Count the lines about new sessions.", ZOOKEEPER) == table
    access = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"
    own = open_source(str(access), cache_dir=str(tmp_path)).profile.table
    assert own is not None and _fielded(own, question, access) == own


def test_the_cli_answers_which_ip_from_the_addresses_in_the_lines(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the model counts the lines, rlm runs the top of the
    address read from them (the column the question's "which IP" names), and the model's answer
    from it is printed."""
    holding = "attempting to establish new session"
    want = _last_addresses(ZOOKEEPER.read_text().splitlines(), holding)
    busiest = min(want.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    question = "New sessions: which peer IP address opened the most of them? Just the address."
    count = {"op": "count", "where": [{"column": "line", "cmp": "contains", "value": holding}]}
    proc, stub = _ask_typed(ZOOKEEPER, question, count, busiest, tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", proc.stderr
    assert '"<ip>"' in json.dumps(stub.requests[0]["body"]["response_format"]["json_schema"]["schema"])
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "top <ip> instead of a count of rows" in shown and busiest in shown


def test_a_placeholder_a_quote_writes_twice_is_two_columns_named_by_their_words(tmp_path: Path) -> None:
    """`copied N chunks in N ms`: two `N`, each a column named by the word beside it (its unit
    after it, else the word before it). Through the CLI, the second's mean is what
    Python finds on the raw lines; one column `N` held only the first."""
    log = tmp_path / "copier.log"
    lines = [
        f"2026-03-0{1 + i % 3} 10:{i % 60:02d}:00 worker-{i % 4} copied {3 + i % 7} chunks in {40 + (i * 37) % 500} ms"
        if i % 5
        else f"2026-03-0{1 + i % 3} 10:{i % 60:02d}:00 worker-{i % 4} idle"
        for i in range(400)
    ]
    log.write_text("\n".join(lines) + "\n")
    quote = "copied N chunks in N ms"
    sample = Sample(lines, whole=True)
    assert [f.name for f in quoted_fields(f"'{quote}'", ["line"], sample)] == ["copied N", "N ms"]
    assert [f.name for f in quoted_fields("'moved N of N'", ["line"])] == ["moved N", "of N"]
    # Beside each other, each named by the text's own words, never by the other placeholder.
    assert [f.name for f in quoted_fields("'ended at N: N: done'", ["line"])] == ["at N", "N done"]
    spent = [int(m[2]) for m in (re.search(r"copied (\d+) chunks in (\d+) ms", x) for x in lines) if m]
    want = round(statistics.mean(spent), 2)
    question = f"On average, how long does a '{quote}' copy take, in ms? Two decimals."
    proc, stub = _ask_typed(log, question, {"op": "avg", "column": "N ms"}, str(want), tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    assert '"N ms"' in json.dumps(stub.requests[0]["body"]["response_format"]["json_schema"]["schema"])
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert str(want)[:5] in shown, shown[-600:]


def test_an_address_read_from_any_line_keeps_the_quoted_lines_condition(tmp_path: Path) -> None:
    """`<ip>`, the last address of each line, is no field of the quoted text: a top of it over
    every line ranks the addresses of lines the question does not quote. Through the CLI the
    quote's `line contains` is added, and the top address of the quoted lines is Python's."""
    log = tmp_path / "sockets.log"
    lines = []
    for i in range(240):
        opened = i % 4 == 0
        peer = ("10.0.0.5" if i % 3 else "10.0.0.6") if opened else f"10.0.0.{9 if i % 3 else 5}"
        verb = "Opened stream link with" if opened else "Dropped stream link with"
        lines.append(f"2026-04-02 09:{i // 60:02d}:{i % 60:02d} relay INFO {verb} /{peer}:{5000 + i}")
    log.write_text("\n".join(lines) + "\n")
    opened = Counter(re.search(r"Opened stream link with /([\d.]+):", x)[1] for x in lines if "Opened" in x)  # type: ignore[index]
    every = Counter(re.search(r"/([\d.]+):", x)[1] for x in lines)  # type: ignore[index]
    (top, n), (_, second) = opened.most_common(2)
    assert n > second and top != every.most_common(1)[0][0]
    question = (
        "Which peer address is named by the greatest number of 'Opened stream link with' lines? The IP alone."
    )
    proc, stub = _ask_typed(log, question, {"op": "top", "column": "<ip>", "k": 1}, top, tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{top}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "line contains 'Opened stream link with'" in shown and f"{top} | {n}" in shown


def test_a_key_no_kept_row_fills_is_read_from_the_quoted_line_instead(tmp_path: Path) -> None:
    """The syslog parse fills `src_ip` on sshd's lines only: a distinct count of it over ftpd's
    quoted lines counted none. rlm runs it on the quoted line's `<ip>`, and says so."""
    found = {
        m[1]
        for line in LINUX.read_text().splitlines()
        if "ftpd" in line and (m := re.search(r"connection from (\d+\.\d+\.\d+\.\d+)", line))
    }
    assert len(found) > 1
    question = "Counting each address once, how many does ftpd report as 'from <ip> (<host>) at'?"
    sent = {
        "op": "count_distinct",
        "column": "src_ip",
        "where": [{"column": "program", "cmp": "=", "value": "ftpd"}],
    }
    proc, stub = ask_typed_once(LINUX, question, sent, str(len(found)), cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "<ip>, read from the lines the question quotes, instead of src_ip" in told, told[-900:]
    assert f"\n{len(found)}\n" in told, told[-900:]
    assert proc.returncode == 0 and proc.stdout == f"{len(found)}\n", proc.stderr


def test_a_key_some_kept_row_fills_or_of_another_kind_is_left_as_sent(
    tables: dict[Path, dict[str, Any]],
) -> None:
    from rlm.run.typed.filled import onto_filled_field

    def counts(query: str) -> list[int] | None:
        with duckdb.connect(tables[LINUX]["path"], read_only=True) as con:
            row = con.execute(query).fetchone()
        return [int(n) for n in row] if row else None

    question = "Which address does ftpd name most in 'from <ip> (<host>) at'?"
    table = _fielded(tables[LINUX], question, LINUX)
    ftpd = [{"column": "program", "cmp": "=", "value": "ftpd"}]
    moved = onto_filled_field(json.dumps({"op": "top", "column": "src_ip", "where": ftpd}), table, counts)
    assert moved is not None and moved[0]["column"] == "<ip>"  # `<host>` is no address
    # Over sshd's lines the parse fills it: left alone; so is a key of no field's kind.
    sshd = [{"column": "program", "cmp": "=", "value": "sshd"}]
    assert (
        onto_filled_field(json.dumps({"op": "top", "column": "src_ip", "where": sshd}), table, counts) is None
    )
    by_user = {"op": "group", "by": "user", "where": ftpd}
    assert onto_filled_field(json.dumps(by_user), table, counts) is None


def test_a_csv_lines_fields_beside_a_counted_word_are_no_number_written_with_it(tmp_path: Path) -> None:
    """In a CSV line (`78,081109,214043,2561,WARN,...`) the digits before the level are other
    columns, not a number written with the word: a count of the level's rows stays a count
    (through the CLI, the real worker and a model that sends the right count)."""
    path = LOGHUB / "HDFS_2k.log_structured.csv"
    with path.open(newline="") as fh:
        want = sum(1 for r in csv.DictReader(fh) if r["Level"] == "WARN" and r["Date"] == "081109")
    assert want > 0
    sent = {
        "op": "count",
        "where": [
            {"column": "Date", "cmp": "=", "value": "081109"},
            {"column": "Level", "cmp": "=", "value": "WARN"},
        ],
    }
    proc, stub = ask_typed_once(path, "How many WARN lines are there on day 081109? Just the number.", sent,
                                str(want), cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "<warn>" not in told and re.search(rf"\b{want}\b", told)


def test_a_value_a_column_lists_is_no_unit_of_a_number_the_lines_write_before_it(tmp_path: Path) -> None:
    """`148 WARN` in a raw line: the number is the line's pid, and WARN a value of its level
    column. A count of that level's lines stays a count (through the CLI, the real worker and a
    model that sends the right count); the table offers no `<warn>` amount."""
    path = LOGHUB / "HDFS_2k.log"
    want = sum(1 for x in path.read_text().splitlines() if x.split()[3:4] == ["WARN"])
    assert want > 0
    question = "How many WARN-tagged entries sit in this HDFS file? Give a number."
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    assert not read_fields(with_quoted_fields(table, question, lambda: sample_lines(str(path))))
    sent = {"op": "count", "where": [{"column": "level", "cmp": "=", "value": "WARN"}]}
    proc, stub = ask_typed_once(path, question, sent, str(want), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "<warn>" not in told and re.search(rf"\b{want}\b", told)


def test_a_key_and_value_the_question_writes_unquoted_is_the_lines_own_text(tmp_path: Path) -> None:
    """ "lines that carry tty=NODEVssh": the pair as the line writes it is a condition, held as a
    whole word (not inside a longer key or value); through the CLI and the worker."""
    linux = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Linux_2k.log"
    lines = linux.read_text(errors="replace").splitlines()
    want = sum(bool(re.search(r"(?<![\w.=-])tty=NODEVssh(?![\w=])", line)) for line in lines)
    assert 0 < want < len(lines)
    proc, stub = ask_typed_once(
        linux, "How many lines carry tty=NODEVssh? A number.", {"op": "count"}, str(want), cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{want}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"count\n-----\n{want}\n" in told and "line contains 'tty=NODEVssh'" in told, told
