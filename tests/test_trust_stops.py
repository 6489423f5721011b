"""Stops that stop, at every stage of a run: the CLI as users run it, signalled as users signal it.

Ctrl-C (SIGINT) or SIGTERM (`timeout`, a service manager) during the line index scan of a big
file, in a cell that spins, in a model call that hangs, in a fan-out whose child runs hang (in
threads of their own) and in a synthesis call that hangs ends the run within 2 s: exit 130 for
SIGINT, 143 for SIGTERM, the trace on disk with status "interrupted", no traceback. (The table build is covered by tests/test_trust_snapshot.py.)
The model is a real HTTP server on 127.0.0.1 speaking the OpenAI API (tests/openai_stub.py);
the stage is known from the stub's own log of requests, the worker process, or the input
mapped into rlm's memory (the scan reads it through mmap).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bigfiles import apache_log
from conftest import FIXTURES, child_workers, start_cli, wait_for, write_script
from openai_stub import OpenAIStub

SIGNALS = [pytest.param(signal.SIGINT, 130, id="SIGINT"), pytest.param(signal.SIGTERM, 143, id="SIGTERM")]
EX = "```python\nprint(len(context_lines))\n```"
FIN = 'FINAL("10000")'
HANG = {"delay": 120}  # longer than any test: the stub ends it when the test is over
SYNTHESIS = "You write the final answer"
SCAN_SIZE = 300 * 1024 * 1024  # a scan of a few tenths of a second on two shared cores


def _start(
    tmp_path: Path, path: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`rlm ask PATH "How many lines?" FLAGS`, its cells allowed far longer than any stop takes."""
    return start_cli(["ask", str(path), "How many lines?", *flags, "--timeout", "90"], cwd=tmp_path, env=env)


def _reached(what: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Wait for a stage of the run; polled often, as some stages last a fraction of a second."""
    wait_for(what, proc, poll=0.005, never="the stage was never reached")


def _stop_and_check(proc: subprocess.Popen[str], tmp_path: Path, sig: signal.Signals, code: int) -> None:
    """What a stop owes the user: its code within 2 s, no traceback, the trace kept and saying so."""
    proc.send_signal(sig)
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - sent
    assert proc.returncode == code, err
    assert took < 2.0, f"the run went on for {took:.1f} s after the signal"
    assert "Traceback" not in err, err
    traces = sorted((tmp_path / "traces").glob("*.json"))
    assert len(traces) == 1, err
    trace = json.loads(traces[0].read_text())
    assert trace["status"] == "interrupted" and trace["exit_code"] == code, (trace["status"], err)


def _mapped(pid: int, path: Path) -> bool:
    """The input is mapped into rlm's memory: the line index scan reads it (source.py _scan)."""
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _asked(stub: OpenAIStub, system_starts: str | None = None) -> bool:
    """The stub received a request (whose system prompt starts so, when given)."""
    for request in list(stub.requests):
        messages: list[dict[str, Any]] = request["body"].get("messages", [])
        system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        if system_starts is None or system.startswith(system_starts):
            return True
    return False


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_stop_during_the_line_index_scan_ends_the_run(
    tmp_path: Path, huge_files: Callable[..., Path], sig: signal.Signals, code: int
) -> None:
    big = huge_files("access-300m.log", apache_log, SCAN_SIZE)
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": "print(1)"}}, "x"])
    # A cold cache (each test has its own) and no table: the scan is what runs.
    proc = _start(tmp_path, big, "-m", model, env={"RLM_TABLES": "off"})
    _reached(lambda: _mapped(proc.pid, big), proc)
    _stop_and_check(proc, tmp_path, sig, code)


def test_sigterm_in_a_spinning_cell_ends_the_run(tmp_path: Path) -> None:
    spin = "x = 0\nwhile True:\n    x += 1"
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": spin}}, "x"])
    proc = _start(tmp_path, FIXTURES / "access.log", "-m", model)
    _reached(lambda: bool(child_workers(proc.pid)), proc)
    time.sleep(0.5)  # the cell is spinning now
    _stop_and_check(proc, tmp_path, signal.SIGTERM, 143)


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_stop_during_a_model_call_that_hangs_ends_the_run(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    with OpenAIStub([], default=HANG) as stub:
        proc = _start(tmp_path, FIXTURES / "access.log", "-m", "openai/stub", "--api-base", stub.api_base)
        _reached(lambda: _asked(stub), proc)
        time.sleep(0.2)  # rlm waits for the reply
        _stop_and_check(proc, tmp_path, sig, code)


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_stop_during_a_synthesis_that_hangs_ends_the_run(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    with OpenAIStub([EX, FIN], default=HANG) as stub:
        proc = _start(tmp_path, FIXTURES / "access.log", "-m", "openai/stub", "--api-base", stub.api_base)
        _reached(lambda: _asked(stub, SYNTHESIS), proc)
        time.sleep(0.2)
        _stop_and_check(proc, tmp_path, sig, code)


@pytest.mark.parametrize(("sig", "code"), SIGNALS)
def test_a_stop_during_a_fan_out_of_child_runs_that_hang_ends_the_run(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """partition_map's chunks too big for one call are investigated by child runs in threads of
    their own: a signal reaches only the main thread, and the stop must not wait for them."""
    cell = 'print(partition_map("Which paths are asked for?", chunk_lines=500))'
    with OpenAIStub([f"```python\n{cell}\n```"], default=HANG) as stub:
        proc = _start(tmp_path, FIXTURES / "access.log", "-m", "openai/stub", "--api-base", stub.api_base)
        _reached(lambda: len(stub.requests) >= 2, proc)  # the step, then the fan-out
        time.sleep(0.2)
        _stop_and_check(proc, tmp_path, sig, code)
