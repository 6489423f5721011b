"""An input's table built in a thread of its own, while the run starts its model's first turn.

A big file's table takes seconds (12-15 s for a 1 GB CSV on two cores), and
only `sql()` needs it: `peek`, `grep` and cells that do not query run
meanwhile. `TableJob` runs the build (rlm.input.tables) with the caller's
context (the run's progress sink), hands back (description, error) once, and
stops the build when asked: its waiting loop checks the job's event twice a
second and interrupts DuckDB's queries (rlm.input.tables._CANCEL), so a
stopped run does not keep building a table it will not use.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from rlm.errors import InputError
from rlm.input.tables import BuildCancelled, build_cancel, build_early

__all__ = ["TableJob", "TableOutcome"]

# (the table's description, or None; why there is none, when its build failed)
TableOutcome = tuple[dict[str, Any] | None, str | None]

# How long a stop waits for the build's thread to end: its waiting loop checks twice a second;
# a copy of the input in progress (a stray carriage return, another encoding) does not check,
# and its thread (a daemon) is left to the process's exit.
_STOP_WAIT_S = 1.5
# The longest a build waits for its `after` event: the start it gives way to takes ~2 s.
_AFTER_WAIT_S = 5.0


class TableJob:
    """One table build in a daemon thread: `result()` waits for it, `stop()` ends it."""

    def __init__(
        self,
        build: Callable[[], TableOutcome],
        *,
        then: Callable[[], None] | None = None,
        after: threading.Event | None = None,
    ) -> None:
        """Start `build` now, in a copy of the caller's context; `then` runs after it in the
        same thread, whatever the outcome (the input's sha256, which would slow the build if
        it ran beside it). With `after`, the build first waits for that event, up to
        _AFTER_WAIT_S: the run's start (litellm's import) holds the GIL, and a build beside
        it takes the cores it needs (1 GB CSV, 2 cores: the model's first request 2.6-2.8 s
        after the start, against 6.2 s with the build beside the import)."""
        self._future: Future[TableOutcome] = Future()
        self._stop = threading.Event()
        # The table without its format's later columns, while they are built (rlm.input.tables)
        self._early: str | None = None
        self._news = threading.Condition()
        self.started = time.monotonic()
        self.finished: float | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run, build, then, after), name="rlm-table-build", daemon=True
        )
        self._thread.start()

    def _run(
        self,
        build: Callable[[], TableOutcome],
        then: Callable[[], None] | None,
        after: threading.Event | None,
    ) -> None:
        build_cancel(self._stop)  # in this thread's own copy of the context
        build_early(self._early_built)
        changed: InputError | None = None
        try:
            if after is not None:
                _wait_for(after, self._stop, _AFTER_WAIT_S)
            if self._stop.is_set():
                raise BuildCancelled
            outcome = build()
        except BuildCancelled:
            outcome = (None, "the run ended before its table was built")
        except InputError as exc:  # the file changed under the build: the run cannot go on
            outcome, changed = (None, None), exc
        except BaseException as exc:  # noqa: BLE001 (a bug in the build costs the run its sql(), said)
            outcome = (None, f"the table's build failed ({type(exc).__name__}: {exc})")
        self.finished = time.monotonic()  # before anyone waiting reads it
        with self._news:
            if changed is not None:
                self._future.set_exception(changed)
            else:
                self._future.set_result(outcome)
            self._news.notify_all()
        if then is not None:
            then()

    def _early_built(self, path: str | None) -> None:
        with self._news:
            self._early = path
            self._news.notify_all()

    def done(self) -> bool:
        return self._future.done()

    def early(self) -> str | None:
        """The path of the table without its format's later columns, waiting until it is stored
        or the build has ended; None once the build has ended (the whole table is then the one
        to open: the early one goes with the build's folder)."""
        with self._news:
            self._news.wait_for(lambda: self._early is not None or self._future.done())
            return None if self._future.done() else self._early

    def result(self, timeout: float | None = None) -> TableOutcome:
        """(description, error), waiting up to `timeout` seconds (None: until it is built).
        Raises TimeoutError when it is still building at the timeout, InputError when the file
        was rewritten or replaced while it was built."""
        return self._future.result(timeout)

    def stop(self) -> None:
        """Stop the build (the run is ending) and wait a moment for its thread; not for the
        hash that follows a finished build (it stops with the process)."""
        self._stop.set()
        if not self._future.done():
            self._thread.join(_STOP_WAIT_S)


def _wait_for(event: threading.Event, stop: threading.Event, limit_s: float) -> None:
    """Wait until `event` is set, `stop` is, or `limit_s` have passed, looking at `stop` ten
    times a second: a run stopped meanwhile does not wait the whole limit."""
    deadline = time.monotonic() + limit_s
    while not event.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
        if stop.is_set() or time.monotonic() >= deadline:
            return
