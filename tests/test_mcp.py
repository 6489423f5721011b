"""`rlm mcp` through a real MCP client session: stdio (the server a subprocess the client spawns)
and streamable HTTP on 127.0.0.1, with the scripted model."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FIXTURES, cli_env, write_script
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

SPIN = "x = 0\nwhile True:\n    x += 1"
TOOLS = {"ask", "estimate", "stats", "replay", "memory"}


def _count(path: Path, needle: str) -> int:
    return sum(1 for line in path.read_text(errors="replace").splitlines() if needle in line)


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A root the client declares, holding a real log; a file outside it; a link from in to out."""
    root = tmp_path / "project"
    outside = tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    log = root / "access.log"
    shutil.copy(FIXTURES / "access.log", log)
    secret = outside / "secret.log"
    secret.write_text('127.0.0.1 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 1\n')
    (root / "link.log").symlink_to(secret)
    return {"root": root, "log": log, "secret": secret, "link": root / "link.log", "tmp": tmp_path}


def _script(tmp_path: Path, expected: int) -> str:
    answer = json.dumps({"answer": str(expected), "explanation": "Counted by code.", "citations": ["F1"]})
    return write_script(
        tmp_path / "s.json",
        {
            "rules": [{"match": "SPIN-PLEASE", "reply": {"tool": "execute", "args": {"code": SPIN}}}],
            "replies": [
                {
                    "tool": "execute",
                    "args": {"code": "print(sum(1 for l in context_lines if '\" 404 ' in l))"},
                },
                {"tool": "final", "args": {"answer": f"{expected} requests returned 404"}},
                answer,
            ],
            "default": "x",
        },
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _http_server(tmp: Path, args: list[str]) -> AsyncIterator[tuple[str, str]]:
    """`rlm mcp --http` on a free port: its URL and the bearer token from the file it names."""
    port = _free_port()
    log = open(tmp / "server.err", "w")
    proc = subprocess.Popen(
        [sys.executable, *args, "--http", f"127.0.0.1:{port}"],
        cwd=tmp,
        env=cli_env(tmp),
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp / "server.err").read_text()
                await anyio.sleep(0.2)
        told = (tmp / "server.err").read_text()
        where = Path(told.split("with the token in ")[1].split(" (readable")[0])
        assert where.stat().st_mode & 0o777 == 0o600 and where.parent.stat().st_mode & 0o777 == 0o700
        yield f"http://127.0.0.1:{port}/mcp", where.read_text().strip()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        log.close()
        assert out == b"", out  # stdout carries nothing in HTTP mode either


@asynccontextmanager
async def _http_client(url: str, token: str | None, **kwargs: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", **kwargs) as client:
            yield client


@asynccontextmanager
async def _session(
    kind: str, place: dict[str, Path], model: str, problems: list[Any], extra: list[str] | None = None
) -> AsyncIterator[Client]:
    tmp = place["tmp"]
    env = cli_env(tmp)
    args = ["-m", "rlm", "mcp", "-m", model, *(extra or [])]

    async def roots(ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=place["root"].as_uri())])

    async def messages(message: Any) -> None:
        if isinstance(message, Exception):  # a line on the server's stdout that is not the protocol's
            problems.append(message)

    if kind == "stdio":
        target: Any = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(tmp))
        async with Client(
            target, list_roots_callback=roots, message_handler=messages, mode="legacy"
        ) as client:
            yield client
        return
    # Over HTTP a client's roots are not used: the directory is the server's --allow.
    async with _http_server(tmp, [*args, "--allow", str(place["root"])]) as (url, token):
        async with _http_client(url, token, list_roots_callback=roots, message_handler=messages) as client:
            yield client


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("kind", ["stdio", "http"])
def test_a_client_session_asks_is_confined_and_cancels(kind: str, place: dict[str, Path]) -> None:
    expected = _count(place["log"], '" 404 ')
    model = _script(place["tmp"], expected)
    problems: list[Any] = []

    async def go() -> None:
        async with _session(kind, place, model, problems) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS

            told: list[str] = []

            async def progress(p: float, total: float | None, message: str | None) -> None:
                told.append(message or "")

            result = await client.call_tool(
                "ask", {"path": str(place["log"]), "question": "how many 404s?"}, progress_callback=progress
            )
            assert not result.is_error, _text(result)
            doc = json.loads(_text(result))
            assert doc["answer"] == str(expected) and doc["status"] == "final" and doc["exit_code"] == 0
            assert doc["citations"][0]["id"] == "F1" and str(expected) in doc["citations"][0]["text"]
            assert Path(doc["trace"]).is_file() and doc["run_id"] == Path(doc["trace"]).stem
            assert any("step 1: execute" in m for m in told) and "writing the answer" in told, told

            # Outside the roots, directly or through a link inside them: refused, in words.
            for path in (place["secret"], place["link"]):
                refused = await client.call_tool("ask", {"path": str(path), "question": "anything?"})
                assert refused.is_error and "outside the directories open to this server" in _text(refused)
            refused = await client.call_tool("stats", {"path": str(place["link"])})
            assert refused.is_error and str(place["secret"]) in _text(refused)

            # A limit can only be lowered: the server's 200 calls, the client's 5.
            est = json.loads(
                _text(
                    await client.call_tool(
                        "estimate", {"path": str(place["log"]), "question": "q", "max_calls": 5}
                    )
                )
            )
            assert est["max_calls"] == 5
            est = json.loads(
                _text(
                    await client.call_tool(
                        "estimate", {"path": str(place["log"]), "question": "q", "max_calls": 5000}
                    )
                )
            )
            assert est["max_calls"] == 200

            stats = json.loads(_text(await client.call_tool("stats", {"path": str(place["log"])})))
            assert stats["lines"] == len(place["log"].read_bytes().splitlines())
            shown = _text(await client.call_tool("replay", {"trace": doc["run_id"]}))
            assert "how many 404s?" in shown and "execute" in shown
            memories = json.loads(_text(await client.call_tool("memory", {"path": str(place["log"])})))
            assert any(str(expected) in m["text"] for m in memories["memories"])

            # Cancel a run whose cell spins: the run stops and its trace is kept, within 2 s.
            spinning = anyio.Event()

            async def watch(p: float, total: float | None, message: str | None) -> None:
                if message and "running execute" in message:
                    spinning.set()

            traces = place["tmp"] / "traces"
            before = set(traces.glob("*.json*"))
            async with anyio.create_task_group() as tg:

                async def slow() -> None:
                    await client.call_tool(
                        "ask",
                        {"path": str(place["log"]), "question": "SPIN-PLEASE", "timeout": 60},
                        progress_callback=watch,
                    )

                tg.start_soon(slow)
                with anyio.fail_after(60):
                    await spinning.wait()
                await anyio.sleep(0.5)
                cancelled = time.monotonic()
                tg.cancel_scope.cancel()
            finished = None
            while time.monotonic() - cancelled < 10:
                new = [p for p in traces.glob("*.json") if p not in before]
                if new and json.loads(new[0].read_text()).get("status") == "interrupted":
                    finished = time.monotonic() - cancelled
                    break
                await anyio.sleep(0.05)
            assert finished is not None and finished < 2.0, finished
            print(f"{kind}: the trace finished as interrupted {finished:.2f} s after the cancel")

            # The server is still there for the next call.
            again = await client.call_tool("stats", {"path": str(place["log"])})
            assert not again.is_error

    anyio.run(go)
    assert problems == []


