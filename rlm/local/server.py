"""Run a llama.cpp OpenAI-compatible server as a child process for one `with` block.

The server is started in its own process group so that stopping it also
stops anything it spawned, and (on Linux) with PR_SET_PDEATHSIG so that the
kernel kills it if this process dies without running its cleanup (SIGKILL,
a crash). Only the standard library is imported here: llama.cpp (the prebuilt
`xllamacpp` wheel by default, or a native `llama-cpp-python` build) is loaded
by the child, never by the CLI process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import ConfigError, ProviderError

LOCAL_MODEL_ALIAS = "local"


@dataclass(frozen=True)
class Backend:
    """One way to run llama.cpp's OpenAI-compatible server in a child process."""

    key: str
    requirement: str  # what pip installs
    distribution: str  # the installed distribution's name, for its version
    # Modules the server needs importable; checked with find_spec so that
    # nothing heavy is imported in this process.
    modules: tuple[str, ...]
    # sha256 of every wheel pip may pick for `requirement` (one per platform);
    # empty for a requirement that may build from source.
    hashes: tuple[str, ...] = ()

    def command(self, gguf: Path, port: int, n_ctx: int, threads: int) -> list[str]:
        """The server's command line for `gguf`, served under the alias `local` on 127.0.0.1:`port`."""
        if self.key == PREBUILT.key:
            return [
                sys.executable,
                "-m",
                "rlm.local.xserve",
                "--model",
                str(gguf),
                "--alias",
                LOCAL_MODEL_ALIAS,
                "--port",
                str(port),
                "--n-ctx",
                str(n_ctx),
                "--threads",
                str(threads),
            ]
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--model_alias",
            LOCAL_MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
        ]


# The default: llama.cpp's own server, prebuilt in a wheel (installs in seconds;
# measured about 1.5x slower per request than a native build). Binary wheels only,
# each pinned by hash: pip can never run code from it at install time.
PREBUILT = Backend(
    key="xllamacpp",
    requirement="xllamacpp==2026.10.11549",
    distribution="xllamacpp",
    modules=("xllamacpp",),
    hashes=(
        "c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261",  # manylinux x86_64
        "e2a3e79e775515de4ad197e667f874070446ef9ac9cf2044bc9866bc4c72289e",  # manylinux aarch64
        "4ecda27a308b2403aa13c9d04b270befab95edc556c24ed00b2f8a98bd7f6781",  # macOS arm64
        "1f2a08052bb653659bcf1bedbbaf86b97f41dd46aa2763d596d7f27c5d89a689",  # macOS x86_64
        "1b76730ab9af47ec8d05a3d55154305fa92642f694dd9ad87d9e5a5e9956a59d",  # Windows x86_64
    ),
)
# `rlm local setup --build`: llama-cpp-python compiled for this CPU (~5-10 minutes
# on 2 cores; faster per request).
NATIVE = Backend(
    key="llama-cpp-python",
    requirement="llama-cpp-python[server]==0.3.36",
    distribution="llama_cpp_python",
    modules=("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context"),
)
# Which one serves when both are installed: the native build, the faster.
BACKENDS: tuple[Backend, ...] = (NATIVE, PREBUILT)
SERVER_REQUIREMENT = PREBUILT.requirement
SERVER_MODULES: tuple[str, ...] = PREBUILT.modules
_LOG_TAIL_LINES = 12
_CAUSE_LINES = 3
_ERROR_LINE = re.compile(r"\berror\b|\bfailed\b", re.IGNORECASE)
_STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class LocalEndpoint:
    """How litellm reaches a running local server."""

    model: str  # litellm model string, e.g. "openai/local"
    api_base: str  # "http://127.0.0.1:<port>/v1"
    n_ctx: int  # the server's context window, for sizing prompts
    # llama.cpp ignores the key, but litellm's OpenAI client refuses to send a request without one.
    api_key: str = "sk-no-key-required"


def missing_server_modules(modules: Sequence[str] | None = None) -> list[str]:
    """The server modules this interpreter cannot import: of `modules`, else of the default backend."""
    wanted = SERVER_MODULES if modules is None else modules
    return [name for name in wanted if importlib.util.find_spec(name) is None]


def installed_backend() -> Backend | None:
    """The backend that will serve the local model (the native build first), or None."""
    for backend in BACKENDS:
        if not missing_server_modules(backend.modules):
            return backend
    return None


def require_server(modules: Sequence[str] | None = None) -> Backend:
    """The backend to serve with; ConfigError saying how to install one when none can run here."""
    backend = installed_backend() if modules is None else None
    if backend is not None:
        return backend
    missing = missing_server_modules(modules)
    raise ConfigError(
        f"the local model server is not installed (missing: {', '.join(missing) or 'xllamacpp'}); "
        f"run `rlm local setup`, or `{sys.executable} -m pip install --only-binary=:all: '{SERVER_REQUIREMENT}'`"
    )


