"""A percentage asked (rlm.run.typed.share): a typed count also gives its share of the table's
rows and of the rows each condition but one keeps, against Python's own count of the file, and
through the CLI with the real worker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ask_typed_once, run_typed

from rlm.input.source import open_source
from rlm.run.typed.share import asks_a_share, asks_for_decimals, with_share

LOG = Path(__file__).resolve().parent.parent / "fixtures" / "access.log"
_REQUEST = re.compile(r'"(\S+) \S+ [^"]*" (\d{3}) ')


@pytest.mark.parametrize(
    "question",
    [
        "What percentage of POST requests failed?",
        "What percent of the lines are warnings?",
        "Which proportion of sessions came from 10.0.0.1?",
        "What fraction of the jobs ran on the mac queue?",
        "What is the share of HEAD requests, in %?",
    ],
)
def test_words_that_ask_for_a_percentage(question: str) -> None:
    assert asks_a_share(question)


@pytest.mark.parametrize(
    "question",
    [
        "Count the POST lines.",
        "Give the 99th percentile of bytes sent.",
        "Which lines contain '100%'?",  # a line's text, quoted
        "Which user shares the most sessions with root?",
    ],
)
def test_other_questions_ask_for_no_percentage(question: str) -> None:
    assert not asks_a_share(question)


def test_the_decimals_asked_for() -> None:
    assert asks_for_decimals("Which percent? Keep 1 decimal.") == 1
    assert asks_for_decimals("What percent, to three decimals?") == 3
    assert asks_for_decimals("What percent?") == 2


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    described = open_source(str(LOG), cache_dir=str(tmp_path_factory.mktemp("share"))).profile.table
    assert described is not None
    return described


def _requests() -> list[tuple[str, int]]:
    out = []
    for line in LOG.read_text().splitlines():
        m = _REQUEST.search(line)
        if m:
            out.append((m[1], int(m[2])))
    return out


def test_a_count_asked_as_a_percentage_gives_its_shares(table: dict[str, Any]) -> None:
    requests = _requests()
    rows = len(LOG.read_text().splitlines())
    asked = with_share(table, "Of the GET lines, which percentage were 404s, to 3 decimals?")
    both = {"op": "count", "where": [{"column": "method", "cmp": "=", "value": "GET"},
                                     {"column": "status", "cmp": "=", "value": 404}]}  # fmt: skip
    names, [values] = run_typed(both, asked)
    gets = sum(1 for method, _ in requests if method == "GET")
    missing = sum(1 for _, status in requests if status == 404)
    kept = sum(1 for method, status in requests if method == "GET" and status == 404)
    assert names == [
        "count",
        "rows in all",
        "percent of all rows",
        "percent of rows where status = 404",
        "percent of rows where method = 'GET'",
    ]
    expected = (
        kept,
        rows,
        round(100 * kept / rows, 3),
        round(100 * kept / missing, 3),
        round(100 * kept / gets, 3),
    )
    assert values == pytest.approx(expected)
    # one condition: its share of the table only; not asked: the count alone
    names, [values] = run_typed({"op": "count", "where": [both["where"][1]]}, asked)
    assert names == ["count", "rows in all", "percent of all rows"]
    assert values == pytest.approx((missing, rows, round(100 * missing / rows, 3)))
    assert run_typed(both, table) == (["count"], [(kept,)])


def test_the_cli_answers_a_percentage_from_the_querys_own_output(tmp_path: Path) -> None:
    """Through the CLI and the real worker, --strict: the model counts the 404s, the query also
    prints their share of all lines, and the model's answer, that share, is grounded and printed."""
    requests = _requests()
    rows = len(LOG.read_text().splitlines())
    share = round(100 * sum(1 for _, status in requests if status == 404) / rows, 2)
    action = {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    question = "Which percentage of the log's lines carry a 404 status?"
    proc, stub = ask_typed_once(LOG, question, action, f"{share}", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{share}\n", proc.stderr
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "percent of all rows" in shown and f"{share}" in shown, shown