def test_only_allow_dirs_without_roots(place: dict[str, Path]) -> None:
    """A client that declares no roots reads only under --allow."""
    model = _script(place["tmp"], 1)

    async def go() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "rlm", "mcp", "-m", model, "--allow", str(place["root"])],
            env=cli_env(place["tmp"]),
            cwd=str(place["tmp"]),
        )
        async with Client(params, mode="legacy") as client:
            ok = await client.call_tool("stats", {"path": str(place["log"])})
            assert not ok.is_error, _text(ok)
            no = await client.call_tool("stats", {"path": str(place["secret"])})
            assert no.is_error and "outside" in _text(no)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "rlm", "mcp", "-m", model],
            env=cli_env(place["tmp"]),
            cwd=str(place["tmp"]),
        )
        async with Client(params, mode="legacy") as client:
            none = await client.call_tool("stats", {"path": str(place["log"])})
            assert none.is_error and "--allow DIR" in _text(none)

    anyio.run(go)


def test_http_listens_on_loopback_only(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "mcp", "--http", "0.0.0.0:8000"],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "loopback only" in proc.stderr and proc.stdout == ""
    assert "Traceback" not in proc.stderr


def test_http_ignores_client_roots_and_wants_the_token(place: dict[str, Path]) -> None:
    """Any local process can reach a loopback port and declare any root: over HTTP only --allow
    counts, and a request without the server's bearer token is turned away."""
    model = _script(place["tmp"], 1)
    args = ["-m", "rlm", "mcp", "-m", model]

    async def everything(ctx: Any) -> types.ListRootsResult:
        uris = ["file:///", place["secret"].parent.as_uri()]
        return types.ListRootsResult(roots=[types.Root(uri=u) for u in uris])

    async def go() -> None:
        async with _http_server(place["tmp"], [*args, "--allow", str(place["root"])]) as (url, token):
            async with create_mcp_http_client() as http:
                hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
                for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                    response = await http.post(url, json=hello, headers=auth)
                    assert response.status_code == 401, response.status_code
            async with _http_client(url, token, list_roots_callback=everything) as client:
                ok = await client.call_tool("stats", {"path": str(place["log"])})
                assert not ok.is_error, _text(ok)
                no = await client.call_tool("stats", {"path": str(place["secret"])})
                assert no.is_error and "outside the directories open to this server" in _text(no)
                nul = await client.call_tool("stats", {"path": str(place["root"] / "access\x00.log")})
                assert nul.is_error and _text(nul).endswith("refused: the path holds a NUL byte")
        assert "Traceback" not in (place["tmp"] / "server.err").read_text()
        async with _http_server(place["tmp"], args) as (url, token):
            async with _http_client(url, token, list_roots_callback=everything) as client:
                none = await client.call_tool("stats", {"path": str(place["log"])})
                assert none.is_error and "over HTTP a client's roots are not used" in _text(none)
                assert "--allow DIR" in _text(none)

    anyio.run(go)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_roots_that_are_not_used(place: dict[str, Path]) -> None:
    """A root of `/`, a relative one or one holding NUL is left out (and said on stderr); the
    others still count. --allow / is warned about."""
    model = _script(place["tmp"], 1)
    weird = ["file:///", "file:relative/dir", "file:///tmp/a%00b", place["root"].as_uri()]

    async def roots(ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root.model_construct(uri=u) for u in weird])

    async def go() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "rlm", "mcp", "-m", model],
            env=cli_env(place["tmp"]),
            cwd=str(place["tmp"]),
        )
        async with Client(params, list_roots_callback=roots, mode="legacy") as client:
            ok = await client.call_tool("stats", {"path": str(place["log"])})
            assert not ok.is_error, _text(ok)
            no = await client.call_tool("stats", {"path": str(place["secret"])})
            assert no.is_error and "outside the directories open to this server" in _text(no)
            nul = await client.call_tool("memory", {"path": "access.log\x00"})
            assert nul.is_error and "NUL byte" in _text(nul)

    anyio.run(go)
    proc = subprocess.run(
        [sys.executable, "-m", "rlm", "mcp", "-m", model, "--allow", "/"],
        cwd=place["tmp"],
        env=cli_env(place["tmp"]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--allow / opens every file" in proc.stderr and "Traceback" not in proc.stderr


def test_replay_shows_only_runs_over_files_the_client_may_read(place: dict[str, Path]) -> None:
    """The trace folder also holds the CLI user's runs, and a trace holds text of its input: a
    run over a file outside the client's roots is not shown, by `last`, id or path."""
    tmp = place["tmp"]
    payroll = tmp / "elsewhere" / "payroll.log"
    payroll.write_text("PAYROLL alice 250000\n")
    script = write_script(
        tmp / "p.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": "print(context_lines[0])"}},
                {"tool": "final", "args": {"answer": "shown above"}},
                json.dumps({"answer": "seen", "explanation": "x", "citations": ["F1"]}),
            ],
            "default": "x",
        },
    )
    cli = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", str(payroll), "what is in it?", "-m", script],
        cwd=tmp,
        env=cli_env(tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    (private,) = (tmp / "traces").glob("*.json")
    model = _script(tmp, _count(place["log"], '" 404 '))
    problems: list[Any] = []

    async def go() -> None:
        async with _session("stdio", place, model, problems) as client:
            for trace in ("last", private.stem, str(private)):
                shown = await client.call_tool("replay", {"trace": trace})
                assert shown.is_error and "PAYROLL" not in _text(shown), _text(shown)
                assert len(_text(shown).splitlines()) == 1
            assert "outside the directories open to this client" in _text(shown)
            done = await client.call_tool("ask", {"path": str(place["log"]), "question": "how many 404s?"})
            assert not done.is_error, _text(done)
            shown = await client.call_tool("replay", {"trace": "last"})
            assert not shown.is_error and "how many 404s?" in _text(shown)
            # The CLI user's newer run over a private file does not hide the client's own.
            again = subprocess.run(
                [sys.executable, "-m", "rlm", "ask", str(payroll), "what is in it?", "-m", script],
                cwd=tmp,
                env=cli_env(tmp),
                capture_output=True,
                timeout=120,
            )
            assert again.returncode == 0
            shown = await client.call_tool("replay", {"trace": "last"})
            assert "how many 404s?" in _text(shown) and "PAYROLL" not in _text(shown)

    anyio.run(go)
    assert problems == []


def test_runs_wait_their_turn_and_a_path_swapped_meanwhile_is_refused(place: dict[str, Path]) -> None:
    """--max-runs 1: a second ask waits while the first runs (a cancel ends its wait). A path
    checked by the server and then changed (a directory on it swapped for a symlink to a
    private one) before the run's process opens it is refused there, nothing of it read."""
    tmp = place["tmp"]
    sub = place["root"] / "d"
    sub.mkdir()
    (sub / "f.log").write_text("harmless line\n" * 5)
    # A swap that stays inside the root still names another file than the one checked.
    near, other = place["root"] / "e", place["root"] / "other"
    near.mkdir()
    other.mkdir()
    (near / "f.log").write_text("harmless line\n" * 5)
    (other / "f.log").write_text("another file\n" * 5)
    private = tmp / "private"
    private.mkdir(mode=0o700)
    (private / "f.log").write_text("TOP-SECRET-PASSWORD=hunter2\n")
    model = _script(tmp, _count(place["log"], '" 404 '))
    problems: list[Any] = []

    async def go() -> None:
        async with _session("stdio", place, model, problems, ["--max-runs", "1"]) as client:
            spinning = anyio.Event()
            told: list[str] = []

            async def watch(p: float, total: float | None, message: str | None) -> None:
                if message and "running execute" in message:
                    spinning.set()

            async def heard(p: float, total: float | None, message: str | None) -> None:
                told.append(message or "")

            swapped: list[types.CallToolResult] = []
            async with anyio.create_task_group() as outer:
                first = anyio.CancelScope()

                async def spin() -> None:
                    with first:
                        await client.call_tool(
                            "ask",
                            {"path": str(place["log"]), "question": "SPIN-PLEASE", "timeout": 60},
                            progress_callback=watch,
                        )

                outer.start_soon(spin)
                with anyio.fail_after(60):
                    await spinning.wait()
                # A call past the limit waits (no progress: its run has not started), and a
                # cancel ends the wait.
                with anyio.move_on_after(3):
                    await client.call_tool(
                        "ask",
                        {"path": str(place["log"]), "question": "how many 404s?"},
                        progress_callback=heard,
                    )
                    raise AssertionError("a second run went beside the first")
                assert told == []

                async def waiting(path: Path) -> None:
                    swapped.append(
                        await client.call_tool("ask", {"path": str(path), "question": "first line?"})
                    )

                outer.start_soon(waiting, sub / "f.log")
                outer.start_soon(waiting, near / "f.log")
                await anyio.sleep(2)  # checked by the server; now waiting for the first run
                sub.rename(place["root"] / "d.orig")
                sub.symlink_to(private)
                near.rename(place["root"] / "e.orig")
                near.symlink_to(other)
                first.cancel()
            # Refused by the run's process, in one line, exit 3: the path now leads out of the
            # root (checked again there), or it names another file than the one checked.
            assert len(swapped) == 2
            for result in swapped:
                assert result.is_error and "[exit 3]" in _text(result) and "hunter2" not in _text(result)
                assert len(_text(result).splitlines()) == 1
            texts = sorted(_text(r) for r in swapped)
            assert any("outside the directories open to this server" in t for t in texts), texts
            assert any("is no longer the file that was checked" in t for t in texts), texts
            for trace in (tmp / "traces").glob("*.json*"):
                assert "hunter2" not in trace.read_text()
            # The server goes on.
            done = await client.call_tool("ask", {"path": str(place["log"]), "question": "how many 404s?"})
            assert not done.is_error, _text(done)

    anyio.run(go)
    assert problems == []


def test_ask_takes_a_time_range(place: dict[str, Path]) -> None:
    """`since`/`until` on the ask tool keep the lines of that range: the count the run prints is
    the range's, as the lines' own times give it; a bound rlm cannot read is an error, exit 2."""
    tmp = place["tmp"]
    lines = place["log"].read_text().splitlines()
    stamps = [datetime.strptime(x.split("[", 1)[1][:20], "%d/%b/%Y:%H:%M:%S") for x in lines]
    lo, hi = datetime(2015, 5, 17, 12, 0), datetime(2015, 5, 17, 13, 30)
    expected = sum(1 for t in stamps if lo <= t <= hi)
    assert 0 < expected < len(lines)
    answer = json.dumps({"answer": "see F1", "explanation": "Counted.", "citations": ["F1"]})
    model = write_script(
        tmp / "r.json",
        {
            "rules": [{"match": r"^system: You write the final answer.*?COUNT=(\d+)", "reply": r"\1"}],
            "replies": [
                {"tool": "execute", "args": {"code": "print('COUNT=' + str(len(context_lines)))"}},
                {"tool": "final", "args": {"answer": "see F1"}},
                answer,
            ],
            "default": "x",
        },
    )
    problems: list[Any] = []

    async def go() -> None:
        async with _session("stdio", place, model, problems) as client:
            done = await client.call_tool(
                "ask",
                {
                    "path": str(place["log"]),
                    "question": "how many lines?",
                    "since": "2015-05-17 12:00",
                    "until": "2015-05-17T13:30:00Z",
                },
            )
            assert not done.is_error, _text(done)
            assert json.loads(_text(done))["answer"] == str(expected)
            bad = await client.call_tool(
                "ask", {"path": str(place["log"]), "question": "q?", "since": "last tuesday"}
            )
            assert (
                bad.is_error
                and "--since 'last tuesday': not a time" in _text(bad)
                and "[exit 2]" in _text(bad)
            )

    anyio.run(go)
    assert problems == []
