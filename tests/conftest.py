"""Shared test helpers: the real data, scripted models, running the CLI as a user does."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.trace.schema import problems

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many processes run the tests under `-n auto` (pyproject addopts), files dealt out
    whole (`--dist loadfile`). Two: most tests run `rlm` in a subprocess that keeps one core busy
    (importing litellm, mostly) while the test waits, so two streams fill the two cores the suite
    is measured on, and its time-bound checks (a stop within 2 s) were set there. None, the tests
    run in this process, where workers would hide what was asked for: the output (`-s`), and the
    real-model questions, whose summary is gathered in one process. PYTEST_XDIST_AUTO_NUM_WORKERS
    still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own reading of it
    if config.getoption("capture") == "no":
        return 0
    if re.search(r"(?<!not )\brealmodel\b", config.getoption("markexpr") or ""):
        return 0
    return 2 if len(os.sched_getaffinity(0)) >= 2 else 0


# The real data the tests read, kept in the repository (sources and licences in its README).
DATA = FIXTURES / "data"


@pytest.fixture(scope="session")
def real_data() -> Path:
    return DATA


@pytest.fixture
def apache_log(real_data: Path) -> Path:
    return real_data / "elastic" / "apache_logs"


@pytest.fixture(scope="session")
def huge_files(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str, Callable[[Path, int], int], int], Path]]:
    """A builder of big input files shared by the whole session: `huge_files(name, build, size)`
    builds `name` with `build(path, size)` the first time it is asked for and returns the same
    file after. The directory (files, and the caches tests put beside them) is removed when
    the session ends: gigabytes should not outlive the run in pytest's kept temp dirs."""
    root = tmp_path_factory.mktemp("huge")

    def built(name: str, build: Callable[[Path, int], int], size: int) -> Path:
        path = root / name
        if not path.exists():
            part = root / f"{name}.part"
            build(part, size)
            part.rename(path)
        return path

    yield built
    shutil.rmtree(root, ignore_errors=True)


def write_script(path: Path, replies: list[Any] | dict[str, Any]) -> str:
    """Write a scripted-provider script; returns the model string that plays it."""
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted/{path}"


def cli_env(cwd: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI run in a test: no RLM_* of the user's, no user config, fast retries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(
        {
            "RLM_RETRY_BASE_DELAY": "0.01",
            "XDG_CONFIG_HOME": str(cwd / ".config"),
            # Traces where the tests look for them: ./traces, asked for explicitly; the per-user
            # default goes to a directory of the test's own.
            "RLM_TRACE_DIR": "traces",
            "XDG_DATA_HOME": str(cwd / ".data"),
            "RLM_CACHE_DIR": str(cwd / ".cache"),
            # No warm process of the user's serves a test's run (tests/test_warm.py starts its own),
            # and none is left behind by one: each of hundreds of runs would start its own.
            "RLM_WARM_DIR": str(cwd / ".warm"),
            "RLM_WARM_AUTO": "0",
        }
    )
    env.update(extra or {})
    return env


def run_cli(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`rlm ARGS` in a subprocess, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "rlm", *args],
        cwd=cwd,
        env=cli_env(cwd, env),
        input=stdin,
        capture_output=True,
        timeout=timeout,
        text=stdin is None,
    )


def ask_typed_cli(path: Path, question: str, replies: list[str], *, cwd: Path) -> tuple[Any, Any]:
    """`rlm ask PATH QUESTION --protocol typed --strict --no-memory` through the CLI, its model a
    real HTTP server on 127.0.0.1 that gives `replies` in turn: the process and the server (its
    requests)."""
    from openai_stub import OpenAIStub

    with OpenAIStub(replies) as stub:
        proc = run_cli(
            ["ask", str(path), question, "-m", "openai/stub", "--api-base", stub.api_base, "--protocol", "typed",
             "--no-memory", "--strict"],
            cwd=cwd,
        )  # fmt: skip
    return proc, stub


