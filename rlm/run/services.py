"""The services a run's parts share: models, budget, ledger, trace, progress, node ids.

One `RunServices` per run, built by the engine and handed explicitly to the parts
that need it (the sub-calls, the node synthesis), so that each says what it uses
and none re-declares another's state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rlm.input.source import Profile
from rlm.model.budget import Budget, Usage
from rlm.model.client import ModelClient, Reply
from rlm.run.events import FindingAdded, Progress
from rlm.run.ledger import FINDING_CHARS, Finding, Ledger
from rlm.run.settings import Settings, Sizing, sizing_for
from rlm.trace.schema import FindingKind
from rlm.trace.writer import TraceWriter


@dataclass
class RunServices:
    settings: Settings
    profile: Profile
    root_model: ModelClient
    sub_model: ModelClient
    trace: TraceWriter
    progress: Progress
    budget: Budget
    # What earlier runs over this file established (rlm.memory): offered to the root's
    # prompt as [ESTABLISHED earlier] and to its synthesis as findings it may cite.
    memory_findings: list[Finding] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    # Node ids are the prefix and a count: "n0", "n1", … in a run; a child investigated on
    # another machine numbers its own children under its id ("n3.1", …, rlm.run.remote_child).
    id_prefix: str = "n"
    first_id: int = 0
    # The node whose answer is the run's: its synthesis has the call held back for it (the
    # root; a child on another machine, whose run is its own).
    answer_node: str = "n0"
    _usage: dict[str, Usage] = field(default_factory=dict)
    _node_count: int = 0
    _nodes_elsewhere: int = 0  # nodes of children investigated on other machines
    _announced: set[str] = field(default_factory=set)  # finding ids already reported as progress
    _lock: threading.Lock = field(default_factory=threading.Lock)
    sub_sizing: Sizing = field(init=False)  # what one sub-call may hold and answer with

    def __post_init__(self) -> None:
        self._node_count = self.first_id
        self.sub_sizing = sizing_for(self.settings, self.sub_model.context_window())

    def model_for(self, depth: int) -> ModelClient:
        return self.root_model if depth == 0 else self.sub_model

    def usage_for(self, node_id: str) -> Usage:
        with self._lock:
            return self._usage.setdefault(node_id, Usage())

    def charge(self, node_id: str, reply: Reply) -> None:
        """A model reply paid for: by the run's budget and in the node's own usage."""
        self.budget.charge(reply.prompt_tokens, reply.completion_tokens, reply.cost)
        self.usage_for(node_id).add(reply.prompt_tokens, reply.completion_tokens, reply.cost)

    @property
    def nodes_started(self) -> int:
        return self._node_count - self.first_id + self._nodes_elsewhere

    def number_under(self, node_id: str) -> None:
        """This run is one child's, investigated on another machine (rlm.run.remote_child): its
        children are numbered under its id, and its answer has the call held back."""
        with self._lock:
            self.id_prefix, self.first_id, self._node_count = f"{node_id}.", 1, 1
            self.answer_node = node_id

    def count_nodes_elsewhere(self, count: int) -> None:
        with self._lock:
            self._nodes_elsewhere += count

    def new_node_id(self) -> str:
        with self._lock:
            node_id = f"{self.id_prefix}{self._node_count}"
            self._node_count += 1
            return node_id

    def add_finding(
        self,
        text: str,
        kind: FindingKind,
        node_id: str,
        step: int,
        *,
        topic: str | None = None,
        cap: int = FINDING_CHARS,
        code: str | None = None,
    ) -> Finding | None:
        """A finding of a node's step: in the ledger, the trace, and told once as progress."""
        finding = self.ledger.add(
            text,
            kind=kind,
            evidence=f"{node_id}.s{step}",
            node=node_id,
            step=step,
            topic=topic,
            cap=cap,
            code=code,
        )
        if finding is not None:
            self.trace.update(ledger=self.ledger.to_list())
            with self._lock:
                new = finding.id not in self._announced
                self._announced.add(finding.id)
            if new:
                self.progress(
                    FindingAdded(
                        id=finding.id,
                        kind=finding.kind,
                        text=finding.text,
                        evidence=finding.evidence,
                        node=finding.node,
                    )
                )
        return finding
