"""The trace on disk: crash safety, Ctrl-C, secrets, and its size bound."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import ROOT, cli_env, latest_trace, run_cli, write_script

from rlm.trace.reader import read_raw


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rlm", *args],
        cwd=cwd,
        env=cli_env(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_steps(directory: Path, n: int, proc: subprocess.Popen[str], timeout: float = 90) -> Path:
    """The trace once it records `n` steps: its document's name (while the run goes, the trace
    is the event log beside it, `<run_id>.jsonl`, which readers fold)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        files = sorted(directory.glob("*.jsonl"))
        if files:
            doc = read_raw(files[-1])
            if len(doc["steps"]) >= n:
                return files[-1].with_suffix(".json")
        time.sleep(0.05)
    raise AssertionError(f"no trace with {n} steps after {timeout} s")


def _slow_script(tmp_path: Path) -> str:
    return write_script(
        tmp_path / "s.json",
        [
            {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 3}},
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}, "delay": 60},
            {"tool": "final", "args": {"answer": "never reached"}},
            "never reached",
        ],
    )


def test_sigkill_mid_run_leaves_a_trace_replay_reads_as_crashed(tmp_path: Path, apache_log: Path) -> None:
    proc = _start(["ask", str(apache_log), "how many 404s?", "-m", _slow_script(tmp_path), "-q"], tmp_path)
    try:
        path = _wait_for_steps(tmp_path / "traces", 1, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not path.exists()  # killed: the event log is the trace
    raw = read_raw(path)
    assert raw["status"] == "running" and raw["finished_at"] is None
    shown = run_cli(["replay", str(path)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "crashed" in shown.stdout and "did not finish" in shown.stdout
    assert "n0.1 grep" in shown.stdout
    as_json = json.loads(run_cli(["replay", str(path), "--json"], cwd=tmp_path).stdout)
    assert as_json["status"] == "crashed"
    assert [s["action"] for s in as_json["steps"]] == ["grep"]
    # The preview the run saw is there, whole: the first grep line's count.
    expected = sum(1 for line in apache_log.read_text().splitlines() if '" 404 ' in line)
    assert as_json["steps"][0]["observation"]["preview"].startswith(f"{expected} lines match")


def test_ctrl_c_leaves_status_interrupted_and_exit_130(tmp_path: Path, apache_log: Path) -> None:
    proc = _start(["ask", str(apache_log), "how many 404s?", "-m", _slow_script(tmp_path)], tmp_path)
    try:
        path = _wait_for_steps(tmp_path / "traces", 1, proc)
        time.sleep(0.3)  # into the slow model call
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert out == ""
    assert "interrupted" in err and "Traceback" not in err
    doc = json.loads(path.read_text())
    assert doc["status"] == "interrupted" and doc["exit_code"] == 130
    assert doc["finished_at"] and len(doc["steps"]) == 1
    shown = run_cli(["replay", str(path)], cwd=tmp_path)
    assert shown.returncode == 0 and "interrupted" in shown.stdout


PLANTED_ENV = "zq8PlantedEnvSecret6Value42"
PLANTED_SK = "sk-proj-Planted0123456789abcdefXYZ"
PLANTED_BEARER = "PlantedBearerToken0987654321"
PLANTED_URL_KEY = "PlantedUrlKeyValue5555"


def test_planted_keys_appear_in_no_trace_stdout_or_stderr(tmp_path: Path) -> None:
    data = tmp_path / "app.log"
    lines = [f"2026-01-01T00:00:{i % 60:02d} INFO request {i} ok" for i in range(200)]
    lines[50] = f"2026-01-01T00:00:50 DEBUG config loaded key={PLANTED_ENV}"
    lines[51] = f"2026-01-01T00:00:51 DEBUG using {PLANTED_SK}"
    lines[52] = f"2026-01-01T00:00:52 DEBUG header Authorization: Bearer {PLANTED_BEARER}"
    lines[53] = f"2026-01-01T00:00:53 DEBUG GET https://api.example.com/v1?api_key={PLANTED_URL_KEY}&q=1"
    data.write_text("\n".join(lines) + "\n")
    model = write_script(
        tmp_path / "s.json",
        [
            {
                "content": f"The key might be {PLANTED_ENV}; let me look.",
                "tool": "grep",
                "args": {"pattern": "DEBUG"},
            },
            {"tool": "peek", "args": {"start": 50, "length": 5}},
            {
                "tool": "execute",
                "args": {
                    "code": f"print('{PLANTED_ENV}')\nprint(context_lines[51])\nnote(context_lines[50])"
                },
            },
            {"tool": "final", "args": {"answer": f"The key is {PLANTED_ENV} and {PLANTED_SK}"}},
            f"The secrets are {PLANTED_ENV}, {PLANTED_SK}, Bearer {PLANTED_BEARER} and ?api_key={PLANTED_URL_KEY}.",
        ],
    )
    # The environment's keys are masked; the same shapes in the file alone are its data (below).
    env = {"MYSERVICE_API_KEY": PLANTED_ENV, "OPENAI_API_KEY": PLANTED_SK}
    planted = (PLANTED_ENV, PLANTED_SK)
    outputs: list[tuple[str, str]] = []
    for extra in ([], ["--json"]):
        proc = run_cli(
            ["ask", str(data), "what keys are in the log?", "-m", model, *extra], cwd=tmp_path, env=env
        )
        assert proc.returncode == 0, proc.stderr
        outputs += [("stdout", proc.stdout), ("stderr", proc.stderr)]
    assert "[REDACTED]" in outputs[0][1]  # the answer was printed, masked
    traces = sorted((tmp_path / "traces").glob("*.json"))
    assert len(traces) == 2
    for t in traces:
        outputs.append((t.name, t.read_text()))
        for extra in ([], ["--json"], ["--full"]):
            shown = run_cli(["replay", str(t), *extra], cwd=tmp_path, env=env)
            assert shown.returncode == 0, shown.stderr
            outputs += [("replay stdout", shown.stdout), ("replay stderr", shown.stderr)]
    logs = run_cli(["logs", "--json"], cwd=tmp_path, env=env)
    outputs.append(("logs", logs.stdout))
    for where, text in outputs:
        for secret in planted:
            assert secret not in text, f"{secret} leaked into {where}"
    # The trace still says what happened, with the secrets masked.
    doc = json.loads(traces[0].read_text())
    assert [s["action"]["name"] for s in doc["steps"]] == ["grep", "peek", "execute", "final"]
    assert "[REDACTED]" in doc["steps"][0]["model_call"]["reply"]["content"]
    assert PLANTED_BEARER in traces[0].read_text() and PLANTED_URL_KEY in traces[0].read_text()


def _big_input(path: Path, size: int) -> None:
    """`size` bytes of varied log lines, written in large blocks."""
    block_lines = [
        f"2026-03-{(i % 28) + 1:02d}T{i % 24:02d}:{i % 60:02d}:00 host{i % 97:02d} svc[{i % 5000}] "
        f"{'ERROR' if i % 13 == 0 else 'INFO'} handled request id={i:08d} in {i % 1000} ms"
        for i in range(20_000)
    ]
    block = ("\n".join(block_lines) + "\n").encode()
    with path.open("wb") as fh:
        written = 0
        while written < size:
            fh.write(block)
            written += len(block)


def test_fifty_steps_over_100_mb_give_a_trace_well_under_1_mb(tmp_path: Path) -> None:
    data = tmp_path / "big.log"
    _big_input(data, 100 * 1024 * 1024)
    replies: list[Any] = []
    for i in range(49):
        kind = i % 3
        if kind == 0:
            replies.append({"tool": "peek", "args": {"start": 1 + i * 10_007, "length": 60}})
        elif kind == 1:
            replies.append({"tool": "grep", "args": {"pattern": f"id={i:04d}", "max_matches": 200}})
        else:
            replies.append(
                {
                    "tool": "execute",
                    "args": {"code": f"print('\\n'.join(context_lines[{i * 1000}:{i * 1000 + 80}]))"},
                }
            )
    replies += [{"tool": "final", "args": {"answer": "done"}}, "done [F1]"]
    model = write_script(tmp_path / "s.json", replies)
    proc = run_cli(
        ["ask", str(data), "what is in this file?", "-m", model, "--max-steps", "60", "-q"],
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    path = sorted((tmp_path / "traces").glob("*.json"))[-1]
    doc = json.loads(path.read_text())
    assert len(doc["steps"]) == 50
    size = path.stat().st_size
    assert size < 600_000, f"trace of {size:,} bytes for 50 steps"
    # Each observation was several thousand characters: only capped previews are kept.
    assert max(len(s["observation"]["preview"]) for s in doc["steps"]) <= 2100
    assert max(s["observation"]["chars"] for s in doc["steps"]) >= 3000
    # Linear growth: no step carries the whole history (the messages are summarised).
    per_step = [len(json.dumps(s)) for s in doc["steps"]]
    assert max(per_step) < 8000, max(per_step)


def test_no_trace_flag_writes_nothing(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "print(1)"}},
            {"tool": "final", "args": {"answer": "1"}},
            "1 [F1]",
        ],
    )
    proc = run_cli(["ask", str(apache_log), "q", "-m", model, "--no-trace", "-q"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "traces").exists() or not list((tmp_path / "traces").glob("*.json"))


def test_trace_names_sort_by_time_and_schema_is_versioned(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        {
            "rules": [{"match": "final answer to a question", "reply": "10000 [F1]"}],
            "default": {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
        },
    )
    for _ in range(2):
        proc = run_cli(["ask", str(apache_log), "q", "-m", model, "--max-steps", "1", "-q"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    names = [p.name for p in sorted((tmp_path / "traces").glob("*.json"))]
    docs = [json.loads((tmp_path / "traces" / n).read_text()) for n in names]
    assert [d["started_at"] for d in docs] == sorted(d["started_at"] for d in docs)
    assert all(d["schema"] == "rlm-trace/1" for d in docs)
    assert latest_trace(tmp_path)["run_id"] == names[-1][: -len(".json")]
    # The documented schema names every top-level field a trace has.
    spec = (ROOT / "docs" / "trace-format.md").read_text()
    for key in docs[0]:
        assert f"`{key}`" in spec, f"field {key} is not documented in docs/trace-format.md"


def test_writer_keeps_bridge_calls_and_reader_reports_unfinished_runs(tmp_path: Path) -> None:
    from rlm.replay.verify import RecordedBridge
    from rlm.trace.reader import read_trace
    from rlm.trace.writer import TraceWriter

    writer = TraceWriter(str(tmp_path))
    writer.add_node({"id": "n0", "parent": None, "depth": 0, "slice": None, "status": "running"})
    writer.add_bridge_call(
        {"node": "n0", "step": 2, "name": "llm_query", "args": {"question": "q"}, "result": "A"}
    )
    writer.add_bridge_call(
        {"node": "n0", "step": 2, "name": "llm_query", "args": {"question": "q"}, "error": "too big"}
    )
    writer.add_bridge_call(
        {"node": "n0", "step": 2, "name": "partition_map", "args": {"question": "p"}, "result": ["x", "y"]}
    )
    assert writer.path is not None
    doc = read_trace(writer.path)
    assert doc["status"] == "crashed"  # written as "running": the run never finished
    bridge = RecordedBridge(doc)
    bridge.current = ("n0", 2)
    # Served in the order the run made them, errors included.
    assert bridge("llm_query", {"question": "q"}) == "A"
    try:
        bridge("llm_query", {"question": "q"})
    except Exception as exc:
        assert getattr(exc, "message", "") == "too big"
    else:
        raise AssertionError("a recorded error must be raised again")
    assert bridge("partition_map", {"question": "p"}) == ["x", "y"]
    writer.update(status="final", exit_code=0)
    assert read_trace(writer.path)["status"] == "final"
