"""The run's progress events, declared once: one frozen dataclass per kind, and their sinks.

A run tells whoever follows it what happens as it happens (nothing in rlm.run
prints): it hands one event at a time to a `Progress`, any callable that takes
an event. The CLI's live status line and stderr lines (rlm.cli.render), its
`--jsonl` stream (rlm.cli.events) and the trace's provider events
(rlm.run.wiring) are sinks of the same stream, joined by `FanOut`.

Each event class carries the name it goes by (`event`: the `event` of a
`--jsonl` line, the `kind` of a trace's provider event) and its fields in the
order they are written. The model client's own events (a retry, a long wait, a
give-up) are declared in rlm.model.events, which may not import rlm.run, and
are part of this stream as they are.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

from rlm.model.events import PROVIDER_EVENTS, ProviderFailed, Retry, Waiting, fields_of
from rlm.run.actions import Action, ParseError
from rlm.run.runner import Outcome
from rlm.trace.schema import FindingKind, ProviderEventRecord
from rlm.trace.writer import TraceWriter

__all__ = [
    "EVENT_TYPES",
    "PROVIDER_EVENTS",
    "KINDS",
    "Event",
    "BatchProgress",
    "FanOut",
    "Fanout",
    "FindingAdded",
    "NodeStarted",
    "Phase",
    "Progress",
    "ProviderFailed",
    "Restart",
    "Retry",
    "RunWarning",
    "InputRead",
    "Step",
    "TableBuild",
    "Waiting",
    "fields_of",
    "no_progress",
]


@dataclass(frozen=True)
class Phase:
    """What the run is doing now ("waiting for the model (n0, step 3)"): the live status line's text."""

    event: ClassVar[str] = "phase"
    what: str


@dataclass(frozen=True)
class Step:
    """A node finished a turn: the action it ran (or the reply it could not use) and what it gave,
    with the run's usage so far."""

    event: ClassVar[str] = "step"
    node: str
    depth: int
    step: int
    action: Action | ParseError
    outcome: Outcome
    usage: dict[str, Any]


@dataclass(frozen=True)
class NodeStarted:
    """A child investigation started, asked `question` by its parent."""

    event: ClassVar[str] = "node"
    node: str
    parent: str
    depth: int
    question: str


@dataclass(frozen=True)
class Fanout:
    """partition_map over `chunks` chunks: plain sub-calls, or (`children`) one child node each."""

    event: ClassVar[str] = "fanout"
    node: str
    chunks: int
    children: bool = False


@dataclass(frozen=True)
class BatchProgress:
    """A partition_map's job at the provider's Batch API (`--batch`, rlm.run.batch), at each look:
    its status, its requests done and failed of all, and the seconds waited for it so far."""

    event: ClassVar[str] = "batch"
    node: str
    batch: str
    status: str
    completed: int
    failed: int
    total: int
    waited_s: float

    @property
    def what(self) -> str:
        """The live status line's text."""
        failed = f", {self.failed:,} failed" if self.failed else ""
        return (
            f"batch {self.batch} {self.status.replace('_', ' ')}: {self.completed:,} of {self.total:,} "
            f"done{failed} ({self.node})"
        )


@dataclass(frozen=True)
class Restart:
    """A node's sandbox worker was killed and started afresh (its variables are gone)."""

    event: ClassVar[str] = "restart"
    node: str
    why: str


@dataclass(frozen=True)
class RunWarning:
    """Something the user should know that does not stop the run."""

    event: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True)
class InputRead:
    """What a several-file input read: its parts and total size, and what it skipped and why
    (one line on stderr; the same facts are in the profile and the trace)."""

    event: ClassVar[str] = "input"
    message: str


@dataclass(frozen=True)
class TableBuild:
    """The input's table is being built (rlm.input.tables): the share of its bytes read so far,
    its bytes, the seconds so far and the seconds still to go at that pace (None at first)."""

    event: ClassVar[str] = "table_build"
    done: float
    bytes: int
    seconds: float
    left_s: float | None

    @property
    def what(self) -> str:
        """The live status line's text."""
        rate = (
            f", {self.done * self.bytes / self.seconds / 1e6:,.0f} MB/s" if self.seconds and self.done else ""
        )
        left = f", about {self.left_s:,.0f} s left" if self.left_s is not None else ""
        return f"building the table: {self.done:.0%} of {self.bytes / 1e6:,.0f} MB{rate}{left}"

    @classmethod
    def of(cls, done: float, size: int, seconds: float) -> TableBuild:
        # Too early a guess of the time left swings wildly: none before 2 % is done.
        left = seconds * (1 - done) / done if done >= 0.02 else None
        return cls(round(done, 3), size, round(seconds, 1), None if left is None else round(left, 1))


@dataclass(frozen=True)
class FindingAdded:
    """A new finding in the ledger (told once per finding id)."""

    event: ClassVar[str] = "finding"
    id: str
    kind: FindingKind
    text: str
    evidence: str
    node: str


Event = (
    Phase
    | TableBuild
    | Step
    | NodeStarted
    | Fanout
    | BatchProgress
    | Restart
    | RunWarning
    | InputRead
    | FindingAdded
    | Retry
    | Waiting
    | ProviderFailed
)

# Every kind a sink may be handed, and the class of each name.
EVENT_TYPES: tuple[type[Event], ...] = (
    Phase,
    TableBuild,
    Step,
    NodeStarted,
    Fanout,
    BatchProgress,
    Restart,
    RunWarning,
    InputRead,
    FindingAdded,
    *PROVIDER_EVENTS,
)
KINDS: dict[str, type[Event]] = {cls.event: cls for cls in EVENT_TYPES}


class Progress(Protocol):
    """Whoever follows a run: handed each event as it happens, from any thread of the run."""

    def __call__(self, event: Event, /) -> None: ...


def no_progress(event: Event, /) -> None:
    """The progress of a run nobody follows."""


class FanOut:
    """One stream handed to several sinks, each event to every sink in order.

    One event at a time: the child nodes of a fan-out run in threads, and a line
    one sink writes for an event is never cut by another event's. Reentrant, so a
    sink may report an event of its own (a trace that cannot be written says so)."""

    def __init__(self, *sinks: Progress) -> None:
        self.sinks = sinks
        self._lock = threading.RLock()

    def __call__(self, event: Event, /) -> None:
        with self._lock:
            for sink in self.sinks:
                sink(event)


class ProviderEventsTrace:
    """The trace's sink of the run's event stream: the provider's events (a retry, a long wait,
    a give-up) are kept as they are told, with when they happened. The trace's other records
    hold more than an event carries (a step's whole model call, the ledger), so they are
    written where they are made."""

    def __init__(self, trace: TraceWriter, started: float) -> None:
        self.trace = trace
        self.started = started

    def __call__(self, event: Event, /) -> None:
        if isinstance(event, PROVIDER_EVENTS):
            record = {
                "kind": event.event,
                "at_s": round(time.monotonic() - self.started, 3),
                **fields_of(event),
            }
            self.trace.add_provider_event(cast(ProviderEventRecord, record))
