"""Faults and limits that hold: a real HTTP provider on 127.0.0.1 that misbehaves, a worker
that cannot start, a trace that cannot be written, a bug, and the budget across a fan-out.

Every scenario runs the `rlm` CLI in a subprocess and checks what a user sees: the exit
code, the one line on stderr, the wall time against its bound, and a trace on disk that
`rlm replay` reads. Timeouts and Retry-After values are small so the battery stays short.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_env, run_cli, write_script
from openai_stub import OpenAIStub

EX = "```python\nprint(len(context_lines))\n```"
FIN = 'FINAL("10000")'
ANS = "10000 lines"
OK_RUN = [EX, FIN, ANS]  # a clean run after the fault: a step, final, synthesis
# What a run costs beyond its faults: start-up (litellm's import is ~2 s, more on a busy
# machine) and the steps themselves.
SLACK = 12.0
TABLE: list[tuple[str, int, float, float]] = []  # scenario, exit, wall, bound: printed at the end


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    wall: float
    trace: dict[str, Any] | None
    trace_path: Path | None

    @property
    def lines(self) -> list[str]:
        """The lines of stderr that speak for the tool (not progress, not the summary)."""
        return [
            ln
            for ln in self.proc.stderr.splitlines()
            if ln.startswith("rlm: ") and not ln.startswith("rlm: warning:") and " · " not in ln
        ]


def _ask(
    tmp_path: Path,
    model_args: list[str],
    *flags: str,
    env: dict[str, str] | None = None,
    question: str = "how many lines?",
    input_path: Path | None = None,
) -> Run:
    target = input_path or _log()
    started = time.monotonic()
    proc = run_cli(["ask", str(target), question, *model_args, *flags], cwd=tmp_path, env=env, timeout=180)
    wall = time.monotonic() - started
    traces = sorted((tmp_path / "traces").glob("*.json"))
    return Run(
        proc, wall, json.loads(traces[-1].read_text()) if traces else None, traces[-1] if traces else None
    )


def _log() -> Path:
    return Path(__file__).resolve().parent.parent / "fixtures" / "data" / "elastic" / "apache_logs"


def _stub_args(stub: OpenAIStub) -> list[str]:
    return ["-m", "openai/stub", "--api-base", stub.api_base]


def _check(run: Run, name: str, code: int, bound: float, tmp_path: Path) -> None:
    """What every scenario owes the user: its exit code, no traceback, its time, a readable trace."""
    TABLE.append((name, run.proc.returncode, run.wall, bound))
    assert run.proc.returncode == code, run.proc.stderr
    assert "Traceback" not in run.proc.stderr and "Error: litellm" not in run.proc.stderr, run.proc.stderr
    assert run.wall <= bound, f"{name} took {run.wall:.1f} s, over its bound of {bound:.1f} s"
    assert run.trace is not None and run.trace_path is not None
    assert run.trace["exit_code"] == code and run.trace["status"] != "running"
    replay = run_cli(["replay", str(run.trace_path)], cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    assert "Traceback" not in replay.stderr and replay.stdout.strip()


def _one_error_line(run: Run) -> str:
    assert len(run.lines) == 1, run.proc.stderr
    line = run.lines[0]
    # The tool's own words: no exception class names, said once.
    assert not re.search(r"\b\w+(Error|Exception)\b:", line), line
    return line


# -- the provider misbehaves ------------------------------------------------------------------


def test_429_with_retry_after_is_waited_for_as_asked(tmp_path: Path) -> None:
    with OpenAIStub(
        [{"status": 429, "message": "slow down", "headers": {"Retry-After": "2"}}, *OK_RUN]
    ) as stub:
        run = _ask(tmp_path, _stub_args(stub), "--max-time", "60", env={"RLM_RETRIES": "2"})
    _check(run, "429 + Retry-After: 2", 0, 2 + SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS
    gap = stub.requests[1]["at"] - stub.requests[0]["at"]
    assert 1.9 <= gap <= 3.5, gap  # waited as asked: not the 0.01 s backoff of the test settings
    assert f"{stub.api_base}: HTTP 429: slow down; attempt 2 of 3 in 2.0 s (as it asked)" in run.proc.stderr
    event = run.trace["provider_events"][0]
    assert event["kind"] == "retry" and event["retry_after"] == 2 and event["attempt"] == 2


def test_retry_after_beyond_the_time_limit_stops_at_the_limit(tmp_path: Path) -> None:
    with OpenAIStub(
        [], default={"status": 429, "message": "slow down", "headers": {"Retry-After": "60"}}
    ) as stub:
        # 15 s: the first request must go out before the loop's own deadline (the limit less the
        # answer's reserve) even on a busy machine, where start-up alone has taken over 6 s. The
        # run ends as soon as the wait asked for cannot fit, so a longer limit costs nothing.
        run = _ask(tmp_path, _stub_args(stub), "--max-time", "15")
    _check(run, "429 + Retry-After: 60, --max-time 15", 6, 15 + 2, tmp_path)
    line = _one_error_line(run)
    assert line == (
        f"rlm: the time limit of 15 s was reached ({stub.api_base} asked to wait 60 s); "
        "nothing was established before it"
    )
    assert len(stub.requests) == 1 and run.proc.stdout == ""


def test_500_then_success(tmp_path: Path) -> None:
    with OpenAIStub([{"status": 500, "message": "broken"}, *OK_RUN]) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "500 then success", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS and len(stub.requests) == 4
    assert f"{stub.api_base}: HTTP 500: broken; attempt 2 of 3 in " in run.proc.stderr
    assert [e["kind"] for e in run.trace["provider_events"]] == ["retry"]


def test_500_forever_is_one_failure_decision(tmp_path: Path) -> None:
    """The loop spends its retries; synthesis does not wait on the dead provider again."""
    with OpenAIStub([EX], default={"status": 500, "message": "broken"}) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "500 forever", 5, SLACK, tmp_path)
    assert len(stub.requests) == 1 + 3  # one good step, then one try and two retries: no more
    line = _one_error_line(run)
    assert line == (
        "rlm: model call to openai/stub failed after 3 attempts: HTTP 500: broken; no answer was written; "
        "established so far (not an answer):"
    )
    assert run.proc.stdout == "" and "gave: 10000" in run.proc.stderr  # the findings: told, not printed
    kinds = [e["kind"] for e in run.trace["provider_events"]]
    assert kinds == ["retry", "retry", "provider_failed"]
    assert run.trace["status"] == "provider_error" and "broken" in run.trace["synthesis"]["error"]


def test_a_hung_provider_is_bounded_by_the_request_timeout(tmp_path: Path) -> None:
    with OpenAIStub([], default={"delay": 60}) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_REQUEST_TIMEOUT": "2", "RLM_RETRIES": "1"})
    _check(run, "hang, request timeout 2 s x 2 attempts", 5, 4 + SLACK, tmp_path)
    assert (
        _one_error_line(run)
        == "rlm: model call to openai/stub failed after 2 attempts: no complete reply within 2.0 s"
    )
    assert len(stub.requests) == 2


@pytest.mark.slow  # waits out a 7 s request timeout
def test_a_slow_reply_is_announced_with_how_long_rlm_will_wait(tmp_path: Path) -> None:
    with OpenAIStub([], default={"delay": 60}) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_REQUEST_TIMEOUT": "7", "RLM_RETRIES": "0"})
    _check(run, "hang, request timeout 7 s, no retry", 5, 7 + SLACK, tmp_path)
    assert f"  waiting for {stub.api_base}: 5 s so far, giving up at 7 s" in run.proc.stderr.splitlines()
    assert _one_error_line(run) == "rlm: model call to openai/stub failed: no complete reply within 7.0 s"
    assert [e["kind"] for e in run.trace["provider_events"]] == ["waiting", "provider_failed"]


def test_a_dripped_reply_is_bounded_as_a_whole(tmp_path: Path) -> None:
    """A byte every 50 ms never trips a per-read timeout; the request timeout bounds the whole reply."""
    with OpenAIStub([], default={"content": EX, "drip": 0.05}) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_REQUEST_TIMEOUT": "2", "RLM_RETRIES": "1"})
    _check(run, "byte drip, request timeout 2 s x 2 attempts", 5, 4 + SLACK, tmp_path)
    assert (
        _one_error_line(run)
        == "rlm: model call to openai/stub failed after 2 attempts: no complete reply within 2.0 s"
    )


def test_a_reset_mid_body_is_retried(tmp_path: Path) -> None:
    with OpenAIStub([{"content": EX, "reset": True}, *OK_RUN]) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "reset mid-body, then success", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS and len(stub.requests) == 4
    assert re.search(
        r"the connection failed \(.*(reset|closed|incomplete).*\); attempt 2 of 3", run.proc.stderr
    )


def test_malformed_json_is_retried(tmp_path: Path) -> None:
    with OpenAIStub([{"raw": '{"id": "x", "choices": [{"mess'}, *OK_RUN]) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "malformed JSON, then success", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS and len(stub.requests) == 4
    assert f"{stub.api_base}: the reply was not valid JSON (" in run.proc.stderr


def test_empty_choices_are_retried_like_malformed_replies(tmp_path: Path) -> None:
    with OpenAIStub([{"content": EX, "no_choices": True}, *OK_RUN]) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "empty choices, then success", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS and len(stub.requests) == 4
    assert f"{stub.api_base}: the reply had no choices; attempt 2 of 3" in run.proc.stderr
    with OpenAIStub([], default={"content": EX, "no_choices": True}) as stub:
        run = _ask(tmp_path, _stub_args(stub), env={"RLM_RETRIES": "2"})
    _check(run, "empty choices forever", 5, SLACK, tmp_path)
    assert (
        _one_error_line(run)
        == "rlm: model call to openai/stub failed after 3 attempts: the reply had no choices"
    )


def test_bad_tool_arguments_become_an_observation(tmp_path: Path) -> None:
    replies = [
        {"tool": "execute", "raw_args": "{code: print(1"},
        {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
        {"tool": "final", "args": {"answer": "10000"}},
        ANS,
    ]
    with OpenAIStub(replies) as stub:
        run = _ask(tmp_path, _stub_args(stub), "--protocol", "tools")
    _check(run, "bad tool arguments", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == ANS
    first = run.trace["steps"][0]
    assert first["parse_error"].startswith("the arguments of `execute` are not valid JSON")
    told = stub.requests[1]["body"]["messages"][-1]
    assert told["role"] == "tool" and "not valid JSON" in told["content"]


# -- --max-time is wall-clock time ---------------------------------------------------------------


@pytest.mark.slow  # waits out a 12 s --max-time, twice
@pytest.mark.parametrize(
    ("fault", "name"),
    [({"delay": 60}, "hang"), ({"content": EX, "drip": 0.05}, "byte drip")],
)
def test_max_time_holds_against_a_stuck_provider(tmp_path: Path, fault: dict[str, Any], name: str) -> None:
    """Default request timeout (120 s) and retries: only --max-time can end this, and it does."""
    with OpenAIStub([EX], default=fault) as stub:
        # 12 s: room for the first step (a real cell) before the limit on a busy machine (9 s was
        # too little beside the gigabyte tests of the same run: nothing was established in time).
        run = _ask(tmp_path, _stub_args(stub), "--max-time", "12")
    _check(run, f"{name}, --max-time 12, default timeout", 6, 12 + 2, tmp_path)
    assert _one_error_line(run) == (
        f"rlm: the time limit of 12 s was reached (while waiting for {stub.api_base}); "
        "no answer was written; established so far (not an answer):"
    )
    assert run.proc.stdout == ""  # no draft, no synthesis: nothing printed, the findings told on stderr
    assert "10000" in run.proc.stderr
    assert run.trace["status"] == "budget" and run.trace["totals"]["elapsed_s"] <= 12.5


def test_max_time_holds_while_the_model_client_loads(tmp_path: Path) -> None:
    """A machine so slow (a cold disk, a busy neighbour) that litellm's import outlasts the limit:
    the run ends at --max-time all the same, says why, and leaves its trace."""
    slow = {
        # Before what the run would import rlm from (a checkout on PYTHONPATH, or the install).
        "PYTHONPATH": os.pathsep.join(
            p
            for p in (str(Path(__file__).resolve().parent / "slow_import"), os.environ.get("PYTHONPATH"))
            if p
        ),
        "RLM_TEST_SLOW_MODULE": "litellm",
        "RLM_TEST_SLOW_S": "60",
    }
    with OpenAIStub([EX, FIN, ANS]) as stub:
        run = _ask(tmp_path, _stub_args(stub), "--max-time", "4", env=slow)
    _check(run, "litellm's import slower than --max-time 4", 6, 4 + 2, tmp_path)
    assert _one_error_line(run) == (
        "rlm: the time limit of 4 s was reached (while loading the model client); "
        "nothing was established before it"
    )
    assert run.proc.stdout == "" and stub.requests == []
    assert run.trace["status"] == "budget" and run.trace["stop"] == "budget"
    assert 3.5 <= run.trace["totals"]["elapsed_s"] <= 4.5


def test_max_time_counts_from_the_start_of_the_command(tmp_path: Path) -> None:
    """--max-time is the user's wall clock: a process that has run for a while before `ask`
    reads the clock is that old, not new."""
    probe = (
        "import time; time.sleep(1.5)\n"
        "from rlm.cli.entry import command_began\n"
        "print(time.monotonic() - command_began())"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert 1.5 <= float(proc.stdout) < 5, proc.stdout


def test_max_cost_compares_what_the_next_call_may_cost(tmp_path: Path) -> None:
    """A priced model (gpt-4o-mini's list price) behind the stub: each call costs ~$0.0002, but may
    cost up to ~$0.0015 (its whole reply allowance), and ~$0.0025 is kept for the answer."""
    limit = 0.005
    with OpenAIStub([], default=lambda n: f"```python\nprint({n})\n```") as stub:
        run = _ask(
            tmp_path, ["-m", "openai/gpt-4o-mini", "--api-base", stub.api_base], "--max-cost", str(limit)
        )
    _check(run, f"--max-cost {limit} (priced model)", 6, SLACK, tmp_path)
    line = _one_error_line(run)
    assert re.match(
        rf"rlm: the cost limit of \${limit:g} was reached \(\$0\.\d+ spent; the next call may cost up to \$0\.\d+\)",
        line,
    ), line
    spent = run.trace["totals"]["cost_usd"]
    assert spent is not None and 0 < spent <= limit
    # Stopped long before the step cap (20): spending was far below the limit, what the next
    # call might cost was not.
    assert 2 <= len(run.trace["steps"]) < 15


# -- the tool's own words (issue 13) -------------------------------------------------------------


def test_a_dead_api_base_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    run = _ask(tmp_path, ["-m", "openai/stub", "--api-base", base])
    _check(run, "refused connection (dead --api-base)", 5, SLACK, tmp_path)
    assert (
        _one_error_line(run) == f"rlm: nothing answers at {base}: is the server running? (model openai/stub)"
    )


def test_an_unknown_model_is_said_in_our_words(tmp_path: Path) -> None:
    run = _ask(tmp_path, ["-m", "no-such-model-xyz"])
    _check(run, "unknown model string", 5, SLACK, tmp_path)
    line = _one_error_line(run)
    assert line.startswith("rlm: unknown model 'no-such-model-xyz': write it as provider/model")
    assert "LLM Provider NOT provided" not in run.proc.stderr


# -- nothing silent: the trace, the worker, a bug ------------------------------------------------


def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    if os.access("/sys", os.W_OK) and not _cannot_write("/sys"):
        pytest.skip("no directory this (root) user cannot write to")
    return Path("/sys")  # exists, and even root cannot create files in it


def _cannot_write(directory: str) -> bool:
    try:
        with open(os.path.join(directory, ".rlm-probe"), "w"):
            pass
    except OSError:
        return True
    os.unlink(os.path.join(directory, ".rlm-probe"))
    return False


def test_a_trace_that_cannot_be_written_is_said_at_once(tmp_path: Path) -> None:
    ro = _unwritable_dir(tmp_path)
    model = write_script(tmp_path / "s.json", OK_RUN)
    started = time.monotonic()
    proc = run_cli(
        ["ask", str(_log()), "lines?", "-m", model, "--trace-dir", str(ro), "--json"], cwd=tmp_path
    )
    wall = time.monotonic() - started
    TABLE.append(("read-only trace directory", proc.returncode, wall, SLACK))
    assert proc.returncode == 0, proc.stderr
    assert wall <= SLACK, f"read-only trace directory took {wall:.1f} s, over its bound of {SLACK:.1f} s"
    warning = next(ln for ln in proc.stderr.splitlines() if "trace" in ln)
    assert re.fullmatch(
        rf"rlm: warning: cannot write the trace {re.escape(str(ro))}/\S+\.json \(.+\): this run leaves no trace",
        warning,
    ), warning
    # Said at the moment it happens: before the first step, not at the end.
    assert proc.stderr.index(warning) < proc.stderr.index("n0.1 ")
    doc = json.loads(proc.stdout)
    assert doc["trace"] is None and doc["answer"] == ANS
    assert doc["warnings"] == [warning.removeprefix("rlm: warning: ")]


INJECT = """
import sys
import rlm.sandbox.client as client
import rlm.run.engine as engine
real_launch = client.Sandbox.launch
starts = []
def launch(self):
    starts.append(1)
    if len(starts) > {workers_ok}:
        raise PermissionError(13, "Permission denied", "/tmp/rlm-worker-injected")
    return real_launch(self)
client.Sandbox.launch = launch
if {crash}:
    def run(self):
        raise RuntimeError("injected bug")
    engine.Engine.run = run
from rlm.cli.app import main
sys.argv = ["rlm", *sys.argv[1:]]
main()
"""


def _run_injected(tmp_path: Path, args: list[str], *, workers_ok: int = 99, crash: bool = False) -> Run:
    code = INJECT.format(workers_ok=workers_ok, crash=crash)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    wall = time.monotonic() - started
    traces = sorted((tmp_path / "traces").glob("*.json"))
    return Run(
        proc, wall, json.loads(traces[-1].read_text()) if traces else None, traces[-1] if traces else None
    )


def test_a_child_worker_that_cannot_start_is_an_observation(tmp_path: Path) -> None:
    zk = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Zookeeper_2k.log"
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
                {"tool": "llm_query", "args": {"question": "CHILD-Q", "start_line": 1, "end_line": 2000}},
                {"tool": "final", "args": {"answer": "2000"}},
                "2000 lines [F1]",
            ]
        },
    )
    run = _run_injected(tmp_path, ["ask", str(zk), "lines?", "-m", model], workers_ok=1)
    _check(run, "a child worker cannot start", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == "2000 lines"
    observation = run.trace["steps"][1]["observation"]["preview"]
    assert observation.startswith(
        "error: the sub-investigation n1 established nothing (the sandbox could not start:"
    )
    assert "Permission denied" in observation
    assert [n["status"] for n in run.trace["nodes"]] == ["final", "sandbox"]


def test_a_root_worker_that_cannot_start_ends_in_one_line(tmp_path: Path) -> None:
    model = write_script(tmp_path / "s.json", OK_RUN)
    run = _run_injected(tmp_path, ["ask", str(_log()), "lines?", "-m", model, "--json"], workers_ok=0)
    _check(run, "the root worker cannot start", 1, SLACK, tmp_path)
    doc = json.loads(run.proc.stdout)
    assert doc["answer"] is None and doc["exit_code"] == 1 and doc["status"] == "no_answer"
    assert _one_error_line(run).startswith(
        "rlm: no answer could be established (the sandbox could not start: [Errno 13] Permission denied"
    )


def test_a_bug_ends_in_one_line_a_json_document_and_a_trace(tmp_path: Path) -> None:
    model = write_script(tmp_path / "s.json", OK_RUN)
    run = _run_injected(tmp_path, ["ask", str(_log()), "lines?", "-m", model, "--json"], crash=True)
    _check(run, "an unexpected exception (a bug)", 1, SLACK, tmp_path)
    line = run.lines[0]
    assert len(run.lines) == 1
    assert line == (
        "rlm: internal error (RuntimeError: injected bug); please report it with the trace "
        f"{run.trace_path.relative_to(tmp_path)}"
    )
    doc = json.loads(run.proc.stdout)
    assert doc["status"] == "crashed" and doc["exit_code"] == 1 and doc["answer"] is None
    assert doc["trace"] == str(run.trace_path.relative_to(tmp_path))
    assert run.trace["status"] == "crashed" and "injected bug" in run.trace["traceback"]


# -- the budget across a fan-out with children ----------------------------------------------------


# A short result first (a finding: the child's synthesis has something to write from), then
# five screens of lines (its prompts grow).
CHILD_CODES = ["print(len(context_lines))"] + [
    f"print('\\n'.join(context_lines[{a}:{a + 60}]))" for a in range(0, 300, 60)
]


def _tree_script(tmp_path: Path, *, chunk_delay: float = 0.0, child_delay: float = 0.0) -> str:
    """Root: partition_map over 40 chunks, then a child investigation over the whole file
    that reads five screens of lines (its prompts grow) before its final."""
    child_steps = [
        {
            "match": "Question: CHILD-Q",
            "times": 1,
            "reply": {"tool": "execute", "args": {"code": code}, "delay": child_delay},
        }
        for code in CHILD_CODES
    ]
    return write_script(
        tmp_path / "tree.json",
        {
            "log": "calls.jsonl",
            "replies": [
                {"tool": "partition_map", "args": {"question": "errors here?", "chunk_lines": 50}},
                {
                    "tool": "llm_query",
                    "args": {"question": "CHILD-Q count lines", "start_line": 1, "end_line": 2000},
                },
                {"tool": "final", "args": {"answer": "done"}},
            ],
            "rules": [
                {
                    "match": "final answer to a question[^\\n]*\\nuser: Question: how many",
                    "reply": "ROOT ANSWER",
                },
                {
                    "match": "final answer to a question[^\\n]*\\nuser: Question: CHILD-Q",
                    "reply": "CHILD ANSWER",
                },
                *child_steps,
                {"match": "Question: CHILD-Q", "reply": {"tool": "final", "args": {"answer": "2000"}}},
                {"match": "Excerpt", "reply": {"content": "no errors", "delay": chunk_delay}},
            ],
        },
    )


def _zk() -> Path:
    return Path(__file__).resolve().parent.parent / "fixtures" / "data" / "loghub" / "Zookeeper_2k.log"


def _calls_made(tmp_path: Path) -> int:
    return len((tmp_path / "calls.jsonl").read_text().splitlines())


def test_tree_without_limits_makes_the_calls_the_limits_cut(tmp_path: Path) -> None:
    """The baseline: root 3 turns + 40 chunks + child 7 turns + child synthesis + root synthesis,
    and its widened second pass: "ROOT ANSWER" is held by no finding (not grounded), so the
    synthesis's confidence is lowered to low and it takes one more look."""
    run = _ask(tmp_path, ["-m", _tree_script(tmp_path)], input_path=_zk())
    _check(run, "fan-out with a child, no limit", 0, SLACK, tmp_path)
    assert run.proc.stdout.strip() == "ROOT ANSWER"
    assert run.trace["synthesis"]["grounded"] is False and run.trace["synthesis"]["first_attempt"]
    assert _calls_made(tmp_path) == run.trace["totals"]["calls"] == 3 + 40 + 7 + 1 + 1 + 1


def test_max_calls_holds_across_fan_out_and_children(tmp_path: Path) -> None:
    run = _ask(tmp_path, ["-m", _tree_script(tmp_path)], "--max-calls", "46", input_path=_zk())
    _check(run, "--max-calls 46 across fan-out + child", 6, SLACK, tmp_path)
    made = _calls_made(tmp_path)
    assert made == run.trace["totals"]["calls"] and made <= 46
    assert _one_error_line(run).startswith("rlm: the limit of 46 model calls was reached")
    child = run.trace["nodes"][1]
    assert child["status"] == "budget" and child["answer_source"] != "synthesis"  # not called past the limit


def test_max_calls_holds_when_children_ask_at_the_same_time(tmp_path: Path) -> None:
    """Chunks too big for one sub-call become child investigations, eight at a time, each in its
    own thread: a call is counted from its admission, so eight children asking at once cannot all
    pass a check that only their replies would have failed (26 calls were made under a limit of 20)."""
    model = write_script(
        tmp_path / "s.json",
        {
            "log": "calls.jsonl",
            "replies": [
                {"tool": "partition_map", "args": {"question": "CHILD-Q errors here?", "chunk_lines": 250}},
                {"tool": "final", "args": {"answer": "done"}},
            ],
            "rules": [
                {"match": "final answer to a question[^\\n]*\\nuser: Question: how many", "reply": "ROOT"},
                {"match": "final answer to a question", "reply": "CHILD"},
                {
                    "match": "Question: CHILD-Q",
                    "reply": {"tool": "execute", "args": {"code": "print(len(context_lines))"}, "delay": 0.3},
                },
            ],
        },
    )
    run = _ask(
        tmp_path,
        ["-m", model],
        "--max-calls",
        "20",
        "--concurrency",
        "8",
        input_path=_zk(),
        env={"RLM_SUB_PROMPT_TOKENS": "400"},  # 250 lines of this log are too many for one sub-call
    )
    assert run.trace["nodes"][1]["parent"] == "n0"  # the chunks were children
    made = _calls_made(tmp_path)
    assert made == run.trace["totals"]["calls"] and made <= 20
    assert run.proc.returncode == 6
    assert _one_error_line(run).startswith("rlm: the limit of 20 model calls was reached")


def test_max_tokens_holds_across_fan_out_and_children(tmp_path: Path) -> None:
    limit = 24_000
    run = _ask(tmp_path, ["-m", _tree_script(tmp_path)], "--max-tokens", str(limit), input_path=_zk())
    _check(run, f"--max-tokens {limit:,} across fan-out + child", 6, SLACK, tmp_path)
    assert run.trace["totals"]["total_tokens"] <= limit
    assert _calls_made(tmp_path) == run.trace["totals"]["calls"] < 53  # fewer than the run without limits
    assert _one_error_line(run).startswith(f"rlm: the limit of {limit:,} tokens was reached")


@pytest.mark.slow  # waits out a 20 s --max-time
def test_max_time_holds_across_fan_out_and_children(tmp_path: Path) -> None:
    limit = 20
    model = _tree_script(tmp_path, chunk_delay=0.2, child_delay=4.5)
    # 20 s: the fan-out must end before the limit even when start-up takes 5-6 s (litellm 1.106's
    # import) on a machine running another test beside it, and its 40 calls cost what litellm
    # spends on each in the parent (about 0.15 s of CPU a call, 40 calls 6-7 s at concurrency 8).
    # 14 s was missed once under the slow suite's load (nothing established in time). The child
    # (5 steps of 4.5 s, begun after the fan-out) cannot finish within it either way.
    run = _ask(tmp_path, ["-m", model], "--max-time", str(limit), "--concurrency", "8", input_path=_zk())
    _check(run, f"--max-time {limit} across fan-out + child (slow replies)", 6, limit + 2, tmp_path)
    assert _one_error_line(run).startswith(f"rlm: the time limit of {limit} s was reached")
    assert run.proc.stdout.strip() == "ROOT ANSWER"  # the answer, written in the time kept for it
    assert run.trace["totals"]["elapsed_s"] <= limit + 0.5


# -- Ctrl-C once the answer is out -----------------------------------------------------------------


def test_ctrl_c_after_the_summary_keeps_the_exit_code(tmp_path: Path) -> None:
    model = write_script(tmp_path / "s.json", OK_RUN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm", "ask", str(_log()), "lines?", "-m", model],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    interrupted: float | None = None
    for line in proc.stderr:
        if " · trace " in line:  # the summary: the run is over, the process is ending
            proc.send_signal(signal.SIGINT)
            interrupted = time.monotonic()
            break
    out, _ = proc.communicate(timeout=30)
    assert interrupted is not None, "no summary line on stderr"
    after = time.monotonic() - interrupted
    TABLE.append(("Ctrl-C after the summary (time to exit after it)", proc.returncode, after, 2.0))
    assert proc.returncode == 0  # not -2 (killed by the signal)
    assert after <= 2.0, f"the process took {after:.1f} s to end after Ctrl-C"
    assert out.strip() == ANS


def test_zz_print_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's table (scenario, exit, wall time, bound), shown with `pytest -s`."""
    with capsys.disabled():
        print("\n| scenario | exit | wall s | bound s |\n|---|---|---|---|")
        for name, code, wall, bound in TABLE:
            print(f"| {name} | {code} | {wall:.1f} | {bound:.1f} |")
