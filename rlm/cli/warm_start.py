"""Starting the warm process (rlm.cli.warm_server) in the background: by `rlm warm start`, and
by itself when an `rlm ask` ran alone because none was running.

An `rlm ask` that no warm process served starts one as it exits (`rlm mcp` starts one as it
starts serving, for the runs it will start), so that the next question
(about any file) is spared litellm's import: the first run pays it, as it would anyway, and
nothing is added to what it waits for but starting a process (a few milliseconds, after its
answer is out). `RLM_WARM_AUTO=0` (or `RLM_NO_WARM=1`, which also keeps runs from being
served) turns that off. The process ends by itself after 15 minutes without a run, and none is
started unasked where less than 2 GiB of memory is available.

The process is started with the environment the caller had when it began (not the one the run
may have added to), so its code key (rlm.cli.warm_client.code_key, which covers the variables
litellm reads at its import) is the one the next caller computes. Standard library only: this
runs in the caller before anything else is imported.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import stat
import subprocess
import sys
from collections.abc import Mapping

from rlm.cli import warm_client as wire
from rlm.privatefiles import make_private_dirs

AUTO_IDLE_S = 15 * 60.0  # one started unasked lingers less than one asked for (30 min)
# A warm process holds about 200 MiB: not started unasked where the machine has little to spare
# (many environments, each with a key of its own, would each start one).
_MIN_AVAILABLE = 2 << 30
_MAX_LOG = 1 << 20  # its log is appended to by each start; past this it starts again empty
# What the process is started with of the caller's environment: what its key covers, where its
# folder is, and what Python and the locale need. Not the rest (API keys, an agent's socket):
# each run is given its caller's own, and the process may outlive the caller's session.
_KEPT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR"})  # and every *_proxy
_KEPT_PREFIXES = ("PYTHON", "LITELLM_", "XDG_", "LC_", "SSL_CERT_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_OFF = frozenset({"0", "off", "no", "false"})
# Set by `ask_after_run`, read at exit: the caller's environment, and whether a run began.
_pending: dict[str, dict[str, str] | bool] = {}


def log_path(socket: str) -> str:
    """The warm process's messages, beside its socket."""
    return socket[: -len(".sock")] + ".log"


def server_environment(env: Mapping[str, str], socket: str) -> dict[str, str]:
    """What of `env` the warm process for `socket` is started with (`_KEPT`): its key is the
    same as `env`'s, and its folder is named absolutely (it starts in that folder)."""
    kept = {
        k: v
        for k, v in env.items()
        if k in _KEPT or k.startswith(_KEPT_PREFIXES) or k.lower().endswith("_proxy")
    }
    kept["RLM_WARM_DIR"] = os.path.dirname(socket)
    return kept


def spawn(
    socket: str, key: str, idle_s: float, env: Mapping[str, str], *, fresh_log: bool = True
) -> subprocess.Popen[bytes]:
    """The warm process for `socket` (named by `key`, the one `env` gives), started in a session of its own
    with its messages in a 0600 log; not waited for. OSError when it cannot be started.
    `fresh_log` False appends: two callers starting one at once must not erase each other's
    lines."""
    log = _open_log(log_path(socket), fresh_log)
    try:
        # -P: the current folder is not put on the import path (a folder holding an `rlm/`
        # would be imported in its place, and by every run forked from it). Its own folder is
        # its working folder: it holds on to none of the user's (each run is given its own).
        # The key it is started for: it serves under no other (rlm.cli.warm_server.main).
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "rlm.cli.warm_server", str(idle_s), key],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=os.path.dirname(socket),
            env=server_environment(env, socket),
            start_new_session=True,
        )
    finally:
        os.close(log)


def _open_log(path: str, fresh: bool) -> int:
    """The log's descriptor: a regular file of the user's with no other name (not a FIFO that
    would hold the caller, nor a link to a file of the user's elsewhere), never followed
    through a symlink; emptied when `fresh` or when it has grown past _MAX_LOG."""
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.getuid():
            raise PermissionError(f"{path} is not a file of the warm process's own")
        if fresh or st.st_size > _MAX_LOG:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ask_after_run(argv: list[str], env: dict[str, str]) -> None:
    """For a command run in this process (no warm process took it): when it is an `rlm ask`
    whose run begins (`run_began`), start a warm process as this process exits, unless one
    runs or starts already, or the caller turned that off."""
    if argv[:1] != ["ask"] or not _wanted(env):
        return
    _pending["env"] = env
    atexit.register(_start_if_a_run_began)


def run_began() -> None:
    """An `rlm ask` got past its command line and settings: a question was asked."""
    _pending["began"] = True


def start_unasked(env: dict[str, str]) -> None:
    """Start a warm process for callers with `env` (an MCP server's, for the runs it will start),
    unless one runs or starts already, the caller turned that off, or memory is short. Says
    nothing and raises nothing: a run not served is only slower."""
    if not _wanted(env):
        return
    try:
        key = wire.code_key(env)
        socket = wire.socket_path(key, env)
        make_private_dirs(os.path.dirname(socket))
        if wire.unusable(socket) is not None:
            return  # a folder others could write to: `rlm warm start` says why; here nothing is said
        if _taken(socket[: -len(".sock")] + ".lock") or _available_memory() < _MIN_AVAILABLE:
            return
        spawn(socket, key, AUTO_IDLE_S, env, fresh_log=False)
    except Exception:  # noqa: BLE001 (whatever went wrong, the caller's own work is what counts)
        return


def _wanted(env: Mapping[str, str]) -> bool:
    """Whether a warm process may be started unasked for a caller with `env`."""
    if env.get("RLM_NO_WARM") or env.get("RLM_WARM_AUTO", "").strip().lower() in _OFF:
        return False
    # An interpreter that ignored the environment, or an import path relative to the caller's
    # folder: a process started elsewhere, from the environment, would not import the same code.
    if sys.flags.ignore_environment or sys.flags.isolated or sys.flags.no_user_site:
        return False
    path = env.get("PYTHONPATH")
    return not path or all(os.path.isabs(p) for p in path.split(os.pathsep))


def _start_if_a_run_began() -> None:
    env = _pending.get("env")
    if isinstance(env, dict) and _pending.get("began") is True:
        start_unasked(env)


def _taken(lock_path: str) -> bool:
    """Whether a warm process of this key runs or is starting: it holds the lock beside its
    socket from its start (rlm.cli.warm_server.main). Asked without connecting, so a process
    that refuses this caller is not kept awake by it, and nothing waits."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing it gives back a lock taken here
    return False


def _available_memory() -> int:
    """The kernel's estimate of the memory that can be had without swapping (MemAvailable)."""
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0
