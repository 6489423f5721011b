"""The MCP server: rlm's tools for a coding agent, over stdio or streamable HTTP.

The model, its endpoint and every limit are the server's own (flags, `RLM_*`, the config
file), resolved once when it starts; a client names files and questions, and may lower a
limit for one call, never raise it or choose the model. Files are readable only under the
server's `--allow` directories and, over stdio, the roots the client declares (rlm.mcp.paths):
over HTTP any local process can connect and declare any root, so there only `--allow` counts,
and a client must present the bearer token the server wrote to a 0600 file when it started.
At most `--max-runs` runs (each a process) go at once, and as many thread-pool tools; the
calls past that wait their turn, and a cancel while waiting ends the wait.
"""

from __future__ import annotations

import io
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rlm import __version__
from rlm.errors import ConfigError, RlmError
from rlm.mcp.paths import FileId, Refused, checked, confine, root_dirs, same_file
from rlm.mcp.runs import ChildFailed, run_in_child
from rlm.run.settings import Settings, cell_seconds_for, coerce, trace_dir_for

T = TypeVar("T")

# The limits a call may lower (the names are those of rlm.run.settings, `timeout` the cell's).
LIMITS = ("max_steps", "max_depth", "max_calls", "max_tokens", "max_cost", "max_time", "cell_timeout")

INSTRUCTIONS = (
    "rlm answers questions about files far too big to read into context (multi-gigabyte logs, CSV, "
    "JSON lines): a model investigates the file in a sandbox and every run leaves a trace. Use `ask` "
    "instead of reading a big file; `estimate` first for the most a run could cost; `stats` for a "
    "free profile of a file; `replay` to see how an answer was established; `memory` for what "
    "earlier runs established about a file. Paths must lie under the server's --allow directories "
    "or (over stdio) this client's roots."
)

NONE_OPEN_HTTP = (
    "no directory is open to this server: over HTTP a client's roots are not used (any local "
    "process could declare any); start the server with --allow DIR to open one"
)


class RlmTools:
    """The state the tools share: the server's settings, its flags, its open directories, whether
    a client's roots count (stdio) or not (HTTP), and how many runs may go at once."""

    def __init__(
        self,
        flags: dict[str, Any],
        settings: Settings,
        allow: list[str],
        *,
        roots: bool = True,
        max_runs: int = 2,
    ) -> None:
        self.flags = {k: v for k, v in flags.items() if v is not None}
        self.settings = settings
        self.allow = allow
        self.roots = roots
        self.max_runs = max_runs
        self._runs: anyio.Semaphore | None = None
        self._threads: anyio.CapacityLimiter | None = None

    @property
    def runs(self) -> anyio.Semaphore:
        """Held by each `ask` for as long as its process runs (made in the server's event loop)."""
        if self._runs is None:
            self._runs = anyio.Semaphore(self.max_runs)
        return self._runs

    @property
    def threads(self) -> anyio.CapacityLimiter:
        """The threads `stats`, `memory`, `estimate` and `replay` may use at once."""
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(self.max_runs)
        return self._threads

    async def allowed(self, ctx: Context | None) -> list[str]:
        """The `--allow` directories and, over stdio, the roots the client declares now (asked
        each call: a client may change them). A client that speaks a protocol without roots has
        none; over HTTP a client's roots are never asked for."""
        dirs = list(self.allow)
        if ctx is None or not self.roots:
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

    async def path(self, path: str, ctx: Context | None) -> tuple[str, FileId, list[str]]:
        """The real path, the file's identity now and the directories it was checked against
        (whoever opens it checks again: rlm.mcp.paths.same_file)."""
        allowed = await self.allowed(ctx)
        try:
            if not self.roots and not allowed and "\x00" not in path:
                raise Refused(NONE_OPEN_HTTP)
            real, file_id = checked(path, allowed)
        except RlmError as exc:
            raise ToolError(exc.message) from None
        return real, file_id, allowed

    async def in_thread(self, work: Callable[[], T]) -> T:
        """`work()` in a worker thread, at most `max_runs` at once (a wait can be cancelled)."""
        return await anyio.to_thread.run_sync(work, limiter=self.threads)

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
        since: str | None = None,
        until: str | None = None,
    ) -> dict[str, Any]:
        """Answer a question about a file far too big to read: a model investigates it in a
        sandbox (grep, peek, code) and a synthesis writes the answer from what it established.
        Returns the answer (the value alone), explanation, cited findings, grounded, confidence,
        status, exit_code, usage and the trace path (see `replay`). Limits given here can only
        lower the server's own: max_steps (turns per node), max_calls, max_tokens, max_cost
        (dollars), max_time (seconds), max_depth (0-3), timeout (seconds per sandbox cell).
        since / until: only the lines written in that range, by each line's own time (an ISO
        date and time, as the log prints it or with a zone; or 90s, 15m, 2h, 3d, today, yesterday)."""
        real, file_id, allowed = await tools.path(path, ctx)
        asked = {
            "max_steps": max_steps,
            "max_calls": max_calls,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "max_time": max_time,
            "max_depth": max_depth,
            "cell_timeout": timeout,
        }
        ranged = {k: v for k, v in (("since", since), ("until", until)) if v is not None}
        request = {
            "path": real,
            "question": question,
            "settings": {**tools.request_settings(asked, real), **ranged},
            "allowed": allowed,
            "file_id": list(file_id),
        }
        told = [0]

        async def progress(line: str) -> None:
            told[0] += 1
            await ctx.report_progress(told[0], None, line)

        try:
            async with tools.runs:  # past --max-runs, the call waits here (a cancel ends the wait)
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
        real, _, _ = await tools.path(path, ctx)
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
            found = await tools.in_thread(
                lambda: estimate_run(real, question, model=model, sub_model=sub_model, **settings)
            )
        except RlmError as exc:
            raise ToolError(exc.message) from None
        return {**found.to_dict(), "text": found.text()}

    @server.tool()
    async def stats(path: str, ctx: Context) -> dict[str, Any]:
        """A profile of a file without any model: size, lines, encoding, format, longest line,
        first and last lines, and the columns of its parsed table where rlm recognizes the format."""
        real, file_id, allowed = await tools.path(path, ctx)
        return await tools.in_thread(lambda: _profile(real, file_id, allowed, tools.settings))

    @server.tool()
    async def replay(ctx: Context, trace: str = "last", full: bool = False) -> str:
        """An earlier run step by step, as text: each action the model took and what it showed,
        the findings and the answer. `trace`: `last` (the newest run over a file this client may
        read), a run id (the trace path's file name without .json) or a trace path. A run over a
        file this client may not read is not shown."""
        allowed = await tools.allowed(ctx)
        return await tools.in_thread(lambda: _replay(trace, full, allowed, tools))

    @server.tool()
    async def memory(path: str, ctx: Context) -> dict[str, Any]:
        """What earlier runs established about this file (the findings their answers cited, kept
        for this file's content), each with its standing, age and the question it answered."""
        real, file_id, allowed = await tools.path(path, ctx)
        return {"memories": await tools.in_thread(lambda: _memories(real, file_id, allowed, tools.settings))}

    return server


