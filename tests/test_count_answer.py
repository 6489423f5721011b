"""An answer that is a count of lines where the question asks for values is in doubt: read from
the query echoes the findings hold, never from the question's wording beyond its answer-form
words; through the CLI with --strict it is withheld, and a number the question may well ask for
(a key of the echo, a figure asked) is printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ask_typed_cli

from rlm.run.count_answer import count_for_values

LEVELS = "level | count\n------+------\nINFO  | 1040\nWARN  | 808\nFATAL | 2\n(3 rows)"


@pytest.mark.parametrize(
    ("question", "answer", "evidence", "doubted"),
    [
        ("Which jobs crashed? List their ids.", "2", [LEVELS], True),
        ("Which jobs crashed? List their ids.", "1,040", [LEVELS], True),
        ("Which job crashed?", "1", ["distinct job\n------------\n1\n(1 row)"], True),
        # The question asks for a figure: a count is what it wants.
        ("How many jobs crashed?", "2", [LEVELS], False),
        ("Count the crashed jobs.", "2", [LEVELS], False),
        ("What is the total of the FATAL lines?", "2", [LEVELS], False),
        # The number is a key of the echo, or written outside any echo: a value, not a count.
        (
            "Which port is busiest?",
            "443",
            ["port | count\n-----+------\n443   | 12\n80    | 443\n(2 rows)"],
            False,
        ),
        ("Which job id crashed?", "2", [LEVELS, "job 2 crashed at 10:00"], False),
        ("Which jobs crashed?", "FATAL", [LEVELS], False),
        ("Which job crashed?", "7", [LEVELS], False),  # held nowhere: grounding's to say
    ],
)
def test_a_count_is_in_doubt_only_where_values_are_asked(
    question: str, answer: str, evidence: list[str], doubted: bool
) -> None:
    said = count_for_values(question, answer, evidence)
    assert (said is not None) == doubted, said
    if doubted:
        assert said is not None and "is a count of lines" in said


def test_the_cli_withholds_a_count_given_for_a_list_under_strict(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the model groups the jobs by state and answers with
    the failed ones' count where their names were asked; --strict withholds it and says why."""
    jobs = tmp_path / "jobs.csv"
    rows = [("alpha", "ok"), ("bravo", "failed"), ("charlie", "ok"), ("delta", "failed"), ("echo", "ok")]
    jobs.write_text("job,state\n" + "".join(f"{j},{s}\n" for j, s in rows))
    replies = [
        json.dumps({"op": "group", "by": "state"}),
        json.dumps({"op": "final", "answer": "2"}),
        json.dumps({"answer": "2", "citations": ["F1"]}),
    ]
    # The count of a row of its ranking is refused once (rlm.run.typed.ranked); sent again after
    # one more query, it is taken, in doubt. (A question that names the column asked, "which
    # jobs", gets the list of that column instead: rlm.run.typed.measure.)
    again = [*replies[:2], json.dumps({"op": "group", "by": "state", "k": 5}), *replies[1:]]
    proc, _ = ask_typed_cli(jobs, "Which ones ended in the failed state? Name them.", again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert "is a count of lines its query made" in proc.stderr and "Traceback" not in proc.stderr
    # The same answer to a question that asks how many is printed.
    proc, _ = ask_typed_cli(jobs, "How many jobs ended in the failed state?", replies, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "2\n", proc.stderr
