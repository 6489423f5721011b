"""Shared test helpers: the real data, scripted models, running the CLI as a user does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.trace.schema import problems

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


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
