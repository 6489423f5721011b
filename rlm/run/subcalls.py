"""The sub-calls of a run: slices, `llm_query`, child nodes, `partition_map` and its fan-out.

A mixin of `rlm.run.engine.Engine`: these methods share the run's state (the
budget, the ledger, the trace, the node count), which the engine owns and
declares below for the type checker. Kept apart so the engine reads as the
run and this module as everything a node may ask of it besides its worker.
Over 400 lines: slices, children and the fan-out call each other (a slice too big
for one call becomes a child; partition_map's big chunks become children).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

from rlm.errors import ProviderError, RlmError
from rlm.input.source import Profile
from rlm.memory.store import MemoryStore, subcall_key
from rlm.model.budget import Budget, BudgetExceeded, Reservation, Usage
from rlm.model.client import ModelClient, Reply
from rlm.model.tokens import count_text
from rlm.run import prompts
from rlm.run.ledger import Finding, Ledger
from rlm.run.node import Node, NodeResult, NodeScope
from rlm.run.routing import subquery_payload
from rlm.run.settings import Settings, Sizing
from rlm.run.synthesis import Synthesis, context_budget, synthesize
from rlm.run.workers import slice_profile, text_worker_spec
from rlm.text.textcap import cap_line, cap_words
from rlm.text.textfile import MappedText
from rlm.trace.redact import redact_text
from rlm.trace.schema import BridgeCallRecord, FindingKind
from rlm.trace.writer import TraceWriter, preview

if TYPE_CHECKING:
    from rlm.run.engine import Engine, Progress

# Bytes per token when sizing a slice without reading it (logs run ~3-4).
BYTES_PER_TOKEN = 3.0
MAX_CHUNKS = 512
EMPTY_ANSWER = "(the helper model gave an empty answer)"


class Subcalls:
    # The run state these methods share, owned and set up by Engine.__init__.
    settings: Settings
    profile: Profile
    question: str
    root_model: ModelClient
    sub_model: ModelClient
    trace: TraceWriter
    progress: Progress
    ledger: Ledger
    budget: Budget
    sub_sizing: Sizing
    citation_counts: dict[str, dict[str, int]]
    unknown_citations: int
    subcall_cache: MemoryStore | None
    memory_findings: list[Finding]
    cache_hits: int
    cache_saved_tokens: int
    _node_count: int
    _lock: threading.Lock
    _tmpdir: str
    _loop: asyncio.AbstractEventLoop | None

    if TYPE_CHECKING:

        def usage_for(self, node_id: str) -> Usage: ...

        def new_node_id(self) -> str: ...

        def add_finding(
            self, text: str, kind: FindingKind, node_id: str, step: int, *, evidence: str | None = None
        ) -> Finding | None: ...

    @staticmethod
    def _window(scope: NodeScope, a: int, b: int) -> MappedText:
        """Lines a..b (numbered in the scope's file) as a mapped view."""
        spec = scope.spec
        return MappedText(
            spec.path, encoding=spec.encoding, start_line=a, end_line=b, index_path=spec.index_path
        )

    # -- sub-calls ---------------------------------------------------------------
    def _bridge(self, node: Node, name: str, args: dict[str, Any]) -> Any:
        """A model call asked for by code in the worker; recorded so `replay --verify` can serve it."""
        step = len(node.turns) + 1
        shown = {k: (preview(v, 200) if k == "text" and isinstance(v, str) else v) for k, v in args.items()}
        record: BridgeCallRecord = {"node": node.id, "step": step, "name": name, "args": shown}
        try:
            if name == "llm_query":
                result: Any = self.llm_query(node, args, step)
            elif name == "partition_map":
                result = self.partition_map(node, args, step, as_list=True)
            elif name == "recall":
                result = node.recall(str(args.get("ref") or ""))
            else:
                raise RlmError(f"{name} is not available")
        except RlmError as exc:
            self.trace.add_bridge_call({**record, "error": exc.message})
            raise
        self.trace.add_bridge_call({**record, "result": result})
        return result

    def _slice(self, node: Node, args: dict[str, Any]) -> tuple[str, str, int, int]:
        """(description, kind, abs_start, abs_end) of what a sub-call asks about."""
        n = node.scope.n_lines
        start = args.get("start_line")
        end = args.get("end_line")
        if start is None and end is None:
            start, end = 1, n
        start = 1 if start is None else int(start)
        end = n if end is None else int(end)
        if n == 0:
            raise RlmError("the context is empty")
        if start < 1 or start > n:
            raise RlmError(f"start_line {start} is outside the context (lines 1-{n:,})")
        if end < start:
            raise RlmError(f"end_line {end} is before start_line {start}")
        end = min(end, n)
        offset = node.scope.first_line - 1
        return f"lines {start:,}-{end:,}", "lines", start + offset, end + offset

    def llm_query(self, node: Node, args: dict[str, Any], step: int) -> str:
        question = str(args.get("question") or "").strip()
        if not question:
            raise RlmError("llm_query needs a question")
        _refuse_sql("llm_query", question)
        text = args.get("text")
        limit = self.sub_sizing.sub_prompt_tokens
        if text is not None:
            where = f"a text of {len(text):,} characters"
            tokens = count_text(text) if len(text) < limit * 8 else int(len(text) / BYTES_PER_TOKEN)
            if tokens <= limit:
                answer = self._plain_subcall(node, question, where, text, step)
            else:
                answer = self._child_over_text(node, question, text, tokens)
        else:
            where, _, a, b = self._slice(node, args)
            with self._window(node.scope, a, b) as window:
                est = int(window.window_bytes / BYTES_PER_TOKEN)
                excerpt = "\n".join(window.lines[:]) if est <= limit * 2 else None
            tokens = count_text(excerpt) if excerpt is not None else est
            if excerpt is not None and tokens <= limit:
                answer = self._plain_subcall(node, question, where, excerpt, step)
            else:
                answer = self._child_over_lines(node, question, a, b, tokens)
        return answer

    def _refuse_depth(self, node: Node, tokens: int) -> RlmError:
        return RlmError(
            f"this slice is about {tokens:,} tokens, more than one sub-call takes ({self.sub_sizing.sub_prompt_tokens:,}), "
            f"and depth {node.depth} cannot start a deeper investigation (the depth limit is "
            f"{self.settings.max_depth}): narrow it to fewer lines, or compute with execute"
        )

    def _sub_messages(self, question: str, where: str, excerpt: str) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": prompts.SUBQUERY_SYSTEM},
            {"role": "user", "content": prompts.subquery_prompt(question, where, excerpt)},
        ]

    def _subquery_context(self, question: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """A sub-query's payload for the trace: isolated, it gets the question and its excerpt only."""
        return subquery_payload(question, messages, self.sub_sizing.sub_prompt_tokens).to_dict()

    def _check_window(self, messages: list[dict[str, Any]]) -> int:
        est = self.sub_model.estimate_prompt_tokens(messages)
        window = self.sub_model.context_window()
        if est + self.sub_sizing.reply_tokens > window:
            raise RlmError(
                f"the sub-call prompt (~{est:,} tokens) does not fit the sub-model's window ({window:,} tokens); "
                "narrow the slice"
            )
        return est

    def _plain_subcall(self, node: Node, question: str, where: str, excerpt: str, step: int) -> str:
        messages = self._sub_messages(question, where, excerpt)
        est = self._check_window(messages)
        answer = self._cached_subcall(node, question, where, messages, step)
        if answer is None:
            self.budget.admit(est)
            reply = self.sub_model.complete(messages, max_tokens=self.sub_sizing.reply_tokens)
            self._cache_subcall(messages, reply)
            answer = self._settle_subcall(node, question, where, reply, step, messages)
        if answer != EMPTY_ANSWER:
            # The helper's answer is established like a child's: the synthesis answers from it.
            self.add_finding(f"{cap_words(question, 160)} ({where}) → {answer}", "subcall", node.id, step)
        return answer

    def _cached_subcall(
        self, node: Node, question: str, where: str, messages: list[dict[str, Any]], step: int
    ) -> str | None:
        """The answer the same model gave to the same prompt in an earlier run (rlm.memory), if any:
        it is not asked, nor paid, again."""
        if self.subcall_cache is None:
            return None
        found = self.subcall_cache.cached(subcall_key(self.sub_model.model, messages))
        if found is None:
            return None
        answer, prompt_tokens, completion_tokens = found
        with self._lock:
            self.cache_hits += 1
            self.cache_saved_tokens += prompt_tokens + completion_tokens
        self.trace.add_subcall(
            {
                "node": node.id,
                "step": step,
                "question": question,
                "slice": where,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cost": 0.0,
                "latency_s": 0.0,
                "answer": answer,
                "cached": True,
                "context": self._subquery_context(question, messages),
            }
        )
        return answer or EMPTY_ANSWER

    def _cache_subcall(self, messages: list[dict[str, Any]], reply: Reply) -> None:
        if self.subcall_cache is not None and reply.content.strip():
            self.subcall_cache.cache(
                subcall_key(self.sub_model.model, messages),
                self.sub_model.model,
                redact_text(reply.content.strip()),  # the cache keeps no key of the environment
                reply.prompt_tokens,
                reply.completion_tokens,
            )

    def _settle_subcall(
        self, node: Node, question: str, where: str, reply: Reply, step: int, messages: list[dict[str, Any]]
    ) -> str:
        self.budget.charge(reply.prompt_tokens, reply.completion_tokens, reply.cost)
        self.usage_for(node.id).add(reply.prompt_tokens, reply.completion_tokens, reply.cost)
        answer = reply.content.strip()
        self.trace.add_subcall(
            {
                "node": node.id,
                "step": step,
                "question": question,
                "slice": where,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "cost": reply.cost,
                "latency_s": round(reply.latency_s, 4),
                "answer": answer,  # whole: bounded by the reply size, and --rerun plays it back
                "context": self._subquery_context(question, messages),
            }
        )
        return answer or EMPTY_ANSWER

    # -- child nodes ---------------------------------------------------------------
    def _child_over_lines(self, node: Node, question: str, a: int, b: int, tokens: int) -> str:
        if node.depth >= self.settings.max_depth:
            raise self._refuse_depth(node, tokens)
        spec = dataclasses.replace(node.scope.spec, start_line=a, end_line=b)
        with self._window(node.scope, a, b) as window:
            block = slice_profile(window, f"lines {a:,}-{b:,} of {self.profile.display_name}")
        scope = NodeScope(
            spec=spec,
            profile_block=block,
            description=f"You work on lines {a:,}-{b:,} of the file; inside your context they are lines 1-{b - a + 1:,}.",
            first_line=a,
            n_lines=b - a + 1,
        )
        return self._run_child(node, question, scope, {"start_line": a, "end_line": b})

    def _child_over_text(self, node: Node, question: str, text: str, tokens: int) -> str:
        if node.depth >= self.settings.max_depth:
            raise self._refuse_depth(node, tokens)
        path = os.path.join(self._tmpdir, f"text-{self._node_count}.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        spec = text_worker_spec(path, self.settings)
        with MappedText(path) as window:
            block = slice_profile(
                window, f"a text of {len(text):,} characters built by the parent investigation"
            )
            n = window.n_lines
        scope = NodeScope(spec=spec, profile_block=block, description=None, first_line=1, n_lines=n)
        return self._run_child(node, question, scope, {"text_chars": len(text)})

    def _register_node(self, node: Node, parent: Node | None, slice_info: dict[str, Any] | None) -> None:
        self.trace.add_node(
            {
                "id": node.id,
                "parent": parent.id if parent else None,
                "parent_step": len(parent.turns) + 1 if parent else None,
                "depth": node.depth,
                "question": node.question,
                "slice": slice_info,
                "model": node.model.model,
                "protocol": node.protocol,
                "observation_chars": node.cap,
                "query_hint": dataclasses.asdict(node.hint) if node.hint else None,
                "status": "running",
            }
        )

    def _run_child(self, parent: Node, question: str, scope: NodeScope, slice_info: dict[str, Any]) -> str:
        child = Node(cast("Engine", self), self.new_node_id(), parent.depth + 1, question, scope)
        self._register_node(child, parent, slice_info)
        self.progress(
            "node", {"node": child.id, "parent": parent.id, "depth": child.depth, "question": question}
        )
        result = child.run()
        synthesis = self._synthesize_node(child, result)
        # No answer written: the parent is told what the child established (never printed as a value).
        answer = synthesis.answer or (
            f"Established so far:\n{synthesis.established}" if synthesis.established else None
        )
        self.trace.update_node(
            child.id,
            status=result.stop,
            steps=result.steps,
            usage=self.usage_for(child.id).to_dict(),
            answer=answer or "",
            answer_source=synthesis.source,
            synthesis_payload=synthesis.payload,
        )
        if result.stop == "budget":
            raise self.budget.stopped or BudgetExceeded("budget", result.detail)
        if not answer:
            raise RlmError(
                f"the sub-investigation {child.id} established nothing ({result.detail or result.stop})"
            )
        self.ledger.add(
            f"{cap_words(question, 160)} → {answer}",
            kind="subcall",
            evidence=child.id,
            node=parent.id,
        )
        return answer

    def _synthesize_node(self, node: Node, result: NodeResult) -> Synthesis:
        # The draft goes to synthesis whole, on its own: not a second time, cut, as a finding.
        findings = [f for f in self.ledger.for_node(node.id) if f.kind != "final_draft"]
        if node.depth == 0:
            findings = [*self.memory_findings, *findings]  # offered memories may be cited like findings
        stop_note = (
            None
            if result.stop == "final"
            else f"the investigation stopped early: {result.detail or result.stop}"
        )
        model = self.root_model if node.depth == 0 else self.sub_model
        self.progress(
            "phase", {"what": "writing the answer" if node.depth == 0 else f"writing {node.id}'s answer"}
        )
        synthesis = synthesize(
            model,
            node.question,
            findings,
            result.draft,
            observations=node.last_observations(2),
            stop_note=stop_note,
            max_tokens=node.sizing.reply_tokens,
            context_tokens=context_budget(node.window, node.sizing.reply_tokens),
            budget=self.budget,  # a child's synthesis is an ordinary call; the root's is held back
            final=node.depth == 0,
        )
        self._charge_synthesis(node, synthesis)
        if node.depth == 0 and synthesis.confidence == "low" and not self.settings.no_reroute:
            synthesis = self._widened_synthesis(node, result, findings, synthesis, stop_note)
        with self._lock:
            for fid in synthesis.payload.get("included") or []:
                self.citation_counts.setdefault(fid, {"offered": 0, "cited": 0})["offered"] += 1
            for fid in synthesis.citations:
                self.citation_counts.setdefault(fid, {"offered": 0, "cited": 0})["cited"] += 1
            self.unknown_citations += len(synthesis.unknown_citations)
        self.trace.update(citations=dict(self.citation_counts), unknown_citations=self.unknown_citations)
        return synthesis

    def _charge_synthesis(self, node: Node, synthesis: Synthesis) -> None:
        if synthesis.reply is not None:
            r = synthesis.reply
            self.budget.charge(r.prompt_tokens, r.completion_tokens, r.cost)
            self.usage_for(node.id).add(r.prompt_tokens, r.completion_tokens, r.cost)

    def _widened_synthesis(
        self, node: Node, result: NodeResult, findings: list[Finding], first: Synthesis, stop_note: str | None
    ) -> Synthesis:
        """One more pass for an answer the synthesis itself called low-confidence: twice the context
        (so findings cut for room come back), more of the last observations, the first answer and
        why it was unsure. An ordinary call of the budget: refused, the first answer stands."""
        self.progress("phase", {"what": "answer unsure: one more look at every finding"})
        note = prompts.reroute_note(first.answer or "", first.confidence_reason)
        second = synthesize(
            self.root_model,
            node.question,
            findings,
            result.draft,
            observations=node.last_observations(4),
            stop_note=f"{stop_note}\n{note}" if stop_note else note,
            max_tokens=node.sizing.reply_tokens,
            context_tokens=2 * context_budget(node.window, node.sizing.reply_tokens),
            budget=self.budget,
        )
        self._charge_synthesis(node, second)
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

    # -- partition_map ---------------------------------------------------------------
    def _chunks(self, node: Node, args: dict[str, Any]) -> list[tuple[int, int]]:
        """(abs_start, abs_end) line ranges covering the node's scope."""
        n = node.scope.n_lines
        offset = node.scope.first_line - 1
        if n == 0:
            raise RlmError("the context is empty")
        chunk_lines = args.get("chunk_lines")
        chunk_chars = args.get("chunk_chars")
        if chunk_lines is not None and int(chunk_lines) < 1:
            raise RlmError("chunk_lines must be at least 1")
        if chunk_chars is not None and int(chunk_chars) < 1:
            raise RlmError("chunk_chars must be at least 1")
        if chunk_lines is None:
            target = (
                int(chunk_chars)
                if chunk_chars
                else int(self.sub_sizing.sub_prompt_tokens * BYTES_PER_TOKEN * 0.8)
            )
            with self._window(node.scope, offset + 1, offset + n) as window:
                avg = max(1.0, window.window_bytes / n)
            chunk_lines = max(1, int(target / avg))
        chunk_lines = int(chunk_lines)
        count = -(-n // chunk_lines)
        if count > MAX_CHUNKS:
            raise RlmError(
                f"{count:,} chunks of {chunk_lines:,} lines is more than {MAX_CHUNKS} sub-calls; use larger chunks "
                "or narrow the question with grep/execute first"
            )
        return [(offset + s, offset + min(n, s + chunk_lines - 1)) for s in range(1, n + 1, chunk_lines)]

    def partition_map(self, node: Node, args: dict[str, Any], step: int, as_list: bool = False) -> Any:
        question = str(args.get("question") or "").strip()
        if not question:
            raise RlmError("partition_map needs a question")
        _refuse_sql("partition_map", question)
        chunks = self._chunks(node, args)
        prompts_: list[tuple[str, list[dict[str, Any]], int]] = []
        limit = self.sub_sizing.sub_prompt_tokens
        first = node.scope.first_line
        with self._window(node.scope, first, first + node.scope.n_lines - 1) as scope_text:
            avg = scope_text.window_bytes / max(1, node.scope.n_lines)
            widest = max(b - a + 1 for a, b in chunks)
            if widest * avg / BYTES_PER_TOKEN > limit * 2:
                # Chunks too big for one plain call are investigated, as llm_query does with a big slice.
                return self._partition_children(node, question, chunks, avg, args, step, as_list)
            excerpts = ["\n".join(scope_text.lines[a - first : b - first + 1]) for a, b in chunks]
        for (a, b), excerpt in zip(chunks, excerpts, strict=True):
            rel = a - node.scope.first_line + 1
            where = f"lines {rel:,}-{rel + b - a:,}"
            messages = self._sub_messages(question, where, excerpt)
            est = self._check_window(messages)
            if est > limit + 600:
                raise RlmError(
                    f"a chunk ({where}) is about {est:,} tokens, over the sub-call limit of {limit:,}; use smaller chunks"
                )
            prompts_.append((where, messages, est))
        total = sum(est + self.sub_sizing.reply_tokens // 4 for _, _, est in prompts_)
        room = self.budget.room_for(len(prompts_), max(1, total // len(prompts_)))
        if room < len(prompts_):
            raise RlmError(
                f"partition_map needs {len(prompts_)} sub-calls (~{total:,} tokens) but the budget has room for "
                f"{room}; use larger chunks or narrow the range"
            )
        reservation = self.budget.reserve(len(prompts_), total)
        self.progress("fanout", {"node": node.id, "chunks": len(prompts_)})
        try:
            results = self._event_loop().run_until_complete(
                self._fan_out(node, question, prompts_, reservation, step)
            )
        finally:
            self.budget.release(reservation)
        return self._partition_result(
            node, question, [w for w, _, _ in prompts_], results, args, step, as_list
        )

    def _partition_result(
        self,
        node: Node,
        question: str,
        wheres: list[str],
        results: list[str],
        args: dict[str, Any],
        step: int,
        as_list: bool,
    ) -> Any:
        summary = "; ".join(f"[{i + 1}] {cap_line(r, 80)}" for i, r in enumerate(results))
        self.ledger.add(
            f"partition_map '{cap_words(question, 120)}' over {len(results)} chunks: {summary}",
            kind="subcall",
            evidence=f"{node.id}.s{step}",
            node=node.id,
        )
        self.trace.update(ledger=self.ledger.to_list())
        if as_list:
            return results
        var = args.get("result_var") or "results"
        if node.runner.sandbox is not None:
            node.runner.sandbox.request("set", timeout=30, name=var, value=results)
        lines = [f"{len(results)} chunks; answers in chunk order (also in the variable `{var}`):"]
        lines += [f"[{i + 1}] {where}: {r}" for i, (where, r) in enumerate(zip(wheres, results, strict=True))]
        return "\n".join(lines)

    def _partition_children(
        self,
        node: Node,
        question: str,
        chunks: list[tuple[int, int]],
        avg_bytes: float,
        args: dict[str, Any],
        step: int,
        as_list: bool,
    ) -> Any:
        """One child investigation per chunk, `concurrency` at a time, one budget for the tree."""
        tokens = int(max(b - a + 1 for a, b in chunks) * avg_bytes / BYTES_PER_TOKEN)
        if node.depth >= self.settings.max_depth:
            raise self._refuse_depth(node, tokens)
        self.progress("fanout", {"node": node.id, "chunks": len(chunks), "children": True})
        first = node.scope.first_line

        def one(chunk: tuple[int, int]) -> str:
            a, b = chunk
            try:
                return self._child_over_lines(node, question, a, b, tokens)
            except RlmError as exc:  # one chunk's failure is that chunk's answer, as in a plain fan-out
                return f"[error] lines {a - first + 1:,}-{b - first + 1:,}: {exc.message}"

        pool = ThreadPoolExecutor(
            max_workers=max(1, self.settings.concurrency), thread_name_prefix="rlm-child"
        )
        futures = [pool.submit(one, chunk) for chunk in chunks]
        try:
            results = [f.result() for f in futures]  # a budget stop in any child ends the fan-out
        finally:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
        wheres = [f"lines {a - first + 1:,}-{b - first + 1:,}" for a, b in chunks]
        return self._partition_result(node, question, wheres, results, args, step, as_list)

    async def _fan_out(
        self,
        node: Node,
        question: str,
        items: list[tuple[str, list[dict[str, Any]], int]],
        reservation: Reservation,
        step: int,
    ) -> list[str]:
        sem = asyncio.Semaphore(self.settings.concurrency)

        async def one(where: str, messages: list[dict[str, Any]], est: int) -> str:
            async with sem:
                hit = self._cached_subcall(node, question, where, messages, step)
                if hit is not None:
                    return hit
                self.budget.admit(est, reservation)
                try:
                    reply = await self.sub_model.acomplete(messages, max_tokens=self.sub_sizing.reply_tokens)
                except ProviderError as exc:
                    return f"[error] {where}: {exc.message}"
                self._cache_subcall(messages, reply)
                return self._settle_subcall(node, question, where, reply, step, messages)

        tasks = [asyncio.create_task(one(w, m, e)) for w, m, e in items]
        try:
            return list(await asyncio.gather(*tasks))
        except BudgetExceeded:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """One loop for the run: litellm keeps per-loop clients and workers, and a fresh
        loop per fan-out would pay their start-up and a slow shutdown every time."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            # Give background tasks a moment to see the cancellation; never wait on them for long.
            loop.run_until_complete(asyncio.wait(pending, timeout=0.2))
        loop.close()


_SQL = re.compile(r"^\s*(?:SELECT|WITH)\s", re.I)


def _refuse_sql(name: str, question: str) -> None:
    """A query where a question in words belongs: helper models cannot run SQL, and a fan-out of
    them over the file would cost many calls to answer nothing. Say what runs it."""
    if _SQL.match(question):
        raise RlmError(
            f"{name} asks a helper model a question in words; that is SQL: run it with "
            f'sql("{" ".join(question.split())[:80]}") inside execute (it reads the table `log`)'
        )
