"""A question naming fields that only a JSON record's lists or deeper objects hold
(rlm.run.typed.unreached): no typed query reads them, so its answer is in doubt."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ask_typed_cli, latest_trace

from rlm.input.source import open_source
from rlm.run.typed.unreached import unreached_named

TAXIS = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "seaborn" / "taxis.csv"


def _write_pools(path: Path) -> None:
    """Status records of a balancer: its host and load at the top, each pool's members in a
    list, each member's health inside it."""
    with path.open("w") as fh:
        for i in range(200):
            members = [
                {"addr": f"10.1.0.{m}:80", "health": "down" if (i + m) % 37 == 0 else "up", "weight": m}
                for m in range(1, 4)
            ]
            record = {
                "host": f"edge-{0 if i % 4 else 1}",
                "ts": 1_700_000_000 + i,
                "load": {"active": i % 7, "idle": 30 - i % 7},
                "pools": {"alpha": {"members": members, "keepalive": 8}},
            }
            fh.write(json.dumps(record) + "\n")


def test_fields_held_only_in_lists_or_deeper_objects_are_named(tmp_path: Path) -> None:
    pools = tmp_path / "pools.jsonl"
    _write_pools(pools)
    table = open_source(str(pools), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    question = "Which pool members ever had a health other than up? Their addresses."
    assert unreached_named(question, table) == ["pool", "member", "health", "address"]  # `addr`
    # Offered columns (`host`, `load.idle`) and words no field has are not.
    assert unreached_named("Which host had the most idle load?", table) == []
    taxis = open_source(str(TAXIS), cache_dir=str(tmp_path / "cache")).profile.table
    assert taxis is not None and unreached_named("Which member pool had the most health?", taxis) == []


def test_the_cli_withholds_an_answer_to_a_question_about_fields_no_query_reads(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a ranking of the hosts, answered for a question
    about the members' health, is withheld under --strict, the reason on stderr; a question
    about the hosts themselves is answered."""
    pools = tmp_path / "pools.jsonl"
    _write_pools(pools)
    hosts = json.dumps({"op": "top", "column": "host", "k": 5})
    final = json.dumps({"op": "final", "answer": "edge-0"})
    replies = [hosts, final, json.dumps({"answer": "edge-0"})]
    question = "Which pool members ever had a health other than up? Their addresses."
    # Refused once as a ranking's first row where no most is asked, then sent again: taken.
    proc, _ = ask_typed_cli(pools, question, [hosts, final, hosts, *replies[1:]], cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "reads none of pool, member, health, address, which the question names" in proc.stderr
    assert any("member" in d for d in latest_trace(tmp_path)["synthesis"]["doubts"])
    grouped = json.dumps({"op": "group", "by": "host", "k": 3})
    proc, _ = ask_typed_cli(
        pools, "Which host wrote the most records?", [grouped, *replies[1:]], cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == "edge-0\n", proc.stderr
