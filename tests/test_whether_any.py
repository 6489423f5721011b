"""A yes or no about whether any row is so, said against the model's own count of those rows:
refused once with the count named, in doubt if sent again (rlm.run.typed.whether)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ask_typed_cli, latest_trace

from rlm.run.typed.whether import count_contradicted


@pytest.mark.parametrize(
    ("question", "answer", "count", "contradicted"),
    [
        ("Were any parcels sent with no weight? yes/no", "No", 12, True),
        ("Were any parcels sent with no weight? yes/no", "Yes", 12, False),
        ("Is there at least one parcel sent to Oslo?", "yes.", 0, True),
        ("Did any parcel go to Oslo?", "No", 0, False),
        ("Did any parcel go to Oslo?", "Oslo got 4", 4, False),  # no yes or no said
        ("Was there a day with more than 40 parcels? yes/no", "No", 300, False),  # groups, not rows
        ("Is the heaviest parcel over the limit? yes/no", "No", 3, False),  # not whether any
        ("Were any parcels sent with no weight? yes/no", "No", None, False),  # no count ran
    ],
)
def test_a_yes_or_no_against_the_count(
    question: str, answer: str, count: int | None, contradicted: bool
) -> None:
    assert (count_contradicted(question, answer, count) is not None) is contradicted


def _parcels(tmp_path: Path) -> Path:
    path = tmp_path / "parcels.csv"
    weights = [2, 0, 5, 7, 0, 1, 3, 0]
    path.write_text("id,weight\n" + "".join(f"P{i},{w}\n" for i, w in enumerate(weights)))
    return path


def test_the_cli_refuses_a_no_its_own_count_denies_once(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the model counts three parcels of weight 0 and
    answers no; refused with its count named, its yes is taken. A no sent again after one more
    action is in doubt and withheld (--strict)."""
    count = json.dumps({"op": "count", "where": [{"column": "weight", "cmp": "=", "value": 0}]})
    question = "Were any parcels recorded with a weight of 0? Reply with yes/no."
    replies = [
        count,
        json.dumps({"op": "final", "answer": "No"}),
        json.dumps({"op": "final", "answer": "Yes"}),
        json.dumps({"answer": "Yes"}),
    ]
    proc, stub = ask_typed_cli(_parcels(tmp_path), question, replies, cwd=tmp_path)
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "your yes or no says other than your own count of them. Your count is 3." in refused, refused[
        -500:
    ]
    assert proc.returncode == 0 and proc.stdout == "Yes\n", proc.stderr
    again = [
        count,
        json.dumps({"op": "final", "answer": "No"}),
        count,
        json.dumps({"op": "final", "answer": "No"}),
    ]
    proc, _ = ask_typed_cli(
        _parcels(tmp_path), question, [*again, json.dumps({"answer": "No"})], cwd=tmp_path
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == [
        "kind: the answer says no where the count of the rows asked about is 3"
    ]


def test_the_prompts_example_copied_is_no_count_to_hold_a_yes_or_no_to(tmp_path: Path) -> None:
    """Through the CLI: the model copies the prompt's example count (a filter on whatever the
    example names) and answers no. That count is not of the rows asked about, so the no is
    not refused (it is in doubt as the example's, as before)."""
    from rlm.input.source import open_source
    from rlm.run.typed.describe import examples

    path = _parcels(tmp_path)
    table = open_source(str(path), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    example = next(action for _, action in examples(table) if action["op"] == "count")
    assert example.get("where"), example  # a count with a condition, as the check reads
    replies = [json.dumps(example), json.dumps({"op": "final", "answer": "No"}), json.dumps({"answer": "No"})]
    question = "Were any parcels recorded with a weight of 0? Reply with yes/no."
    proc, stub = ask_typed_cli(path, question, replies, cwd=tmp_path)
    told = stub.requests[2]["body"]["messages"][-1]["content"] if len(stub.requests) > 2 else ""
    assert "your yes or no says other than" not in told
    assert latest_trace(tmp_path)["steps"][1]["observation"]["preview"].startswith("final answer recorded")
