"""`rlm.ask` and `rlm.aask`: one run of the engine, as `rlm ask` makes it, for a program.

Settings resolve as the command's do (rlm.run.settings.load_settings): keyword arguments
stand where flags stand, so they win over `RLM_*` variables and the config file. The run is
`rlm.run.wiring.run_ask`, the CLI's own; only what surrounds it differs: no signal handlers
and nothing printed (a program owns its process and its streams), the outcome typed.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from collections.abc import Callable
from typing import IO, Any

from rlm.api.errors import ProviderError, raise_for
from rlm.api.result import Result, result_of
from rlm.errors import Interrupted, UsageError
from rlm.errors import ProviderError as _ProviderError

Source = str | os.PathLike[str] | IO[bytes]
# Handed each event of the run (rlm.run.events: Phase, Step, FindingAdded, RunWarning, ...),
# from whichever thread of the run it happens in.
ProgressCallback = Callable[[Any], None]

_active = [0]
_active_lock = threading.Lock()


def settings_for(model: str | None, sub_model: str | None, overrides: dict[str, Any]) -> Any:
    """The run's settings: these values where given, else RLM_* variables, the config file, the
    defaults. An unknown name is a usage error (exit 2), as an unknown flag is."""
    from rlm.run.settings import OPTIONS, load_settings

    unknown = sorted(set(overrides) - set(OPTIONS))
    if unknown:
        raise UsageError(f"unknown setting(s): {', '.join(unknown)} (the settings are in README, 'Options')")
    return load_settings({**overrides, "model": model, "sub_model": sub_model})


def input_of(source: Source) -> tuple[str, IO[bytes] | None]:
    """The run's input argument and stream: a path as it is, a binary file object as stdin is."""
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise UsageError("source must be a str path, an os.PathLike of one, or a binary file object")
        if "://" in path:  # a remote input (rlm.input.remote): its URL's credentials never written
            from rlm.input.remote import url_secrets
            from rlm.trace.redact import register_secret

            for value in url_secrets(path):
                register_secret(value)
        # "-" is a file of that name here; standard input is passed as the stream it is.
        return (os.path.join(".", path) if path == "-" else path), None
    if not hasattr(source, "read"):
        raise UsageError(f"source must be a path or a binary file object, not {type(source).__name__}")
    return "-", source


def ask(
    source: Source,
    question: str,
    *,
    model: str | None = None,
    sub_model: str | None = None,
    progress: ProgressCallback | None = None,
    **settings: Any,
) -> Result:
    """Answer `question` about `source` (a path; an `s3://`, `gs://` or `https://` URL, a pattern
    in an object's key matched against the bucket's listing; or a binary file object read to
    its end).

    `settings` are any of `rlm ask`'s settings by name (`max_calls=50`, `max_cost=0.25`,
    `trace_dir="traces"`, `no_memory=True`, `api_base=...`); `progress` is handed every event of
    the run as it happens. Returns the result when the run answered (exit code 0). Otherwise it
    raises the exception of the exit code `rlm ask` would end with: `NoAnswer` (1),
    `UsageError` (2), `InputError` (3), `ConfigError` (4), `ProviderError` (5),
    `BudgetExceeded` (6), each an `rlm.RlmError` with `exit_code`; the last three and
    `NoAnswer` carry the run's `result` (its partial answer, if any) and `trace_path`. Ctrl-C stops the
    run with KeyboardInterrupt, as in any program, and the trace is finished as `interrupted`.
    """
    from rlm.run.events import RunWarning
    from rlm.run.wiring import run_ask

    resolved = settings_for(model, sub_model, settings)
    input_arg, stream = input_of(source)
    warnings: list[str] = []

    def report(event: Any, /) -> None:
        if isinstance(event, RunWarning):
            warnings.append(event.message)
        if progress is not None:
            progress(event)

    with _active_lock:
        if _active[0] == 0:
            # The CLI's process ends with its run; a program's lives on: a stop of an earlier
            # run must not make the next one read its own errors as a stop.
            Interrupted.last = None
        _active[0] += 1
    try:
        try:
            run = run_ask(resolved, input_arg, question, progress=report, stdin=stream)
        except _ProviderError as exc:
            if isinstance(exc, ProviderError):
                raise
            raised = ProviderError(exc.message)
            raised.trace_path = exc.trace_path
            raise raised from exc
    finally:
        with _active_lock:
            _active[0] -= 1
    result = result_of(run, question.strip(), warnings)
    raise_for(result)
    return result


class Cancelled(KeyboardInterrupt):
    """The stop of a run whose `aask` was cancelled, raised inside the run's thread. Not an
    `Interrupted`: that one marks the whole process as stopped, and other runs go on."""

    exit_code = 130


async def aask(
    source: Source,
    question: str,
    *,
    model: str | None = None,
    sub_model: str | None = None,
    progress: ProgressCallback | None = None,
    **settings: Any,
) -> Result:
    """`ask` in a thread of its own, awaited: several questions can run at once.

    Cancelling the awaiting task raises CancelledError at once and stops the run as Ctrl-C stops
    `rlm ask` (its trace finished as `interrupted`), in its thread, at the thread's next Python
    instruction: a model request or a sandbox cell it is waiting on ends first (within the
    request and cell time limits). `rlm mcp` runs each question in a process of its own instead,
    which a cancel stops at once.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Result] = loop.create_future()

    def settle(outcome: Result | BaseException) -> None:
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def work() -> None:
        try:
            outcome: Result | BaseException = ask(
                source, question, model=model, sub_model=sub_model, progress=progress, **settings
            )
        except BaseException as exc:  # handed to the awaiting task, which raises it
            outcome = exc
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop is closed: nobody awaits the outcome any more
            pass

    thread = threading.Thread(target=work, name="rlm-aask", daemon=True)
    thread.start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        _stop(thread)
        # The stopped run's own exception is nobody's to raise: the caller has its CancelledError.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise


def _stop(thread: threading.Thread) -> None:
    """Raise `Cancelled` in the run's thread (CPython's asynchronous exception: the way to stop
    a thread that is not waiting for the event loop; run_ask handles it as it handles Ctrl-C)."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Cancelled))
