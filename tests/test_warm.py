"""A warm process (`rlm warm start`) as a user runs it: `rlm ask` answers through it exactly as
it answers alone (stdout, stderr, exit status, its working directory and environment), Ctrl-C
stops the run it serves, a client that dies takes its run with it, and nobody else can use it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, cli_env, run_cli, start_cli, traces_in, wait_for, write_script

from rlm.trace.eventlog import fold

SPIN = "x = 0\nwhile True:\n    x += 1"
COUNT_404 = 'print(sql("SELECT count(*) FROM log WHERE status = 404"))'


@pytest.fixture(scope="module")
def warm_dir() -> Iterator[Path]:
    """A warm process for this module's tests, in a short folder of its own (a socket's path is
    at most 107 bytes), stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="w", dir="/tmp")) / "warm"
    home = folder.parent
    proc = run_cli(["warm", "start", "--idle", "10"], cwd=home, env={"RLM_WARM_DIR": str(folder)})
    assert proc.returncode == 0, proc.stderr
    assert "ready" in proc.stderr and proc.stdout == ""
    yield folder
    run_cli(["warm", "stop"], cwd=home, env={"RLM_WARM_DIR": str(folder)})
    shutil.rmtree(home, ignore_errors=True)


def _status(folder: Path, cwd: Path) -> dict[str, int]:
    proc = run_cli(["warm", "status"], cwd=cwd, env={"RLM_WARM_DIR": str(folder)})
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.replace(",", "").split()
    return {"pid": int(words[2]), "served": int(words[3]), "running": int(words[6])}


def _ask_argv(model: str, *options: str) -> list[str]:
    """`rlm ask` over the fixture access log, as a process's argv."""
    return [sys.executable, "-m", "rlm", "ask", str(FIXTURES / "access.log"), "q", "-m", model, *options]


def _counting_404s(folder: Path) -> str:
    """The access log copied into `folder`, and a scripted model that counts its 404s (35)."""
    shutil.copy(FIXTURES / "access.log", folder / "access.log")
    script = [
        {"tool": "execute", "args": {"code": COUNT_404}},
        {"tool": "final", "args": {"answer": "35"}},
        "35 [F1]",
    ]
    return write_script(folder / "s.json", script)


def test_a_question_through_the_warm_process_is_answered_as_alone(warm_dir: Path, tmp_path: Path) -> None:
    before = _status(warm_dir, tmp_path)["served"]
    model = _counting_404s(tmp_path)
    env = {"RLM_WARM_DIR": str(warm_dir)}
    # A relative path and a relative trace folder: the run works where the user is.
    warm = run_cli(
        ["ask", "access.log", "How many requests returned 404?", "-m", model, "--json"], cwd=tmp_path, env=env
    )
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout)["answer"] == "35"
    assert "Traceback" not in warm.stderr
    assert _status(warm_dir, tmp_path)["served"] == before + 1
    (trace,) = traces_in(tmp_path)  # RLM_TRACE_DIR=traces, read in the user's folder
    assert trace["status"] == "final"
    # The same question without it: the same answer, the same kind of stderr.
    alone = run_cli(
        ["ask", "access.log", "How many requests returned 404?", "-m", model, "--json"],
        cwd=tmp_path,
        env={**env, "RLM_NO_WARM": "1"},
    )
    assert json.loads(alone.stdout)["answer"] == "35"
    assert _status(warm_dir, tmp_path)["served"] == before + 1
    # Bad input: the one-line error and exit 3 the user gets without it, nothing on stdout.
    missing = run_cli(["ask", "nothing-here.log", "q", "-m", model], cwd=tmp_path, env=env)
    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr.startswith("rlm: ") and len(missing.stderr.strip().splitlines()) == 1
    assert _status(warm_dir, tmp_path)["served"] == before + 2


