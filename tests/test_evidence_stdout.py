"""stdout is a value or nothing: a run with no synthesised answer and no draft prints nothing
(what it established goes to stderr and --json), and an answer a note states is not taken for code.
Through the CLI with the scripted model on the real access log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import FIXTURES, latest_trace, run_cli, write_script

ACCESS = FIXTURES / "access.log"
COUNT = "print(len(context_lines))"
# Matched in the synthesis call only (its system prompt), whatever step the loop stopped at.
SYNTHESIS = "final answer to a question"
# A synthesis reply the check refuses: a figure found in no finding.
MADE_UP = json.dumps({"answer": "7654321", "explanation": "Summed.", "citations": ["F1"]})


def _ask(tmp_path: Path, replies: list[Any], synthesis: Any, *flags: str) -> Any:
    script = {
        "replies": replies,
        "rules": [{"match": SYNTHESIS, "reply": synthesis}],
        "default": {"tool": "execute", "args": {"code": COUNT}},
    }
    model = write_script(tmp_path / "s.json", script)
    return run_cli(["ask", str(ACCESS), "how many lines?", "-m", model, *flags], cwd=tmp_path)


def test_a_refused_synthesis_without_a_draft_prints_nothing_and_exits_1(tmp_path: Path) -> None:
    replies = [{"tool": "execute", "args": {"code": COUNT}}]
    proc = _ask(tmp_path, replies, MADE_UP, "--max-steps", "1")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    # The message says why and what was established, framed as no answer.
    assert "7654321, found in no finding" in proc.stderr
    assert "established so far (not an answer)" in proc.stderr
    assert "2000" in proc.stderr and "[F1]" in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "no_answer" and trace["exit_code"] == 1
    assert trace["synthesis"]["source"] == "findings" and trace["synthesis"]["answer"] is None

    again = tmp_path / "json"
    again.mkdir()
    proc = _ask(again, replies, "", "--max-steps", "1", "--json")  # an empty reply: no answer either
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] is None and doc["exit_code"] == 1 and doc["status"] == "no_answer"
    assert "2000" in doc["findings"][0]["text"]
    assert "established so far" in doc["message"] and "2000" in doc["message"]


def test_a_refused_synthesis_with_a_draft_prints_the_draft_alone(tmp_path: Path) -> None:
    replies = [
        {"tool": "execute", "args": {"code": COUNT}},
        {"tool": "final", "args": {"answer": "2000"}},
    ]
    proc = _ask(tmp_path, replies, MADE_UP)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2000\n"
    trace = latest_trace(tmp_path)
    assert trace["status"] == "partial" and trace["synthesis"]["source"] == "draft"


def test_a_budget_stop_without_a_draft_or_a_synthesis_prints_nothing_and_exits_6(tmp_path: Path) -> None:
    proc = _ask(tmp_path, [], "", "--max-calls", "3")
    assert proc.returncode == 6, proc.stderr
    assert proc.stdout == ""
    assert "limit" in proc.stderr and "established so far" in proc.stderr and "2000" in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "budget" and trace["exit_code"] == 6
    assert trace["synthesis"]["answer"] is None


def test_an_answer_a_note_states_is_not_taken_for_the_code(tmp_path: Path) -> None:
    """The cell's code holds the note's words as a string; the note itself is a finding that says them."""
    code = 'note("the log shows 17 deploys")\nprint(len(context_lines))'
    reply = json.dumps({"answer": "17 deploys", "explanation": "The note.", "citations": ["F1"]})
    proc = _ask(tmp_path, [{"tool": "execute", "args": {"code": code}}], reply, "--max-steps", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "17 deploys\n"
    trace = latest_trace(tmp_path)
    assert trace["synthesis"]["source"] == "synthesis" and trace["synthesis"]["citations"] == ["F1"]
    assert trace["ledger"][0] == {**trace["ledger"][0], "kind": "note", "text": "the log shows 17 deploys"}
