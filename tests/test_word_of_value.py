"""A value a question names by one of its words, where the lines say the word names its rows
(rlm.run.typed.wordvalue)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import duckdb
from conftest import FIXTURES, ask_typed_once

from rlm.input.source import open_source
from rlm.run.typed.wordvalue import onto_word_of_value

AUTH = FIXTURES / "auth.log"
TAXIS = FIXTURES / "data" / "seaborn" / "taxis.csv"


def _amended(path: Path, question: str, action: dict[str, Any], cache: Path) -> tuple[Any, list[list[int]]]:
    table = open_source(str(path), cache_dir=str(cache)).profile.table
    assert table is not None
    probes: list[list[int]] = []

    def counts(query: str) -> list[int]:
        with duckdb.connect(table["path"], read_only=True) as con:
            probes.append([int(n) for n in con.execute(query).fetchone() or ()])
        return probes[-1]

    return onto_word_of_value(question, json.dumps(action), table, counts), probes


def test_one_word_of_a_value_names_its_rows_where_the_lines_write_it_on_those_alone(tmp_path: Path) -> None:
    with TAXIS.open(newline="") as fh:
        paid = [r["payment"] for r in csv.DictReader(fh)]
    amended, _ = _amended(TAXIS, "How many rides were paid by card?", {"op": "count"}, tmp_path)
    assert amended is not None
    assert amended[0]["where"] == [{"column": "payment", "cmp": "=", "value": "credit card"}]
    assert paid.count("credit card") > 0


def test_a_word_other_lines_write_too_names_no_value(tmp_path: Path) -> None:
    """ftpd's lines write "connection" as well as sshd's closed connections: no condition."""
    lines = []
    for i in range(10):
        lines += [
            f"Jun 14 15:16:{i:02d} combo sshd[1993{i}]: Connection closed by 10.0.0.{i} [preauth]",
            f"Jun 14 15:17:{i:02d} combo ftpd[2408{i}]: connection from 10.1.0.{i} () at Tue Jun 14 15:17:{i:02d} 2005",
            f"Jun 14 15:18:{i:02d} combo sshd[1994{i}]: Failed password for root from 10.2.0.{i} port 22 ssh2",
        ]
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(lines) + "\n")
    question = "How many connection lines name a host?"
    amended, probes = _amended(path, question, {"op": "count"}, tmp_path / "cache")
    assert amended is None and probes == [[10, 20]]
    # Where only the closed connections write it, the word names them.
    path.write_text("\n".join(x for x in lines if "ftpd" not in x) + "\n")
    amended, probes = _amended(path, question, {"op": "count"}, tmp_path / "cache2")
    assert (
        amended is not None
        and amended[0]["where"][-1]["value"] == "connection_closed"
        and probes == [[10, 10]]
    )


def test_the_cli_ranks_the_users_of_the_accepted_logins(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a ranking of every line's users is kept to the
    accepted logins, and the model told."""
    users = re.findall(r"Accepted \w+ for (\S+) from", AUTH.read_text())
    assert len(set(users)) == 1
    question = "Which account got an accepted login? Account name only."
    proc, stub = ask_typed_once(
        AUTH, question, {"op": "top", "column": "user", "k": 5}, users[0], cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == f"{users[0]}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "event = 'accepted_password' (the lines that write 'accepted')" in told
    assert re.search(rf"{re.escape(users[0])}\s*\|\s*{len(users)}\n\(1 row", told)


def test_a_noun_of_any_row_or_a_word_of_a_long_text_names_no_value(tmp_path: Path) -> None:
    """ "its messages" is every line's; a template of many words is a text, not a kind of line."""
    path = FIXTURES / "data" / "loghub" / "OpenSSH_2k.log_structured.csv"
    question = "Which remote IP appears in the messages of the busiest Pid?"
    amended, probes = _amended(path, question, {"op": "top", "column": "Pid"}, tmp_path)
    assert amended is None and probes == []