def default_threads() -> int:
    """The CPUs this process may run on (respects taskset/cgroup affinity where the OS reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(
    gguf: Path, port: int, n_ctx: int, threads: int, backend: Backend | None = None
) -> list[str]:
    """The command line of a llama.cpp server for `gguf` (the installed backend unless given)."""
    return (backend or installed_backend() or PREBUILT).command(gguf, port, n_ctx, threads)


# Run in front of the server: ask the kernel to SIGKILL this process when its
# parent dies (PR_SET_PDEATHSIG survives exec), then exec the server. SIGKILL, not
# SIGTERM: a server in the middle of a generation took minutes to heed SIGTERM. A launcher
# instead of `preexec_fn`, because preexec_fn is unsafe once the parent has threads
# (litellm starts some). If the parent died before the prctl, exit at once.
_LAUNCHER = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _launch_command(command: Sequence[str]) -> list[str]:
    """`command` wrapped so that it dies with this process on Linux (a no-op wrapper elsewhere)."""
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *command]


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file, preceded by earlier lines that name an error.

    llama.cpp states the cause ("error loading model: ... corrupted or
    incomplete") before the Python traceback that fills the end of the log,
    so those lines are kept even when they are not among the last ones.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(server log unreadable: {exc})"
    kept = [line for line in text.splitlines() if line.strip()]
    if not kept:
        return "(the server wrote nothing)"
    head, tail = kept[:-lines], kept[-lines:]
    causes = [line for line in head if _ERROR_LINE.search(line)][-_CAUSE_LINES:]
    return "\n".join([*causes, "...", *tail] if causes else tail)


def _answers(url: str) -> bool:
    # Imported here: urllib.request costs ~60 ms, and `import rlm.local` runs on every `rlm ask`.
    import urllib.error
    import urllib.request

    # No proxy: an http_proxy from the environment must not see (or break) a loopback health check.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2.0) as resp:
            return bool(200 <= resp.status < 300)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after a grace period."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    # Children of the server (if any) share its group; make sure none outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_STOP_GRACE_S)


# llama.cpp's OpenMP threads spin while they wait by default; on a small machine
# where other processes share the cores a spinning thread holds the core its
# partner needs. Measured on 2 shared cores (load average 6-7), 1.5B model, one
# 714-token prompt: 0.53 tokens/s spinning, 10.2 passive. The user's own setting wins.
SERVER_ENV: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}


@contextlib.contextmanager
def run_server(
    command: Sequence[str], health_url: str, *, startup_timeout: float, what: str = "local model server"
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `command`, wait until `health_url` answers 2xx, yield the process, always stop it.

    Raises ProviderError with the last lines of the server's log if it exits
    before answering or does not answer within `startup_timeout` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="rlm-server-") as tmp:
        log_path = Path(tmp) / "server.log"
        env = {**SERVER_ENV, **os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                _launch_command(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + startup_timeout
            while not _answers(health_url):
                code = proc.poll()
                if code is not None:
                    raise ProviderError(
                        f"the {what} exited with code {code} before answering; from its log:\n{log_tail(log_path)}"
                    )
                if time.monotonic() >= deadline:
                    raise ProviderError(
                        f"the {what} did not answer within {startup_timeout:.0f}s; from its log:\n"
                        f"{log_tail(log_path)}"
                    )
                time.sleep(0.2)
            yield proc
        finally:
            _stop(proc)


@contextlib.contextmanager
def local_server(
    gguf: Path, *, n_ctx: int = 4096, threads: int | None = None, startup_timeout: float = 120.0
) -> Iterator[LocalEndpoint]:
    """Serve `gguf` with llama.cpp on a free 127.0.0.1 port for the duration of the block.

    Raises ConfigError if no server backend is installed, and
    ProviderError (with the server's log tail) if the server fails to start.
    The server is stopped on exit, on exceptions and on KeyboardInterrupt.
    """
    backend = require_server()
    gguf = Path(gguf)
    if not gguf.is_file():
        raise ConfigError(f"GGUF model file not found: {gguf}")
    port = free_port()
    command = server_command(gguf, port, n_ctx, threads or default_threads(), backend)
    api_base = f"http://127.0.0.1:{port}/v1"
    with (
        _loopback_bypasses_proxy(),
        run_server(command, f"{api_base}/models", startup_timeout=startup_timeout),
    ):
        yield LocalEndpoint(model=f"openai/{LOCAL_MODEL_ALIAS}", api_base=api_base, n_ctx=n_ctx)


@contextlib.contextmanager
def _loopback_bypasses_proxy() -> Iterator[None]:
    """Add 127.0.0.1 to NO_PROXY/no_proxy for the block, restoring both after.

    litellm's HTTP client honours http_proxy from the environment, and a
    corporate proxy cannot reach (or must not see) a server on our loopback:
    measured, `rlm ask -m local` with http_proxy set failed with a connection
    error before this.
    """
    saved = {name: os.environ.get(name) for name in ("NO_PROXY", "no_proxy")}
    for name, value in saved.items():
        hosts = [h.strip() for h in (value or "").split(",") if h.strip()]
        if "127.0.0.1" not in hosts:
            os.environ[name] = ",".join([*hosts, "127.0.0.1"])
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
