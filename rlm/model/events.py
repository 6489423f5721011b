"""What a model client tells its run while a call goes: a retry, a long wait, a give-up.

One frozen dataclass per kind. They live here, not with the run's other events
(rlm.run.events), because the client emits them and rlm.model may not import
rlm.run; rlm.run.events declares them as part of the run's one event stream.
Each has the name it goes by in that stream (`event`) and its fields, in the
order every reader of the stream (the trace's provider events, `--jsonl`) writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Retry:
    """A call failed and is tried again after `wait_s` (`retry_after`: the wait the provider asked for)."""

    event: ClassVar[str] = "retry"
    model: str
    where: str
    attempt: int  # the attempt about to be made, counting from 1
    attempts: int  # how many attempts in all
    error: str
    wait_s: float
    retry_after: float | None


@dataclass(frozen=True)
class Waiting:
    """A reply is slow: told at 5, 10, 20 … s of one call, with the limit it gives up at."""

    event: ClassVar[str] = "waiting"
    model: str
    where: str
    waited_s: int
    limit_s: float


@dataclass(frozen=True)
class ProviderFailed:
    """The run's one decision to give up on a provider, with the message the user is shown."""

    event: ClassVar[str] = "provider_failed"
    model: str
    where: str
    message: str


ProviderEvent = Retry | Waiting | ProviderFailed
PROVIDER_EVENTS: tuple[type[ProviderEvent], ...] = (Retry, Waiting, ProviderFailed)

# Where a client sends its events (the run's progress stream, rlm.run.events.Progress).
ProviderEvents = Callable[[ProviderEvent], None]


def fields_of(event: Any) -> dict[str, Any]:
    """An event's fields by name, in declared order; the values as they are (no deep copy: a
    step's action and outcome are objects its readers look into)."""
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
