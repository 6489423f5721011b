"""The warm process: litellm and the run's modules imported once, a child forked per `rlm ask`.

`python -m rlm.cli.warm_server [IDLE_SECONDS]`, started by `rlm warm start`. It imports what
every run imports (litellm, the engine, DuckDB, numpy, the tokenizer's tables), then listens on
its socket (rlm.cli.warm_client) until it has been idle for IDLE_SECONDS, is told to stop, or
gets SIGTERM. For each run it forks: the child takes the client's standard streams, working
directory, environment, umask and arguments, and runs the CLI's `main()` as a fresh process
would from there on; the server waits for it (a pidfd) and sends its exit status back. A
signal the client passes on is sent to the child; a client that goes away has its run stopped
(SIGTERM: the run ends as interrupted, its trace finished). Stopping the server stops its runs.

The fork is why this process keeps no thread: it holds none when it forks (checked at start),
so the child has no lock held by a thread that does not exist in it.

What a run reads from its environment is read in the child, after the client's environment
replaced the server's; what litellm read at its import (its own LITELLM_* settings) is the
server's. A message is trusted only from a process of the same uid and rights (SO_PEERCRED,
then /proc: _same_rights), and only in the shape written here; anything else is refused, and
the client then runs in-process.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import selectors
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from rlm.cli import warm_client as wire
from rlm.privatefiles import make_private_dirs

DEFAULT_IDLE_S = 30 * 60
_STOP_GRACE_S = 5.0
_FIRST_MESSAGE_S = 2.0  # a client sends its request as it connects; one that does not is let go
# What a client may pass on, and how it reaches the run: SIGHUP as SIGTERM (a run ends on it,
# as alone), Ctrl-Z as SIGSTOP (the run handles no SIGTSTP), a stop and a continue to the run's
# process group, as a terminal sends them to its foreground group.
_PASSABLE = {
    int(signal.SIGINT): signal.SIGINT,
    int(signal.SIGTERM): signal.SIGTERM,
    int(signal.SIGHUP): signal.SIGTERM,
    int(signal.SIGWINCH): signal.SIGWINCH,
    int(signal.SIGTSTP): signal.SIGSTOP,
    int(signal.SIGCONT): signal.SIGCONT,
}
_STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
# The fields of /proc/PID/status that say what a process may do, and its namespaces: a client
# must have the server's, or a same-uid process with fewer rights (no capabilities, another
# group, a seccomp filter, a container's mounts) would get a run made with the server's.
_CREDENTIALS = (
    "Uid",
    "Gid",
    "Groups",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
)
_NAMESPACES = ("mnt", "net", "pid", "user", "uts", "ipc", "cgroup")


@dataclass
class _Run:
    pid: int
    conn: socket.socket
    pidfd: int


def preload() -> None:
    """Import and warm what every run needs, so that a forked child finds it done."""
    import rlm.cli.app  # noqa: F401  (the CLI, typer and the settings)
    import rlm.mcp.child  # noqa: F401  (the MCP server's runs)
    import rlm.run.wiring  # noqa: F401  (the engine, the input's modules, DuckDB, numpy)
    from rlm.model.client import import_ahead
    from rlm.model.tokens import count_text

    import_ahead()
    count_text("warm")  # the tokenizer's tables


def _valid_run(message: dict[str, Any]) -> bool:
    """A run request in the one shape the client sends: argv, cwd and env as strings, a umask."""
    argv, cwd, env, umask = message.get("run"), message.get("cwd"), message.get("env"), message.get("umask")
    return (
        isinstance(argv, list)
        and len(argv) >= 2
        and all(isinstance(a, str) for a in argv)
        and argv[1] in wire.WARM_COMMANDS
        and isinstance(cwd, str)
        and isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        and type(umask) is int
        and 0 <= umask <= 0o777
        and isinstance(message.get("ignored", []), list)
        and all(type(n) is int and n in _PASSABLE for n in message.get("ignored", []))
    )


def _become_the_run(message: dict[str, Any], fds: list[int], server_pid: int) -> None:
    """In the forked child, the server's descriptors closed and the stops still blocked: take
    the client's streams, place, environment and arguments, run the CLI, and never return
    (main() ends the process with the run's exit status)."""
    try:
        os.setpgid(0, 0)  # its own group: a signal for the server's group is not for the run
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGWINCH, signal.SIGTSTP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in message.get("ignored", []):
            signal.signal(signum, signal.SIG_IGN)
        _die_with_parent()
        # Handlers are the run's now: a stop that came meanwhile is delivered here.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        if os.getppid() != server_pid:
            raise KeyboardInterrupt  # the server died before the death signal was asked for
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.umask(message["umask"])
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        _settle_environment()
        sys.argv = list(message["run"])
        _fresh_streams()
        from rlm.cli.entry import run_here

        run_here()
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            os.write(2, b"rlm: stopped before the run started\n")
        os._exit(130)
    except BaseException as exc:  # noqa: BLE001 - anything here ends this child, said on its stderr
        with contextlib.suppress(OSError):
            os.write(2, f"rlm: the warm process could not start the run: {exc}\n".encode())
    os._exit(1)


def _settle_environment() -> None:
    """What was read from the server's environment when it started, read again from the run's:
    the time zone, the temporary folder, and the variables litellm and tiktoken need (set in the
    server's environment, which the client's replaced)."""
    import tempfile

    from rlm.model.client import litellm_environment

    time.tzset()
    tempfile.tempdir = None
    litellm_environment()


_server_streams: list[Any] = []


def _fresh_streams() -> None:
    """sys.stdin/stdout/stderr on descriptors 0-2 as the interpreter makes them at start, so
    that buffering follows what they are now (a terminal or a pipe), not what the server's were."""
    encoding = os.environ.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
    # The server's own stream objects close their descriptor when collected: kept, never closed.
    _server_streams.extend([sys.stdin, sys.stdout, sys.stderr])
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=encoding)
    stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding=encoding, line_buffering=os.isatty(1)
    )
    stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    for name, stream in (("__stdin__", stdin), ("__stdout__", stdout), ("__stderr__", stderr)):
        setattr(sys, name, stream)  # what a library falls back on is the run's too


