"""The parent's handle on a sandbox worker: start, send, time out, kill, restart.

The worker is hostile until proven otherwise: its replies are parsed as JSON
(never unpickled or evaluated), their size is capped, and on a timeout, EOF,
oversize or malformed reply the whole process group is killed and a fresh
worker started. Model calls the worker asks for while a cell runs are served
here through `bridge`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import rlm
from rlm.sandbox.oslimits import NOBODY_UID

# Kept equal to the worker's MAX_MESSAGE_BYTES: the worker never sends more.
MAX_REPLY_BYTES = 64_000_000
START_TIMEOUT = 120.0
# Extra wall-clock time over the per-cell CPU limit, for the kernel's SIGKILL to land first.
WALL_GRACE = 2.0

Bridge = Callable[[str, dict[str, Any]], Any]
# What a worker whose table is still being built is given at its sql(): waits for the build,
# then (the table's path, or None and why there is none, early); with `whole` False, the table
# without its format's later columns (early True) if that is stored before the whole one is.
TableWait = Callable[[bool], tuple[str | None, str | None, bool]]
# What a worker whose input's line index is still being made is given before its spec is sent:
# waits for the index, then the spec over it.
IndexWait = Callable[["WorkerSpec"], "WorkerSpec"]


class WorkerLost(Exception):
    """The worker died, timed out or misbehaved; it has been killed and must be restarted."""


class InputShrank(WorkerLost):
    """The worker was killed by SIGBUS: the input it maps shrank under it (a copytruncate).

    A restarted worker would map other bytes than the run's index describes, so this is no
    fault to restart from: the run's one snapshot of its input is gone."""


@dataclass
class WorkerSpec:
    path: str
    encoding: str = "utf-8"
    start_line: int | None = None
    end_line: int | None = None
    index_path: str | None = None
    memory_bytes: int = 0
    drop_to_uid: int | None = None
    os_limits: bool = True
    table_path: str | None = None  # the input's DuckDB table (rlm.input.tables), opened before lock-down
    table_error: str | None = None  # why the input has no table, for sql() to say
    # The table is still being built (rlm.input.tablejob): the worker's first sql() asks for it,
    # and the Sandbox places it in a folder of the worker's, the one Landlock leaves readable.
    table_pending: bool = False
    # The input's line index is still being made (rlm.input.glance): the worker is started, and
    # sent its spec once the Sandbox's `settle` gives the index.
    index_pending: bool = False
    # Several inputs read as one (rlm.input.parts): [name, first line, last line] of each file.
    parts: list[list[Any]] | None = None


def _worker_env() -> dict[str, str]:
    """A minimal environment: no provider keys, no user site, nothing inherited by accident."""
    package_root = str(Path(rlm.__file__).resolve().parent.parent)
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": package_root,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        # numpy's BLAS would start a thread per core at import; the worker needs none.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        # One malloc arena: the scan threads would each reserve 64 MB of address space
        # for their own, out of the worker's address-space limit.
        "MALLOC_ARENA_MAX": "1",
    }


