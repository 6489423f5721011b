"""Child investigations: a node of its own over a slice, or a text, too big for one sub-call.

llm_query and partition_map (rlm.run.subcalls) start one when what they are
asked about does not fit a plain helper call. The child is a full node
(rlm.run.node) one level deeper, isolated from its parent; its answer is
written by its own synthesis and becomes a finding of its parent.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any

from rlm.errors import RlmError
from rlm.model.budget import BudgetExceeded
from rlm.run.events import NodeStarted
from rlm.run.host import NodeHost
from rlm.run.node import Node
from rlm.run.node_synthesis import NodeSynthesis
from rlm.run.scope import Asker, NodeScope
from rlm.run.services import RunServices
from rlm.run.workers import slice_profile, text_worker_spec
from rlm.text.textcap import cap_words
from rlm.text.textfile import MappedText


class Children:
    """Starts, records and answers from the child nodes of a run."""

    def __init__(self, run: RunServices, host: NodeHost, synthesis: NodeSynthesis) -> None:
        self.run = run
        self.host = host  # what each child asks of the run (the engine)
        self.synthesis = synthesis
        self._tmpdir = tempfile.mkdtemp(prefix="rlm-run-")  # texts a child investigates

    def too_deep(self, asker: Asker, tokens: int) -> RlmError:
        """The error for a slice too big for one sub-call, asked for by a node at the depth cap."""
        return RlmError(
            f"this slice is about {tokens:,} tokens, more than one sub-call takes "
            f"({self.run.sub_sizing.sub_prompt_tokens:,}), "
            f"and depth {asker.depth} cannot start a deeper investigation (the depth limit is "
            f"{self.run.settings.max_depth}): narrow it to fewer lines, or compute with execute"
        )

    def over_lines(self, asker: Asker, question: str, a: int, b: int, tokens: int) -> str:
        """A child over lines a..b (numbered in the file); its answer."""
        if asker.depth >= self.run.settings.max_depth:
            raise self.too_deep(asker, tokens)
        spec = dataclasses.replace(asker.scope.spec, start_line=a, end_line=b)
        with asker.scope.window(a, b) as window:
            block = slice_profile(window, f"lines {a:,}-{b:,} of {self.run.profile.display_name}")
        scope = NodeScope(
            spec=spec,
            profile_block=block,
            description=f"You work on lines {a:,}-{b:,} of the file; inside your context they are lines 1-{b - a + 1:,}.",
            first_line=a,
            n_lines=b - a + 1,
        )
        return self._run(asker, question, scope, {"start_line": a, "end_line": b})

    def over_text(self, asker: Asker, question: str, text: str, tokens: int) -> str:
        """A child over a text the parent's code built; its answer."""
        if asker.depth >= self.run.settings.max_depth:
            raise self.too_deep(asker, tokens)
        path = os.path.join(self._tmpdir, f"text-{self.run.nodes_started}.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        spec = text_worker_spec(path, self.run.settings)
        with MappedText(path) as window:
            block = slice_profile(
                window, f"a text of {len(text):,} characters built by the parent investigation"
            )
            n = window.n_lines
        scope = NodeScope(spec=spec, profile_block=block, description=None, first_line=1, n_lines=n)
        return self._run(asker, question, scope, {"text_chars": len(text)})

    def register(self, node: Node, parent: Asker | None, slice_info: dict[str, Any] | None) -> None:
        """A node's entry in the trace: the root's, or a child's with the step that started it."""
        self.run.trace.add_node(
            {
                "id": node.id,
                "parent": parent.node_id if parent else None,
                "parent_step": parent.step if parent else None,
                "depth": node.depth,
                "question": node.question,
                "slice": slice_info,
                "model": node.model.model,
                "protocol": node.protocol,
                "observation_chars": node.cap,
                "status": "running",
            }
        )

    def _run(self, parent: Asker, question: str, scope: NodeScope, slice_info: dict[str, Any]) -> str:
        run = self.run
        child = Node(self.host, run.new_node_id(), parent.depth + 1, question, scope)
        self.register(child, parent, slice_info)
        run.progress(NodeStarted(node=child.id, parent=parent.node_id, depth=child.depth, question=question))
        result = child.run()
        synthesis = self.synthesis.synthesize(child, result)
        # No answer written: the parent is told what the child established (never printed as a value).
        answer = synthesis.answer or (
            f"Established so far:\n{synthesis.established}" if synthesis.established else None
        )
        run.trace.update_node(
            child.id,
            status=result.stop,
            steps=result.steps,
            usage=run.usage_for(child.id).to_dict(),
            answer=answer or "",
            answer_source=synthesis.source,
            synthesis_payload=synthesis.payload,
        )
        if result.stop == "budget":
            raise run.budget.stopped or BudgetExceeded("budget", result.detail)
        if not answer:
            raise RlmError(
                f"the sub-investigation {child.id} established nothing ({result.detail or result.stop})"
            )
        # The child's answer is its parent's finding; no step of the parent's own made it.
        run.ledger.add(
            f"{cap_words(question, 160)} → {answer}", kind="subcall", evidence=child.id, node=parent.node_id
        )
        return answer

    def close(self) -> None:
        shutil.rmtree(self._tmpdir, ignore_errors=True)