@pytest.mark.parametrize("ignored", [False, True])
def test_ctrl_c_stops_the_run_it_serves(warm_dir: Path, tmp_path: Path, ignored: bool) -> None:
    """Also when the caller started with SIGINT ignored (a background job's is): `rlm ask`
    alone sets its own handler all the same, so the signal is passed on all the same."""
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": SPIN}}, "x"])
    args = _ask_argv(model, "--timeout", "60")
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=cli_env(tmp_path, {"RLM_WARM_DIR": str(warm_dir)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    wait_for(lambda: _status(warm_dir, tmp_path)["running"] == 1, proc, seconds=30, poll=0.2)
    time.sleep(1.5)  # the cell is spinning
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "rlm: stopping… (Ctrl-C again to quit at once)" in err and "Traceback" not in err
    (trace,) = traces_in(tmp_path)
    assert trace["status"] == "interrupted"
    assert _status(warm_dir, tmp_path)["running"] == 0


def _worker_started(cwd: Path) -> bool:
    """Whether the run's live trace log under `cwd` records its started worker (the sandbox's
    report, empty in the log's first line)."""
    for log in (cwd / "traces").glob("*.jsonl"):
        doc, _ = fold(log.read_text())
        if doc is not None and doc.get("sandbox"):
            return True
    return False


def test_a_client_killed_outright_takes_its_run_with_it(warm_dir: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": SPIN}}, "x"])
    args = ["ask", str(FIXTURES / "access.log"), "q", "-m", model, "--timeout", "60"]
    served = _status(warm_dir, tmp_path)["served"]
    proc = start_cli(args, cwd=tmp_path, env={"RLM_WARM_DIR": str(warm_dir)})
    # Killed once its cell runs (its worker started, said in the live log): a client killed
    # while the run is still starting takes it too, but before there is a trace to finish.
    wait_for(lambda: _worker_started(tmp_path), proc, seconds=30, poll=0.2)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _status(warm_dir, tmp_path)["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    status = _status(warm_dir, tmp_path)
    assert status["running"] == 0 and status["served"] == served + 1  # the warm process ran it
    (trace,) = traces_in(tmp_path)  # the run was stopped, not lost: its trace is finished
    assert trace["status"] in ("interrupted", "terminated")


def test_a_request_of_another_shape_is_refused_and_the_server_goes_on(warm_dir: Path, tmp_path: Path) -> None:
    path = next(warm_dir.glob("warm-*.sock"))
    for message in ({"run": ["rlm", "replay", "last"], "cwd": "/", "env": {}, "umask": 0o22}, [1, 2], "x"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.settimeout(10)
            sock.connect(str(path))
            socket.send_fds(sock, [json.dumps(message).encode()], [0, 1, 2])
            assert "refused" in json.loads(sock.recv(4096))
    assert _status(warm_dir, tmp_path)["running"] == 0


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("refused")
else:
    print("connected")
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs a second user: runs as root to become nobody")
def test_another_user_cannot_reach_it(warm_dir: Path) -> None:
    assert warm_dir.stat().st_mode & 0o777 == 0o700
    path = next(warm_dir.glob("warm-*.sock"))
    assert path.stat().st_mode & 0o777 == 0o600
    tried = subprocess.run(
        [*AS_NOBODY, sys.executable, "-I", "-c", _CONNECT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tried.stdout.strip() == "refused", tried.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="needs a second user: runs as root to become nobody")
def test_another_user_s_questions_are_answered_in_its_own_process(warm_dir: Path, tmp_path: Path) -> None:
    served = _status(warm_dir, tmp_path)["served"]
    home = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own folders are root's, 0700
    home.chmod(0o777)
    env = cli_env(home, {"RLM_WARM_DIR": str(warm_dir), "HOME": str(home)})
    if subprocess.run([*AS_NOBODY, sys.executable, "-c", "import rlm"], env=env, cwd=home).returncode:
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip("nobody cannot import rlm from this checkout (a folder only root may enter)")
    shutil.copy(FIXTURES / "access.log", home / "access.log")
    model = write_script(home / "s.json", ["done", "done"])
    for name in ("access.log", "s.json"):
        (home / name).chmod(0o644)
    status = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "rlm", "warm", "status"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 1 and status.stdout.strip() == "not running"
    # One plain call (the sandbox's worker needs what nobody may not read here): the warm
    # process served nobody.
    ask = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "rlm", "ask", "access.log", "q", "-m", model, "--mode", "plain"],
        cwd=home, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ask.returncode == 0 and ask.stdout.strip() == "done", ask.stderr
    assert _status(warm_dir, tmp_path)["served"] == served
    # A config folder it cannot enter (root's, 0700): the one-line config error, exit 4.
    private = home / "root-only"
    private.mkdir(mode=0o700)
    env["XDG_CONFIG_HOME"] = str(private)
    ask = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "rlm", "ask", "access.log", "q", "-m", model],
        cwd=home, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ask.returncode == 4 and ask.stdout == "", ask.stderr
    assert ask.stderr.startswith("rlm: cannot read config file") and len(ask.stderr.splitlines()) == 1
    shutil.rmtree(home, ignore_errors=True)


def test_a_folder_others_can_write_to_is_refused_in_one_line(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    proc = run_cli(["warm", "start"], cwd=tmp_path, env={"RLM_WARM_DIR": str(shared)})
    assert proc.returncode == 4 and proc.stdout == ""
    assert (
        proc.stderr.startswith("rlm: warm: the socket cannot be used") and len(proc.stderr.splitlines()) == 1
    )
    assert not list(shared.iterdir())


def _mcp_server(model: str, env: dict[str, str], folder: Path) -> Any:
    """`rlm mcp` with `model`, serving the files of `folder`, as a stdio client starts it."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm", "mcp", "-m", model, "--allow", str(folder)],
        env=env,
        cwd=str(folder),
    )


def test_an_mcp_run_is_served_by_it_too(warm_dir: Path, tmp_path: Path) -> None:
    import anyio
    from mcp import Client, types

    served = _status(warm_dir, tmp_path)["served"]
    model = _counting_404s(tmp_path)
    env = cli_env(tmp_path, {"RLM_WARM_DIR": str(warm_dir)})
    server = _mcp_server(model, env, tmp_path)

    async def go() -> str:
        async with Client(server, mode="legacy") as client:
            done = await client.call_tool(
                "ask", {"path": str(tmp_path / "access.log"), "question": "How many 404s?"}
            )
            assert not done.is_error
            return "".join(c.text for c in done.content if isinstance(c, types.TextContent))

    assert json.loads(anyio.run(go))["answer"] == "35"
    assert _status(warm_dir, tmp_path)["served"] == served + 1


def _raw(path: Path, message: bytes, fds: list[int]) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(30)
    sock.connect(str(path))
    socket.send_fds(sock, [message], fds)
    return sock


def test_a_stop_sent_as_the_run_starts_stops_it_and_bad_messages_end_nothing(
    warm_dir: Path, tmp_path: Path
) -> None:
    """A SIGINT passed on at once (before the child has the run's handlers) stops the run
    (exit 130), never lost; a message nested too deep or a signal of the wrong type is
    refused or ignored, and the server serves on."""
    path = next(warm_dir.glob("warm-*.sock"))
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": SPIN}}, "x"])
    env = cli_env(tmp_path, {"RLM_WARM_DIR": str(warm_dir)})
    argv = ["rlm", "ask", str(FIXTURES / "access.log"), "q", "-m", model, "--timeout", "60"]
    for _ in range(3):
        out = tmp_path / "out.txt"
        with open(out, "wb") as sink, open(os.devnull, "rb") as nothing:
            request = {"run": argv, "cwd": str(tmp_path), "env": env, "umask": 0o22, "ignored": []}
            sock = _raw(path, json.dumps(request).encode(), [nothing.fileno(), sink.fileno(), sink.fileno()])
            sock.send(json.dumps({"signal": 2.0}).encode())  # the wrong type: ignored
            sock.send(json.dumps({"signal": int(signal.SIGINT)}).encode())
            replies = [json.loads(sock.recv(4096)), json.loads(sock.recv(4096))]
            sock.close()
        assert "pid" in replies[0] and replies[1] == {"exit": 130}, out.read_text()
    deep = _raw(path, b"[" * 200_000, [])
    assert "refused" in json.loads(deep.recv(4096))
    deep.close()
    assert _status(warm_dir, tmp_path)["running"] == 0


def test_a_closed_stdin_is_dev_null_and_a_caller_with_fewer_rights_runs_alone(
    warm_dir: Path, tmp_path: Path
) -> None:
    """A caller whose stdin is closed hands over /dev/null in its place, never the socket that
    would take its descriptor. The same uid is not enough: a process without the server's
    capabilities is refused, and answered in its own process."""
    served = _status(warm_dir, tmp_path)["served"]
    model = write_script(tmp_path / "s.json", ["done", "done", "done", "done"])
    args = _ask_argv(model, "--mode", "plain")
    env = cli_env(tmp_path, {"RLM_WARM_DIR": str(warm_dir)})
    closed = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert closed.returncode == 0 and closed.stdout.strip() == "done", closed.stderr
    served += 1
    assert _status(warm_dir, tmp_path)["served"] == served
    if os.getuid() == 0 and shutil.which("setpriv"):
        fewer = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
        weaker = subprocess.run(
            [*fewer, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert weaker.returncode == 0 and weaker.stdout.strip() == "done", weaker.stderr
    assert _status(warm_dir, tmp_path)["served"] == served


def _alone_env(cwd: Path, folder: Path, **extra: str) -> dict[str, str]:
    """A test's environment with the default a user has: a run alone starts a warm process."""
    env = cli_env(cwd, {"RLM_WARM_DIR": str(folder), **extra})
    env.pop("RLM_WARM_AUTO")
    return env


def _warm(cmd: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlm", "warm", cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_question_asked_alone_leaves_a_warm_process_for_the_next(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="w", dir="/tmp")) / "warm"
    model = _counting_404s(tmp_path)
    env = _alone_env(tmp_path, folder)
    other = _alone_env(tmp_path, folder, LITELLM_LOG="ERROR")  # a setting litellm reads at its import
    argv = [sys.executable, "-m", "rlm", "ask", "access.log", "How many requests returned 404?", "-m", model]

    def ask(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    try:
        # A FIFO planted where its log goes would hold the caller at exit: none is started.
        from rlm.cli.warm_client import socket_path

        folder.mkdir(mode=0o700)
        log = Path(socket_path(env=env)).with_suffix(".log")
        os.mkfifo(log, 0o600)
        held = ask(env)
        assert (held.returncode, held.stdout) == (0, "35\n"), held.stderr
        assert _warm("status", tmp_path, env).returncode == 1 and not list(folder.glob("*.sock"))
        assert log.is_fifo()
        log.unlink()
        first = ask(env)
        assert (first.returncode, first.stdout) == (0, "35\n"), first.stderr
        assert "warm" not in first.stderr  # nothing said: a script sees no difference but the time
        # Started as the first run ended; it answers once litellm is imported.
        deadline = time.monotonic() + 120
        while _warm("status", tmp_path, env).returncode != 0:
            assert time.monotonic() < deadline, [p.read_text() for p in folder.glob("*.log")]
            time.sleep(0.2)
        assert _status(folder, tmp_path)["served"] == 0
        second = ask(env)
        assert (second.returncode, second.stdout) == (0, "35\n"), second.stderr
        assert _status(folder, tmp_path)["served"] == 1
        # Another value of what litellm read when that process started: this run is not its.
        third = ask(other)
        assert (third.returncode, third.stdout) == (0, "35\n"), third.stderr
        assert _status(folder, tmp_path)["served"] == 1
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        assert all(p.stat().st_mode & 0o077 == 0 for p in folder.iterdir())
    finally:
        for e in (env, other):
            _warm("stop", tmp_path, e)
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_no_warm_process_is_left_when_turned_off_or_when_no_question_was_asked(tmp_path: Path) -> None:
    model = _counting_404s(tmp_path)
    folder = tmp_path / "warm"
    turned_off = run_cli(
        ["ask", "access.log", "q", "-m", model], cwd=tmp_path, env={"RLM_WARM_DIR": str(folder)}
    )
    assert turned_off.returncode == 0, turned_off.stderr  # RLM_WARM_AUTO=0, as every test runs
    bad_flag = subprocess.run(
        [sys.executable, "-m", "rlm", "ask", "access.log", "q", "--max-steps", "none"],
        cwd=tmp_path, env=_alone_env(tmp_path, folder), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad_flag.returncode == 2 and bad_flag.stdout == "", bad_flag.stderr
    # A variable litellm reads, not UTF-8 (the key is made of bytes as they are): answered as ever.
    odd = run_cli(
        ["ask", "access.log", "q", "-m", model], cwd=tmp_path, env={"no_proxy": os.fsdecode(b"a\xff")}
    )
    assert odd.returncode == 0 and "Traceback" not in odd.stderr, odd.stderr
    # The process is started (or not) before the run's own process exits: nothing to wait for.
    assert not folder.exists()


def test_an_mcp_server_starts_one_for_its_runs(tmp_path: Path) -> None:
    """`rlm mcp` with the default a user has starts a warm process as it starts serving: its
    first run, asked once that process is ready, is served by it."""
    import anyio
    from mcp import Client, types

    folder = Path(tempfile.mkdtemp(prefix="w", dir="/tmp")) / "warm"
    model = _counting_404s(tmp_path)
    env = _alone_env(tmp_path, folder)
    server = _mcp_server(model, env, tmp_path)

    async def go() -> str:
        async with Client(server, mode="legacy") as client:
            deadline = time.monotonic() + 120
            while _warm("status", tmp_path, env).returncode != 0:
                assert time.monotonic() < deadline, [p.read_text() for p in folder.glob("*.log")]
                await anyio.sleep(0.2)
            assert _status(folder, tmp_path)["served"] == 0
            done = await client.call_tool(
                "ask", {"path": str(tmp_path / "access.log"), "question": "How many 404s?"}
            )
            assert not done.is_error
            return "".join(c.text for c in done.content if isinstance(c, types.TextContent))

    try:
        assert json.loads(anyio.run(go))["answer"] == "35"
        assert _status(folder, tmp_path)["served"] == 1
    finally:
        _warm("stop", tmp_path, env)
        shutil.rmtree(folder.parent, ignore_errors=True)
