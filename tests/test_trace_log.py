"""The live trace: an event log appended as the run goes, folded into the document at its end.

Writing a trace must cost the same per event however long the run already is; a run killed
outright must leave what `rlm replay` and `rlm logs` read; the log is as private as the
document (0600, never written through a symlink), redacted line by line; listing and the
folder's bound see a run that is going or died.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, cli_env, run_cli, write_script

from rlm.errors import InputError
from rlm.trace import eventlog
from rlm.trace.reader import read_raw, read_trace
from rlm.trace.writer import TraceWriter

SECRET = "zq8LogSecret6Value42xyz"


def _step(node: str, index: int) -> dict[str, Any]:
    """A step record of the shape the engine writes: whole reply, capped preview."""
    code = f"rows = [l for l in context_lines[{index * 10}:{index * 10 + 500}] if ' 404 ' in l]\nprint(len(rows))"
    return {
        "node": node,
        "index": index,
        "model_call": {
            "messages": [{"role": "system", "tokens": 1100}, {"role": "user", "tokens": 200}],
            "prompt_tokens": 2400,
            "completion_tokens": 80,
            "cost": None,
            "latency_s": 1.5,
            "reply": {
                "content": "Counting the next window.",
                "tool_calls": [
                    {"id": f"call_{index}", "name": "execute", "arguments": json.dumps({"code": code})}
                ],
                "finish_reason": "tool_calls",
            },
        },
        "action": {"name": "execute", "args": {"code": code}},
        "parse_error": None,
        "observation": {"preview": f"{index} rows\n" + "x" * 1800, "chars": 1810, "ok": True},
        "duration_s": 1.7,
    }


def _finding(n: int) -> dict[str, Any]:
    return {"id": f"F{n}", "kind": "result", "text": f"{n} rows", "full": None, "evidence": f"n0.s{n}",
            "node": "n0", "topic": f"window {n % 4}", "superseded_by": None}  # fmt: skip


def _written_bytes() -> int:
    """Bytes this process has handed to write(2) so far (the kernel's own count)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's per-process I/O counts")
def test_each_step_costs_the_same_to_write_however_long_the_run_is(tmp_path: Path) -> None:
    """Steps 301-400 of a run write as many bytes as steps 1-100: the trace is appended to,
    not rewritten whole after every event (which writes each step again at every event)."""
    writer = TraceWriter(str(tmp_path))
    writer.add_node({"id": "n0", "parent": None, "depth": 0, "status": "running"})
    ledger: list[dict[str, Any]] = []

    def steps(first: int, last: int) -> int:
        before = _written_bytes()
        for i in range(first, last + 1):
            writer.add_step(_step("n0", i))
            if i % 2 == 0:
                ledger.append(_finding(i))
                writer.update(ledger=[dict(f) for f in ledger])  # the engine gives the ledger whole
        return _written_bytes() - before

    early = steps(1, 100)
    steps(101, 300)
    late = steps(301, 400)
    assert late < 1.5 * early, f"steps 301-400 wrote {late:,} bytes, steps 1-100 {early:,}"
    writer.update(status="final", exit_code=0)
    writer.close()
    assert len(read_trace(tmp_path / f"{writer.run_id}.json")["steps"]) == 400


def test_the_log_folds_into_the_document_the_run_ends_with(tmp_path: Path) -> None:
    writer = TraceWriter(str(tmp_path))
    writer.flush()
    assert writer.path is not None and writer.log_path is not None
    document, log = writer.path, writer.log_path
    assert not document.exists() and log.is_file()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    writer.update(question="q", settings={"max_steps": 5}, input={"display_name": "a.log"})
    writer.add_node({"id": "n0", "parent": None, "depth": 0, "status": "running"})
    writer.warn("a warning")
    writer.warn("a warning")  # said once
    ledger = [_finding(1), _finding(2)]
    writer.update(ledger=[dict(f) for f in ledger])
    writer.add_step(_step("n0", 1))
    writer.add_node({"id": "n1", "parent": "n0", "parent_step": 2, "depth": 1})
    writer.add_subcall({"node": "n0", "step": 2, "question": "which?", "slice": "lines 1-9", "answer": "A"})
    writer.add_bridge_call(
        {"node": "n0", "step": 2, "name": "llm_query", "args": {"question": "q"}, "result": "A"}
    )
    writer.add_provider_event({"kind": "retry", "at_s": 1.0, "model": "m", "attempt": 2})
    writer.update_node("n1", status="final", steps=1, answer="A")
    ledger[0]["superseded_by"] = "F3"
    ledger.append(_finding(3))
    writer.update(ledger=[dict(f) for f in ledger])
    writer.add_model_client("root", {"model": "m", "where": "m", "context_window": 32000})
    writer.add_model_call({"role": "root", "key": "k" * 64, "reply": {"content": "x"}, "prompt_tokens": 3})
    writer.add_step(_step("n0", 2))

    # While the run goes, the log is the trace: folded, it is the document in memory.
    expected = json.loads(json.dumps(writer.doc))
    assert read_raw(document) == expected
    assert read_trace(document)["status"] == "crashed"  # "running" with no end: read as crashed
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["e"] == "start"
    # The ledger, given whole at every finding, is logged by what changed.
    extend = [e for e in lines if e["e"] == "extend"]
    assert extend and extend[-1]["keep"] == 0 and len(extend[-1]["items"]) == 3  # F1 changed

    writer.update(status="final", exit_code=0, answer="A")
    writer.close()
    assert not log.exists()
    assert stat.S_IMODE(document.stat().st_mode) == 0o600
    final = json.loads(document.read_text())
    assert final == json.loads(json.dumps(writer.doc))
    assert final["warnings"] == ["a warning"] and final["nodes"][1]["answer"] == "A"
    assert final["ledger"][0]["superseded_by"] == "F3" and len(final["cassette"]["calls"]) == 1
    assert read_trace(log)["status"] == "final"  # named by its log, the finished document is read


def test_no_secret_reaches_the_log_or_the_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quoted = 'zq8Quoted"Secret\\Value77'  # JSON escapes it: masked all the same
    monkeypatch.setenv("MYSERVICE_API_KEY", SECRET)
    monkeypatch.setenv("OTHER_SECRET", quoted)
    writer = TraceWriter(str(tmp_path))
    writer.update(question=f"is {SECRET} in the log?")
    step = _step("n0", 1)
    step["model_call"]["reply"]["content"] = f"The key is {SECRET}, the other {quoted}"
    writer.add_step(step)
    assert writer.log_path is not None
    text = writer.log_path.read_text()
    assert SECRET not in text and json.dumps(quoted)[1:-1] not in text and "[REDACTED]" in text
    assert read_raw(writer.log_path)["steps"][0]["model_call"]["reply"]["content"] == (
        "The key is [REDACTED], the other [REDACTED]"
    )
    writer.close()
    assert writer.path is not None
    text = writer.path.read_text()
    assert SECRET not in text and json.dumps(quoted)[1:-1] not in text and "[REDACTED]" in text


def test_a_symlink_or_file_at_the_log_s_name_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    traces = tmp_path / "traces"
    traces.mkdir()
    # A name the caller chose: refused, said, and the victim untouched.
    named = "2026-01-01T00-00-00-abcd"
    (traces / f"{named}.jsonl").symlink_to(victim)
    said: list[str] = []
    writer = TraceWriter(str(traces), run_id=named, on_problem=said.append)
    writer.update(question="q")
    assert writer.path is None and said and "cannot write the trace" in said[0]
    # A drawn name: another one is drawn, and the trace is written there.
    writer = TraceWriter(str(traces))
    assert writer.log_path is not None
    planted = writer.log_path
    planted.symlink_to(victim)
    writer.update(question="q")
    assert writer.path is not None and writer.log_path is not None and writer.log_path != planted
    assert not writer.log_path.is_symlink() and writer.log_path.is_file()
    assert victim.read_text() == "the user's own file\n"
    writer.close()
    assert read_trace(writer.path)["question"] == "q" and victim.read_text() == "the user's own file\n"


def test_a_reader_never_finds_the_log_empty_or_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`replay` of a run just starting folds its log: the log appears with its first line whole."""
    traces = tmp_path / "traces"
    unreadable: list[str] = []
    write = eventlog.append

    def read_every_log_then_write(fd: int, data: bytes) -> None:
        # Whatever a reader would find at the moment of each write, the first one included.
        for log in traces.glob("*.jsonl"):
            try:
                read_raw(log)
            except InputError as exc:
                unreadable.append(str(exc))
        write(fd, data)

    monkeypatch.setattr(eventlog, "append", read_every_log_then_write)
    writers = []
    for n in range(3):
        writer = TraceWriter(str(traces))
        writer.update(question=f"q{n}", answer="x" * 20_000)
        writer.update(status="running")
        writers.append(writer)
    assert unreadable == []
    logs = sorted(traces.glob("*.jsonl"))
    assert len(logs) == 3 and sorted(p.name for p in traces.iterdir()) == [p.name for p in logs]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in logs)
    assert {read_raw(p)["question"] for p in logs} == {"q0", "q1", "q2"}
    for writer in writers:
        writer.close()
    # A file system without hard links: the log is made in place, and nothing is left beside it.
    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(PermissionError(1, "no links")))
    plain = tmp_path / "plain"
    writer = TraceWriter(str(plain))
    writer.update(question="in place")
    assert writer.log_path is not None and read_raw(writer.log_path)["question"] == "in place"
    assert [p.name for p in plain.iterdir()] == [writer.log_path.name]
    writer.close()
    assert writer.path is not None and read_trace(writer.path)["question"] == "in place"


def test_a_cut_or_foreign_log_reads_as_far_as_it_goes_and_garbage_is_exit_3(tmp_path: Path) -> None:
    writer = TraceWriter(str(tmp_path / "traces"))
    writer.update(question="how many?")
    writer.add_node({"id": "n0", "parent": None, "depth": 0, "status": "running"})
    writer.add_step(_step("n0", 1))
    assert writer.log_path is not None
    log = writer.log_path
    with log.open("a") as fh:
        fh.write('{"e": "a-later-kind", "x": 1}\n')  # a kind this version does not know: skipped
        fh.write('{"e": "append", "to": "steps", "item": {"node": "n0", "ind')  # cut by a power loss
    shown = run_cli(["replay", str(log), "--json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["status"] == "crashed" and [s["index"] for s in doc["steps"]] == [1]
    # Named by the document's name, the log is found.
    assert run_cli(["replay", str(log.with_suffix(".json"))], cwd=tmp_path).returncode == 0

    garbage = tmp_path / "2026-01-01T00-00-00-beef.jsonl"
    garbage.write_text('{"e": "set", "fields": {"status": "final"}}\n')
    proc = run_cli(["replay", str(garbage)], cwd=tmp_path)
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not a valid trace" in proc.stderr


def test_logs_last_and_the_bound_see_runs_that_are_going_or_died(tmp_path: Path) -> None:
    from rlm.replay.logs import trace_files
    from rlm.trace.retention import sweep

    traces = tmp_path / "traces"
    finished = TraceWriter(str(traces), run_id="2026-01-01T00-00-00-aaaa")
    finished.update(question="first", status="final", exit_code=0, answer="1")
    finished.close()
    died = TraceWriter(str(traces), run_id="2026-01-02T00-00-00-bbbb")
    died.update(question="second")
    died.add_node({"id": "n0", "parent": None, "depth": 0, "status": "running"})
    # Folded, but killed before its log was removed: the document is the trace.
    both = TraceWriter(str(traces), run_id="2026-01-03T00-00-00-cccc")
    both.update(question="third", status="final", exit_code=0, answer="3")
    assert both.log_path is not None
    kept = both.log_path.read_bytes()
    both.close()
    (traces / "2026-01-03T00-00-00-cccc.jsonl").write_bytes(kept)
    names = [p.name for p in trace_files(traces)]
    assert names == [
        "2026-01-03T00-00-00-cccc.json",
        "2026-01-02T00-00-00-bbbb.jsonl",
        "2026-01-01T00-00-00-aaaa.json",
    ]
    rows = json.loads(run_cli(["logs", "--json"], cwd=tmp_path).stdout)
    assert [(r["question"], r["status"]) for r in rows] == [
        ("third", "final"),
        ("second", "crashed"),
        ("first", "final"),
    ]
    last = run_cli(["replay", "last", "--json"], cwd=tmp_path)
    assert json.loads(last.stdout)["question"] == "third"
    # The folder's bound counts and removes a log like a document.
    for age, name in enumerate(sorted(os.listdir(traces), reverse=True)):
        then = time.time() - 3600 * (age + 1)
        os.utime(traces / name, (then, then))
    swept = sweep(traces, keep=1)
    assert sorted(p.name for p in swept.removed) == [
        "2026-01-01T00-00-00-aaaa.json",
        "2026-01-02T00-00-00-bbbb.jsonl",
        "2026-01-03T00-00-00-cccc.json",
    ]
    assert os.listdir(traces) == ["2026-01-03T00-00-00-cccc.jsonl"]


def test_a_run_killed_outright_is_listed_and_replayed_from_its_log(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "grep", "args": {"pattern": '" 404 ', "max_matches": 3}},
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}, "delay": 60},
            {"tool": "final", "args": {"answer": "never reached"}},
            "never reached",
        ],
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlm",
            "ask",
            str(FIXTURES / "access.log"),
            "how many 404s?",
            "-m",
            model,
            "-q",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    traces = tmp_path / "traces"
    try:
        deadline = time.monotonic() + 90
        while not any(len(read_raw(p)["steps"]) >= 1 for p in traces.glob("*.jsonl")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no step was logged"
            time.sleep(0.05)
        assert not list(traces.glob("*.json"))  # going on: the log is all there is
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    [log] = traces.glob("*.jsonl")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    rows = json.loads(run_cli(["logs", "--json"], cwd=tmp_path).stdout)
    assert [(r["run_id"], r["status"], r["steps"]) for r in rows] == [(log.stem, "crashed", 1)]
    shown = run_cli(["replay", "last"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "crashed" in shown.stdout and "did not finish" in shown.stdout and "n0.1 grep" in shown.stdout
