"""Context routing (rlm.run.routing), through the CLI as users run it: every call kind gets the
payload its spec declares, children and sub-queries are isolated, the question's focus decides
what comes first, what was left out can be recalled within an allowance, and the trace records
every payload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import FIXTURES, run_cli, script_log, write_script

from rlm.run.routing import Router, focus_of

ACCESS = FIXTURES / "access.log"
ROOT_ONLY = "ROOT-ONLY-FACT the parent established"


def _trace(tmp_path: Path) -> dict[str, Any]:
    paths = sorted((tmp_path / "traces").glob("*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(paths[-1].read_text())


def _ask(
    tmp_path: Path, question: str, replies: list[Any], env: dict[str, str] | None = None, log: Path = ACCESS
) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    calls = tmp_path / "calls.jsonl"
    calls.unlink(missing_ok=True)
    model = write_script(tmp_path / "script.json", {"log": str(calls), "replies": replies})
    proc = run_cli(["ask", str(log), question, "-m", model], cwd=tmp_path, env=env)
    return proc, _trace(tmp_path), script_log(calls)


def _prompt(call: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in call["messages"])


def test_each_call_kind_gets_and_records_its_declared_payload(tmp_path: Path) -> None:
    replies = [
        {"tool": "execute", "args": {"code": f"note({ROOT_ONLY!r})"}},
        {"tool": "llm_query", "args": {"question": "Which methods appear?", "start_line": 1, "end_line": 20}},
        {"tool": "final", "args": {"answer": "GET"}},
        json.dumps({"answer": "GET", "explanation": "From the helper.", "citations": ["F2"]}),
    ]
    # The sub-query is the second call: the helper's reply comes between the root's turns.
    replies.insert(2, "Only GET appears in lines 1-20.")
    proc, trace, calls = _ask(tmp_path, "Which HTTP methods appear?", replies)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "GET\n"

    turns = [s["model_call"]["context"] for s in trace["steps"]]
    assert [c["kind"] for c in turns] == ["root_turn"] * 3
    assert turns[0]["included"] == [] and turns[2]["included"] == ["T1", "T2"]  # recent turns, verbatim
    assert turns[2]["budget"] > 0 and turns[2]["whole"]["task"] > 0

    (sub,) = trace["subcalls"]
    assert sub["context"]["kind"] == "subquery"
    assert sub["context"]["included"] == [] and sub["context"]["whole"]["excerpt"] > 100
    sub_prompt = _prompt(calls[2])
    assert "Which methods appear?" in sub_prompt and ROOT_ONLY not in sub_prompt  # isolated
    assert "Question: Which HTTP methods appear?" not in sub_prompt  # not even the root's question

    payload = trace["synthesis"]["payload"]
    assert payload["kind"] == "synthesis" and set(payload["allotted"]) == {
        "findings",
        "memories",
        "observations",
    }
    assert {"F1", "F2"} <= set(payload["included"])
    assert ROOT_ONLY in _prompt(calls[-1])


def test_a_child_investigation_is_isolated_from_its_parent_and_from_memory(tmp_path: Path) -> None:
    # Run 1 leaves a memory of this file; run 2's root is offered it, its child is not.
    first = [
        {
            "tool": "execute",
            "args": {"code": 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'},
        },
        {"tool": "final", "args": {"answer": "35"}},
        json.dumps({"answer": "35", "explanation": "SQL.", "citations": ["F1"]}),
    ]
    proc, trace, _ = _ask(tmp_path, "How many 404 responses?", first)
    assert proc.returncode == 0 and trace["memory"]["stored"] == ["M1"], proc.stderr

    second = [
        {"tool": "execute", "args": {"code": f"note({ROOT_ONLY!r})"}},
        {"tool": "llm_query", "args": {"question": "CHILD-Q: which IPs?", "start_line": 1, "end_line": 120}},
        {"tool": "peek", "args": {"start": 1, "length": 3}},  # the child's first turn
        {"tool": "final", "args": {"answer": "a few"}},
        json.dumps({"answer": "a few IPs", "explanation": "Seen.", "citations": []}),  # the child's synthesis
        {"tool": "final", "args": {"answer": "a few IPs"}},
        json.dumps({"answer": "a few IPs", "explanation": "From the child.", "citations": ["F2"]}),
    ]
    proc, trace, calls = _ask(
        tmp_path, "Which client IPs made 404 requests?", second, env={"RLM_SUB_PROMPT_TOKENS": "300"}
    )
    assert proc.returncode == 0, proc.stderr
    root_prompt, child_prompts = _prompt(calls[0]), [_prompt(c) for c in calls[2:5]]
    assert "[ESTABLISHED earlier]" in root_prompt and "[M1]" in root_prompt
    for prompt in child_prompts:
        assert "CHILD-Q" in prompt
        assert ROOT_ONLY not in prompt and "[ESTABLISHED earlier]" not in prompt and "[M1]" not in prompt
    child = [s for s in trace["steps"] if s["node"] != "n0"]
    assert child and {s["model_call"]["context"]["kind"] for s in child} == {"child_turn"}
    root = [s for s in trace["steps"] if s["node"] == "n0"]
    assert {s["model_call"]["context"]["kind"] for s in root} == {"root_turn"}
    assert "M1" in root[0]["model_call"]["context"]["included"]
    assert "memories" in root[0]["model_call"]["context"]["allotted"]
    assert all("memories" not in s["model_call"]["context"]["allotted"] for s in child)
    (child_node,) = [n for n in trace["nodes"] if n["id"] != "n0"]
    child_synthesis = child_node["synthesis_payload"]
    assert child_synthesis["kind"] == "synthesis"
    assert not {"F1", "M1"} & set(child_synthesis["included"])  # the parent's note, the memory


def test_what_was_left_out_can_be_recalled_until_the_allowance_is_spent(tmp_path: Path) -> None:
    log = FIXTURES / "data" / "loghub" / "Linux_2k.log"
    replies: list[Any] = [
        {"tool": "execute", "args": {"code": "note('MARKER: sshd is the noisiest service')"}}
    ]
    replies += [{"tool": "peek", "args": {"start": 1 + 40 * i, "length": 40}} for i in range(6)]
    replies += [
        {"tool": "execute", "args": {"code": 'print(recall("F99"))'}},
        {"tool": "execute", "args": {"code": 'print(recall("F1"))'}},
        {"tool": "execute", "args": {"code": 'print(recall("T2"))'}},
        {"tool": "execute", "args": {"code": 'print(recall("T3"))'}},
        {"tool": "final", "args": {"answer": "sshd"}},
        json.dumps({"answer": "sshd", "explanation": "Noted.", "citations": ["F1"]}),
    ]
    proc, trace, _ = _ask(
        tmp_path, "Which service is the noisiest?", replies, env={"RLM_HISTORY_TOKENS": "800"}, log=log
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sshd\n"
    obs = {s["index"]: s["observation"] for s in trace["steps"]}
    assert not obs[8]["ok"] and "there is no 'F99' this investigation can see" in obs[8]["preview"]
    # F1 was made in a dropped turn: the [ESTABLISHED] block shows it, so it is in view, free.
    assert obs[9]["ok"] and "(already in view)" in obs[9]["preview"] and "MARKER" in obs[9]["preview"]
    # A dropped turn comes back whole or cut to what is left of the allowance (half of 800 tokens).
    assert obs[10]["ok"] and obs[10]["preview"].startswith("[T2] ") and "peek" in obs[10]["preview"]
    assert not obs[11]["ok"] and "the recall budget of this investigation is spent" in obs[11]["preview"]
    context = trace["steps"][10]["model_call"]["context"]  # step 11's prompt
    assert {"id": "T1", "why": "over the turns budget"} in context["excluded"]
    assert "F1" in context["included"]
    recalls = [c for c in trace["bridge_calls"] if c["name"] == "recall"]
    assert [c["args"]["ref"] for c in recalls] == ["F99", "F1", "T2", "T3"]
    assert "error" in recalls[0] and "result" in recalls[2] and "error" in recalls[3]


def test_the_questions_focus_decides_what_the_synthesis_puts_first(tmp_path: Path) -> None:
    notes = [
        "note('ERROR lines peaked at 14:02 with 311 in that minute')",
        "note('ERROR lines in all: 1532, from 10.0.0.7 mostly')",
    ]

    def run(question: str) -> dict[str, Any]:
        replies: list[Any] = [{"tool": "execute", "args": {"code": code}} for code in notes]
        replies += [
            {"tool": "final", "args": {"answer": "see findings"}},
            json.dumps({"answer": "311", "explanation": "Noted.", "citations": ["F1"]}),
        ]
        proc, trace, _ = _ask(tmp_path, question, replies)
        assert proc.returncode == 0, proc.stderr
        payload = trace["synthesis"]["payload"]
        ids = {f["text"].split(":")[0]: f["id"] for f in trace["ledger"] if f["kind"] == "note"}
        return {"payload": payload, "ids": ids}

    timed = run("How many ERROR lines were there per minute after 14:00?")
    assert timed["payload"]["focus"]["time"] is True
    assert timed["payload"]["top"] == timed["ids"]["ERROR lines peaked at 14"]
    plain = run("How many ERROR lines are there?")
    assert plain["payload"]["focus"] == {"time": False, "entities": ["error"]}  # both name it: a tie
    assert plain["payload"]["top"] == plain["ids"]["ERROR lines in all"]  # the latest settled finding
    named = run("How many lines came from 10.0.0.7?")
    assert "10.0.0.7" in named["payload"]["focus"]["entities"]
    assert named["payload"]["top"] == named["ids"]["ERROR lines in all"]


def test_focus_widens_the_share_of_what_was_established() -> None:
    # The policy itself, for the cases the CLI tests above do not reach: a focused question gives
    # findings more of the budget and ranks matching items first.
    assert focus_of("how many 500s after 14:02").time
    assert focus_of("requests per hour").time
    assert not focus_of("how many requests returned 404").time
    assert "404" in focus_of("how many requests returned 404").entities
    plain, timed = (
        Router("root_turn", "how many requests", 1000),
        Router("root_turn", "requests per hour", 1000),
    )
    needs = {"findings": 1000, "turns": 1000}
    assert timed.allotments(needs)["findings"] > plain.allotments(needs)["findings"]
    items = timed.items([("F1", "total 4,000 requests", 3.0), ("F2", "peak hour 14:00 with 300", 3.0)])
    assert max(items, key=lambda i: i.priority).id == "F2"
