"""The MCP server: rlm's tools for a coding agent, over stdio or streamable HTTP.

The model, its endpoint and every limit are the server's own (flags, `RLM_*`, the config
file), resolved once when it starts; a client names files and questions, and may lower a
limit for one call, never raise it or choose the model. Files are readable only under the
client's declared roots and the server's `--allow` directories (rlm.mcp.paths).
"""

from __future__ import annotations

import io
import os
import sys
import time
import warnings
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rlm import __version__
from rlm.errors import ConfigError, RlmError
from rlm.mcp.paths import confine, root_dirs
from rlm.mcp.runs import ChildFailed, run_in_child
from rlm.run.settings import Settings, cell_seconds_for, coerce, trace_dir_for

# The limits a call may lower (the names are those of rlm.run.settings, `timeout` the cell's).
LIMITS = ("max_steps", "max_depth", "max_calls", "max_tokens", "max_cost", "max_time", "cell_timeout")

INSTRUCTIONS = (
    "rlm answers questions about files far too big to read into context (multi-gigabyte logs, CSV, "
    "JSON lines): a model investigates the file in a sandbox and every run leaves a trace. Use `ask` "
    "instead of reading a big file; `estimate` first for the most a run could cost; `stats` for a "
    "free profile of a file; `replay` to see how an answer was established; `memory` for what "
    "earlier runs established about a file. Paths must lie under this client's roots or the "
    "server's --allow directories."
)


class RlmTools:
    """The state the tools share: the server's settings, its flags and its open directories."""

    def __init__(self, flags: dict[str, Any], settings: Settings, allow: list[str]) -> None:
        self.flags = {k: v for k, v in flags.items() if v is not None}
        self.settings = settings
        self.allow = allow

    async def allowed(self, ctx: Context | None) -> list[str]:
        """The `--allow` directories and the roots the client declares now (asked each call: a
        client may change them). A client that speaks a protocol without roots has none."""
        dirs = list(self.allow)
        if ctx is None:
            return dirs
        caps = ctx.client_capabilities
        if caps is None or getattr(caps, "roots", None) is None:
            return dirs
        try:
            with warnings.catch_warnings():
                # Deprecated as of the 2026-07-28 protocol; the clients of today declare them.
                warnings.simplefilter("ignore")
                listed = await ctx.session.list_roots()
        except Exception:
            return dirs
        return dirs + root_dirs(str(r.uri) for r in listed.roots)

    async def path(self, path: str, ctx: Context | None) -> str:
        try:
            return confine(path, await self.allowed(ctx))
        except RlmError as exc:
            raise ToolError(exc.message) from None

    def lowered(self, asked: dict[str, Any], input_bytes: int) -> dict[str, Any]:
        """The server's limits, each lowered to what the call asked where it asked for less."""
        out: dict[str, Any] = {}
        for name, value in asked.items():
            if value is None:
                continue
            try:
                wanted = coerce(name, value)
            except ValueError as exc:
                raise ToolError(f"{name} must be {exc}, not {value!r}") from None
            own = getattr(self.settings, name)
            if name == "cell_timeout" and own is None:
                own = cell_seconds_for(self.settings, input_bytes)
            out[name] = wanted if own is None else min(own, wanted)
        return out

    def request_settings(self, asked: dict[str, Any], real: str) -> dict[str, Any]:
        try:
            size = os.path.getsize(real)
        except OSError:
            size = 0
        return {**self.flags, **self.lowered(asked, size)}


