"""Offline checks of the real-model suite's own machinery: expectations and the lenient scorer."""

from __future__ import annotations

import re

import pytest

from .conftest import summarise
from .questions import QUESTIONS, is_correct, normalise


def test_questions_are_distinct_and_answerable_from_the_data() -> None:
    assert len(QUESTIONS) >= 10
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    for q in QUESTIONS:
        if not q.file.is_file():
            pytest.skip(f"fixtures/data missing: {q.file}")
        answer = q.answer()
        assert answer and answer != "0", q.id
        # the answer is in the data, not only in the question
        assert answer not in q.question, q.id


def test_count_expectation_matches_a_grep_of_the_file() -> None:
    q = next(q for q in QUESTIONS if q.id == "ssh-failed-password")
    if not q.file.is_file():
        pytest.skip("fixtures/data missing")
    text = q.file.read_text(encoding="utf-8", errors="replace")
    assert q.answer() == str(len(re.findall(r"^.*Failed password.*$", text, flags=re.M)))


@pytest.mark.parametrize(
    ("expected", "answer", "right"),
    [
        ("1318", "There are 1,318 WARN lines.", True),
        ("13", "13.", True),
        ("13", "There are 130 lines", False),
        ("13", "version 2.13 of the log", False),
        ("chrome.exe", "The program is Chrome.exe.", True),
        ("183.62.140.25", "183.62.140.253", False),
        ("183.62.140.253", "IP 183.62.140.253 (286 lines)", True),
        ("80", "", False),
    ],
)
def test_lenient_scoring(expected: str, answer: str, right: bool) -> None:
    assert is_correct(expected, answer) is right


def test_normalise_drops_only_thousands_separators() -> None:
    assert normalise("1,318 and 2,000,000 and 3,14") == "1318 and 2000000 and 3,14"


def test_summary_counts_and_medians() -> None:
    rows = [
        {"correct": True, "elapsed_s": 10.0, "prompt_tokens": 100, "completion_tokens": 10, "calls": 2},
        {"correct": False, "elapsed_s": 30.0, "prompt_tokens": 300, "completion_tokens": 30, "calls": 4},
        {"correct": True, "elapsed_s": 20.0, "prompt_tokens": None, "completion_tokens": None, "calls": None},
    ]
    s = summarise(rows, 61.0)
    assert (s["questions"], s["right"], s["median_elapsed_s"], s["median_tokens"], s["median_calls"]) == (
        3,
        2,
        20.0,
        220,
        3.0,
    )
