"""A final naming a lower row of the model's own ranking, where the question asks for the most:
refused once, in doubt if sent again after one more query (rlm.run.typed.ranked)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import ask_typed_cli, latest_trace

from rlm.run.typed.ranked import off_top

TAXIS = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "seaborn" / "taxis.csv"
QUESTION = "Which dropoff zone got the most trips among those ending in Brooklyn?"
BROOKLYN = [{"column": "dropoff_borough", "cmp": "=", "value": "Brooklyn"}]


def _ranking() -> list[str]:
    """The dropoff zones of trips ending in Brooklyn as the group query ranks them: most first, ties by name."""
    with TAXIS.open(newline="") as fh:
        counts = Counter(
            r["dropoff_zone"]
            for r in csv.DictReader(fh)
            if r["dropoff_borough"] == "Brooklyn" and r["dropoff_zone"]
        )
    return [zone for zone, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Which zone was the most common?", "Astoria", False),
        ("Which zone was the most common?", "It is Astoria.", False),
        ("Which zone was the most common?", "Park Slope", True),
        ("Which zone was the most common?", "Park Slope, then Astoria", True),  # the first is named
        ("Which zone was the most common? List the top 3.", "Astoria", True),  # several asked
        ("Which zone had a ride at 3am?", "Astoria", True),  # no most asked
    ],
)
def test_a_lower_row_misfits_where_the_one_most_is_asked(question: str, answer: str, fits: bool) -> None:
    keys = ["Park Slope", "Williamsburg (North Side)", "Astoria", "Boerum Hill"]
    assert (off_top(question, answer, keys) is None) is fits


def test_a_final_naming_a_lower_row_is_refused_once_then_taken_in_doubt(tmp_path: Path) -> None:
    ranking = _ranking()
    lower = ranking[2]
    group = json.dumps({"op": "group", "by": "dropoff_zone", "k": 20, "where": BROOKLYN})
    wrong = json.dumps({"op": "final", "answer": f"The busiest dropoff zone is {lower}."})
    replies = [group, wrong, json.dumps({"op": "top", "column": "dropoff_zone", "k": 1, "where": BROOKLYN})]
    # Told, the model answers with the first row: the answer stands.
    right = [*replies, json.dumps({"op": "final", "answer": ranking[0]}), json.dumps({"answer": ranking[0]})]
    proc, stub = ask_typed_cli(TAXIS, QUESTION, right, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{ranking[0]}\n", proc.stderr
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: the question asks for the most, and your answer is not the first row" in told
    assert lower not in told.rsplit("final refused", 1)[1]  # the model's answer is not quoted back
    # Sent again after one more query, it is taken, in doubt: --strict withholds it.
    again = [*replies, wrong, json.dumps({"answer": lower})]
    proc, _ = ask_typed_cli(TAXIS, QUESTION, again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    doubts = latest_trace(tmp_path)["synthesis"]["doubts"]
    row = ranking.index(lower) + 1
    assert doubts == [
        f"kind: the answer names row {row} of a ranking, most first, where the question asks for the most"
    ]