def _ask_reply(result: dict[str, Any]) -> dict[str, Any]:
    """What a client is given of a run: the --json document but its findings (the cited ones
    are in `citations`; the rest is in the trace, which `replay` shows)."""
    reply = {k: v for k, v in result.items() if k != "findings"}
    reply["findings"] = len(result.get("findings") or [])
    return reply


def _profile(path: str, file_id: FileId, allowed: list[str], settings: Settings) -> dict[str, Any]:
    from rlm.input.source import open_source

    try:
        same_file(path, allowed, file_id, _file_id(path))
        with open_source(path, cache_dir=settings.cache_dir) as source:
            opened = source.profile.identity
            same_file(path, allowed, file_id, None if opened is None else (opened.device, opened.inode))
            profile = source.profile.to_dict(wait=True)
    except RlmError as exc:
        raise ToolError(exc.message) from None
    return {k: v for k, v in profile.items() if k not in ("index_path", "work_path")}


def _file_id(path: str) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# `last` looks at this many of the newest traces for one over a file the client may read.
LAST_LOOKS_AT = 200


def _replay(trace: str, full: bool, allowed: list[str], tools: RlmTools) -> str:
    """A trace the client may read, rendered: one of the trace folder's (by `last` or id) or a
    trace file under its open directories, and in every case a run over a file under its open
    directories (a trace holds text of its input; the folder also holds the CLI user's runs)."""
    from rlm.replay.logs import trace_files
    from rlm.replay.render import load_trace

    if "\x00" in trace:
        raise ToolError("refused: the trace holds a NUL byte")
    folder = trace_dir_for(tools.settings)
    if trace == "last":
        for found in trace_files(folder)[:LAST_LOOKS_AT]:
            try:
                doc = load_trace(found)
            except RlmError:
                continue
            if _readable_input(doc, allowed) is None:
                return _rendered(doc, str(found), full)
        raise ToolError(f"no trace in {folder} of a run over a file open to this client")
    if os.sep not in trace and not trace.endswith(".json"):
        path = os.path.join(folder, f"{trace}.json")
        if not (os.path.exists(path) or os.path.exists(path[: -len(".json")] + ".jsonl")):
            raise ToolError(f"no run {trace!r} in {folder}")
    else:
        try:
            path = confine(trace, [folder, *allowed])
        except RlmError as exc:
            raise ToolError(exc.message) from None
    try:
        doc = load_trace(path)
    except RlmError as exc:
        raise ToolError(exc.message) from None
    why = _readable_input(doc, allowed)
    if why is not None:
        raise ToolError(f"refused: {trace} is a run over {why}")
    return _rendered(doc, path, full)


