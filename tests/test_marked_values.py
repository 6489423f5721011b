"""A value a question says is written after a fixed text inside the lines (`the peer= value`, the
number after a `took:`, what a `[job: ...]` tag holds): read by the question's form alone, offered
as a column, and a query of another column moved onto it, giving what Python finds on the raw
lines; through the CLI, the moved query runs in the real worker and its answer is printed."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ask_typed_once

from rlm.input.source import open_source
from rlm.run.typed import compile_sql, describe_actions
from rlm.run.typed.fields import Sample, read_fields, sample_lines, with_quoted_fields
from rlm.run.typed.markers import question_markers
from rlm.run.typed.measure import with_asked_measure

_PEER = re.compile(r"peer=(\S+)")
_TOOK = re.compile(r"took: ([0-9,.]+)")
_JOB = re.compile(r"\[job: ([^\]]+)\]")


def _write_log(path: Path, lines: int = 3000) -> list[str]:
    """A syslog whose messages hold values after fixed texts, and some lines without them."""
    rng = random.Random(7)
    hosts = ["alpha", "bravo", "charlie", "delta"]
    peers = [f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}" for _ in range(30)]
    out = []
    for i in range(lines):
        clock = f"Mar  3 {10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        host = rng.choice(hosts)
        if i % 7 == 3:
            out.append(f"{clock} {host} cron[{100 + i}]: (root) CMD (run-parts /etc/cron.hourly)")
            continue
        took = f"{rng.randint(0, 2400):,}.{rng.randint(0, 999):03d}"
        job = f"j-{rng.randint(0, 400):04x}"
        peer = rng.choice(peers[: rng.randint(1, len(peers))])
        out.append(
            f"{clock} {host} worker[{200 + i % 50}]: job done [job: {job}] peer={peer} took: {took} ms"
        )
    path.write_text("\n".join(out) + "\n")
    return out


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], dict[str, Any]]:
    folder = tmp_path_factory.mktemp("marked")
    path = folder / "jobs.log"
    lines = _write_log(path)
    table = open_source(str(path), cache_dir=str(folder / "cache")).profile.table
    assert table is not None and "host" in [c[0] for c in table["columns"]]
    return path, lines, table


def _fielded(table: dict[str, Any], question: str, path: Path) -> dict[str, Any]:
    return with_quoted_fields(table, question, lambda: sample_lines(str(path)))


def _moved(
    question: str, sent: dict[str, Any], table: dict[str, Any], path: Path
) -> tuple[Any, str, list[Any]]:
    """The query rlm runs instead of `sent`, what it says changed, and the query's rows."""
    fielded = _fielded(table, question, path)
    moved = with_asked_measure(question, json.dumps(sent), fielded)
    assert moved is not None, question
    with duckdb.connect(table["path"], read_only=True) as con:
        rows = con.execute(compile_sql(moved[0], fielded)).fetchall()
    return moved[0], moved[1], rows


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_a_marker_is_read_from_the_questions_form_only() -> None:
    said = {
        "Which remote address (its peer= value) shows up most?": ("peer=", ""),
        "What do the '[job: ...]' tags hold most often?": ("[job:", "]"),
        "How many KB ids follow 'Package_for_KB...' in the names?": ("Package_for_KB", ""),
        "What is the largest 'took:' value?": ("took:", ""),
        "Count the records whose number after '####' is odd.": ("####", ""),
    }
    for question, (text, closing) in said.items():
        assert [(m.text, m.closing) for m in question_markers(question)] == [(text, closing)], question
    # Quotes that name lines, or lines with their own placeholders, hold no marker; nor an
    # equation's sign between words.
    for question in (
        "How many lines with 'error:' did each host log?",
        "How many 'Accepted publickey for ...' lines are there?",
        "What is the average of the 'Waited N seconds' lines?",
        "Is x = y + z where a=b?",
    ):
        assert question_markers(question) == [], question


def test_the_value_after_a_marker_is_a_column_of_its_kind(
    log: tuple[Path, list[str], dict[str, Any]],
) -> None:
    path, _, table = log
    fielded = _fielded(
        table, "What is the largest 'took:' value, and the busiest peer (the peer= value)?", path
    )
    fields = {f.name: f for f in read_fields(fielded)}
    assert set(fields) == {"<took>", "<peer>"} and all(f.marked for f in fields.values())
    assert fields["<took>"].number and not fields["<peer>"].number
    told = describe_actions(fielded)
    assert '"<peer>" (text) is the <peer> of each line "peer=<peer>"' in told
    # A marker no line of a whole input holds gives no column.
    assert _fielded(table, "What is the most common 'nosuchkey=' value?", path) == table


