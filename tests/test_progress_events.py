"""The run's progress events: every event a sink is handed is one of the declared kinds with
its declared fields, and `--jsonl` writes each with exactly those fields."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import DATA, cli_env, write_script

TESTS = Path(__file__).parent
# The events a run says of itself through --jsonl, beside those of the run's stream.
COMMAND_EVENTS = {"start", "answer", "summary", "error"}


def _watched_run(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """A scripted run that retries, waits on a slow reply, restarts its sandbox, starts a child
    node and a fan-out of them, with --jsonl; and every event its sinks were handed."""
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {
                    "tool": "execute",
                    "args": {"code": "print(len(context_lines))"},
                    "error": "rate_limit",
                    "error_times": 1,
                },
                {
                    "tool": "execute",
                    "args": {
                        "code": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
                    },
                },
                {
                    "tool": "llm_query",
                    "args": {"question": "CHILD-Q: count", "start_line": 1, "end_line": 1500},
                },
                {"tool": "partition_map", "args": {"question": "PM-Q which?", "chunk_lines": 1000}},
                {"tool": "grep", "args": {"pattern": "Failed password"}, "delay": 5.5},
                {"tool": "final", "args": {"answer": "2000"}},
                "2000",
            ],
            "rules": [
                {
                    "match": "final answer to a question[^\\n]*\\nuser: Question: (CHILD-Q|PM-Q)",
                    "reply": "CHILD ANSWER",
                },
                {
                    "match": "Question: (CHILD-Q|PM-Q)",
                    "times": 3,
                    "reply": {"tool": "execute", "args": {"code": "print(7)"}},
                },
                {
                    "match": "Question: (CHILD-Q|PM-Q)",
                    "reply": {"tool": "final", "args": {"answer": "counted"}},
                },
            ],
        },
    )
    log = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            str(TESTS / "event_probe.py"),
            str(log),
            "ask",
            str(DATA / "loghub" / "OpenSSH_2k.log"),
            "how many lines?",
            "-m",
            model,
            "--jsonl",
            "--timeout",
            "2",
            "--max-cost",
            "1",
            "--concurrency",
            "1",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path, {"RLM_SUB_PROMPT_TOKENS": "300"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, seen


def test_every_event_the_sinks_receive_is_declared_with_its_fields(tmp_path: Path) -> None:
    from rlm.run.events import KINDS

    proc, seen = _watched_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [e for e in seen if e["problems"]] == []
    # Both sinks are handed the same stream, and the run told every kind it has.
    by_sink = {
        sink: [e["event"] for e in seen if e["sink"] == sink] for sink in ("StderrReporter", "JsonlEvents")
    }
    assert by_sink["StderrReporter"] == by_sink["JsonlEvents"]
    told = set(by_sink["JsonlEvents"])
    assert {"phase", "step", "finding", "node", "fanout", "restart", "retry", "waiting", "warning"} <= told

    # Each --jsonl line of a run's event has exactly the fields declared for it, in their order
    # (fanout's `children` only when true), and a line of any other kind is the command's own.
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["event"] == "start" and [e["event"] for e in lines[-2:]] == ["answer", "summary"]
    for line in lines:
        kind = line["event"]
        assert kind in KINDS or kind in COMMAND_EVENTS, kind
        if kind in KINDS and kind != "step":
            declared = [f.name for f in dataclasses.fields(KINDS[kind])]
            if kind == "fanout" and "children" not in line:
                declared.remove("children")
            assert list(line)[3:] == declared, line
