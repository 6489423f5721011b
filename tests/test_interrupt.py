"""Ctrl-C as a user presses it: said at once, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, alive, child_workers, start_cli, wait_for, write_script

SPIN = "x = 0\nwhile True:\n    x += 1"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A run whose one cell spins: the run, and its worker once the cell is spinning."""
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": SPIN}}, "x"])
    args = ["ask", str(FIXTURES / "access.log"), "q", "-m", model, "--timeout", "60"]
    proc = start_cli(args, cwd=tmp_path)
    workers: list[int] = []

    def started() -> bool:
        workers[:] = child_workers(proc.pid)
        return bool(workers)

    wait_for(started, proc, seconds=30, never="the worker never started")
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
    assert not any(alive(pid) for pid in workers)


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
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)


def test_the_worker_dies_when_rlm_is_killed_outright(tmp_path: Path) -> None:
    # SIGKILL leaves rlm no time to stop its worker: the kernel must (the parent-death signal,
    # which a uid drop clears, so it is armed again after the drop).
    proc, workers = _start(tmp_path)
    time.sleep(1.5)  # the cell is well into its spin, far from reading the closed pipe
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)


SWALLOWED_STOP = r"""
import signal, time
from rlm.cli import app
from rlm.errors import Interrupted

signal.signal(signal.SIGTERM, app._sigterm_as_interrupt)
# Code in a frame of the import machinery, run where exceptions are swallowed (as a module
# lock's weakref callback is): a stop raised there would be lost.
inside = compile(
    "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
    "t = time.monotonic()\nwhile time.monotonic() - t < 0.2: pass",
    "<frozen importlib._bootstrap>",
    "exec",
)

class Callback:
    def __del__(self):
        exec(inside)

try:
    Callback()
    t = time.monotonic()
    while time.monotonic() - t < 5:
        pass
    print("went on")
except Interrupted as stop:
    print("stopped", stop.exit_code)
"""


def test_a_stop_that_lands_inside_the_import_machinery_is_not_lost(tmp_path: Path) -> None:
    """A signal handled in a frame of Python's import machinery is sent again to land outside it:
    raised there, the stop could be swallowed and the run go on."""
    proc = subprocess.run(
        [sys.executable, "-c", SWALLOWED_STOP], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "stopped 143", proc.stdout + proc.stderr
    assert "Exception ignored" not in proc.stderr


STOP_DURING_AN_IMPORT = r"""
import signal, sys, time
from rlm.cli import app
from rlm.errors import Interrupted

signal.signal(signal.SIGTERM, app._sigterm_as_interrupt)
sys.path.insert(0, ".")
try:
    import slow_module
    t = time.monotonic()
    while time.monotonic() - t < 5:
        pass
    print("went on")
except Interrupted as stop:
    print("stopped", stop.exit_code, "whole" if "slow_module" in sys.modules else "cut")
"""

# A module whose import runs code of its own, as an extension module's does (DuckDB's builds
# enums from inside its native code, where a raised stop aborts the process): the stop lands in
# that code's frame, not in the import machinery's.
SLOW_MODULE = r"""
import os, signal, time

def build():
    os.kill(os.getpid(), signal.SIGTERM)
    t = time.monotonic()
    while time.monotonic() - t < 0.3:
        pass

build()
"""


def test_a_stop_during_an_import_waits_for_the_import_to_end(tmp_path: Path) -> None:
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    proc = subprocess.run(
        [sys.executable, "-c", STOP_DURING_AN_IMPORT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "stopped 143 whole", proc.stdout + proc.stderr