class Sandbox:
    def __init__(
        self,
        spec: WorkerSpec,
        bridge: Bridge | None = None,
        table: TableWait | None = None,
        settle: IndexWait | None = None,
    ) -> None:
        self.spec = spec
        self.bridge = bridge
        self.table = table
        self.settle = settle
        self._unsent = False  # launched, its spec held back until the line index is made
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: str | None = None
        self.ready: dict[str, Any] = {}
        self.restarts = 0
        self.startup_s = 0.0
        self._launched = 0.0
        self._buf = b""
        self._table_file = ""  # the name the table is placed under in the worker's table folder
        self._table_placed = ""  # "", "early" or "whole": which table the worker was handed

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the worker process and hand it its spec, without waiting for it to be ready: it
        imports, maps the input and locks itself down meanwhile. Called from the thread that
        keeps the worker: the kernel kills the worker when that thread ends (PR_SET_PDEATHSIG
        follows the thread that forked it, not the process)."""
        self._launched = time.monotonic()
        self.workdir = tempfile.mkdtemp(prefix="rlm-worker-")
        os.chmod(self.workdir, 0o755)
        log = open(os.path.join(self.workdir, "worker.log"), "wb")  # noqa: SIM115 (kept for the process)
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-B", "-m", "rlm.sandbox.worker.main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=self.workdir,
            env=_worker_env(),
            start_new_session=True,
            close_fds=True,
        )
        log.close()
        self._buf = b""
        # The worker imports meanwhile; it maps the input once told where its index is.
        self._unsent = self.spec.index_pending and self.settle is not None
        if not self._unsent:
            self._send_spec()

    def _send_spec(self) -> None:
        assert self.workdir is not None, "launched first"
        sent = asdict(self.spec)
        if self.spec.table_pending and self.table is not None:
            # Nobody (a worker that drops root) may pass through, not list: the table's name is
            # random, chosen now, so that the worker's DuckDB is told that one path (and its
            # write-ahead log's) before it locks itself, and can reach no other.
            sent["table_dir"] = os.path.join(self.workdir, "table")
            sent["table_file"] = f"{secrets.token_hex(16)}.duckdb"
            os.mkdir(sent["table_dir"])
            os.chmod(sent["table_dir"], 0o711 if self._drops_root() else 0o700)
            self._table_file = sent["table_file"]
            self._table_placed = ""
        self._send(sent)

    def wait_ready(self) -> dict[str, Any]:
        """Wait for a launched worker's ready message; raises WorkerLost (the worker killed), and
        what the wait for the input's line index raises (InputError: the file changed)."""
        if self._unsent and self.settle is not None:
            self.spec = self.settle(self.spec)
            self._unsent = False
            self._send_spec()
        msg = self._read(START_TIMEOUT)
        if not msg.get("ready"):
            self.kill()
            raise WorkerLost(f"the sandbox could not open the input: {msg.get('error', 'unknown error')}")
        self.ready = msg
        now, at = time.monotonic(), msg.get("at")
        # The worker's own word for when it was ready, if it is a time between its launch and now.
        ready_at = float(at) if isinstance(at, int | float) and self._launched <= at <= now else now
        self.startup_s = ready_at - self._launched
        return msg

    def restart(self) -> dict[str, Any]:
        self.kill()
        self.restarts += 1
        return self.start()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream:
                        stream.close()
                except OSError:
                    pass
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    close = kill

    def log_tail(self, lines: int = 5) -> str:
        if not self.workdir:
            return ""
        try:
            text = Path(self.workdir, "worker.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    # -- requests -----------------------------------------------------------
    def request(self, op: str, *, timeout: float, **args: Any) -> dict[str, Any]:
        """Send one request; serve bridge calls until its reply arrives.

        The timeout counts the worker's own time: time spent serving a model
        call for it is not charged to the cell.
        """
        if self.proc is None:
            self.start()
        self._send({"op": op, **args})
        remaining = timeout
        while True:
            started = time.monotonic()
            msg = self._read(remaining)
            remaining -= time.monotonic() - started
            if "bridge" not in msg:
                if msg.get("exhausted"):
                    self.restart()
                    msg["restarted"] = "the sandbox ran out of memory"
                return msg
            self._serve_bridge(msg)

    def _serve_bridge(self, msg: dict[str, Any]) -> None:
        name, args = msg.get("bridge"), msg.get("args")
        if name == "table" and self.table is not None and self.spec.table_pending:
            whole = not isinstance(args, dict) or args.get("whole") is not False
            self._send(self._place_table(whole))
            return
        if self.bridge is None or not isinstance(name, str) or not isinstance(args, dict):
            self._send({"bridge_error": f"{name} is not available here"})
            return
        try:
            result = self.bridge(name, args)
        except WorkerLost:
            raise
        except Exception as exc:  # the model code sees the error; the run goes on
            self._send({"bridge_error": getattr(exc, "message", None) or str(exc)})
            return
        self._send({"bridge_result": result})

    def _place_table(self, whole: bool) -> dict[str, Any]:
        """The built table, put where the worker may read it: a hard link in its table folder
        (the same file, no copy), or a copy where the folder is on another filesystem or the
        worker drops root for nobody (a link would hand nobody the cached file's inode).
        Placed once under one name: a worker asking again (its first sql() interrupted) gets
        the same name. With `whole` False the early table (without the format's later columns)
        may come first; the whole table then takes its name (the worker opens it again)."""
        assert self.table is not None and self.workdir is not None
        if self._table_placed == "whole":
            return {"bridge_result": {"name": self._table_file, "early": False}}
        path, error, early = self.table(whole)
        if path is None:
            return {"bridge_error": error or "no table was built"}
        if early and self._table_placed == "early":
            return {"bridge_result": {"name": self._table_file, "early": True}}
        dest = os.path.join(self.workdir, "table", self._table_file)
        try:
            owner = (self.spec.drop_to_uid or NOBODY_UID) if self._drops_root() else None
            if self._table_placed:  # the early table is there, and open in the worker
                with contextlib.suppress(FileNotFoundError):  # a failed attempt's
                    os.unlink(dest + ".whole")
                _place(path, dest + ".whole", owner)
                os.replace(dest + ".whole", dest)
            else:
                _place(path, dest, owner)
        except OSError as exc:
            if early:  # the early table went with its build, which has ended: the whole one
                return self._place_table(True)
            return {"bridge_error": f"the table could not be handed to the sandbox ({exc.strerror or exc})"}
        self._table_placed = "early" if early else "whole"
        return {"bridge_result": {"name": self._table_file, "early": early}}

    def _drops_root(self) -> bool:
        """Whether the worker starts as root and becomes another user (rlm.sandbox.oslimits)."""
        return os.geteuid() == 0 and self.spec.drop_to_uid != 0

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._lost("the sandbox worker exited")

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + max(0.0, timeout)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._lost(f"timed out after {timeout:.0f} s")
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = self.proc.poll()
                    if code is None:
                        try:
                            code = self.proc.wait(timeout=1)
                        except subprocess.TimeoutExpired:
                            code = None
                    self._lost(_describe_exit(code), shrank=code == -signal.SIGBUS)
                self._buf += chunk
                if len(self._buf) > MAX_REPLY_BYTES:
                    self._lost(f"sent a reply over {MAX_REPLY_BYTES:,} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            self._lost("sent a malformed reply")
        if not isinstance(msg, dict):
            self._lost("sent a malformed reply")
        reply: dict[str, Any] = msg
        return reply

    def _lost(self, why: str, *, shrank: bool = False) -> None:
        tail = self.log_tail()
        self.kill()
        lost = InputShrank if shrank else WorkerLost
        raise lost(why + (f" ({tail.splitlines()[-1][:200]})" if tail else ""))

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _place(src: str, dest: str, owner: int | None) -> None:
    """`src` at `dest`, read-only (0400): a hard link (the cached table is 0400 itself), or a
    copy where linking is not possible; with `owner` (the uid a worker drops root for), always
    a copy, made 0400 and root's until it is whole, then handed to that uid."""
    if owner is None:
        try:
            os.link(src, dest)
            return
        except OSError:
            pass
    with open(src, "rb") as fh:  # first: a source gone leaves nothing at `dest`
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
        try:
            with os.fdopen(fd, "wb") as out:
                _copy_within_kernel(fh, out)
                os.fchmod(out.fileno(), 0o400)
                if owner is not None:
                    os.fchown(out.fileno(), owner, -1)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(dest)
            raise


def _copy_within_kernel(src: BinaryIO, out: BinaryIO) -> None:
    """Copy `src` into `out` by copy_file_range (the bytes never enter this process: a 441 MB
    table took 0.17-0.21 s against 0.22-2.0 s read and written through a buffer), falling back
    to a buffered copy where the kernel or the filesystem does not offer it."""
    try:
        while os.copy_file_range(src.fileno(), out.fileno(), 64 << 20):
            pass
    except OSError:
        src.seek(0)
        out.seek(0)
        out.truncate()
        shutil.copyfileobj(src, out, 16 << 20)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the sandbox worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": " (killed: memory or CPU limit)",
            "SIGXCPU": " (CPU time limit)",
            "SIGSEGV": "",
            # The worker maps the input: reading past its end after it shrank (a copytruncate).
            "SIGBUS": " reading the input, which shrank under it",
        }
        return f"the sandbox worker was killed by {name}{hint.get(name, '')}"
    return f"the sandbox worker exited with code {code}"
