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
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FIXTURES, cli_env, write_script
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters

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
async def _session(
    kind: str, place: dict[str, Path], model: str, problems: list[Any]
) -> AsyncIterator[Client]:
    tmp = place["tmp"]
    env = cli_env(tmp)
    args = ["-m", "rlm", "mcp", "-m", model]

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
    port = _free_port()
    log = open(tmp / "server.err", "w")
    proc = subprocess.Popen(
        [sys.executable, *args, "--http", f"127.0.0.1:{port}"],
        cwd=tmp,
        env=env,
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
        async with Client(
            f"http://127.0.0.1:{port}/mcp", list_roots_callback=roots, message_handler=messages, mode="legacy"
        ) as client:
            yield client
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        log.close()
        assert out == b"", out  # stdout carries nothing in HTTP mode either


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
