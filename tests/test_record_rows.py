"""`SELECT count(*) FROM log` counts records: a CSV's header line and a JSON-lines file's blank
lines are no rows of `log` (they stay in context_lines and `log_lines`), and the profile the
model reads says so. Through the CLI over real HTTP, the real worker, default settings."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from conftest import DATA, latest_trace, run_cli
from openai_stub import OpenAIStub


def _count_rows(tmp_path: Path, path: Path) -> tuple[list[str], str]:
    """What sql()'s count and len(context_lines) printed, and the first prompt's task message."""
    replies = [
        {"tool": "execute", "args": {"code": 'print(sql("SELECT count(*) FROM log")[0][0])'}},
        {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
        {"tool": "final", "args": {"answer": "counted"}},
        json.dumps({"answer": "counted", "citations": ["F1"]}),
    ]
    with OpenAIStub(replies) as stub:
        proc = run_cli(
            ["ask", str(path), "how many records?", "-m", "openai/stub", "--api-base", stub.api_base]
            + ["--protocol", "tools"],
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr
    steps = latest_trace(tmp_path)["steps"]
    printed = [s["observation"]["preview"].strip() for s in steps[:2]]
    return printed, stub.requests[0]["body"]["messages"][1]["content"]


def test_a_csv_header_is_not_a_row(tmp_path: Path) -> None:
    path = DATA / "seaborn" / "taxis.csv"
    with open(path, newline="") as fh:
        records = sum(1 for _ in csv.DictReader(fh))
    lines = len(path.read_text().splitlines())
    printed, task = _count_rows(tmp_path, path)
    assert printed == [str(records), str(lines)] and lines == records + 1
    assert "a row is a record, not rows: line 1 (the header)" in task  # the model is told


def test_blank_json_lines_are_not_rows(tmp_path: Path) -> None:
    source = (DATA / "elastic" / "nginxplus_json_logs").read_text().splitlines()[:300]
    with_blanks = [*source[:100], "", *source[100:200], "   ", *source[200:], ""]
    path = tmp_path / "status.jsonl"
    path.write_text("\n".join(with_blanks) + "\n")
    printed, task = _count_rows(tmp_path, path)
    assert printed == ["300", str(len(with_blanks))]
    assert "not rows: 3 blank lines" in task
