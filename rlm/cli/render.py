"""Everything shown to a person on stderr: progress, warnings, the run summary.

stdout belongs to the answer (or the JSON document); this module never
writes there. Colour only when stderr is a terminal. Every line is for a person,
so control characters from the file or a model are always made visible here
(rlm.text.visible), and rich is never asked to read markup in them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

from rlm.replay.paint import painter
from rlm.run.actions import Action, ParseError
from rlm.run.events import (
    BatchProgress,
    Event,
    Fanout,
    InputRead,
    NodeStarted,
    Phase,
    Restart,
    Retry,
    RunWarning,
    Step,
    TableBuild,
    Waiting,
)
from rlm.text.textcap import cap_line
from rlm.text.visible import visible
from rlm.trace.redact import redact_text


def live_wanted(stream: TextIO, quiet: bool) -> bool:
    """A live status line only for a person at a terminal that can draw one."""
    tty = hasattr(stream, "isatty") and stream.isatty()
    return tty and not quiet and os.environ.get("TERM", "") != "dumb"


class LiveStatus:
    """The bottom line of a terminal while a run goes: what is happening now and for how
    long, the step, tokens and cost so far. Lines printed meanwhile scroll above it."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.phase = "starting"
        self.since = time.monotonic()
        self.step = ""
        self.tokens = 0
        self.cost: float | None = None
        # A table built while the run goes on (rlm.input.tablejob): its share done, and when told.
        self.table: tuple[float, float] | None = None
        self._status = console.status(self._renderable(), spinner="dots")
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="rlm-status", daemon=True)

    def start(self) -> None:
        self._status.start()
        self._ticker.start()

    def stop(self) -> None:
        if not self._done.is_set():
            self._done.set()
            self._status.stop()

    def update(self, event: Event) -> None:
        if isinstance(event, Phase):
            self.phase, self.since = event.what, time.monotonic()
        elif isinstance(event, TableBuild) and not (
            self.phase in _BEFORE_THE_MODEL or self.phase.startswith("building the table")
        ):
            self.table = (event.done, time.monotonic())  # beside what the run does meanwhile
        elif isinstance(event, TableBuild):  # the same phase, told again as it goes: its seconds run on
            if not self.phase.startswith("building the table"):
                self.since = time.monotonic()
            self.phase = event.what
        elif isinstance(event, BatchProgress):  # a job's looks, the same phase: its seconds run on
            if not self.phase.startswith(f"batch {event.batch} "):
                self.since = time.monotonic()
            self.phase = event.what
        elif isinstance(event, Step):
            self.step = f"{event.node}.{event.step}"
            usage = event.usage or {}
            self.tokens = int(usage.get("total_tokens") or 0)
            self.cost = usage.get("cost_usd")
        else:
            return
        self._status.update(self._renderable())

    def _tick(self) -> None:
        while not self._done.wait(0.5):  # the seconds of the current phase keep counting
            self._status.update(self._renderable())

    def _renderable(self) -> Any:
        # A Text, not a str: rich would read "[...]" in a phase as markup.
        from rich.text import Text

        return Text(visible(self._text()))

    def _text(self) -> str:
        now = time.monotonic()
        parts = [f"{self.phase} · {now - self.since:.0f} s"]
        if self.table is not None and now - self.table[1] < _TABLE_TOLD_S:
            parts.append(f"table {self.table[0]:.0%} built")
        if self.step:
            parts.append(f"step {self.step}")
        parts.append(f"{self.tokens:,} tokens")
        if self.cost is not None:
            parts.append(f"${self.cost:.4f}")
        return " · ".join(parts)


# The phases of a run before its model's first turn: a table's build is the line's whole text
# then; afterwards it is a part of it, shown while its progress keeps coming (twice a second).
_BEFORE_THE_MODEL = ("starting", "reading the input")
_TABLE_TOLD_S = 1.5


