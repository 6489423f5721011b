"""A final that is a shown value with part of its middle lost or changed: refused once, the close
values named as the rows write them; in doubt if sent again (rlm.run.typed.miscopied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ask_typed_cli, latest_trace

from rlm.run.typed.miscopied import miscopied

SERVERS = {"10.100.20.250": 9, "10.100.22.250": 5, "10.100.4.250": 2}


@pytest.mark.parametrize(
    ("answer", "near"),
    [
        ("10.100.250", ["10.100.20.250", "10.100.22.250", "10.100.4.250"]),  # a part of the middle lost
        ("10.100.20.257", ["10.100.20.250"]),  # a character changed
        ("10.100.20.250", []),  # as shown
        ("10.100.20.250.", []),  # an end character (as_shown mends it)
        ("12", []),  # a number is rightly a value no row shows (a count, a total)
        ("10.100.4.251", []),  # in an output seen before
        ("an unrelated answer", []),
    ],
)
def test_a_near_copy_of_a_shown_value(answer: str, near: list[str]) -> None:
    cells = [*SERVERS, *map(str, SERVERS.values())]
    assert miscopied(answer, cells, seen="count\n10.100.4.251 | 3") == near


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "sync.csv"
    rows = [server for server, n in SERVERS.items() for _ in range(n)]
    path.write_text("n,server\n" + "".join(f"{i},{s}\n" for i, s in enumerate(rows)))
    return path


def test_the_cli_refuses_a_miscopied_final_once_naming_what_the_rows_write(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the final drops part of the first row's address, is
    refused with the close values named, and the value as written is taken; sent again after one
    more action, the miscopy is in doubt and withheld (--strict)."""
    top = json.dumps({"op": "top", "column": "server", "k": 3})
    wrong = json.dumps({"op": "final", "answer": "10.100.250"})
    right = json.dumps({"op": "final", "answer": "10.100.20.250"})
    question = "Which server do the rows name most often?"
    replies = [top, wrong, right, json.dumps({"answer": "10.100.20.250"})]
    proc, stub = ask_typed_cli(_log(tmp_path), question, replies, cwd=tmp_path)
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: your answer is no value your results show" in refused, refused[-600:]
    assert "The rows write, close to it: '10.100.20.250', '10.100.22.250', '10.100.4.250'." in refused
    assert proc.returncode == 0 and proc.stdout == "10.100.20.250\n", proc.stderr
    again = [top, wrong, json.dumps({"op": "count"}), wrong, json.dumps({"answer": "10.100.250"})]
    proc, _ = ask_typed_cli(_log(tmp_path), question, again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == [
        "kind: the answer is no value the results show, only close to one"
    ]