def build(tools: RlmTools) -> MCPServer[Any]:
    """The server and its tools."""
    server: MCPServer[Any] = MCPServer(
        "rlm", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    @server.tool()
    async def ask(
        path: str,
        question: str,
        ctx: Context,
        max_steps: int | None = None,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        max_time: float | None = None,
        max_depth: int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Answer a question about a file far too big to read: a model investigates it in a
        sandbox (grep, peek, code) and a synthesis writes the answer from what it established.
        Returns the answer (the value alone), explanation, cited findings, grounded, confidence,
        status, exit_code, usage and the trace path (see `replay`). Limits given here can only
        lower the server's own: max_steps (turns per node), max_calls, max_tokens, max_cost
        (dollars), max_time (seconds), max_depth (0-3), timeout (seconds per sandbox cell)."""
        real = await tools.path(path, ctx)
        asked = {
            "max_steps": max_steps,
            "max_calls": max_calls,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "max_time": max_time,
            "max_depth": max_depth,
            "cell_timeout": timeout,
        }
        request = {"path": real, "question": question, "settings": tools.request_settings(asked, real)}
        told = [0]

        async def progress(line: str) -> None:
            told[0] += 1
            await ctx.report_progress(told[0], None, line)

        try:
            outcome = await run_in_child(request, progress)
        except ChildFailed as exc:
            raise ToolError(str(exc)) from None
        result = outcome.get("result")
        error = outcome.get("error")
        if result is None:
            # Nothing was run, or the run ended before it had a result: one line, as rlm ask says it.
            assert error is not None
            trace = f" (trace: {error['trace']})" if error.get("trace") else ""
            raise ToolError(f"{error['message']} [exit {error['exit_code']}]{trace}")
        return _ask_reply(result)

    @server.tool()
    async def estimate(
        path: str,
        question: str,
        ctx: Context,
        max_steps: int | None = None,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        max_time: float | None = None,
    ) -> dict[str, Any]:
        """The most an `ask` with these arguments could spend, without running it: model calls,
        tokens and dollars (where the model's price is known), under the server's limits
        lowered by those given."""
        real = await tools.path(path, ctx)
        asked = {
            "max_steps": max_steps,
            "max_calls": max_calls,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "max_time": max_time,
        }
        settings = tools.request_settings(asked, real)
        model, sub_model = settings.pop("model", None), settings.pop("sub_model", None)
        from rlm.api.estimate import estimate as estimate_run

        try:
            found = await anyio.to_thread.run_sync(
                lambda: estimate_run(real, question, model=model, sub_model=sub_model, **settings)
            )
        except RlmError as exc:
            raise ToolError(exc.message) from None
        return {**found.to_dict(), "text": found.text()}

    @server.tool()
    async def stats(path: str, ctx: Context) -> dict[str, Any]:
        """A profile of a file without any model: size, lines, encoding, format, longest line,
        first and last lines, and the columns of its parsed table where rlm recognizes the format."""
        real = await tools.path(path, ctx)
        return await anyio.to_thread.run_sync(lambda: _profile(real, tools.settings))

    @server.tool()
    async def replay(ctx: Context, trace: str = "last", full: bool = False) -> str:
        """An earlier run step by step, as text: each action the model took and what it showed,
        the findings and the answer. `trace`: `last` (the newest run), a run id (the trace
        path's file name without .json) or a trace path."""
        path = await _trace_path(trace, tools, ctx)
        return await anyio.to_thread.run_sync(lambda: _render(path, full))

    @server.tool()
    async def memory(path: str, ctx: Context) -> dict[str, Any]:
        """What earlier runs established about this file (the findings their answers cited, kept
        for this file's content), each with its standing, age and the question it answered."""
        real = await tools.path(path, ctx)
        return {"memories": await anyio.to_thread.run_sync(lambda: _memories(real, tools.settings))}

    return server


def _ask_reply(result: dict[str, Any]) -> dict[str, Any]:
    """What a client is given of a run: the --json document but its findings (the cited ones
    are in `citations`; the rest is in the trace, which `replay` shows)."""
    reply = {k: v for k, v in result.items() if k != "findings"}
    reply["findings"] = len(result.get("findings") or [])
    return reply


def _profile(path: str, settings: Settings) -> dict[str, Any]:
    from rlm.input.source import open_source

    try:
        with open_source(path, cache_dir=settings.cache_dir) as source:
            profile = source.profile.to_dict(wait=True)
    except RlmError as exc:
        raise ToolError(exc.message) from None
    return {k: v for k, v in profile.items() if k not in ("index_path", "work_path")}


async def _trace_path(trace: str, tools: RlmTools, ctx: Context) -> str:
    """A trace the client may read: one of this server's runs (by `last` or id), or a file under
    its open directories."""
    from rlm.replay.logs import latest_trace

    folder = trace_dir_for(tools.settings)
    if trace == "last":
        found = latest_trace(folder)
        if found is None:
            raise ToolError(f"no trace in {folder} yet")
        return str(found)
    if os.sep not in trace and not trace.endswith(".json"):
        candidate = os.path.join(folder, f"{trace}.json")
        if os.path.exists(candidate) or os.path.exists(candidate[: -len(".json")] + ".jsonl"):
            return candidate
        raise ToolError(f"no run {trace!r} in {folder}")
    try:
        return confine(trace, [folder, *await tools.allowed(ctx)])
    except RlmError as exc:
        raise ToolError(exc.message) from None


def _render(path: str, full: bool) -> str:
    from rlm.replay.render import load_trace, render

    try:
        doc = load_trace(path)
    except RlmError as exc:
        raise ToolError(exc.message) from None
    out = io.StringIO()
    render(doc, path, out, full=full)
    return out.getvalue()


def _memories(path: str, settings: Settings) -> list[dict[str, Any]]:
    import hashlib
    import sqlite3

    from rlm.memory.recall import age_text, standing_text
    from rlm.memory.store import MemoryStore, default_memory_path

    where = settings.memory or default_memory_path()
    if settings.no_memory:
        return []
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 << 20):
            digest.update(chunk)
    try:
        with MemoryStore(where) as store:
            keys = store.inputs_matching(path, os.path.getsize(path), digest.hexdigest())
            found = [m for k in keys for m in store.memories(k)]
    except (sqlite3.Error, OSError) as exc:
        raise ToolError(f"the memory {where} cannot be used ({exc})") from None
    now = time.time()
    return [
        {
            "id": m.ref,
            "text": m.text,
            "evidence": m.evidence,
            "question": m.question,
            "standing": standing_text(m),
            "age": age_text(now - m.created),
            "tier": m.tier,
        }
        for m in found
    ]


def serve(flags: dict[str, Any], allow: list[str], http: str | None) -> None:
    """Serve until the client goes (stdio) or the process is stopped (HTTP)."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import resolve_model_name

    settings = load_settings(flags)
    for folder in allow:
        if not os.path.isdir(folder):
            raise ConfigError(f"--allow {folder}: not a directory")
    try:
        resolve_model_name(settings)
    except ConfigError as exc:
        # stats, replay and memory need no model; ask will say this again, as its error.
        print(f"rlm: warning: {exc.message}", file=sys.stderr, flush=True)
    server = build(RlmTools(flags, settings, [os.path.abspath(d) for d in allow]))
    if http is None:
        server.run("stdio")
        return
    host, port = _address(http)
    server.run("streamable-http", host=host, port=port)


def _address(http: str) -> tuple[str, int]:
    """HOST:PORT, loopback only: the tools read files, and a client is trusted with them."""
    from rlm.errors import UsageError

    host, sep, port = http.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http must be HOST:PORT (e.g. 127.0.0.1:8765), not {http!r}")
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise UsageError(f"--http listens on loopback only (127.0.0.1, ::1, localhost), not {host!r}")
    return host, int(port)