class StderrReporter:
    """A sink of the run's events (rlm.run.events): one short line each on stderr, and on a
    terminal a live status line below them (rich; NO_COLOR and TERM=dumb respected)."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False, live: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.paint = painter(self.stream)
        self.warnings: list[str] = []  # every warning shown, for --json
        # A batch job is looked at for hours (rlm.run.batch): a line when its counts move, not each look.
        self._batch_seen: dict[str, tuple[str, int, int]] = {}
        self.live: LiveStatus | None = None
        self.console: Any = None
        if live:
            from rich.console import Console

            self.console = Console(file=self.stream, highlight=False, emoji=False)
            self.live = LiveStatus(self.console)
            self.live.start()

    def close(self) -> None:
        """Remove the status line (before the summary, and on every way out)."""
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _write(self, text: str, style: str | None = None) -> None:
        # Made visible before colour is added: the painter's own escapes are the only ones written.
        text = visible(redact_text(text))
        if self.console is not None and self.live is not None:
            styles = {"dim": "dim", "warn": "yellow", "err": "red", "ok": "green"}
            self.console.print(text, style=styles.get(style or "", None), markup=False, highlight=False)
            return
        if style:
            text = self.paint(text, {"dim": "dim", "warn": "yellow", "err": "red", "ok": "green"}[style])
        print(text, file=self.stream, flush=True)

    def __call__(self, event: Event, /) -> None:
        if self.live is not None:
            self.live.update(event)
        if isinstance(event, RunWarning):
            self.warn(event.message)
            return
        if self.quiet:
            return
        if isinstance(event, BatchProgress):
            now = (event.status, event.completed, event.failed)
            if self._batch_seen.get(event.batch) == now:
                return
            self._batch_seen[event.batch] = now
        line = _line(event)
        if line is not None:
            self._write(*line)

    def warn(self, message: str) -> None:
        self.warnings.append(redact_text(message))
        self._write(f"rlm: warning: {message}", "warn")

    def error(self, message: str) -> None:
        self.close()
        self._write(f"rlm: {message}", "err")

    def summary(self, result: Any) -> None:
        self.close()
        if self.quiet:
            return
        usage = result.usage or {}
        cost = usage.get("cost_usd")
        cost_text = "cost unknown" if cost is None else f"${cost:.4f}"
        parts = [
            result.status,
            _count(result.steps, "step"),
            _count(usage.get("calls", 0), "call"),
            *([_count(usage["failed_requests"], "failed request")] if usage.get("failed_requests") else []),
            f"{usage.get('total_tokens', 0):,} tokens",
            cost_text,
            f"{result.elapsed_s:.1f} s",
        ]
        if result.trace_path:
            parts.append(f"trace {result.trace_path}")
        self._write("rlm: " + " · ".join(parts), "ok" if result.exit_code == 0 else "warn")


def _line(event: Event) -> tuple[str, str] | None:
    """The stderr line of an event and its style; None for those the status line alone shows
    (a phase) and those told otherwise (a finding: in the summary and --explain; a give-up:
    as the run's error)."""
    if isinstance(event, Step):
        return _step_line(event), "dim"
    if isinstance(event, NodeStarted):
        return (
            f"  {'  ' * event.depth}↳ {event.node} (depth {event.depth}): {cap_line(event.question, 80)}",
            "dim",
        )
    if isinstance(event, InputRead):
        return f"rlm: {event.message}", "dim"
    if isinstance(event, Fanout):
        return f"  {event.node}: partition_map over {event.chunks} chunks", "dim"
    if isinstance(event, BatchProgress):
        return f"  {event.what} after {event.waited_s:,.0f} s", "dim"
    if isinstance(event, Restart):
        return f"  {event.node}: sandbox restarted ({event.why})", "warn"
    if isinstance(event, Retry):
        return (
            f"  {event.where}: {cap_line(event.error, 100)}; attempt {event.attempt} of "
            f"{event.attempts} in {event.wait_s:.1f} s"
            + (" (as it asked)" if event.retry_after is not None else ""),
            "warn",
        )
    if isinstance(event, Waiting):
        return (
            f"  waiting for {event.where}: {event.waited_s:.0f} s so far, giving up at {event.limit_s:.0f} s",
            "dim",
        )
    return None


def _step_line(event: Step) -> str:
    action, outcome = event.action, event.outcome
    indent = "  " * (event.depth + 1)
    if isinstance(action, ParseError):
        what = f"unusable reply: {cap_line(action.message, 70)}"
    else:
        what = action.name + " " + _describe_args(action)
    first = outcome.observation.strip().splitlines()[0] if outcome.observation.strip() else ""
    return f"{indent}{event.node}.{event.step} {what} → {cap_line(first, 70)}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _describe_args(action: Action) -> str:
    a = action.args
    if action.name == "grep":
        return f"/{cap_line(a['pattern'], 40)}/"
    if action.name == "peek":
        return f"{a['start']}+{a['length']} {a['unit']}"
    if action.name == "execute":
        first = next((ln for ln in a["code"].splitlines() if ln.strip()), "")
        return cap_line(first.strip(), 50)
    if action.name in ("llm_query", "partition_map"):
        return cap_line(repr(a["question"]), 50)
    if action.name == "final":
        return cap_line(repr(a["answer"]), 50)
    return ""
