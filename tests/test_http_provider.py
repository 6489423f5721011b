"""The loop over real HTTP: litellm's `openai/<name>` against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import latest_trace, run_cli
from openai_stub import OpenAIStub


def test_native_tool_calls_over_http(tmp_path: Path, apache_log: Path) -> None:
    """--protocol tools against a local server: litellm sends tools=."""
    total = sum(1 for line in apache_log.read_text().splitlines() if "Googlebot" in line)
    replies = [
        {"tool": "grep", "args": {"pattern": "Googlebot", "max_matches": 2}},
        {"tool": "final", "args": {"answer": f"{total} Googlebot requests"}},
        f"{total} requests came from Googlebot [F1].",
    ]
    with OpenAIStub(replies) as stub:
        proc = run_cli(
            [
                "ask",
                str(apache_log),
                "how many requests from Googlebot?",
                "-m",
                "openai/stub",
                "--api-base",
                stub.api_base,
                "--protocol",
                "tools",
            ],
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{total} requests came from Googlebot."
    first = stub.requests[0]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "peek",
        "grep",
        "execute",
        "llm_query",
        "partition_map",
        "final",
    ]
    second = stub.requests[1]["body"]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "grep"
    # the result comes framed as data (rlm.run.framing), opening with what grep found
    assert second[-1]["role"] == "tool" and re.match(
        rf"<data-[a-z]+>\n{total:,} lines match /Googlebot/", second[-1]["content"]
    )
    synthesis = stub.requests[2]["body"]
    assert "tools" not in synthesis  # synthesis never offers tools
    # ... and asks for JSON mode, which OpenAI-compatible servers (llama.cpp's too) honour
    assert synthesis["response_format"] == {"type": "json_object"}
    assert all("response_format" not in r["body"] for r in stub.requests[:2])  # the loop's turns do not
    # litellm's own flags (the MCP look it is told to skip) stay with litellm: the server gets the
    # request's fields alone
    assert all(not any(k.startswith("_") for k in r["body"]) for r in stub.requests)
    assert latest_trace(tmp_path)["status"] == "final"


def test_text_protocol_is_auto_for_a_local_server(tmp_path: Path, apache_log: Path) -> None:
    replies = [
        "Let me count.\n```python\nprint(len(context_lines))\n```",
        '```python\nfinal("10000 lines")\n```',
        "10000 lines [F1]",
    ]
    with OpenAIStub(replies) as stub:
        proc = run_cli(
            [
                "ask",
                str(apache_log),
                "lines?",
                "-m",
                "openai/stub",
                "--api-base",
                stub.api_base,
                "--json",
                "-q",
            ],
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "10000 lines"
    assert all("tools" not in r["body"] for r in stub.requests)
    observation = stub.requests[1]["body"]["messages"][-1]
    assert observation["role"] == "user" and re.match(r"<data-[a-z]+>\n?10000", observation["content"])


def test_server_errors_are_retried_then_reported(tmp_path: Path, apache_log: Path) -> None:
    replies = [
        {"status": 503, "message": "busy"},
        {"status": 429, "message": "slow down"},
        "```python\nprint(len(context_lines))\n```",
        'FINAL("10000")',
        "10000 [F1]",
    ]
    with OpenAIStub(replies) as stub:
        ok = run_cli(
            ["ask", str(apache_log), "lines?", "-m", "openai/stub", "--api-base", stub.api_base], cwd=tmp_path
        )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "10000" and len(stub.requests) == 5
    with OpenAIStub([], default={"status": 500, "message": "broken"}) as stub:
        bad = run_cli(
            ["ask", str(apache_log), "lines?", "-m", "openai/stub", "--api-base", stub.api_base],
            cwd=tmp_path,
            env={"RLM_RETRIES": "2"},
        )
    assert bad.returncode == 5 and bad.stdout == ""
    assert "broken" in bad.stderr and "Traceback" not in bad.stderr
    assert len(stub.requests) == 3  # one try and two retries