def test_queries_of_another_column_are_moved_onto_the_marked_value(
    log: tuple[Path, list[str], dict[str, Any]],
) -> None:
    path, lines, table = log
    peers = Counter(m[1] for m in map(_PEER.search, lines) if m)
    took = [_number(m[1]) for m in map(_TOOK.search, lines) if m]
    jobs = {m[1] for m in map(_JOB.search, lines) if m}

    q = "Which remote address (its peer= value) shows up most? Just the address."
    query, change, rows = _moved(q, {"op": "top", "column": "host", "k": 5}, table, path)
    assert query["column"] == "<peer>" and "instead of host" in change
    assert rows[0] == (peers.most_common(1)[0][0], peers.most_common(1)[0][1])

    q = "What is the longest 'took:' value? Just the number."
    query, change, rows = _moved(q, {"op": "top", "column": "host"}, table, path)
    assert query == {"asks": query["asks"], "op": "max", "column": "<took>"} and rows == [(max(took),)]

    q = "What is the mean 'took:' value? Round to 2 decimals."
    query, change, rows = _moved(q, {"op": "sum", "column": "pid"}, table, path)
    assert query["op"] == "avg" and rows[0][0] == pytest.approx(sum(took) / len(took))

    q = "How many distinct ids do the '[job: ...]' tags hold?"
    _, _, rows = _moved(q, {"op": "count"}, table, path)
    assert rows == [(len(jobs),)]

    q = "How many jobs have a 'took:' value over 1,000? Just the number."
    sent = {"op": "count", "where": [{"column": "line", "cmp": "contains", "value": "1,000"}]}
    query, _, rows = _moved(q, sent, table, path)
    assert query["where"] == [{"column": "<took>", "cmp": ">", "value": 1000}]
    assert rows == [(sum(t > 1000 for t in took),)]

    # Which line goes with the largest value: its rows, the line beside the value.
    q = "Which host logged the slowest job (the largest 'took:' value)?"
    query, _, rows = _moved(q, {"op": "count"}, table, path)
    assert query["op"] == "rows" and query["order_by"] == "<took>" and query["columns"][0] == "host"
    slowest = max(lines, key=lambda x: _number(m[1]) if (m := _TOOK.search(x)) else -1)
    assert rows[0][1] == slowest.split()[3] and rows[0][2] == max(took)


def test_a_query_of_the_marked_value_runs_as_sent(log: tuple[Path, list[str], dict[str, Any]]) -> None:
    path, _, table = log
    fielded = _fielded(table, "Which peer= value shows up most?", path)
    assert (
        with_asked_measure(
            "Which peer= value shows up most?", json.dumps({"op": "top", "column": "<peer>"}), fielded
        )
        is None
    )


