"""Ctrl-C during `rlm ask -m local`: "stopping…" at once, exit 130, no local model server left behind.

The local model server here is the real `python -m rlm.local.xserve` child,
started by the real `rlm.local.server` code in its own process group, with a
stand-in `xllamacpp` module whose server answers `/v1/models` and then never
answers a chat request: the run is stuck waiting for the model, as with a
slow real model, when Ctrl-C comes. (tests/test_interrupt.py covers the sandbox worker.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import cli_env

from rlm.local.server import NATIVE, installed_backend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process tree read from /proc")

FAKE_XLLAMACPP = textwrap.dedent(
    """
    import json, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    __version__ = "0-test"

    class _Namespace:
        pass

    class CommonParams:
        def __init__(self):
            self.model = _Namespace()
            self.cpuparams = _Namespace()
            self.cpuparams_batch = _Namespace()

    class _Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "local", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            time.sleep(600)  # a model that takes its time

    class Server:
        def __init__(self, params):
            self._httpd = ThreadingHTTPServer(("127.0.0.1", params.port), _Handler)
            threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
            self.listening_address = f"http://127.0.0.1:{params.port}"
    """
)


def _start(tmp_path: Path) -> subprocess.Popen[bytes]:
    if installed_backend() is NATIVE:
        pytest.skip("the native server is installed here and would serve instead of the stand-in")
    fake = tmp_path / "fake"
    (fake / "xllamacpp").mkdir(parents=True)
    (fake / "xllamacpp" / "__init__.py").write_text(FAKE_XLLAMACPP)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    data = tmp_path / "notes.txt"
    data.write_text("alpha\nbeta\n")
    env = cli_env(tmp_path, {"PYTHONPATH": str(fake), "NO_COLOR": "1"})
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlm",
            "ask",
            str(data),
            "how many lines?",
            "-m",
            "local",
            "--gguf",
            str(gguf),
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: the test's signals reach rlm only
    )


def _server_of(proc: subprocess.Popen[bytes], timeout: float = 90) -> list[int]:
    """Wait until the stand-in server answers (its xserve child is up), then a moment more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = descendants(proc.pid)
        if any(b"rlm.local.xserve" in _cmdline(pid) for pid in kids):
            time.sleep(3)  # the health check passes and the first chat request is sent
            return descendants(proc.pid)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the local server never started")


def descendants(root: int) -> list[int]:
    """Every live process below `root`, found through /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _read_stderr_until(
    proc: subprocess.Popen[bytes], needle: bytes, timeout: float
) -> tuple[bytes, float | None]:
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    seen = b""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        chunk = proc.stderr.read()
        if chunk:
            seen += chunk
            if needle in seen:
                return seen, time.monotonic() - started
        time.sleep(0.02)
    return seen, None


def _wait_all_gone(pids: list[int], timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _cleanup(proc: subprocess.Popen[bytes], pids: list[int]) -> None:
    for pid in [proc.pid, *pids]:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=10)


@pytest.mark.timeout(240)
def test_ctrl_c_says_stopping_at_once_and_leaves_no_process(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    kids: list[int] = []
    try:
        kids = _server_of(proc)
        proc.send_signal(signal.SIGINT)
        seen, after = _read_stderr_until(proc, "stopping…".encode(), timeout=10)
        assert after is not None, seen.decode(errors="replace")
        assert after < 1.0, f"'stopping…' came {after:.2f} s after Ctrl-C"
        assert proc.wait(timeout=60) == 130
        rest = seen + (proc.stderr.read() or b"")  # type: ignore[union-attr]
        assert b"interrupted; the trace so far is kept" in rest, rest
        assert _wait_all_gone(kids) == [], "left behind: " + ", ".join(
            _cmdline(pid).replace(b"\0", b" ").decode() for pid in kids if _alive(pid)
        )
    finally:
        _cleanup(proc, kids)


@pytest.mark.timeout(240)
def test_a_second_ctrl_c_quits_at_once_and_leaves_no_process(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    kids: list[int] = []
    try:
        kids = _server_of(proc)
        proc.send_signal(signal.SIGINT)
        _read_stderr_until(proc, "stopping…".encode(), timeout=10)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert proc.wait(timeout=10) == 130
        assert time.monotonic() - started < 3
        assert _wait_all_gone(kids, timeout=5) == [], "left behind after a second Ctrl-C"
    finally:
        _cleanup(proc, kids)
