"""Handing `rlm ask` to a warm process, and what the two sides share: where its socket is, the
key of the code it runs, the messages they exchange.

Every `rlm ask` spends seconds importing litellm (5 s on two cores) before its first model
request. A warm process (`rlm warm start`, rlm.cli.warm_server) has done that once; it forks a
child per run that runs `rlm` with this process's arguments, working directory, environment,
umask and standard streams (passed as file descriptors), so the run writes to the same
terminal or pipe and its exit status comes back here as this process's own. Ctrl-C and
SIGTERM are sent on to the child, which stops as a run stops (exit 130 or 143).

Nothing here may cost what it saves: the standard library only, rlm.privatefiles and
rlm.cli.entry (which import nothing else). When anything is off (no server, a folder another
user could write to, a server of other code or of another user, a refusal) the run goes on in
this process as if there were no warm process; nothing is said, so a script sees no
difference but the time.

Trust: the socket lives in a folder that must be the user's own and 0700 (`unsafe_dir`), and
each side checks the other's uid (SO_PEERCRED) before it trusts a message; the server also
refuses messages of another shape (rlm.cli.warm_server).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Mapping
from typing import Any

from rlm.cli.entry import MCP_RUN
from rlm.privatefiles import unsafe_dir

# The commands a warm process runs: those that call a model, and so import litellm (`ask`, and
# the MCP server's run).
WARM_COMMANDS = frozenset({"ask", MCP_RUN})
# The longest message either side accepts: an environment and arguments fit many times over.
MAX_MESSAGE = 1 << 20
# sockaddr_un's path is 108 bytes with its terminating zero.
_MAX_SOCKET_PATH = 107
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def warm_dir(env: Mapping[str, str] | None = None) -> str:
    """The folder of the warm process's socket: `$RLM_WARM_DIR`, else `$XDG_RUNTIME_DIR/rlm`,
    else `$XDG_CACHE_HOME/rlm/warm` (`~/.cache/rlm/warm`): never a name in /tmp, which another
    user could take first. Whichever it is, it is used only if it is the user's own and
    writable by nobody else (rlm makes it 0700)."""
    env = os.environ if env is None else env
    named = env.get("RLM_WARM_DIR")
    if named:
        return os.path.abspath(named)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "rlm")
    cache = env.get("XDG_CACHE_HOME")
    if not (cache and os.path.isabs(cache)):
        cache = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "rlm", "warm")


# What decides, beyond the files, which code an interpreter imports.
_IMPORT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH")
# What litellm and its HTTP clients read once, at their import: a run whose values differ is
# not served by a process that read others (its proxy, its certificates, litellm's settings).
_READ_AT_IMPORT = (
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
)  # fmt: skip
# What rlm itself sets before litellm's import (rlm.model.client.litellm_environment): keyed as
# rlm leaves it, so a process that has set it (the MCP server, whose runs come here) keys alike.
_SET_BY_RLM = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_FORCED_BY_RLM = frozenset({"LITELLM_MODE"})


def code_key(env: Mapping[str, str] | None = None) -> str:
    """What identifies the code a warm process runs and what it read as it started: rlm's
    source files (path, size, mtime), the interpreter, the variables that change what it
    imports (PYTHONPATH, ...), those litellm and its HTTP clients read at their import
    (LITELLM_*, the proxy variables, ...) and the folders its libraries are installed in. Code
    edited, a library installed or one of those variables changed since the server started
    gives another key, so the server's socket, named by it, is not found and the run goes on
    here. About a millisecond. `env`: the environment to key (this process's by default)."""
    env = os.environ if env is None else env
    digest = hashlib.sha256()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest.update(_bytes(f"{os.path.realpath(sys.executable)}\0{sys.prefix}\0{sys.version}\0{package}\0"))
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                digest.update(_bytes(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0"))
    read = {*_IMPORT_VARIABLES, *_READ_AT_IMPORT, *(k for k in env if k.startswith("LITELLM_"))}
    for name in sorted(read - _FORCED_BY_RLM):
        digest.update(_bytes(f"{name}={env.get(name, _SET_BY_RLM.get(name))}\0"))
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")) and os.path.isdir(entry):
            digest.update(_bytes(f"{entry}\0{os.stat(entry).st_mtime_ns}\0"))
    return digest.hexdigest()[:16]


def _bytes(text: str) -> bytes:
    """`text` as the bytes it came from: a variable or file name need not be UTF-8."""
    return text.encode("utf-8", "surrogateescape")


def socket_path(key: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The socket of the warm process of this code (`code_key`) for the environment `env`."""
    return os.path.join(warm_dir(env), f"warm-{key or code_key(env)}.sock")


def unusable(path: str) -> str | None:
    """Why the socket `path` cannot be used, or None: its folder must be private, the path short
    enough for a socket address."""
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        return (
            f"its path is longer than a socket address allows ({path}); set RLM_WARM_DIR to a shorter folder"
        )
    why = unsafe_dir(os.path.dirname(path))
    return f"{os.path.dirname(path)} {why}" if why else None


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The pid, uid and gid of the process at the other end of a Unix socket, as the kernel
    knows them."""
    pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return int(pid), int(uid), int(gid)


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message: a JSON object in one datagram of the SOCK_SEQPACKET socket, with `fds`."""
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """The next message, or None at the end of the connection or for anything but a JSON object."""
    data = sock.recv(MAX_MESSAGE)
    if not data:
        return None
    return parse(data)


def parse(data: bytes) -> dict[str, Any] | None:
    """A message's JSON object, or None for anything else (nesting too deep included)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def connect(path: str, timeout: float | None = None) -> socket.socket | None:
    """A connection to the warm process at `path`, checked to be the user's own, or None."""
    if unusable(path) is not None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        if peer_credentials(sock)[1] == os.getuid():
            return sock
    except OSError:
        pass
    sock.close()
    return None


# Signals passed on to the run; a stop (SIGTSTP, Ctrl-Z) stops this process too, and SIGCONT
# resumes the run with it; SIGWINCH tells the run's status line the terminal's new width.
_PASSED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH, signal.SIGTSTP, signal.SIGCONT)
_FIRST_REPLY_S = 15.0  # the server forks at once; longer, it is stopped or stuck: run here


def forward(argv: list[str]) -> int | None:
    """Run `rlm ARGV` in the warm process, if one runs this code; its exit status, or None when
    it is not run there (nothing has been written then, and the caller runs it itself)."""
    if not argv or argv[0] not in WARM_COMMANDS or os.environ.get("RLM_NO_WARM"):
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        return None  # a folder deleted under the caller: it says so itself
    try:
        sock = connect(socket_path())
    except (OSError, ValueError):  # a folder unreadable on the way, a name no socket can take
        return None
    if sock is None:
        return None
    umask = os.umask(0)
    os.umask(umask)
    # What the caller ignores (nohup's SIGHUP) the run ignores too. SIGINT and SIGTERM are
    # passed on all the same: `rlm ask` alone sets its own handlers for them whatever it was
    # started with (a background job starts with SIGINT ignored), so the run does too.
    ignored = [int(s) for s in _PASSED if signal.getsignal(s) is signal.SIG_IGN]
    passed = [s for s in _PASSED if int(s) not in ignored or s in (signal.SIGINT, signal.SIGTERM)]
    run = {"run": ["rlm", *argv], "cwd": cwd, "env": dict(os.environ), "umask": umask, "ignored": ignored}
    caught: list[int] = []
    pid: list[int] = []

    def pass_on(signum: int, frame: Any) -> None:
        caught.append(signum)
        try:
            send(sock, {"signal": signum})
        except OSError:
            return
        if signum == signal.SIGTSTP and pid:  # stop here too, as a shell's job stops
            signal.signal(signal.SIGTSTP, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTSTP)
            signal.signal(signal.SIGTSTP, pass_on)  # continued: the SIGCONT handler told the run

    # Passed on from before the request leaves: one that arrives before the run starts waits in
    # the socket and reaches it once it does.
    previous = {s: signal.signal(s, pass_on) for s in passed}
    sock.settimeout(_FIRST_REPLY_S)
    try:
        if sock.fileno() <= 2:  # a standard stream was closed (rlm.cli.entry reopens them)
            raise OSError("the socket took a standard stream's descriptor")
        send(sock, run, [0, 1, 2])
        first = receive(sock)
    except OSError:
        first = None
    if first is None or type(first.get("pid")) is not int:
        sock.close()  # refused, or no answer in time: not started (the server forks only for
        # a client still there)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        stops = [s for s in caught if s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        if stops:  # stopped before any run started: the stop's exit status (130, 143, 129)
            os.write(2, b"rlm: stopped before the run started\n")
            return 128 + stops[0]
        return None
    pid.append(first["pid"])
    sock.settimeout(None)
    while True:
        try:
            message = receive(sock)
        except OSError:
            message = None
        if message is None:
            _wait_for(pid[0])
            os.write(2, b"rlm: the warm process ended during the run: what it printed is all there is\n")
            return 1
        code = message.get("exit")
        if type(code) is int:
            return int(code)


def _wait_for(pid: int, seconds: float = 5.0) -> None:
    """Wait a little for the run (its server gone, it was sent SIGTERM) to end, so that this
    process's last line comes after the run's."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        select.select([fd], [], [], seconds)
    finally:
        os.close(fd)
