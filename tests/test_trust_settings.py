"""Settings are validated, and redaction protects the environment's secrets, not the user's data.

Every bad value (an RLM_* variable or the config file) is one line on stderr and a
documented exit code (2 for a variable, 4 for the config file), never a traceback and
never a run under a nonsense limit. A value the user's file holds that merely looks like
a key (a signed URL's `?sig=`, an access key id) is the answer when asked for; the keys
of the environment (provider variables, --api-key, credentials in --api-base) are masked
wherever rlm writes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli, write_script

SIGNED = "/files/report.pdf?sig=abc123def456"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
ENV_KEY = "sk-test-0123456789abcdefXYZ"
URL_PASSWORD = "hunter2-secret-pw"
URL_KEY = "azurekey123456789"


def _log(path: Path) -> None:
    lines = []
    for i in range(300):
        where = SIGNED if i % 3 == 0 else f"/files/doc{i % 7}.txt"
        lines.append(
            f'10.0.0.{i % 9} - - [01/Mar/2026:10:{i % 60:02d}:00 +0000] "GET {where} HTTP/1.1" 200 {500 + i}'
        )
    lines.insert(100, f"# backup credentials: aws_access_key_id = {KEY_ID}")
    path.write_text("\n".join(lines) + "\n")


def _answering(tmp_path: Path, answer: str, name: str = "s.json") -> str:
    return write_script(
        tmp_path / name,
        [
            {"tool": "grep", "args": {"pattern": "sig=|aws_access", "max_matches": 3}},
            {"tool": "final", "args": {"answer": answer}},
            answer,
        ],
    )


@pytest.mark.parametrize(
    "name, value",
    [
        ("RLM_CELL_TIMEOUT", "nan"),
        ("RLM_CELL_TIMEOUT", "inf"),
        ("RLM_MAX_TIME", "-inf"),
        ("RLM_MAX_STEPS", "2.5"),
        ("RLM_MEMORY_HEADROOM_MB", "0"),
        ("RLM_TEMPERATURE", "-1"),
        ("RLM_TRACE", "maybe"),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2(tmp_path: Path, name: str, value: str) -> None:
    data = tmp_path / "access.log"
    _log(data)
    model = _answering(tmp_path, SIGNED)
    proc = run_cli(
        ["ask", str(data), "which path was requested most?", "-m", model], cwd=tmp_path, env={name: value}
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"rlm: {name} must be ") and repr(value) in proc.stderr


@pytest.mark.parametrize(
    "line, name",
    [
        ("cell_timeout = nan", "cell_timeout"),
        ("max_time = inf", "max_time"),
        ("max_steps = 2.5", "max_steps"),
        ("memory_headroom_mb = -1", "memory_headroom_mb"),
        ('cache_dir = { where = "." }', "cache_dir"),
        ("no_memory = 1", "no_memory"),
    ],
)
def test_a_bad_config_value_is_one_line_and_exit_4(tmp_path: Path, line: str, name: str) -> None:
    data = tmp_path / "access.log"
    _log(data)
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    model = _answering(tmp_path, SIGNED)
    proc = run_cli(
        ["ask", str(data), "which path was requested most?", "-m", model],
        cwd=tmp_path,
        env={"RLM_CONFIG": str(config)},
    )
    assert proc.returncode == 4, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"rlm: config file {config}: {name} must be "), proc.stderr


def test_values_that_look_like_keys_in_the_file_are_the_answer(tmp_path: Path) -> None:
    data = tmp_path / "access.log"
    _log(data)
    for question, answer in (
        ("which path was requested most?", SIGNED),
        ("which access key id is in the file?", KEY_ID),
    ):
        model = _answering(tmp_path, answer)
        proc = run_cli(["ask", str(data), question, "-m", model], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == answer + "\n"
    traces = sorted((tmp_path / "traces").glob("*.json"))
    assert [json.loads(t.read_text())["answer"] for t in traces] == [SIGNED, KEY_ID]


def test_the_environments_keys_are_masked_wherever_rlm_writes(tmp_path: Path) -> None:
    """A provider key from the environment and the credentials in --api-base, echoed by the
    model (in a reply, a cell, a finding it cites), reach neither stdout, the trace (whose
    api_base is recorded without them) nor the memory."""
    data = tmp_path / "access.log"
    _log(data)
    echoed = f"{ENV_KEY} {URL_PASSWORD} {URL_KEY}"
    model = write_script(
        tmp_path / "s.json",
        [
            {"content": f"I was given {echoed}", "tool": "grep", "args": {"pattern": "aws_access"}},
            {"tool": "execute", "args": {"code": f"note('given {echoed}')\nprint('{echoed}')"}},
            {"tool": "final", "args": {"answer": echoed}},
            json.dumps({"answer": echoed, "citations": ["F1", "F2", "F3"]}),
        ],
    )
    base = f"http://bob:{URL_PASSWORD}@127.0.0.1:9/v1?api-key={URL_KEY}"
    memory = tmp_path / "memory.sqlite3"
    proc = run_cli(
        ["ask", str(data), f"what key were you given? not {ENV_KEY}", "-m", model, "--api-base", base],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": ENV_KEY, "RLM_MEMORY": str(memory)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[REDACTED] [REDACTED] [REDACTED]\n"
    trace = next((tmp_path / "traces").glob("*.json")).read_text()
    with sqlite3.connect(memory) as db:
        remembered = db.execute("SELECT question, text, evidence FROM memories").fetchall()
    assert len(remembered) >= 2 and any("given [REDACTED]" in row[1] for row in remembered)
    for secret in (ENV_KEY, URL_PASSWORD, URL_KEY):
        assert secret not in trace and secret not in proc.stderr
        assert all(secret not in field for row in remembered for field in row)
    doc = json.loads(trace)
    assert doc["settings"]["api_base"] == "http://127.0.0.1:9/v1?api-key=[REDACTED]"
    assert doc["answer"] == "[REDACTED] [REDACTED] [REDACTED]"
