"""A run for the MCP server: rlm.mcp.child in a subprocess, its progress forwarded as it comes.

A cancel from the client cancels the task awaiting the run; the run is then stopped as Ctrl-C
stops `rlm ask` (SIGINT: the trace is finished as `interrupted`). A run that has not stopped
after STOP_GRACE_S is killed: its trace is an event log written as the run went, which
`rlm replay` reads (DESIGN rule 3), so the client's wait stays under two seconds either way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import Process

STOP_GRACE_S = 1.5


class ChildFailed(Exception):
    """The run's process ended without saying how the run ended (it crashed or was killed)."""


async def run_in_child(
    request: dict[str, Any], on_progress: Callable[[str], Awaitable[None]]
) -> dict[str, Any]:
    """The child's last line: `{"result": ...}` or `{"error": ..., "result"?: ...}`."""
    process = await anyio.open_process(
        # rlm.mcp.child by way of the program's entry, which hands it to a warm process when
        # one runs (`rlm warm start`): the run then starts without importing litellm again.
        # -P: the server's folder is not put on the import path (an `rlm/` there is not rlm).
        [sys.executable, "-P", "-m", "rlm", "_mcp-run"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,  # the server's own stderr: the client's log, never the protocol's channel
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(json.dumps(request).encode("utf-8"))
        await process.stdin.aclose()
        last: dict[str, Any] | None = None
        buffered = b""
        async for chunk in process.stdout:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                doc = json.loads(line)
                if "progress" in doc:
                    await on_progress(str(doc["progress"]))
                else:
                    last = doc
        await process.wait()
        if last is None:
            raise ChildFailed(f"the run's process ended with code {process.returncode} and no result")
        return last
    except BaseException:
        with anyio.CancelScope(shield=True):
            await stop(process)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


async def stop(process: Process) -> None:
    """Stop the run as Ctrl-C does, then kill it if it has not ended within STOP_GRACE_S."""
    if process.returncode is not None:
        return
    try:
        process.send_signal(signal.SIGINT)
    except ProcessLookupError:
        return
    with anyio.move_on_after(STOP_GRACE_S):
        await process.wait()
        return
    try:
        process.kill()
    except ProcessLookupError:
        return
    await process.wait()
