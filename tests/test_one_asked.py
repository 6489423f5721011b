"""A question about one thing answered with the first row of a ranking of many
(rlm.run.typed.ranked): where the question asks for no most, a final naming the first of
several ranked values is refused once and in doubt after; where it says one line of a kind
occurs once, a first row counting several lines leaves the answer in doubt, the model told."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import ask_typed_cli, latest_trace

from rlm.run.typed.ranked import one_said, unasked_top

KEYS = ["w-17", "w-03", "w-08"]


@pytest.mark.parametrize(
    ("question", "answer", "fits"),
    [
        ("Which worker ran the job that was aborted?", "w-17", False),
        ("Which worker ran the job that was aborted?", "It was w-17.", False),
        ("Which worker ran the job that was aborted?", "w-03", True),  # not the first row
        ("Which worker ran the job that was aborted?", "w-17, w-03", True),  # several named
        ("Which worker logged the most retries?", "w-17", True),  # a most asked
        ("Which worker was the busiest?", "w-17", True),
        ("Which worker retried more often than the others?", "w-17", True),
        ("How many jobs did worker w-17 run?", "w-17", True),
        ("Which workers retried? List them.", "w-17", True),
    ],
)
def test_the_first_row_of_a_ranking_misfits_where_no_most_is_asked(
    question: str, answer: str, fits: bool
) -> None:
    assert (unasked_top(question, answer, KEYS) is None) is fits
    assert unasked_top("Which worker ran the job that was aborted?", "w-17", KEYS[:1]) is None  # one row


def _write_jobs(path: Path) -> None:
    """A job log: w-17 retries all day, w-08 aborts one job, the others finish theirs."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["time", "worker", "event", "job"])
        for i in range(600):
            worker, event = ("w-17", "retry") if i % 2 else (f"w-0{3 + i % 4}", "finished")
            if i == 301:
                worker, event = "w-08", "aborted"
            out.writerow([f"2026-02-01 0{i // 100}:{i % 60:02d}:00", worker, event, f"job-{i}"])


def test_a_rankings_top_answered_where_no_most_is_asked_is_refused_once_then_in_doubt(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the first row of a ranking of every worker is
    refused once; after a query of the aborted job's rows alone, its worker is taken."""
    jobs = tmp_path / "jobs.csv"
    _write_jobs(jobs)
    question = "The log holds one job that was cut short. Which worker ran it?"
    everyone = json.dumps({"op": "top", "column": "worker", "k": 5})
    aborted = json.dumps(
        {
            "op": "top",
            "column": "worker",
            "k": 5,
            "where": [{"column": "event", "cmp": "=", "value": "aborted"}],
        }
    )

    def final(answer: str) -> str:
        return json.dumps({"op": "final", "answer": answer})

    replies = [everyone, final("w-17"), aborted, final("w-08"), json.dumps({"answer": "w-08"})]
    proc, stub = ask_typed_cli(jobs, question, replies, cwd=tmp_path)
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert (
        "final refused: your answer is the first row of a ranking, and the question asks for no most"
        in refused
    )
    # After a query keeping one row, the answer is no ranking's top; its filter on a value the
    # question does not write is its one doubt (rlm.run.typed.conditions.unstated).
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == [
        "rows: kept only event = 'aborted', which the question does not state"
    ]
    assert "w-08" in proc.stderr and "no most" not in proc.stderr
    # The same first row sent again after one more ranking of every worker: in doubt, withheld.
    again = [everyone, final("w-17"), everyone, final("w-17"), json.dumps({"answer": "w-17"})]
    proc, _ = ask_typed_cli(jobs, question, again, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "the question asks for no most" in proc.stderr


def test_a_first_row_counting_many_lines_where_one_is_said_is_in_doubt(tmp_path: Path) -> None:
    """The question says one job of a kind occurs once; the ranking's first row counts 299:
    the model is told, and its answer from that row is withheld under --strict."""
    jobs = tmp_path / "jobs.csv"
    _write_jobs(jobs)
    question = "Exactly one job got cut short today. Which worker ran it? Give the worker alone."
    first = json.dumps({"op": "group", "by": "worker", "k": 1})
    final = json.dumps({"op": "final", "answer": "w-17"})
    replies = [first, final, first, final, json.dumps({"answer": "w-17"})]
    proc, stub = ask_typed_cli(jobs, question, replies, cwd=tmp_path)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        "the question says one line of that kind is in the input, and 'w-17', ranked first, counts 299 lines"
        in told
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    doubts = latest_trace(tmp_path)["synthesis"]["doubts"]
    assert "rows: ranked 'w-17' first with 299 lines, where the question says there is one" in doubts


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("Exactly one job was aborted. Which worker ran it?", True),
        ("Which worker ran the only aborted job?", True),
        ("A single job was aborted: by which worker?", True),
        ("Which worker ran aborted jobs? Give a single name, please.", False),  # the answer's form
        ("Which worker ran aborted jobs? Only one name, please.", False),
        ("Which worker aborted jobs?", False),
        ("Every retry line comes from a single worker. Which?", False),  # one value, many lines
    ],
)
def test_one_thing_said_is_read_outside_the_answers_form(tmp_path: Path, question: str, said: bool) -> None:
    jobs = tmp_path / "jobs.csv"
    _write_jobs(jobs)
    from rlm.input.source import open_source

    table = open_source(str(jobs), cache_dir=str(tmp_path / "cache")).profile.table
    assert table is not None
    printed = "worker | count\n-------+------\nw-17   | 300\n(1 row)\n"
    content = json.dumps({"op": "group", "by": "worker", "k": 1})
    assert (one_said(question, content, printed, table) is not None) is said
    counted_once = "worker | count\n-------+------\nw-08   | 1\n(1 row)\n"
    assert one_said(question, content, counted_once, table) is None


def test_a_top_one_is_run_again_to_see_whether_its_row_is_alone(tmp_path: Path) -> None:
    """Through the CLI and the real worker: a ranking cut at one row says nothing of whether it
    is alone. Where no most is asked, rlm runs it again for two rows: a first row among several
    is refused once and in doubt after; a row that is alone (the rows of the one job the
    question names) is taken."""
    jobs = tmp_path / "jobs.csv"
    _write_jobs(jobs)
    top_one = json.dumps({"op": "top", "column": "worker", "k": 1})

    def final(answer: str) -> str:
        return json.dumps({"op": "final", "answer": answer})

    question = "The log holds one job that was cut short. Which worker ran it?"
    replies = [top_one, final("w-17"), top_one, final("w-17"), json.dumps({"answer": "w-17"})]
    proc, stub = ask_typed_cli(jobs, question, replies, cwd=tmp_path)
    assert "the question asks for no most" in stub.requests[2]["body"]["messages"][-1]["content"]
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    # The question names the aborted job: rlm keeps the ranking to it, and its one row is alone.
    question = "Which worker ran the aborted job?"
    replies = [top_one, final("w-08"), json.dumps({"answer": "w-08"})]
    proc, stub = ask_typed_cli(jobs, question, replies, cwd=tmp_path)
    assert "event = 'aborted'" in stub.requests[1]["body"]["messages"][-1]["content"]
    assert proc.returncode == 0 and proc.stdout == "w-08\n", proc.stderr
