"""Starting the warm process (rlm.cli.warm_server) in the background: by `rlm warm start`, and
by itself when an `rlm ask` ran alone because none was running.

An `rlm ask` that no warm process served starts one as it exits, so that the next question
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
import os
import subprocess
import sys

from rlm.cli import warm_client as wire
from rlm.privatefiles import make_private_dirs

AUTO_IDLE_S = 15 * 60.0  # one started unasked lingers less than one asked for (30 min)
# A warm process holds about 200 MiB: not started unasked where the machine has little to spare
# (many environments, each with a key of its own, would each start one).
_MIN_AVAILABLE = 2 << 30
_OFF = frozenset({"0", "off", "no", "false"})
# Set by `ask_after_run`, read at exit: the caller's environment, and whether a run began.
_pending: dict[str, dict[str, str] | bool] = {}


def log_path(socket: str) -> str:
    """The warm process's messages, beside its socket."""
    return socket[: -len(".sock")] + ".log"


def spawn(
    socket: str, idle_s: float, env: dict[str, str] | None = None, *, fresh_log: bool = True
) -> subprocess.Popen[bytes]:
    """The warm process for `socket`, started in a session of its own with its messages in a
    0600 log; not waited for. OSError when it cannot be started. `fresh_log` False appends:
    two callers starting one at once must not erase each other's lines."""
    flags = (
        os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_TRUNC if fresh_log else os.O_APPEND)
    )
    log = os.open(log_path(socket), flags, 0o600)
    try:
        # -P: the current folder is not put on the import path (a folder holding an `rlm/`
        # would be imported in its place, and by every run forked from it). Its own folder is
        # its working folder: it holds on to none of the user's (each run is given its own).
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "rlm.cli.warm_server", str(idle_s)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=os.path.dirname(socket),
            env=env,
            start_new_session=True,
        )
    finally:
        os.close(log)


def ask_after_run(argv: list[str], env: dict[str, str]) -> None:
    """For a command run in this process (no warm process took it): when it is an `rlm ask`
    whose run begins (`run_began`), start a warm process as this process exits, unless one
    answers already or the caller turned that off."""
    if argv[:1] != ["ask"] or env.get("RLM_NO_WARM") or env.get("RLM_WARM_AUTO", "").strip().lower() in _OFF:
        return
    _pending["env"] = env
    atexit.register(_start_if_a_run_began)


def run_began() -> None:
    """An `rlm ask` got past its command line and settings: a question was asked."""
    _pending["began"] = True


def _start_if_a_run_began() -> None:
    env = _pending.get("env")
    if not isinstance(env, dict) or _pending.get("began") is not True:
        return
    try:
        socket = wire.socket_path(env=env)
        make_private_dirs(os.path.dirname(socket))
        if wire.unusable(socket) is not None:
            return  # a folder others could write to: `rlm warm start` says why; here nothing is said
        running = wire.connect(socket, timeout=1)
        if running is not None:
            running.close()
            return
        if _available_memory() < _MIN_AVAILABLE:
            return
        spawn(socket, AUTO_IDLE_S, env, fresh_log=False)
    except (OSError, ValueError):
        return  # the run's own exit status is what the caller gets


def _available_memory() -> int:
    """The kernel's estimate of the memory that can be had without swapping (MemAvailable)."""
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0
