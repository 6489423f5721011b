"""Unit tests of the pieces the loop is made of: actions, ledger, budget, caps, compaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ask, script_log

from rlm.model.budget import Budget, BudgetExceeded
from rlm.run.actions import Action, ParseError, parse_text, parse_tool_call, tool_schemas
from rlm.run.ledger import Ledger
from rlm.text.textcap import cap_middle, cap_words


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        (
            '```python\ngrep("500", max_matches=5)\n```',
            "grep",
            {"pattern": "500", "max_matches": 5, "ignore_case": False},
        ),
        ("```py\nx = [l for l in context_lines if 'a' in l]\nprint(len(x))\n```", "execute", None),
        ("```repl\npeek(10)\n```", "peek", {"start": 10, "length": 20, "unit": "lines"}),
        ('FINAL("1873")', "final", {"answer": "1873"}),
        ("FINAL(1873 requests)", "final", {"answer": "1873 requests"}),
        ("FINAL ANSWER: 1873", "final", {"answer": "1873"}),
        (
            '<tool_call>\n{"name": "peek", "arguments": {"start": 5, "length": 2}}\n</tool_call>',
            "peek",
            {"start": 5, "length": 2, "unit": "lines"},
        ),
        (
            '```json\n{"action": "grep", "pattern": "x", "ignore_case": "true"}\n```',
            "grep",
            {"pattern": "x", "max_matches": 50, "ignore_case": True},
        ),
        (
            'ACTION: llm_query(question="who?", start_line=1, end_line=9)',
            "llm_query",
            {"question": "who?", "start_line": 1, "end_line": 9, "text": None},
        ),
    ],
)
def test_text_protocol_forms(text: str, name: str, args: dict | None) -> None:
    action = parse_text(text)
    assert isinstance(action, Action) and action.name == name
    if args is not None:
        assert action.args == args


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "your reply was empty; reply with exactly one action"),
        ("I would grep for errors.", "no action found in your reply"),
        ("```python\ngrep()\n```", "missing required argument `pattern` for `grep`"),
        ("```python\npeek(1, 5, unit='bytes')\n```", "`unit` of `peek` must be 'lines' or 'chars'"),
        ("```python\npeek('a', 5)\n```", "argument `start` of `peek` must be integer, got str"),
        ("```python\nfinal('')\n```", "`final` needs a non-empty answer"),
        ('```python\ngrep("x", 5, True, 9)\n```', "`grep` takes at most 3 arguments"),
    ],
)
def test_text_protocol_errors_speak_the_models_language(text: str, message: str) -> None:
    result = parse_text(text)
    assert isinstance(result, ParseError)
    assert result.message.startswith(message)


def test_only_the_first_action_counts() -> None:
    text = '```python\nprint(1)\n```\nResult: 1\n```python\nfinal("1")\n```'
    action = parse_text(text)
    assert isinstance(action, Action) and action.name == "execute"
    assert text[: action.source_end].endswith("print(1)\n```")


def test_tool_call_parsing_and_schemas() -> None:
    assert parse_tool_call("grep", '{"pattern": "x", "max_matches": 9999}').args["max_matches"] == 500
    assert parse_tool_call("execute", "{}").message == "missing required argument `code` for `execute`"
    bad = parse_tool_call("peek", '{"start": 1, "length": 2, "colour": "red"}')
    assert bad.message == "unknown argument `colour` for `peek`; it takes: start, length, unit"
    schemas = {t["function"]["name"]: t["function"] for t in tool_schemas()}
    assert schemas["peek"]["parameters"]["required"] == ["start"]
    assert schemas["grep"]["parameters"]["properties"]["max_matches"]["type"] == "integer"
    assert "1-based" in schemas["peek"]["description"] and "Python `re`" in schemas["grep"]["description"]


def test_ledger_ids_dedup_caps_and_keeps_findings_about_errors() -> None:
    ledger = Ledger()
    a = ledger.add("1873 requests returned 500", kind="result", evidence="n0.s2", node="n0")
    b = ledger.add("  1873 requests   returned 500 ", kind="note", evidence="n0.s3", node="n0")
    assert a is b and a.id == "F1"
    # In a tool for logs, findings about errors are findings: their shape decides nothing.
    shaped_like_errors = [
        "ERROR lines: 1,532",
        "Errors peak at 14:02 (311)",
        "NullPointerException: 12 times",
    ]
    kept = [ledger.add(t, kind="result", evidence="x", node="n0") for t in shaped_like_errors]
    assert [f.text for f in kept if f] == shaped_like_errors
    assert ledger.add("   ", kind="note", evidence="x", node="n0") is None
    long = ledger.add("word " * 400, kind="note", evidence="n0.s4", node="n0")
    assert long.id == "F5" and long.text.endswith("[cut, 1,999 characters in all]")
    assert not long.text.split(" … [cut")[0].endswith("wor")  # cut at a word boundary
    assert ledger.current[0].line().startswith("[F1] (result, n0.s2) 1873 requests returned 500")


def test_caps_keep_head_and_tail_and_state_the_length() -> None:
    text = "\n".join(f"line {i}" for i in range(10_000))
    capped = cap_middle(text, 1000)
    assert len(capped) <= 1000 and capped.startswith("line 0\n") and capped.endswith("line 9999")
    assert f"of {len(text):,} characters cut here" in capped
    assert cap_words("short", 10) == "short"


def test_budget_reserves_fan_out_and_holds_back_synthesis() -> None:
    budget = Budget(max_calls=10, max_tokens=100_000, synthesis_tokens=1000)
    reservation = budget.reserve(5, 5000)
    for _ in range(4):
        budget.admit(900, reservation)  # within the reservation
        budget.charge(900, 10, None)
    outside = 0
    with pytest.raises(BudgetExceeded) as stop:
        while True:
            budget.admit(100)  # outside the reservation
            budget.charge(100, 10, None)
            outside += 1
    # 10 calls: 4 made in the reservation, 1 still held by it, 1 kept for synthesis.
    assert outside == 4
    assert stop.value.limit == "calls"
    budget.release(reservation)
    assert budget.usage.to_dict()["cost_usd"] is None  # unpriced calls: unknown, never $0


def test_budget_refuses_a_fan_out_that_cannot_fit() -> None:
    budget = Budget(max_calls=10, max_tokens=100_000)
    with pytest.raises(BudgetExceeded):
        budget.reserve(20, 1000)
    assert budget.room_for(20, 1000) == 9


def test_old_turns_are_compacted_into_an_established_digest(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Linux_2k.log"
    replies = [{"tool": "execute", "args": {"code": "note('sshd is the noisiest service')"}}]
    replies += [{"tool": "peek", "args": {"start": 1 + 40 * i, "length": 40}} for i in range(6)]
    replies += [{"tool": "final", "args": {"answer": "sshd"}}, "sshd [F1]"]
    script = isolated / "s.json"
    script.write_text(json.dumps({"log": "calls.jsonl", "replies": replies}))
    result = ask(log, "noisiest service?", script, history_tokens=800)
    assert result.answer == "sshd"  # the value alone: the citation mark goes to the citations
    calls = script_log(isolated / "calls.jsonl")
    last_turn = calls[-2]["messages"]
    digest = [m for m in last_turn if m["role"] == "user" and m["content"].startswith("[ESTABLISHED]")]
    assert digest and "sshd is the noisiest service" in digest[0]["content"]
    assert "Earlier turns T1-T" in digest[0]["content"] and "removed to save room" in digest[0]["content"]
    assert len(last_turn) < 2 + 1 + 2 * 7  # old turns are gone
