"""llm_query and partition_map: child nodes, the depth cap, fan-out, one budget for the tree."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import ask, latest_trace, script_log

from rlm.model.client import load_litellm


def _script(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_small_slice_is_one_plain_sub_call(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "OpenSSH_2k.log"
    script = _script(
        isolated / "s.json",
        {
            "log": "calls.jsonl",
            "replies": [
                {
                    "tool": "llm_query",
                    "args": {"question": "Which user is attacked?", "start_line": 1, "end_line": 5},
                },
                {"tool": "final", "args": {"answer": "root"}},
                "root [F1]",
            ],
            "rules": [{"match": "excerpt of a larger file", "reply": "The user is root."}],
        },
    )
    result = ask(log, "who is attacked?", script)
    assert result.exit_code == 0 and result.answer == "root"
    calls = script_log(isolated / "calls.jsonl")
    sub = [c for c in calls if "excerpt of a larger file" in c["messages"][0]["content"]]
    assert len(sub) == 1
    first_five = log.read_text().splitlines()[:5]
    assert "\n".join(first_five) in sub[0]["messages"][1]["content"]  # the slice, inlined
    trace = latest_trace(isolated)
    assert trace["steps"][0]["observation"]["preview"] == "The user is root."
    assert len(trace["nodes"]) == 1 and trace["subcalls"][0]["slice"] == "lines 1-5"
    assert trace["ledger"][0]["kind"] == "subcall" or any(f["kind"] == "final_draft" for f in trace["ledger"])


def test_large_slice_becomes_child_node_at_depth_1(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "OpenSSH_2k.log"
    lines = log.read_text().splitlines()
    failures = sum(1 for ln in lines[:1500] if "Failed password" in ln)
    script = _script(
        isolated / "s.json",
        {
            "log": "calls.jsonl",
            "replies": [
                {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
                {
                    "tool": "llm_query",
                    "args": {
                        "question": "CHILD-Q: count failed passwords",
                        "start_line": 1,
                        "end_line": 1500,
                    },
                },
                {"tool": "final", "args": {"answer": "see child"}},
                "ROOT ANSWER",
            ],
            "rules": [
                {
                    "match": "final answer to a question[^\\n]*\\nuser: Question: CHILD-Q",
                    "reply": "CHILD ANSWER",
                },
                {
                    "match": "Question: CHILD-Q",
                    "times": 1,
                    "reply": {
                        "tool": "execute",
                        "args": {
                            "code": "print(sum(1 for l in context_lines if 'Failed password' in l), len(context_lines))"
                        },
                    },
                },
                {"match": "Question: CHILD-Q", "reply": {"tool": "final", "args": {"answer": "counted"}}},
            ],
        },
    )
    result = ask(log, "ROOT-Q: how many failures?", script, sub_prompt_tokens=300)
    assert result.exit_code == 0 and result.answer == "ROOT ANSWER"
    trace = latest_trace(isolated)
    nodes = {n["id"]: n for n in trace["nodes"]}
    assert nodes["n1"]["parent"] == "n0" and nodes["n1"]["depth"] == 1
    assert nodes["n1"]["slice"] == {"start_line": 1, "end_line": 1500}
    assert nodes["n1"]["usage"]["calls"] == 3  # two turns and its own synthesis
    child_steps = [s for s in trace["steps"] if s["node"] == "n1"]
    # The child's worker holds only the slice: 1500 lines, and the count over them.
    assert child_steps[0]["observation"]["preview"].strip() == f"{failures} 1500"
    root_steps = [s for s in trace["steps"] if s["node"] == "n0"]
    assert root_steps[1]["observation"]["preview"] == "CHILD ANSWER"
    child_finding = [f for f in trace["ledger"] if f["evidence"] == "n1"]
    assert child_finding and child_finding[0]["node"] == "n0"
    # Isolation: no request of the child carries anything of the parent's conversation.
    child_calls = [
        c
        for c in script_log(isolated / "calls.jsonl")
        if c["messages"][1]["content"].startswith("Question: CHILD-Q")
    ]
    assert len(child_calls) == 3
    for call in child_calls:
        text = json.dumps(call["messages"])
        assert "ROOT-Q" not in text and "print(len(context_lines))" not in text


def test_depth_reaches_three_and_refuses_to_go_deeper(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "HDFS_2k.log"
    rules = [
        {"match": "final answer to a question[^\\n]*\\nuser: Question: (Q\\d)", "reply": "answer of \\1"},
    ]
    # Each level asks the next about a big slice; the depth-3 node is refused.
    for level, (a, b) in enumerate([(1, 1800), (1, 1600), (1, 1400), (1, 1200)]):
        q = f"Q{level + 1}"
        rules.append(
            {
                "match": f"Question: {q}\n",
                "times": 1,
                "reply": {
                    "tool": "llm_query",
                    "args": {"question": f"Q{level + 2}", "start_line": a, "end_line": b},
                },
            }
        )
        rules.append(
            {"match": f"Question: {q}\n", "reply": {"tool": "final", "args": {"answer": f"done {q}"}}}
        )
    script = _script(isolated / "s.json", {"rules": rules})
    result = ask(log, "Q1", script, sub_prompt_tokens=300)
    assert result.exit_code == 0
    trace = latest_trace(isolated)
    depths = {n["id"]: n["depth"] for n in trace["nodes"]}
    assert sorted(depths.values()) == [0, 1, 2, 3]
    deepest = [n["id"] for n in trace["nodes"] if n["depth"] == 3][0]
    refused = [s for s in trace["steps"] if s["node"] == deepest][0]["observation"]["preview"]
    assert "cannot start a deeper investigation" in refused and "narrow it" in refused
    assert result.answer == "answer of Q1"


def test_max_depth_flag_lowers_the_cap(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "HDFS_2k.log"
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "llm_query", "args": {"question": "big", "start_line": 1, "end_line": 2000}},
                {"tool": "final", "args": {"answer": "no"}},
                "no",
            ]
        },
    )
    ask(log, "q", script, sub_prompt_tokens=300, max_depth=0)
    first = latest_trace(isolated)["steps"][0]["observation"]["preview"]
    assert first.startswith("error: this slice is about") and "the depth limit is 0" in first


def test_partition_map_32_chunks_one_failing_rest_in_order(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Zookeeper_2k.log"  # 2,000 lines: 32 chunks of 63 lines
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "partition_map", "args": {"question": "which lines?", "chunk_lines": 63}},
                {
                    "tool": "execute",
                    "args": {
                        "code": "print(len(results)); print(results[0]); print(results[30]); print(results[31])"
                    },
                },
                {"tool": "final", "args": {"answer": "ok"}},
                "ok",
            ],
            "rules": [
                {
                    "match": "Excerpt \\(lines 1,891-",
                    "reply": {"error": "bad_request", "message": "chunk refused"},
                },
                {"match": "Excerpt \\(lines ([\\d,]+)-([\\d,]+)\\)", "reply": "saw \\1 to \\2"},
            ],
        },
    )
    result = ask(log, "q", script, concurrency=8)
    assert result.exit_code == 0
    trace = latest_trace(isolated)
    steps = trace["steps"]
    # the user is told a chunk has no answer, not only the model
    told = [w for w in trace["warnings"] if w.startswith("partition_map of n0:")]
    assert len(told) == 1 and "chunk refused" in told[0], trace["warnings"]
    assert told[0].startswith("partition_map of n0: 1 of 32 chunks have no answer (lines 1,891-1,953: ")
    obs = steps[0]["observation"]["preview"]
    assert obs.startswith("32 chunks; answers in chunk order")
    assert "[1] lines 1-63: saw 1 to 63" in obs
    assert "[31] lines 1,891-1,953: [error]" in obs and "chunk refused" in obs
    assert steps[1]["observation"]["preview"].splitlines() == [
        "32",
        "saw 1 to 63",
        f"[error] lines 1,891-1,953: {_err_text(obs)}",
        "saw 1,954 to 2,000",
    ]


def _err_text(obs: str) -> str:
    line = [ln for ln in obs.splitlines() if ln.startswith("[31]")][0]
    return line.split("[error] lines 1,891-1,953: ", 1)[1]


def test_partition_map_from_code_sets_results(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Zookeeper_2k.log"
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {
                    "tool": "execute",
                    "args": {
                        "code": "r = partition_map('n?', chunk_lines=50)\nprint(len(r), r[-1], results == r)"
                    },
                },
                {"tool": "final", "args": {"answer": "ok"}},
                "ok",
            ],
            "rules": [{"match": "Excerpt \\(lines ([\\d,]+)-", "reply": "from \\1"}],
        },
    )
    ask(log, "q", script)
    assert latest_trace(isolated)["steps"][0]["observation"]["preview"].strip() == "40 from 1,951 True"


def test_fan_out_larger_than_budget_is_refused_before_spending(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Zookeeper_2k.log"
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "partition_map", "args": {"question": "q", "chunk_lines": 50}},
                {"tool": "final", "args": {"answer": "stopped"}},
                "stopped",
            ],
            "rules": [{"match": "Excerpt", "reply": "x"}],
        },
    )
    result = ask(log, "q", script, max_calls=20)
    trace = latest_trace(isolated)
    assert trace["subcalls"] == []
    assert "needs 40 sub-calls" in trace["steps"][0]["observation"]["preview"]
    assert result.usage["calls"] == 3


def test_budget_stop_mid_fan_out_spends_no_more_than_reserved(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Zookeeper_2k.log"
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
                {"tool": "partition_map", "args": {"question": "q", "chunk_lines": 63}},
            ],
            "rules": [
                {"match": "final answer to a question", "reply": "2000 lines [F1]"},
                {"match": "Excerpt", "reply": {"content": "x", "delay": 1.0}},
            ],
        },
    )
    # 32 chunks, 4 at a time, 1 s each: the fan-out needs 8 s and is stopped at 6 s; its first
    # calls end in time even when the worker's start and the first step take 4 s on a busy machine.
    # litellm is imported first: its import (seconds, 15 on a loaded machine) is not measured here.
    load_litellm()
    result = ask(log, "q", script, concurrency=4, max_time=6.0)
    assert result.exit_code == 6 and result.status == "budget"
    assert "time limit" in result.message
    assert result.answer == "2000 lines"  # the partial answer from what was established
    trace = latest_trace(isolated)
    made = len(trace["subcalls"])
    assert 0 < made < 32  # the fan-out was cut short, and never past its reservation
    assert trace["status"] == "budget" and trace["exit_code"] == 6
    assert trace["totals"]["calls"] == 2 + made + 1


def test_sub_model_is_used_for_sub_calls(isolated: Path, real_data: Path) -> None:
    log = real_data / "loghub" / "Zookeeper_2k.log"
    sub = _script(isolated / "sub.json", {"log": "sub.jsonl", "default": "from the sub-model"})
    script = _script(
        isolated / "s.json",
        {
            "replies": [
                {"tool": "llm_query", "args": {"question": "what?", "start_line": 1, "end_line": 3}},
                {"tool": "final", "args": {"answer": "ok"}},
                "ok",
            ]
        },
    )
    ask(log, "q", script, sub_model=f"scripted/{sub}")
    assert latest_trace(isolated)["steps"][0]["observation"]["preview"] == "from the sub-model"
    assert len(script_log(isolated / "sub.jsonl")) == 1
    assert re.search(r"scripted/.*sub\.json", json.dumps(latest_trace(isolated)["models"]))