def _readable_input(doc: dict[str, Any], allowed: list[str]) -> str | None:
    """None when the run's input is a file under `allowed`; else what it was, in a few words."""
    given = (doc.get("input") or {}).get("path")
    if not isinstance(given, str) or not given:
        return "an input that is not a file open to this client"
    try:
        confine(given, allowed)
    except RlmError:
        return "a file outside the directories open to this client"
    return None


def _rendered(doc: dict[str, Any], path: str, full: bool) -> str:
    from rlm.replay.render import render

    out = io.StringIO()
    render(doc, path, out, full=full)
    return out.getvalue()


def _memories(path: str, file_id: FileId, allowed: list[str], settings: Settings) -> list[dict[str, Any]]:
    import hashlib
    import sqlite3

    from rlm.memory.recall import age_text, standing_text
    from rlm.memory.store import MemoryStore, default_memory_path

    where = settings.memory or default_memory_path()
    if settings.no_memory:
        return []
    digest = hashlib.sha256()
    try:
        same_file(path, allowed, file_id, _file_id(path))
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            same_file(path, allowed, file_id, (st.st_dev, st.st_ino))
            while chunk := fh.read(4 << 20):
                digest.update(chunk)
    except RlmError as exc:
        raise ToolError(exc.message) from None
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        with MemoryStore(where) as store:
            keys = store.inputs_matching(path, st.st_size, digest.hexdigest())
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


def serve(
    flags: dict[str, Any],
    allow: list[str],
    http: str | None,
    max_runs: int = 2,
    serving: Callable[[], None] | None = None,
) -> None:
    """Serve until the client goes (stdio) or the process is stopped (HTTP). `serving` is called
    once the command line is accepted, as serving begins."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import resolve_model_name

    settings = load_settings(flags)
    from rlm.errors import UsageError

    if max_runs < 1:
        raise UsageError(f"--max-runs must be at least 1, not {max_runs}")
    for folder in allow:
        if "\x00" in folder or not os.path.isdir(folder):
            raise ConfigError(f"--allow {folder!r}: not a directory")
        if os.path.realpath(folder) == os.path.realpath(os.sep):
            print(
                f"rlm: warning: --allow {folder} opens every file this user can read to the clients",
                file=sys.stderr,
                flush=True,
            )
    try:
        resolve_model_name(settings)
    except ConfigError as exc:
        # stats, replay and memory need no model; ask will say this again, as its error.
        print(f"rlm: warning: {exc.message}", file=sys.stderr, flush=True)
    tools = RlmTools(
        flags, settings, [os.path.abspath(d) for d in allow], roots=http is None, max_runs=max_runs
    )
    server = build(tools)
    if serving is not None:
        serving()
    if http is None:
        server.run("stdio")
        return
    host, port = _address(http)
    _serve_http(server, host, port)


def _serve_http(server: MCPServer[Any], host: str, port: int) -> None:
    """Streamable HTTP at /mcp behind a bearer token: any local process can reach a loopback
    port, so the token (new at each start, in a 0600 file only this user can read) is what
    tells the user's own client from another user's process."""
    import secrets

    import uvicorn

    token = secrets.token_urlsafe(32)
    where = _write_token(token, port)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"rlm: serving MCP at http://{shown}:{port}/mcp; a client sends the header "
        f"'Authorization: Bearer <token>', with the token in {where} (readable by this user only)",
        file=sys.stderr,
        flush=True,
    )
    app = _bearer(server.streamable_http_app(host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    try:
        anyio.run(uvicorn.Server(config).serve)
    finally:
        try:
            os.unlink(where)
        except OSError:
            pass


def token_path(port: int) -> str:
    """Where the HTTP server on `port` writes its bearer token: the per-user data folder."""
    from platformdirs import user_data_dir

    return os.path.join(user_data_dir("rlm", appauthor=False), "mcp", f"http-token-{port}")


def _write_token(token: str, port: int) -> str:
    from rlm.privatefiles import make_private_dirs, write_private

    where = token_path(port)
    try:
        make_private_dirs(os.path.dirname(where))
        write_private(where, token + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the server's token to {where}: {exc.strerror or exc}") from None
    return where


def _bearer(app: Any, token: str) -> Any:
    """`app`, answering 401 to any HTTP request without `Authorization: Bearer <token>`."""
    import hmac

    expected = f"Bearer {token}".encode()
    body = (
        b'{"error": "unauthorized: send the header Authorization: Bearer <token>, the token rlm mcp wrote"}'
    )

    async def checked(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            given = next((v for k, v in scope.get("headers") or [] if k.lower() == b"authorization"), b"")
            if not hmac.compare_digest(given, expected):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return checked


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
