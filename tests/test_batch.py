"""`rlm ask --batch`: a partition_map's sub-calls as one job of the provider's Batch API, through
the CLI against a real HTTP server on 127.0.0.1 (tests/openai_stub.py) that speaks the OpenAI
files and batches API and runs each job's requests through its chat-completions replies.

The root model and the sub-model are one `openai/stub` client there: its turns are the stub's
scripted replies, each chunk's sub-query is answered by a rule with the lines it was shown."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

from conftest import latest_trace, run_cli, start_cli, wait_for, write_script
from openai_stub import OpenAIStub

CHUNKS = 8
QUESTION = "which lines?"
# Each helper answers with the lines its prompt names; a root prompt never holds "Excerpt (".
RULES = [{"match": r"Excerpt \(lines ([\d,]+-[\d,]+)\)", "reply": r"seen \1"}]


def _root_turns() -> list[Any]:
    return [
        "```python\nprint(partition_map('which lines is this?', chunk_lines=25))\n```",
        '```python\nfinal("8 chunks")\n```',
        json.dumps({"answer": "8 chunks", "citations": ["F1"]}),
    ]


def _log(tmp_path: Path, apache_log: Path) -> Path:
    log = tmp_path / "part.log"
    log.write_text("".join(apache_log.read_text().splitlines(keepends=True)[: CHUNKS * 25]))
    return log


def _args(log: Path, stub: OpenAIStub, *extra: str) -> list[str]:
    return ["ask", str(log), QUESTION, "-m", "openai/stub", "--api-base", stub.api_base, *extra]


def _request(body: dict[str, Any]) -> str:
    """A chat-completions request as its messages and reply cap, the excerpt's frame code left out."""
    shown = json.dumps({"messages": body["messages"], "max_tokens": body["max_tokens"]}, sort_keys=True)
    return re.sub(r"data-[a-z]+>", "data-CODE>", shown)


