"""What a node works on, what it gives back, and who asks for a sub-call.

Plain data shared by the node, the sub-calls and the engine, kept apart so that
none of them has to import another for its types.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.sandbox.client import WorkerSpec
from rlm.text.textfile import MappedText
from rlm.trace.schema import StopReason


@dataclass
class NodeScope:
    """What part of the input a node works on; line numbers are relative to it."""

    spec: WorkerSpec
    profile_block: str
    description: str | None = None  # e.g. "You work on lines 1001-2000 of access.log."
    first_line: int = 1  # absolute number of the scope's line 1
    n_lines: int = 0
    memories: tuple[tuple[str, str], ...] = ()  # (ref, line) offered from earlier runs (the root only)

    def window(self, a: int, b: int) -> MappedText:
        """Lines a..b (numbered in the scope's file) as a mapped view."""
        spec = self.spec
        return MappedText(
            spec.path, encoding=spec.encoding, start_line=a, end_line=b, index_path=spec.index_path
        )


@dataclass
class NodeResult:
    node_id: str
    draft: str | None
    stop: StopReason
    steps: int
    detail: str = ""
    largest_prompt: int = 0
    # The doubts of the node's last query (a condition the question names that it left out,
    # rlm.run.typed.conditions; the prompt's example; ...), however the node ended: an answer
    # from it is then in doubt.
    doubts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Asker:
    """The node that asks for a sub-call, and the step it is running when it asks.

    The step is given, never inferred: a node drops old turns when its history is full, so the
    count of turns it holds says nothing about which step it is on.
    """

    node_id: str
    depth: int
    scope: NodeScope
    step: int
