"""What a node may ask of its run: the `NodeHost` protocol and the records that cross it.

A node (rlm.run.node) knows its run only through this protocol: it adds and reads
findings, records its steps, starts its worker, makes sub-calls, and reads the
settings, the budget and the run's `Progress` (rlm.run.events). The engine implements it; a test
or another driver may implement it too. Nothing here imports the node or the
engine, so the node can be read, and driven, without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rlm.model.budget import Budget
from rlm.model.client import ModelClient, Reply
from rlm.run.actions import Action, ParseError
from rlm.run.events import Event
from rlm.run.ledger import Finding
from rlm.run.runner import ActionHost, Outcome
from rlm.run.scope import Asker
from rlm.run.settings import Settings
from rlm.sandbox.client import Sandbox, WorkerSpec
from rlm.trace.schema import BridgeCallRecord

# A call made by code running in the worker (llm_query, partition_map, recall): name, arguments.
Bridge = Callable[[str, dict[str, Any]], Any]


@dataclass(frozen=True)
class StepDone:
    """One finished turn of a node, as the run records it (trace and progress)."""

    node_id: str
    depth: int
    step: int
    messages: list[dict[str, Any]]  # what was sent to the model
    est_tokens: int  # our estimate of the prompt's tokens
    reply: Reply
    action: Action | ParseError
    outcome: Outcome
    duration: float
    dropped_turns: int  # turns left out of the prompt for room so far
    context: dict[str, Any]  # the prompt's assembled context (rlm.run.routing.Payload.to_dict)
    told: str | None = None  # what the run told the model after the observation (a table built meanwhile)


def chunk_error(where: str, message: str) -> str:
    """A chunk's answer when it has none: what the model reads in its place, and what
    `Partition.failures` finds."""
    return f"[error] {where}: {message}"


@dataclass(frozen=True)
class Partition:
    """partition_map's answers, one per chunk in order, with the lines each chunk covered."""

    wheres: list[str]
    results: list[str]

    def observation(self, var: str) -> str:
        """What the model is shown when it called partition_map as an action."""
        lines = [f"{len(self.results)} chunks; answers in chunk order (also in the variable `{var}`):"]
        lines += [
            f"[{i + 1}] {where}: {r}"
            for i, (where, r) in enumerate(zip(self.wheres, self.results, strict=True))
        ]
        return "\n".join(lines)

    def failures(self) -> list[str]:
        """`where: message` of each chunk that has no answer (`chunk_error`), in chunk order."""
        return [
            r.removeprefix("[error] ")
            for where, r in zip(self.wheres, self.results, strict=True)
            if r.startswith(chunk_error(where, ""))
        ]


class FindingsView(Protocol):
    """The findings a node's prompt and recall() read."""

    def findings_of(self, node_id: str) -> list[Finding]:
        """The node's current findings (none superseded)."""
        ...

    def all_findings(self) -> list[Finding]:
        """Every finding of the run so far."""
        ...

    def memories(self) -> list[Finding]:
        """What earlier runs established about this input, as offered to this run."""
        ...


class NodeHost(ActionHost, FindingsView, Protocol):
    """The run as a node sees it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def table(self) -> dict[str, Any] | None:
        """The input's parsed table as profiled (columns, common values), if it has one."""
        ...

    def model_for(self, depth: int) -> ModelClient:
        """The model a node at this depth talks to."""
        ...

    def protocol_for(self, model: ModelClient) -> str:
        """How the model is asked for actions: "tools", "text" or "typed" (rlm.run.typed)."""
        ...

    def progress(self, event: Event, /) -> None:
        """Tell whoever follows the run (rlm.run.events)."""
        ...

    def charge(self, node_id: str, reply: Reply) -> None:
        """Charge a model reply to the run's budget and to the node's usage."""
        ...

    def settled_spec(self, spec: WorkerSpec) -> WorkerSpec:
        """`spec` with the input's table, waiting for one still being built (rlm.input.tablejob)."""
        ...

    def table_news(self) -> str | None:
        """Once a table that was being built as the run started is built, what to tell of it."""
        ...

    def launch_sandbox(self, spec: WorkerSpec, bridge: Bridge) -> Sandbox:
        """Start a worker over `spec` without waiting for it; calls made by its code go to `bridge`."""
        ...

    def sandbox_ready(self, sandbox: Sandbox) -> None:
        """Wait for a launched worker to be ready (raises WorkerLost), and record its layers."""
        ...

    def record_step(self, done: StepDone) -> None: ...

    def note_steps_elsewhere(self, steps: int, largest_prompt: int) -> None:
        """Steps a child made on another machine (its records are in the trace already)."""
        ...

    def record_bridge_call(self, record: BridgeCallRecord) -> None: ...

    def llm_query(self, asker: Asker, args: dict[str, Any]) -> str: ...

    def partition_map(self, asker: Asker, args: dict[str, Any]) -> Partition: ...