def _subcall_calls(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The cassette's calls of the fan-out (the root's turns and synthesis are the others)."""
    keys = {c["key"] for c in trace["cassette"]["calls"]}
    assert len(keys) == len(trace["cassette"]["calls"])
    return [c for c in trace["cassette"]["calls"] if "seen" in (c.get("reply") or {}).get("content", "")]


def test_a_fan_out_with_batch_answers_as_the_plain_one_in_one_job(tmp_path: Path, apache_log: Path) -> None:
    log = _log(tmp_path, apache_log)
    (tmp_path / "plain").mkdir()
    with OpenAIStub(_root_turns(), rules=RULES) as plain_stub:
        plain = run_cli(_args(log, plain_stub, "--no-memory"), cwd=tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    here = latest_trace(tmp_path / "plain")
    assert len(plain_stub.requests) == CHUNKS + 3 and not plain_stub.batches

    with OpenAIStub(_root_turns(), rules=RULES, batch_polls=1) as stub:
        proc = run_cli(_args(log, stub, "--batch"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == plain.stdout == "8 chunks\n"
        there = latest_trace(tmp_path)
        # One job of CHUNKS requests; the chat-completions endpoint saw the root's turns and
        # synthesis only.
        assert len(stub.batches) == 1 and len(stub.batch_requests) == CHUNKS
        (job,) = stub.batches.values()
        assert len(stub.requests) == 3 and all("Excerpt (" not in str(r["body"]) for r in stub.requests)
        # ... the same requests the plain fan-out sent (each run frames its excerpts with a code of its own)
        sent = sorted(_request(r["body"]) for r in plain_stub.requests if "Excerpt (" in str(r["body"]))
        assert sorted(_request(r["body"]) for r in stub.batch_requests) == sent
        assert {r["custom_id"] for r in stub.batch_requests} == {f"chunk-{i}" for i in range(1, CHUNKS + 1)}

        # A second run of the same question: the sub-call cache answers every chunk, no job is made.
        stub.replies.extend(_root_turns())
        again = run_cli(_args(log, stub, "--batch", "--json"), cwd=tmp_path)
        assert again.returncode == 0 and json.loads(again.stdout)["answer"] == "8 chunks", again.stderr
        assert len(stub.batches) == 1 and len(stub.batch_requests) == CHUNKS
        assert "batches" not in json.loads(Path(tmp_path, json.loads(again.stdout)["trace"]).read_text())

    shown = there["steps"][0]["observation"]["preview"]
    assert shown == here["steps"][0]["observation"]["preview"]
    assert shown.startswith("['seen 1-25', 'seen 26-50'") and "'seen 176-200']" in shown
    assert [f["text"] for f in there["ledger"]] == [f["text"] for f in here["ledger"]]
    # Charged as the plain fan-out is: one call a chunk, its usage as the server counted it.
    assert there["totals"]["calls"] == here["totals"]["calls"] == CHUNKS + 3
    assert there["totals"]["prompt_tokens"] == here["totals"]["prompt_tokens"]
    assert there["totals"]["completion_tokens"] == here["totals"]["completion_tokens"]
    # The job in the trace, and each sub-call recorded as the plain fan-out's, naming it.
    (record,) = there["batches"]
    assert record["id"] == job["id"] and record["input_file_id"] == job["input_file_id"]
    assert record["status"] == "completed" and record["completed"] == record["requests"] == CHUNKS
    assert re.fullmatch(r"[0-9a-f]{64}", record["sha256"])
    assert len(there["subcalls"]) == CHUNKS and {s["batch"] for s in there["subcalls"]} == {job["id"]}
    # (the plain fan-out records each as it ends, the batch in chunk order)
    assert sorted(s["answer"] for s in there["subcalls"]) == sorted(s["answer"] for s in here["subcalls"])
    assert {c.get("batch") for c in _subcall_calls(there)} == {job["id"]}
    assert len(_subcall_calls(there)) == CHUNKS
    # Each look at the job was told on stderr when it moved on: in progress, then completed.
    assert f"batch {job['id']} in progress: 0 of {CHUNKS} done" in proc.stderr
    assert f"batch {job['id']} completed: {CHUNKS} of {CHUNKS} done" in proc.stderr


def test_an_interrupted_batch_run_is_taken_up_again_by_its_run_id(tmp_path: Path, apache_log: Path) -> None:
    log = _log(tmp_path, apache_log)
    with OpenAIStub(_root_turns(), rules=RULES, batch_polls=10_000) as stub:
        proc = start_cli([*_args(log, stub, "--batch", "--no-memory"), "--jsonl"], cwd=tmp_path)
        # Stopped once the run has told one look at its job (it looks again only after telling it).
        wait_for(lambda: any(b["polls"] >= 2 for b in stub.batches.values()), proc, seconds=90)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        (job,) = stub.batches.values()
        said = re.search(r"run the same command with --batch --resume (\S+)", err)
        assert said, err
        run_id = said.group(1)
        stopped = json.loads((tmp_path / "traces" / f"{run_id}.json").read_text())
        assert stopped["status"] == "interrupted"
        assert [b["id"] for b in stopped["batches"]] == [job["id"]]
        assert any(json.loads(line)["event"] == "batch" for line in out.splitlines())

        # The job finishes at the provider meanwhile; the same command with --resume looks at it.
        stub.batch_polls = 0
        stub.replies[:] = _root_turns()
        resumed = run_cli([*_args(log, stub, "--batch", "--no-memory"), "--resume", run_id], cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == "8 chunks\n"
        assert len(stub.batches) == 1 and len(stub.batch_requests) == CHUNKS  # no second job
    trace = latest_trace(tmp_path)
    assert trace["resume"]["run_id"] == run_id
    (record,) = trace["batches"]
    assert record["id"] == job["id"] and record["resumed_from"] == run_id
    assert record["status"] == "completed" and len(trace["subcalls"]) == CHUNKS
    assert trace["steps"][0]["observation"]["preview"].startswith("['seen 1-25', 'seen 26-50'")


def test_a_failed_batch_ends_the_run_naming_it(tmp_path: Path, apache_log: Path) -> None:
    log = _log(tmp_path, apache_log)
    with OpenAIStub(_root_turns(), rules=RULES, batch_ends="failed") as stub:
        proc = run_cli(_args(log, stub, "--batch", "--no-memory"), cwd=tmp_path)
        (job,) = stub.batches.values()
    assert proc.returncode == 5, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"rlm: the batch {job['id']} at {stub.api_base} ended failed: the stub's job failed" in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "provider_error" and trace["batches"][0]["status"] == "failed"
    # The run's one failure decision about the provider: the root was not asked again.
    assert len(stub.requests) == 1


def test_a_run_id_to_resume_must_name_a_run_that_sent_a_job(tmp_path: Path, apache_log: Path) -> None:
    log = _log(tmp_path, apache_log)
    script = write_script(tmp_path / "s.json", _root_turns())
    cases = {
        "nosuchrun": "rlm: --resume nosuchrun: trace not found: traces/nosuchrun.json (runs are looked up in traces)",
        "../etc/passwd": "rlm: --resume takes a run id, as `rlm logs` lists them, not '../etc/passwd'",
        "planted": "rlm: --resume planted: that run sent no batch job to take up",
    }
    # A trace is data: a job whose id is not a plain token is no job to take up.
    (tmp_path / "traces").mkdir()
    job = {"id": "../../x", "input_file_id": "file-1", "sha256": "0" * 64, "requests": 2, "where": "x"}
    (tmp_path / "traces" / "planted.json").write_text(json.dumps({"schema": "rlm-trace/1", "batches": [job]}))
    for run_id, message in cases.items():
        proc = run_cli(["ask", str(log), QUESTION, "-m", script, "--batch", "--resume", run_id], cwd=tmp_path)
        assert (proc.returncode, proc.stderr, proc.stdout) == (2, message + "\n", ""), run_id
    alone = run_cli(["ask", str(log), QUESTION, "-m", script, "--resume", "planted"], cwd=tmp_path)
    assert alone.returncode == 2
    assert alone.stderr == "rlm: --resume takes up the batch jobs of a --batch run: give --batch too\n"


def test_a_model_without_a_batch_api_is_refused_before_anything_is_sent(
    tmp_path: Path, apache_log: Path
) -> None:
    log = _log(tmp_path, apache_log)
    script = write_script(tmp_path / "s.json", _root_turns())
    proc = run_cli(["ask", str(log), QUESTION, "-m", script, "--batch"], cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"rlm: --batch needs a provider with a Batch API (OpenAI: openai/…, or a LiteLLM proxy: "
        f"litellm_proxy/…); the sub-model {script} has none: leave out --batch"
    ]
    assert latest_trace(tmp_path)["steps"] == []


def test_a_budget_too_small_for_the_job_refuses_it_before_it_is_sent(
    tmp_path: Path, apache_log: Path
) -> None:
    log = _log(tmp_path, apache_log)
    with OpenAIStub(_root_turns(), rules=RULES) as stub:
        proc = run_cli(_args(log, stub, "--batch", "--no-memory", "--max-calls", "6"), cwd=tmp_path)
        assert not stub.batches and not stub.files and not stub.batch_requests
    assert proc.returncode == 0, proc.stderr
    shown = latest_trace(tmp_path)["steps"][0]["observation"]["preview"]
    assert f"partition_map needs {CHUNKS} sub-calls" in shown and "the budget has room for" in shown


def test_the_wait_for_a_job_ends_at_the_time_limit_and_says_how_to_take_it_up(
    tmp_path: Path, apache_log: Path
) -> None:
    log = _log(tmp_path, apache_log)
    with OpenAIStub(_root_turns(), rules=RULES, batch_polls=10_000) as stub:
        started = time.monotonic()
        proc = run_cli(_args(log, stub, "--batch", "--no-memory", "--max-time", "10"), cwd=tmp_path)
        took = time.monotonic() - started
        assert len(stub.batches) == 1, proc.stderr
        (job,) = stub.batches.values()
    assert proc.returncode == 6 and proc.stdout == "", proc.stderr
    assert took < 10 + 3, took  # the limit, and the process's start and end
    assert f"the time limit of 10 s was reached (while the batch {job['id']} was in progress)" in proc.stderr
    trace = latest_trace(tmp_path)
    assert f"run the same command with --batch --resume {trace['run_id']}" in proc.stderr
    (record,) = trace["batches"]
    assert record["status"] == "in_progress" and isinstance(record["waited_s"], float)
