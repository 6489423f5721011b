"""The `rlm` program: a run handed to the warm process when one serves this code, else run here.

Kept apart from rlm.cli.app so that a run the warm process takes imports nothing but the
standard library here (rlm.cli.warm_client): the point is the seconds not spent. The MCP
server's runs come this way too (`python -m rlm _mcp-run`, rlm.mcp.runs), so that a warm
process spares each of them the same seconds.
"""

from __future__ import annotations

import os
import sys
import time

# The MCP server's run in a process of its own (rlm.mcp.child), not a command of the CLI's.
MCP_RUN = "_mcp-run"
# The environment the command started with, before anything rlm runs adds to it (litellm's
# settings): what a warm process is keyed by (rlm.cli.warm_client.code_key) and started with.
_started_with: dict[str, str] = {}
# The longest a process may have run before `ask` asks when it began (command_began) for its
# start to be taken as the command's: beyond it, the process is not one started for the command.
_PLAUSIBLE_START_S = 60.0


def started_with() -> dict[str, str]:
    """The environment this command started with (this process's, where `main` did not run)."""
    return dict(_started_with or os.environ)


def command_began() -> float:
    """When this process began, on the clock of time.monotonic(): --max-time is the user's wall
    clock, and the interpreter's start and rlm's imports before `ask` reads its flags are
    seconds of it on a busy machine. The kernel's start time of the process (/proc/self/stat,
    in clock ticks since boot) against CLOCK_BOOTTIME; where either cannot be read, or the
    age they give is not a plausible start-up's, now."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as stat:
            # The fields after the command's name, which is in parentheses and may hold either.
            fields = stat.read().rsplit(b")", 1)[1].split()
        tick = 1 / os.sysconf("SC_CLK_TCK")
        # The start is kept in whole ticks (10 ms), rounded down: less one tick, the age is never
        # more than the process's own (a memory kept just before it started is still before it).
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) * tick - tick
    except (OSError, IndexError, ValueError, AttributeError):
        return now
    return now - age if 0 <= age <= _PLAUSIBLE_START_S else now


def run_here() -> None:
    """Run the command sys.argv names in this process (the warm process's child calls this)."""
    if sys.argv[1:2] == [MCP_RUN]:
        from rlm.mcp.child import main as run_for_mcp

        run_for_mcp()
        return
    from rlm.cli.app import main as run_cli

    run_cli()


def _open_standard_streams() -> None:
    """A standard stream the caller closed (`<&-`) is /dev/null instead: else the next file
    or socket opened takes its descriptor and is read or written as that stream (a socket to
    the warm process handed over as the run's stdin), and Python's sys.stdin is None, which
    `rlm ask -` would trip over. A closed stdin reads as empty, as `< /dev/null` does."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def main() -> None:
    _started_with.update(os.environ)
    _open_standard_streams()
    from rlm.cli.warm_client import forward

    code = forward(sys.argv[1:])
    if code is not None:
        os._exit(code)
    from rlm.cli.warm_start import ask_after_run

    ask_after_run(sys.argv[1:], started_with())
    run_here()


if __name__ == "__main__":
    main()
