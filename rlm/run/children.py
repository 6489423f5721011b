"""Child investigations: a node of its own over a slice, or a text, too big for one sub-call.

llm_query and partition_map (rlm.run.subcalls) start one when what they are
asked about does not fit a plain helper call. The child is a full node
(rlm.run.node) one level deeper, isolated from its parent; its answer is
written by its own synthesis and becomes a finding of its parent. Under
`--executor dask://` it runs on a worker of the cluster (rlm.run.remote_child)
with a share of the budget, and what it did there is recorded here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from rlm.errors import ConfigError, Interrupted, ProviderError, RlmError
from rlm.model.budget import BudgetExceeded, Reservation
from rlm.model.remote_call import ClientSpec
from rlm.run.events import NodeStarted, RunWarning
from rlm.run.executor import LOCAL, DaskExecutor
from rlm.run.host import NodeHost
from rlm.run.node import Node
from rlm.run.node_synthesis import NodeSynthesis
from rlm.run.remote_child import ChildTask, adopt_child, pack_text, slice_parts, slice_table, usage_of
from rlm.run.scope import Asker, NodeScope
from rlm.run.services import RunServices
from rlm.run.workers import slice_profile, text_worker_spec
from rlm.text.textcap import cap_words
from rlm.text.textfile import MappedText
from rlm.trace.schema import AnswerSource, StopReason


class Children:
    """Starts, records and answers from the child nodes of a run."""

    def __init__(
        self,
        run: RunServices,
        host: NodeHost,
        synthesis: NodeSynthesis,
        cluster: DaskExecutor | None = None,
    ) -> None:
        self.run = run
        self.host = host  # what each child asks of the run (the engine)
        self.synthesis = synthesis
        # --executor dask://: children run on its workers (given what runs them there)
        self.cluster = cluster if cluster is not None and cluster.child_runner is not None else None
        self._tmpdir = tempfile.mkdtemp(prefix="rlm-run-")  # texts a child investigates
        # Children out on the cluster, each holding a share of the budget: one that finds too
        # little left waits for another to give back what it did not use.
        self._shares = threading.Condition()
        self._out = 0

    def too_deep(self, asker: Asker, tokens: int) -> RlmError:
        """The error for a slice too big for one sub-call, asked for by a node at the depth cap."""
        return RlmError(
            f"this slice is about {tokens:,} tokens, more than one sub-call takes "
            f"({self.run.sub_sizing.sub_prompt_tokens:,}), "
            f"and depth {asker.depth} cannot start a deeper investigation (the depth limit is "
            f"{self.run.settings.max_depth}): narrow it to fewer lines, or compute with execute"
        )

    def over_lines(self, asker: Asker, question: str, a: int, b: int, tokens: int, ways: int = 1) -> str:
        """A child over lines a..b (numbered in the file); its answer. `ways`: how many children
        it runs beside (a share of the budget each, when they run on a cluster)."""
        if asker.depth >= self.run.settings.max_depth:
            raise self.too_deep(asker, tokens)
        # A child's worker opens the table as it starts: one still being built is waited for.
        spec = dataclasses.replace(self.host.settled_spec(asker.scope.spec), start_line=a, end_line=b)
        with asker.scope.window(a, b) as window:
            block = slice_profile(window, f"lines {a:,}-{b:,} of {self.run.profile.display_name}")
            size = window.window_bytes
            send = self.cluster is not None and size <= SEND_MAX_BYTES
            data = window.window_data() if send else b""
        if self.cluster is not None and not send:
            # A task carries its slice: one this big would pass through the scheduler and sit in
            # memory several times over (here, there and on the way); it is investigated here.
            note = (
                f"lines {a:,}-{b:,} ({size / 2**20:,.0f} MiB) are more than a cluster task carries "
                f"({SEND_MAX_BYTES >> 20} MiB): that child runs here"
            )
            self.run.trace.warn(note)
            self.run.progress(RunWarning(note))
        scope = NodeScope(
            spec=spec,
            profile_block=block,
            description=f"You work on lines {a:,}-{b:,} of the file; inside your context they are lines 1-{b - a + 1:,}.",
            first_line=a,
            n_lines=b - a + 1,
        )
        if send:
            table = (
                slice_table(spec.table_path, a, b, self._tmpdir)
                if spec.table_path and self.run.profile.table
                else None
            )
            sent = _Sent(data, table, slice_parts(spec.parts, a, b), ways)
            return self._run(asker, question, scope, {"start_line": a, "end_line": b}, sent)
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
        sent = _Sent(text.encode("utf-8"), None, None, 1) if self.cluster is not None else None
        return self._run(asker, question, scope, {"text_chars": len(text)}, sent)

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

    def _run(
        self,
        parent: Asker,
        question: str,
        scope: NodeScope,
        slice_info: dict[str, Any],
        sent: _Sent | None = None,
    ) -> str:
        run = self.run
        child = Node(self.host, run.new_node_id(), parent.depth + 1, question, scope)
        self.register(child, parent, slice_info)
        run.progress(NodeStarted(node=child.id, parent=parent.node_id, depth=child.depth, question=question))
        if sent is not None:
            done = self._elsewhere(child, sent)
        else:
            result = child.run()
            synthesis = self.synthesis.synthesize(child, result)
            done = _Done(
                result.stop,
                result.steps,
                result.detail,
                synthesis.answer,
                synthesis.established,
                synthesis.source,
                synthesis.payload,
            )
        # No answer written: the parent is told what the child established (never printed as a value).
        answer = done.answer or (f"Established so far:\n{done.established}" if done.established else None)
        run.trace.update_node(
            child.id,
            status=done.stop,
            steps=done.steps,
            usage=run.usage_for(child.id).to_dict(),
            answer=answer or "",
            answer_source=done.source,
            synthesis_payload=done.payload,
            **({"ran_on": done.ran_on} if done.ran_on else {}),
        )
        if done.stop == "budget" and (sent is None or run.budget.stopped is not None):
            raise run.budget.stopped or BudgetExceeded("budget", done.detail)
        if not answer:
            raise RlmError(
                f"the sub-investigation {child.id} established nothing ({done.detail or done.stop})"
            )
        # The child's answer is its parent's finding; no step of the parent's own made it.
        run.ledger.add(
            f"{cap_words(question, 160)} → {answer}", kind="subcall", evidence=child.id, node=parent.node_id
        )
        return answer

    def _elsewhere(self, child: Node, sent: _Sent) -> _Done:
        """Run `child` on the cluster (rlm.run.remote_child) under a share of the budget, and
        record here what it did there."""
        run = self.run
        assert self.cluster is not None
        try:
            share = self._take_share(sent.ways)
        except (BudgetExceeded, Interrupted) as exc:  # never sent: stopped while it waited for a share
            run.trace.update_node(
                child.id, status="budget" if isinstance(exc, BudgetExceeded) else "interrupted", steps=0
            )
            raise
        budget = run.budget
        try:
            out = self._send(child, sent, share)
        finally:
            budget.release(share)
            with self._shares:
                self._out -= 1
                self._shares.notify_all()
        budget.charge_usage(usage_of(out.get("total")))
        return self._outcome_of(child, out)

    def _send(self, child: Node, sent: _Sent, share: Reservation) -> dict[str, Any]:
        """The child's task, sent to the cluster; what it sent back."""
        run = self.run
        budget = run.budget
        assert self.cluster is not None
        task = ChildTask(
            node_id=child.id,
            depth=child.depth,
            question=child.question,
            profile_block=child.scope.profile_block,
            description=child.scope.description,
            n_lines=child.scope.n_lines,
            display_name=run.profile.display_name,
            format=run.profile.format,
            text=pack_text(sent.text),
            table=sent.table,
            table_info=run.profile.table if sent.table is not None else None,
            parts=sent.parts,
            # On the worker its own children run in threads there: the run is the child's alone.
            settings=dataclasses.replace(run.settings, executor=LOCAL),
            model=ClientSpec.of(run.sub_model, run.settings.router_strategy),
            cell_seconds=self.host.cell_seconds,
            calls=share.calls,
            tokens=share.tokens,
            cost=budget.cost_share(sent.ways),
            seconds=budget.time_left(),
            stop_event=f"rlm-stop-{run.trace.run_id}",
        )
        return self.cluster.investigate(task, lambda: budget.stopped is not None)

    def _outcome_of(self, child: Node, out: dict[str, Any]) -> _Done:
        """What a child sent back from the cluster, recorded here; its failure raised as at home."""
        run = self.run
        budget = run.budget
        if "error" in out:
            message = f"{out['error']} (on {out.get('ran_on') or 'the cluster'})"
            failed: dict[str, Any] = {"status": "provider" if out.get("kind") == "provider" else "stuck"}
            if out.get("kind") == "internal":
                # A bug on the worker: the chunk's answer says so, and so do stderr and the trace.
                failed["traceback"] = str(out.get("traceback") or "")[-8000:]
                run.trace.warn(f"{child.id}: {message}")
                run.progress(RunWarning(f"{child.id}: {message}"))
            run.trace.update_node(child.id, **failed)
            if out.get("kind") == "config":
                raise ConfigError(message)
            if out.get("kind") == "provider":
                raise ProviderError(message)
            raise RlmError(message)
        adopt_child(run, child.id, out)
        self.host.note_steps_elsewhere(int(out.get("steps_total") or 0), int(out.get("largest_prompt") or 0))
        stop = str(out.get("stop") or "")
        if stop == "budget" and out.get("budget_stopped") and run.budget.stopped is None:
            # The child's share ran out, not the run's budget: what it established is its answer.
            over = _used_up(run)
            if over:
                raise budget.give_up("calls", over)
        payload = out.get("synthesis_payload")
        return _Done(
            stop,  # type: ignore[arg-type]
            int(out.get("steps") or 0),
            str(out.get("detail") or ""),
            out.get("answer") if isinstance(out.get("answer"), str) else None,
            str(out.get("established") or ""),
            str(out.get("answer_source") or ""),  # type: ignore[arg-type]
            payload if isinstance(payload, dict) else {},
            str(out.get("ran_on") or ""),
        )

    def _take_share(self, ways: int) -> Reservation:
        """A share of what the budget has left for one child on the cluster (at least a step and
        its answer); while other children are out, wait for what they give back."""
        budget = self.run.budget
        with self._shares:
            while True:
                share = budget.share(min(ways, self.run.settings.concurrency), _MIN_CALLS)
                if share is not None:
                    self._out += 1
                    return share
                if self._out == 0:
                    raise budget.give_up(
                        "calls",
                        f"the limit of {budget.max_calls} model calls leaves too few for another child",
                    )
                self._shares.wait(0.5)
                if Interrupted.last is not None:
                    raise Interrupted.again()

    def close(self) -> None:
        shutil.rmtree(self._tmpdir, ignore_errors=True)


# A child on the cluster needs at least one step and its answer.
_MIN_CALLS = 2
# The largest slice a child is sent to the cluster with; a bigger one is investigated here.
SEND_MAX_BYTES = 256 << 20


def _used_up(run: RunServices) -> str:
    """Why the run's own budget has no room left for a call, or "" while it has."""
    budget = run.budget
    if budget.room_for(1, 1) == 0:
        return f"the limit of {budget.max_calls} model calls was reached"
    return ""


@dataclass(frozen=True)
class _Sent:
    """What a child on the cluster is sent of its slice."""

    text: bytes
    table: bytes | None
    parts: list[list[Any]] | None
    ways: int


@dataclass(frozen=True)
class _Done:
    """How a child ended, wherever it ran."""

    stop: StopReason
    steps: int
    detail: str
    answer: str | None
    established: str
    source: AnswerSource
    payload: dict[str, Any]
    ran_on: str = ""