def test_the_cli_answers_from_the_marked_value_where_the_model_ranked_another_column(
    log: tuple[Path, list[str], dict[str, Any]], tmp_path: Path
) -> None:
    """Through the CLI and the real worker: the model ranks the syslog's host, rlm runs the top
    of the value after the marker instead and tells it, and the model's answer is printed."""
    path, lines, _ = log
    peers = Counter(m[1] for m in map(_PEER.search, lines) if m)
    busiest = min(peers.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    question = "Which remote address (its peer= value) shows up most? Just the address."
    proc, stub = ask_typed_once(
        path, question, {"op": "top", "column": "host", "k": 3}, busiest, cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "<peer>, the value the question names, instead of host" in shown
    assert f"{busiest}" in shown and str(peers[busiest]) in shown

    # A total of the process ids, refused as it would run, is first moved onto the marked value.
    took = [_number(m[1]) for m in map(_TOOK.search, lines) if m]
    largest = str(max(took))
    question = "What is the largest 'took:' value? The number alone."
    proc, stub = ask_typed_once(path, question, {"op": "sum", "column": "pid"}, largest, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{largest}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "could not be used" not in shown and f"max <took>\n----------\n{largest}\n" in shown, shown
    # Nothing to move it onto: refused in words that name the amounts there are.
    question = "What do the process ids add up to?"
    proc, stub = ask_typed_once(path, question, {"op": "sum", "column": "pid"}, "0", cwd=tmp_path)
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "sum needs a column of amounts; pid is an id or a code of each row" in shown, shown


_MAC = re.compile(r"(?i)\b([0-9a-f]{2}(?::[0-9a-f]{2}){5})\b")
_UUID = re.compile(r"\b([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")


def _write_leases(path: Path, lines: int = 2000) -> list[str]:
    """A syslog of DHCP requests, each from a MAC address and for a session UUID."""
    rng = random.Random(11)
    macs = [":".join(f"{rng.randint(0, 255):02x}" for _ in range(6)) for _ in range(12)]
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(9)]
    out = []
    for i in range(lines):
        clock = f"Apr  9 {i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        host = rng.choice(["gw1", "gw2", "gw3"])
        mac, session = rng.choice(macs[: rng.randint(1, 12)]), rng.choice(sessions[: rng.randint(1, 9)])
        kind = rng.choice(["DHCPREQUEST", "DHCPACK"])
        out.append(
            f"{clock} {host} dhcpd[{300 + i % 9}]: {kind} for 10.1.{i % 200}.{i % 250} from {mac} session {session}"
        )
    path.write_text("\n".join(out) + "\n")
    return out


def test_a_mac_address_or_uuid_asked_is_read_from_the_lines_and_ranked(tmp_path: Path) -> None:
    """Where the question names a MAC address or a UUID and no column's name does, the first of
    each line is a column, and a top of another column is moved onto the one asked for."""
    path = tmp_path / "leases.log"
    lines = _write_leases(path)
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    requests = [x for x in lines if "DHCPREQUEST" in x]
    sent = {
        "op": "top",
        "column": "host",
        "where": [{"column": "line", "cmp": "contains", "value": "DHCPREQUEST"}],
    }
    for question, shape, name in (
        ("Which MAC address made the most DHCPREQUEST calls? Just the address.", _MAC, "<mac>"),
        ("Which session UUID shows up in the most DHCPREQUEST lines?", _UUID, "<uuid>"),
    ):
        fielded = _fielded(table, question, path)
        assert [f.name for f in read_fields(fielded)] == [name]
        assert f'"{name}" (text) holds the first {name.strip("<>").upper()} of each line' in describe_actions(
            fielded
        )
        query, change, rows = _moved(question, sent, table, path)
        assert query["column"] == name and "instead of host" in change
        want = Counter(m[1] for m in map(shape.search, requests) if m)
        assert rows and all(want[value] == count for value, count in rows)
        assert rows[0][1] == max(want.values()) and len(rows) == min(len(want), query.get("k", 10))
    assert _fielded(table, "Which host logged the most DHCPACK lines?", path) == table


def test_letters_glued_to_the_ellipsis_begin_the_value(tmp_path: Path) -> None:
    """`'Patch_KB...'`: the value is `KB` and what follows it, as the lines write it, and only
    where the lines write `KB` there (`Patch_Rollup...` lines are not its values)."""
    (marker,) = question_markers("Which ids of 'Patch_KB...' packages are installed most? List them.")
    assert (marker.head, marker.lead) == ("Patch_", "KB")
    rng = random.Random(3)
    lines = []
    for i in range(600):
        kind = rng.choice([f"Patch_KB{rng.randint(100, 140)}~amd64~~6.1", "Patch_RollupFix~amd64~~7.0"])
        lines.append(f"2016-09-28 04:{i // 60 % 60:02d}:{i % 60:02d}, Info CBS Installing package {kind}")
    path = tmp_path / "cbs.log"
    path.write_text("\n".join(lines) + "\n")
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    want = Counter(m[1] for m in (re.search(r"Patch_(KB\d+)", x) for x in lines) if m)
    question = "How many distinct ids do the 'Patch_KB...' packages carry?"
    _, _, rows = _moved(question, {"op": "count"}, table, path)
    assert rows == [(len(want),)]
    question = "Which ids of 'Patch_KB...' packages are installed most? List them."
    query, _, rows = _moved(question, {"op": "top", "column": "line", "k": 5}, table, path)
    assert all(value.startswith("KB") and want[value] == count for value, count in rows)


def test_a_key_is_read_where_a_word_begins_and_its_value_glued_to_it(tmp_path: Path) -> None:
    """`user=` is not the end of `ruser=`: on the fixture's authentication lines, an empty
    `ruser=` before the remote host's key, the value is the account, as Python reads it after a
    whole key."""
    auth = Path(__file__).resolve().parent.parent / "fixtures" / "auth.log"
    lines = auth.read_text().splitlines()
    accounts = Counter(m[1] for line in lines if (m := re.search(r"(?<![\w])user=(\S+)", line)))
    assert accounts and any("ruser= " in line for line in lines)
    table = open_source(str(auth), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    question = "What is the most common user= value? Just the name."
    fielded = _fielded(table, question, auth)
    with duckdb.connect(table["path"], read_only=True) as con:
        rows = con.execute(compile_sql({"op": "top", "column": "<user>", "k": 50}, fielded)).fetchall()
    assert dict(rows) == dict(accounts)


def _write_transfers(path: Path, lines: int = 2500) -> list[str]:
    """A syslog of file transfers, each writing its size before the word `bytes`, among lines
    that write none (a session's keepalive, its id after the word)."""
    rng = random.Random(13)
    out = []
    for i in range(lines):
        clock = f"May  6 {i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        host = rng.choice(["north", "south", "east"])
        if i % 5 == 0:
            out.append(
                f"{clock} {host} xferd[{400 + i % 7}]: session {1000 + i % 37} keepalive from 10.2.0.{i % 250}"
            )
            continue
        size = rng.randint(0, 90_000)
        out.append(
            f"{clock} {host} xferd[{400 + i % 7}]: sent report-{i}.pdf to 10.2.1.{i % 250} ({size} bytes) in 0.{i % 9} s"
        )
    path.write_text("\n".join(out) + "\n")
    return out


def test_a_number_the_lines_write_with_the_word_asked_is_summed_ranked_and_extreme(tmp_path: Path) -> None:
    """Asked the bytes a log moved, where its lines write `(48213 bytes)`: the sum of those
    numbers, not a count of lines; the largest for `the largest byte count`; the host moving the
    most bytes from a group totalling them; a count bounded by a number the question states in
    bytes. Each against Python's reading of the raw lines, and through the CLI the count sent is
    run as the sum."""
    path = tmp_path / "xfer.log"
    lines = _write_transfers(path)
    sizes = [(line.split()[3], int(m[1])) for line in lines if (m := re.search(r"\((\d+) bytes\)", line))]
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None and "host" in [c[0] for c in table["columns"]]

    q = "What total of bytes did the transfers move, altogether?"
    query, change, rows = _moved(q, {"op": "count"}, table, path)
    assert query["op"] == "sum" and query["column"] == "<bytes>" and "instead of a count of rows" in change
    assert rows == [(sum(n for _, n in sizes),)]

    q = "What was the largest byte count of a single transfer?"
    query, _, rows = _moved(q, {"op": "count"}, table, path)
    assert query == {"asks": query["asks"], "op": "max", "column": "<byte>"}
    assert rows == [(max(n for _, n in sizes),)]

    q = "Which host moved the most bytes? Host only."
    query, _, rows = _moved(q, {"op": "top", "column": "host", "k": 3}, table, path)
    totals = Counter[str]()
    for host, n in sizes:
        totals[host] += n
    (busiest, most), *_ = totals.most_common()
    assert query["op"] == "group" and query["agg"] == "sum" and (rows[0][0], rows[0][-1]) == (busiest, most)

    # A number the question states in the word ("more than 50,000 bytes") bounds the count.
    q = "How many transfers moved more than 50,000 bytes?"
    query, change, rows = _moved(q, {"op": "count"}, table, path)
    assert query["where"] == [{"column": "<bytes>", "cmp": ">", "value": 50000}], change
    assert rows == [(sum(n > 50_000 for _, n in sizes),)]
    n = sizes[0][1]
    q = f"How many transfers went out with a {n} bytes payload?"
    query, _, rows = _moved(q, {"op": "count"}, table, path)
    assert query["where"] == [{"column": "<bytes>", "cmp": "=", "value": n}]
    assert rows == [(sum(m == n for _, m in sizes),)]
    # A number written after its word (`session 1012`) is an id, not an amount: "how many
    # sessions" stays a count of lines.
    q = "How many sessions sent a keepalive?"
    fielded = _fielded(table, q, path)
    assert [f.template for f in read_fields(fielded)] == ["sessions N"]
    assert with_asked_measure(q, json.dumps({"op": "count"}), fielded) is None
    # A little word between is no amount's word, whatever number the lines write after it.
    retried = Sample([f"May  6 00:00:0{i} north xferd[1]: retry from 3 peers" for i in range(5)], whole=True)
    q = "Which host had the most retries from 3 peers?"
    assert "<from>" not in json.dumps(with_quoted_fields(table, q, lambda: retried).get("quoted_fields"))
    # A word the lines never write with a number gives no column: the count stays a count.
    fielded = _fielded(table, "How many transfers went to the east host?", path)
    assert "<transfers>" not in json.dumps(fielded.get("quoted_fields"))

    total = sum(n for _, n in sizes)
    proc, stub = ask_typed_once(
        path,
        "What total of bytes did the transfers move, altogether?",
        {"op": "count"},
        str(total),
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout == f"{total}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "sum <bytes>\n" in shown and f"{total}" in shown, shown


def test_a_value_the_question_quotes_is_not_moved_onto_a_word_it_asks_of(tmp_path: Path) -> None:
    """Asked the average run time over quoted lines `finished in N s`, a query of N stays on N
    although the lines also write `queue time: M`: the question's own placeholder is what it asks
    about, not the number written with its word `time`."""
    path = tmp_path / "jobs.log"
    rng = random.Random(17)
    lines = [
        f"Jun  2 10:{i // 60:02d}:{i % 60:02d} node{i % 3} runner[{90 + i % 4}]: job {i} finished in "
        f"{rng.randint(1, 300)} s (queue time: {rng.randint(1, 60)})"
        for i in range(600)
    ]
    path.write_text("\n".join(lines) + "\n")
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    q = "Over the 'finished in N s' lines, what is the average run time? Two decimals."
    fielded = _fielded(table, q, path)
    assert {f.name for f in read_fields(fielded)} >= {"N", "<time>"}
    assert with_asked_measure(q, json.dumps({"op": "avg", "column": "N"}), fielded) is None
    # Nor is a count of rows made the average of that other number.
    moved = with_asked_measure(q, json.dumps({"op": "count"}), fielded)
    assert moved is None or "<time>" not in json.dumps(moved[0]), moved


def test_the_word_after_the_one_asked_of_picks_the_number_a_line_writes_twice(tmp_path: Path) -> None:
    """Lines that write `N bytes (x KB) sent, M bytes received`: asked the bytes received, the sum
    is of M, not of the N the line writes first; asked the bytes sent, of N."""
    path = tmp_path / "proxy.log"
    rng = random.Random(23)
    pairs = [(rng.randint(0, 9000), rng.randint(0, 9000)) for _ in range(400)]
    lines = []
    for i, (sent, got) in enumerate(pairs):
        clock = f"[10.30 16:{i // 60 % 60:02d}:{i % 60:02d}] app{i % 4}.exe - relay.example.net:443"
        lines.append(f"{clock} open through proxy relay.example.net:5070 HTTPS")
        lines.append(
            f"{clock} close, {sent} bytes ({sent / 1024:.2f} KB) sent, {got} bytes received, lifetime 00:01"
        )
    path.write_text("\n".join(lines) + "\n")
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None and table["format"] != "csv"
    for asked, total in (("received", sum(g for _, g in pairs)), ("sent", sum(s for s, _ in pairs))):
        q = f"Over the close lines, how many bytes {asked} altogether?"
        query, _, rows = _moved(q, {"op": "count"}, table, path)
        assert query["op"] == "sum" and rows == [(total,)], (asked, query)


def test_a_word_before_value_that_the_lines_write_as_a_key_is_a_marker(tmp_path: Path) -> None:
    """ "which tty value": no `=` in the question, but the lines write `tty=`; the value after it
    is a field, and a top of the host is moved onto it (through the CLI). A word the lines do
    not write as a key is none."""
    linux = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Linux_2k.log"
    text = linux.read_text(errors="replace")
    (most, n), (_, second) = Counter(re.findall(r"(?<![\w.-])tty=(\S+)", text)).most_common(2)
    assert n > second
    question = "Which tty value do the lines write most? Value only."
    proc, stub = ask_typed_once(linux, question, {"op": "top", "column": "host", "k": 3}, most, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{most}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert told.split("\n")[3].split("|")[0].strip() == most, told
    table = open_source(str(linux), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    plain = with_quoted_fields(
        table, "Which session value is written most often?", lambda: sample_lines(str(linux))
    )
    assert read_fields(plain) == []
