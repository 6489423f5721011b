"""One snapshot per run, and stops that stop: the CLI as users run it, on real files.

A stop (Ctrl-C, SIGTERM from `timeout`) during the table build of a big file ends the run
within 2 s with 130 or 143 and its trace; a file appended to or truncated during a run is
said (stderr, --json warnings) and nothing of the run is kept in memory; a log written to
while it is read still gets a table, of the lines that were indexed.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bigfiles import apache_log
from conftest import FIXTURES, start_cli, table_building, traces_in, wait_for, write_script

ACCESS = FIXTURES / "access.log"
COUNT_404 = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
COUNT = 'print("rows", sql("SELECT count(*) FROM log")[0][0])'
BIG = 160 * 1024 * 1024  # a build of a few seconds on two shared cores
QUESTION = "How many requests returned status 404?"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_during_the_table_build_ends_the_run_within_two_seconds(
    tmp_path: Path, huge_files: Callable[..., Path], sig: signal.Signals, code: int
) -> None:
    big = huge_files("access-160m.log", apache_log, BIG)
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": COUNT}}, "x"])
    proc = start_cli(["ask", str(big), QUESTION, "-m", model], cwd=tmp_path)
    wait_for(lambda: table_building(tmp_path / ".cache"), proc)
    time.sleep(0.4)  # the parts' queries are running
    assert proc.poll() is None
    proc.send_signal(sig)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == code, err
    assert took < 2.0, f"the run went on for {took:.1f} s after the signal"
    assert "Traceback" not in err and "no table" not in err
    [trace] = traces_in(tmp_path)
    assert trace["status"] == "interrupted" and trace["exit_code"] == code


@pytest.mark.parametrize("change", ["appended to", "truncated"])
def test_a_file_changed_during_the_run_is_said_and_kept_out_of_memory(tmp_path: Path, change: str) -> None:
    log = tmp_path / "access.log"
    log.write_bytes(ACCESS.read_bytes())
    calls = tmp_path / "calls.jsonl"
    script = {
        "log": str(calls),
        "replies": [
            # The file changes while this first reply is on its way (see below).
            {"tool": "execute", "args": {"code": COUNT_404}, "delay": 1.5},
            {"tool": "final", "args": {"answer": "35"}},
            json.dumps({"answer": "35", "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = start_cli(["ask", str(log), QUESTION, "-m", model, "--json"], cwd=tmp_path)
    wait_for(lambda: calls.exists() and calls.read_text().strip() != "", proc)
    if change == "appended to":
        with open(log, "ab") as fh:
            fh.write(ACCESS.read_bytes()[:20000].rsplit(b"\n", 1)[0] + b"\n")
    else:  # logrotate's copytruncate: the file is emptied in place, and written again
        with open(log, "r+b") as fh:
            fh.truncate(0)
            fh.write(b'127.0.0.1 - - [01/Jan/2025:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "x"\n')
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    said = f"access.log was {change} during the run"
    assert said in err
    assert any(said in w for w in doc["warnings"]), doc["warnings"]
    assert any("nothing of this run is kept in memory" in w for w in doc["warnings"])
    [trace] = traces_in(tmp_path)
    assert any(said in w for w in trace["warnings"])
    assert trace["memory"]["stored"] == []


@pytest.mark.parametrize("mb", [40, 80], ids=["built-before-the-first-turn", "built-beside-it"])
def test_a_log_written_to_while_it_is_read_still_gets_a_table_of_the_indexed_lines(
    tmp_path: Path, huge_files: Callable[..., Path], mb: int
) -> None:
    """From 64 MB the table builds while the model's first turn starts (rlm.input.tablejob):
    appended to during that build, the log's table still holds exactly the indexed lines."""
    log = tmp_path / "growing.log"
    log.write_bytes(huge_files(f"access-{mb}m.log", apache_log, mb * 1024 * 1024).read_bytes())
    more = ACCESS.read_bytes()
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": COUNT}}, "x"])
    proc = start_cli(["ask", str(log), QUESTION, "-m", model, "--no-memory"], cwd=tmp_path)
    stop = threading.Event()

    def writer() -> None:  # a server still logging while the table is built
        while not stop.is_set():
            with open(log, "ab") as fh:
                fh.write(more)
            time.sleep(0.05)

    wait_for(lambda: table_building(tmp_path / ".cache"), proc)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join()
    _, err = proc.communicate(timeout=120)
    assert "no table" not in err, err
    [trace] = traces_in(tmp_path)
    lines = trace["input"]["lines"]
    steps = json.dumps(trace)
    assert f"rows {lines}" in steps, "sql() did not answer over the indexed lines"
    # Seen as the file was profiled (a snapshot of its indexed bytes), or as the run ended.
    assert "was written to while it was read" in err or "growing.log was appended to during the run" in err, (
        err
    )
