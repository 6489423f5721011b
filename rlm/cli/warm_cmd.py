"""`rlm warm start|stop|status`: the warm process that spares each `rlm ask` litellm's import.

`start` starts it in the background (a session of its own, its messages in a 0600 log beside
its socket) and returns once it answers; `status` prints one line on stdout; `stop` ends it
and the runs it is serving. Exit codes: 0 done (for `status`: one runs), 1 none runs
(`status`, `stop`), 4 it cannot start (its folder is not private, its socket path too long, no
pidfd), with one line saying why.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated, Any

import typer

from rlm.cli import warm_client as wire
from rlm.cli.entry import started_with
from rlm.cli.plainhelp import PlainHelp
from rlm.cli.warm_start import log_path, spawn
from rlm.errors import ExitCode
from rlm.privatefiles import make_private_dirs, unsafe_dir
from rlm.text.visible import visible

warm_app = typer.Typer(
    help="A warm process that spares each `rlm ask` the seconds of litellm's import: start, stop, status.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_READY_S = 120.0  # litellm's import on a loaded machine


def _say(message: str) -> None:
    print(f"rlm: {visible(message)}", file=sys.stderr, flush=True)


def _ask(message: dict[str, Any]) -> dict[str, Any] | None:
    """The running server's reply to `message`, or None when none runs for this code."""
    sock = wire.connect(wire.socket_path(env=started_with()), timeout=10)
    if sock is None:
        return None
    with sock:
        try:
            wire.send(sock, message)
            return wire.receive(sock)
        except OSError:
            return None


@warm_app.command("start", cls=PlainHelp)
def start_command(
    idle: Annotated[
        float, typer.Option("--idle", min=0.1, help="Minutes without a run after which it ends (default 30).")
    ] = 30.0,
) -> None:
    """Start the warm process in the background; `rlm ask` then runs in it, seconds sooner."""
    key = wire.code_key(started_with())
    path = wire.socket_path(key, started_with())
    running = _ask({"status": True})
    if running is not None:
        _say(f"a warm process already runs (pid {running.get('pid')}): {path}")
        return
    folder = os.path.dirname(path)
    try:
        make_private_dirs(folder)
    except OSError as exc:
        _say(f"warm: cannot make {folder}: {exc.strerror or exc}")
        raise typer.Exit(int(ExitCode.CONFIG)) from None
    why = wire.unusable(path) or unsafe_dir(folder)
    if why:
        _say(f"warm: the socket cannot be used: {why}")
        raise typer.Exit(int(ExitCode.CONFIG))
    try:
        proc = spawn(path, key, idle * 60, started_with())
    except OSError as exc:
        _say(f"warm: cannot start the process: {exc.strerror or exc}")
        raise typer.Exit(int(ExitCode.CONFIG)) from None
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path(path), encoding="utf-8", errors="replace") as fh:
                said = fh.read().strip().splitlines()
            _say(
                said[-1].removeprefix("rlm: ") if said else f"warm: the process ended with {proc.returncode}"
            )
            raise typer.Exit(int(ExitCode.CONFIG))
        if _ask({"status": True}) is not None:
            _say(f"warm process {proc.pid} ready; it ends after {idle:g} min without a run (`rlm warm stop`)")
            return
        time.sleep(0.1)
    proc.terminate()
    _say(f"warm: the process was not ready within {_READY_S:.0f} s; see {log_path(path)}")
    raise typer.Exit(int(ExitCode.CONFIG))


@warm_app.command("status", cls=PlainHelp)
def status_command() -> None:
    """Whether a warm process runs for this code: one line on stdout; exit 1 when none does."""
    status = _ask({"status": True})
    if status is None:
        print("not running")
        raise typer.Exit(int(ExitCode.NO_ANSWER))
    print(
        f"running: pid {status.get('pid')}, {status.get('served')} runs served, {status.get('running')} running now,"
        f" up {time.time() - float(status.get('started') or time.time()):.0f} s"
    )


@warm_app.command("stop", cls=PlainHelp)
def stop_command() -> None:
    """End the warm process (runs it is serving end as interrupted); exit 1 when none runs."""
    if _ask({"stop": True}) is None:
        _say("no warm process runs for this code")
        raise typer.Exit(int(ExitCode.NO_ANSWER))
    path = wire.socket_path(env=started_with())
    deadline = time.monotonic() + 10
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    _say("warm process stopped")