def run_typed(action: dict[str, Any], table: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """A typed action compiled on `table` (its description) and its query run on the table's file
    read-only: (the result's column names, its rows)."""
    import duckdb

    from rlm.run.actions import Action
    from rlm.run.typed import to_action

    compiled = to_action(json.dumps(action), table)
    assert isinstance(compiled, Action), compiled
    # The query as the worker reads it: the `sql(...)` call's argument, a Python string literal.
    call = next(
        node
        for node in ast.walk(ast.parse(compiled.args["code"]))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "sql"
    )
    query = ast.literal_eval(call.args[0])
    with duckdb.connect(table["path"], read_only=True) as con:
        cursor = con.execute(query)
        return [d[0] for d in cursor.description], cursor.fetchall()


def ask_typed_once(
    path: Path, question: str, action: dict[str, Any], answer: str, *, cwd: Path
) -> tuple[Any, Any]:
    """ask_typed_cli with a model that sends `action`, then `final` with `answer` (and the
    synthesis's reply citing the first finding)."""
    replies = [
        json.dumps(action),
        json.dumps({"op": "final", "answer": answer}),
        json.dumps({"answer": answer, "citations": ["F1"]}),
    ]
    return ask_typed_cli(path, question, replies, cwd=cwd)


def start_cli(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`rlm ARGS` started in a subprocess as a user starts it, for a test that acts on the run
    while it goes (a signal, a change to its input); stdout and stderr are pipes, read as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlm", *args],
        cwd=cwd,
        env=cli_env(cwd, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(
    what: Callable[[], bool],
    proc: subprocess.Popen[str],
    *,
    seconds: float = 60,
    poll: float = 0.02,
    never: str = "the awaited stage was never reached",
) -> None:
    """Poll `what` every `poll` seconds until it holds. Fails with the run's stderr when the run
    ends first (a stage it never reached), and with `never` once `seconds` have passed. A short
    `poll` catches a stage that lasts a fraction of a second (a scan of the input)."""
    deadline = time.monotonic() + seconds
    while not what():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, never
        time.sleep(poll)


def _parent_of(stat: str) -> int:
    """The parent pid in the text of /proc/PID/stat (after the command name, which may hold spaces)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def child_workers(pid: int) -> list[int]:
    """The sandbox workers whose parent is `pid`, found through /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # the process ended while the list was read
        if _parent_of(stat) == pid and b"rlm.sandbox.worker.main" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """`pid` runs: it exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def table_building(cache: Path) -> bool:
    """A table build has begun under the cache directory `cache`: its work folder is there."""
    return any(p.is_dir() for p in cache.rglob("rlm-build-*")) if cache.exists() else False


def traces_in(directory: Path) -> list[dict[str, Any]]:
    """Every finished trace under `directory`/traces, oldest first."""
    return [json.loads(p.read_text()) for p in sorted((directory / "traces").glob("*.json"))]


def exec_cell(sandbox: Any, code: str, *, wall: float, cpu: float) -> tuple[str, dict[str, Any]]:
    """Run a cell in a real worker: ("reply", the reply) or ("lost", why) when the worker was killed."""
    from rlm.sandbox.client import WorkerLost

    try:
        return "reply", sandbox.request("exec", timeout=wall, code=code, cpu_seconds=cpu)
    except WorkerLost as exc:
        return "lost", {"error": str(exc)}


def product_worker(path: Path, cache_dir: Path) -> Any:
    """A worker started from the product's one factory (rlm.run.workers.worker_spec_for) over
    `path` opened as `rlm ask` opens it: its prebuilt index, its table, the default memory
    headroom. The cache is made readable by the worker's uid (the worker drops root to nobody).
    Returns the started Sandbox."""
    from rlm.input.source import open_source
    from rlm.run.settings import Settings
    from rlm.run.workers import worker_spec_for
    from rlm.sandbox.client import Sandbox

    profile = open_source(str(path), cache_dir=str(cache_dir)).profile
    profile.digest.result()  # the digest is stored from a thread of its own: let it land before the walk
    for p in [cache_dir, *cache_dir.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    sandbox = Sandbox(worker_spec_for(profile, Settings()))
    sandbox.start()
    return sandbox


def latest_trace(directory: Path) -> dict[str, Any]:
    traces = sorted((directory / "traces").glob("*.json"))
    assert traces, f"no trace written in {directory / 'traces'}"
    return json.loads(traces[-1].read_text())


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in-process in tmp_path with no user config, no RLM_* variables, fast retries."""
    for key in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / ".data"))
    monkeypatch.setenv("RLM_TRACE_DIR", "traces")
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ask(path: Path, question: str, script: Path, **flags: Any) -> Any:
    """run_ask in-process with a scripted model; returns the RunResult."""
    from rlm.run.settings import load_settings
    from rlm.run.wiring import run_ask

    settings = load_settings({"model": f"scripted/{script}", "retry_base_delay": 0.01, **flags})
    return run_ask(settings, str(path), question)


def script_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(autouse=True)
def no_internal_errors(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Any run in a test whose trace reports an internal error fails that test, unless the test
    provokes one on purpose: such an error reaches users even when the test's own asserts pass.
    Every trace a run wrote must also match rlm.trace.schema, statuses and kinds included."""
    yield
    if request.node.get_closest_marker("internal_error_expected"):
        return
    for trace in tmp_path.rglob("traces/*.json"):
        try:
            doc = json.loads(trace.read_text())
        except (OSError, ValueError):
            continue
        internal = [w for w in doc.get("warnings") or [] if "internal error" in str(w)]
        assert not internal, f"{trace.name}: {internal}"
        if isinstance(doc, dict) and "tool_version" in doc:  # written by rlm, not made by the test
            wrong = problems(doc, strict=True)
            assert not wrong, f"{trace.name} does not match rlm.trace.schema: {wrong[:5]}"
