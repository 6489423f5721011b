"""Ctrl-C as a user presses it: said at once, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, cli_env, write_script

SPIN = "x = 0\nwhile True:\n    x += 1"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"rlm.sandbox.worker.main" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": SPIN}}, "x"])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlm",
            "ask",
            str(FIXTURES / "access.log"),
            "q",
            "-m",
            model,
            "--timeout",
            "60",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    workers: list[int] = []
    while time.monotonic() < deadline and not workers:
        time.sleep(0.2)
        workers = _children(proc.pid)
    assert workers, "the worker never started"
    time.sleep(0.5)  # the cell is spinning now
    return proc, workers


def test_ctrl_c_says_stopping_at_once_and_leaves_no_worker(tmp_path: Path) -> None:
    proc, workers = _start(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "rlm: stopping… (Ctrl-C again to quit at once)" in err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not any(_alive(pid) for pid in workers)


def test_pressing_ctrl_c_twice_ends_at_once_and_the_worker_dies_with_rlm(tmp_path: Path) -> None:
    proc, workers = _start(tmp_path)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.05)  # two presses, not one: signals sent together arrive as one
    os.kill(proc.pid, signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 5
    # The first press usually finishes the stop before the second lands; either way: 130, at once.
    assert proc.returncode == 130 and "rlm: stopping…" in err and "Traceback" not in err
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)


def test_the_worker_dies_when_rlm_is_killed_outright(tmp_path: Path) -> None:
    # SIGKILL leaves rlm no time to stop its worker: the kernel must (the parent-death signal,
    # which a uid drop clears, so it is armed again after the drop).
    proc, workers = _start(tmp_path)
    time.sleep(1.5)  # the cell is well into its spin, far from reading the closed pipe
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)