def _die_with_parent() -> None:
    """The run ends (SIGTERM) if the server dies: `rlm warm stop`, or the server killed."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _status_fields(pid: int | str) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
        pairs = (line.split(":", 1) for line in fh if ":" in line)
        return {k: " ".join(v.split()) for k, v in pairs if k in _CREDENTIALS}


def _namespaces(pid: int | str) -> dict[str, str]:
    return {
        ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in _NAMESPACES if os.path.exists(f"/proc/self/ns/{ns}")
    }


def _same_rights(conn: socket.socket) -> bool:
    """The peer is a process of this user with this server's rights, in its namespaces: the
    same uid (SO_PEERCRED), groups, capabilities, no-new-privileges and seccomp state, and
    the same mounts, network, users and processes. Anything unreadable is a refusal."""
    try:
        pid, uid, _ = wire.peer_credentials(conn)
        if uid != os.getuid():
            return False
        return _status_fields(pid) == _status_fields("self") and _namespaces(pid) == _namespaces("self")
    except OSError:
        return False


def _still_there(conn: socket.socket) -> bool:
    """The client has not hung up (gave up waiting): no run is started for nobody."""
    import select

    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLRDHUP)
    return not any(ev & (select.POLLHUP | select.POLLRDHUP | select.POLLERR) for _, ev in poller.poll(0))


class _Stop(Exception):
    """SIGTERM or SIGINT reached the server while it waited: it stops."""


class Server:
    """The listening socket, the runs in progress, and the idle clock."""

    def __init__(self, path: str, idle_s: float, lock_fd: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self.idle_s = idle_s
        self.selector = selectors.DefaultSelector()
        self.runs: dict[int, _Run] = {}
        self.served = 0
        self.started = time.time()
        self.last_active = time.monotonic()
        self.stopping = False
        self.waiting = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)

    def listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead server's socket: the lock said none runs
        previous = os.umask(0o177)
        try:
            self.listener.bind(self.path)  # 0600 from the umask, in a 0700 folder
        finally:
            os.umask(previous)
        self.listener.listen(16)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def serve(self) -> None:
        try:
            while not self.stopping:
                timeout = None if self.runs else max(0.0, self.idle_s - (time.monotonic() - self.last_active))
                if timeout == 0.0:
                    break
                try:
                    self.waiting = True
                    ready = self.selector.select(timeout)
                except _Stop:
                    break
                finally:
                    self.waiting = False
                for key, _ in ready:
                    try:
                        self._handle(key.data)
                    except _Stop:
                        raise
                    except Exception as exc:  # noqa: BLE001 - one event's failure is not every run's end
                        print(f"rlm: warm: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        except _Stop:
            pass
        finally:
            self.close()

    def _handle(self, kind: Any) -> None:
        if kind == "accept":
            self._accept()
        elif isinstance(kind, tuple) and kind[0] == "client":
            self._from_client(kind[1])
        elif isinstance(kind, tuple) and kind[0] == "ended":
            self._ended(kind[1])

    def stop(self, signum: int, frame: Any) -> None:
        """The handler of SIGTERM and SIGINT: stop now if waiting, else once this event is handled."""
        self.stopping = True
        if self.waiting:
            raise _Stop

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last_active = time.monotonic()
        try:
            conn.settimeout(_FIRST_MESSAGE_S)
            if not _same_rights(conn):
                conn.close()
                return
            data, fds, _, _ = socket.recv_fds(conn, wire.MAX_MESSAGE, 3)
        except OSError:
            conn.close()
            return
        message = wire.parse(data) if data else None
        if message is not None and len(fds) == 3 and _valid_run(message) and _still_there(conn):
            self._start(conn, message, fds)
            return
        for fd in fds:
            os.close(fd)
        reply: dict[str, Any] = {"refused": "not a request this server takes"}
        if message is not None and not fds and message.get("status") is True:
            reply = self.status()
        elif message is not None and not fds and message.get("stop") is True:
            reply, self.stopping = {"stopping": True}, True
        with contextlib.suppress(OSError):
            wire.send(conn, reply)
        conn.close()

    def _start(self, conn: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
        # The stops are blocked across the fork: the child must not take one with the server's
        # handler (lost) before it has the run's; it unblocks them once it does.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        server_pid = os.getpid()
        try:
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    wire.send(conn, {"refused": f"cannot start a process: {exc.strerror or exc}"})
                conn.close()
                return
            if pid == 0:
                self._close_in_child(conn)
                _become_the_run(message, fds, server_pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        for fd in fds:
            os.close(fd)
        self.served += 1
        pidfd = os.pidfd_open(pid)  # a child of ours, not yet reaped: its pid cannot be reused
        self.runs[pid] = _Run(pid, conn, pidfd)
        conn.settimeout(None)
        self.selector.register(conn, selectors.EVENT_READ, ("client", pid))
        self.selector.register(pidfd, selectors.EVENT_READ, ("ended", pid))
        with contextlib.suppress(OSError):
            wire.send(conn, {"pid": pid})

    def _close_in_child(self, conn: socket.socket) -> None:
        """Close what is the server's, through the objects that own it (a descriptor closed
        behind its object's back would be closed again when the object goes, by then perhaps
        a file of the run's). The lock too: a run must not keep a new server from starting."""
        for sock in [self.listener, conn, *(run.conn for run in self.runs.values())]:
            sock.close()
        for run in self.runs.values():
            with contextlib.suppress(OSError):
                os.close(run.pidfd)
        self.runs.clear()
        self.selector.close()
        os.close(self.lock_fd)

    def _from_client(self, pid: int) -> None:
        run = self.runs.get(pid)
        if run is None or run.conn.fileno() < 0:
            return  # ended in this same round of events
        try:
            message = wire.receive(run.conn)
        except OSError:
            message = None
        if message is None:  # the client is gone: its run is stopped, as a closed terminal would
            self.selector.unregister(run.conn)
            run.conn.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                os.killpg(pid, signal.SIGCONT)  # a stopped run must be able to stop
            return
        signum = message.get("signal")
        sent = _PASSABLE.get(signum) if type(signum) is int else None
        if sent is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if sent in (signal.SIGSTOP, signal.SIGCONT):
                os.killpg(pid, sent)  # the run's group (setpgid in _become_the_run)
            else:
                os.kill(pid, sent)

    def _ended(self, pid: int) -> None:
        run = self.runs.pop(pid, None)
        if run is None:
            return
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            code = 128 - code  # killed by a signal: the shell's way of saying it
        self.selector.unregister(run.pidfd)
        os.close(run.pidfd)
        if run.conn.fileno() >= 0:
            self.selector.unregister(run.conn)
            with contextlib.suppress(OSError):
                wire.send(run.conn, {"exit": code})
            run.conn.close()
        self.last_active = time.monotonic()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "served": self.served,
            "running": len(self.runs),
            "started": self.started,
            "idle_s": self.idle_s,
        }

    def close(self) -> None:
        """Stop the runs still going (SIGTERM, then SIGKILL after a grace), remove the socket."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.listener.close()
        for pid in self.runs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        while self.runs and time.monotonic() < deadline:
            for key, _ in self.selector.select(0.1):
                if isinstance(key.data, tuple) and key.data[0] == "ended":
                    self._ended(key.data[1])
        for pid in self.runs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Serve until idle for argv[0] seconds (default 30 min); exit 0, or 4 when it cannot
    (its folder is not private, another server of this code runs, or argv[1], the key it was
    started for, is not the one its code and environment give)."""
    idle_s = float(argv[0]) if argv else DEFAULT_IDLE_S
    if len(argv) > 1 and argv[1] != wire.code_key():
        # Started for another key than its own environment gives: no caller would find it.
        print("rlm: warm: this process's code or environment is not the caller's", file=sys.stderr)
        return 4
    path = wire.socket_path()
    folder = os.path.dirname(path)
    try:
        make_private_dirs(folder)
    except OSError as exc:
        print(f"rlm: warm: cannot make {folder}: {exc.strerror or exc}", file=sys.stderr)
        return 4
    why = wire.unusable(path)
    if why:
        print(f"rlm: warm: the socket cannot be used: {why}", file=sys.stderr)
        return 4
    lock = os.open(
        path[: -len(".sock")] + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("rlm: warm: a warm process of this code already runs", file=sys.stderr)
        return 4
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (OSError, AttributeError):
        print("rlm: warm: this system has no pidfd (Linux 5.3 or later is needed)", file=sys.stderr)
        return 4
    preload()
    if threading.active_count() != 1:
        # A fork copies only the thread that forks: a lock another thread held would stay held.
        print("rlm: warm: the preload left threads running; forking now is not safe", file=sys.stderr)
        return 4
    server = Server(path, idle_s, lock)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, server.stop)
    server.listen()
    print(f"rlm: warm process {os.getpid()} serving {path}", file=sys.stderr, flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
