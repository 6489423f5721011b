"""A node's answer, written from its findings once its loop has stopped (the root's and every child's).

The synthesis call itself is rlm.run.synthesis; this module chooses what a node
offers it (its findings, the root's memories, its last observations), charges
the call to the node, gives an answer the synthesis called low-confidence one
widened pass (the root only), and counts which findings were offered and cited.
"""

from __future__ import annotations

import threading

from rlm.run import prompts
from rlm.run.events import Phase
from rlm.run.ledger import Finding
from rlm.run.node import Node
from rlm.run.scope import NodeResult
from rlm.run.services import RunServices
from rlm.run.synthesis import Synthesis, context_budget, synthesize


class NodeSynthesis:
    """Writes each node's answer and keeps the run's citation counts."""

    def __init__(self, run: RunServices) -> None:
        self.run = run
        # How often each finding was offered to a synthesis and cited by it; citations of ids
        # never offered are dropped and counted.
        self.citation_counts: dict[str, dict[str, int]] = {}
        self.unknown_citations = 0
        self._lock = threading.Lock()

    def synthesize(self, node: Node, result: NodeResult) -> Synthesis:
        run = self.run
        # The draft goes to synthesis whole, on its own: not a second time, cut, as a finding.
        findings = [f for f in run.ledger.for_node(node.id) if f.kind != "final_draft"]
        if node.depth == 0:
            findings = [*run.memory_findings, *findings]  # offered memories may be cited like findings
        stop_note = (
            None
            if result.stop == "final"
            else f"the investigation stopped early: {result.detail or result.stop}"
        )
        run.progress(Phase("writing the answer" if node.depth == 0 else f"writing {node.id}'s answer"))
        synthesis = synthesize(
            run.model_for(node.depth),
            node.question,
            findings,
            result.draft,
            observations=node.last_observations(2),
            stop_note=stop_note,
            max_tokens=node.sizing.reply_tokens,
            context_tokens=context_budget(node.window, node.sizing.reply_tokens),
            budget=run.budget,  # a child's synthesis is an ordinary call; the root's is held back
            final=node.id == run.answer_node,
        )
        self._charge(node, synthesis)
        if node.depth == 0 and synthesis.confidence == "low" and not run.settings.no_reroute:
            synthesis = self._widened(node, result, findings, synthesis, stop_note)
        with self._lock:
            for fid in synthesis.payload.get("included") or []:
                self.citation_counts.setdefault(fid, {"offered": 0, "cited": 0})["offered"] += 1
            for fid in synthesis.citations:
                self.citation_counts.setdefault(fid, {"offered": 0, "cited": 0})["cited"] += 1
            self.unknown_citations += len(synthesis.unknown_citations)
            counts, unknown = dict(self.citation_counts), self.unknown_citations
        run.trace.update(citations=counts, unknown_citations=unknown)
        return synthesis

    def _charge(self, node: Node, synthesis: Synthesis) -> None:
        if synthesis.reply is not None:
            self.run.charge(node.id, synthesis.reply)

    def _widened(
        self, node: Node, result: NodeResult, findings: list[Finding], first: Synthesis, stop_note: str | None
    ) -> Synthesis:
        """One more pass for an answer the synthesis itself called low-confidence: twice the context
        (so findings cut for room come back), more of the last observations, the first answer and
        why it was unsure. An ordinary call of the budget: refused, the first answer stands."""
        self.run.progress(Phase("answer unsure: one more look at every finding"))
        note = prompts.reroute_note(first.answer or "", first.confidence_reason)
        second = synthesize(
            self.run.root_model,
            node.question,
            findings,
            result.draft,
            observations=node.last_observations(4),
            stop_note=f"{stop_note}\n{note}" if stop_note else note,
            max_tokens=node.sizing.reply_tokens,
            context_tokens=2 * context_budget(node.window, node.sizing.reply_tokens),
            budget=self.run.budget,
        )
        self._charge(node, second)
        attempt = {
            "answer": first.answer,
            "confidence": first.confidence,
            "confidence_reason": first.confidence_reason,
            "citations": first.citations,
            "payload": first.payload,
        }
        if second.source != "synthesis":  # refused or failed: the first answer stands, and says so
            first.first_attempt = {**attempt, "widened_pass": second.error or second.source}
            return first
        second.first_attempt = attempt
        return second
