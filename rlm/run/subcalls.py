"""The sub-calls a node asks for: `llm_query` over a slice or a text, and `partition_map`'s fan-out.

A slice that fits one helper call is asked as one plain call (answered from the
run's sub-call cache when the same model was asked the same before); one too big
becomes a child investigation (rlm.run.children). partition_map asks the same
question of every chunk of the node's scope, `concurrency` at a time, under one
budget reservation; chunks too big for a plain call become children too.
Every call is told which node asks and at which step (rlm.run.scope.Asker): the
trace records it there, and `rlm replay --verify` serves it back from there.
"""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from rlm.errors import ConfigError, ProviderError, RlmError
from rlm.memory.store import MemoryStore, subcall_key
from rlm.model.budget import BudgetExceeded, Reservation
from rlm.model.client import Reply
from rlm.model.remote_call import ClientSpec, reply_of
from rlm.model.tokens import count_text
from rlm.run import prompts
from rlm.run.batch import fan_out_as_batch
from rlm.run.children import Children
from rlm.run.events import Fanout, RunWarning
from rlm.run.executor import LOCAL, Call, DaskExecutor
from rlm.run.host import Partition, chunk_error
from rlm.run.routing import subquery_payload
from rlm.run.scope import Asker
from rlm.run.services import RunServices
from rlm.text.textcap import cap_line, cap_words
from rlm.trace.redact import redact_text
from rlm.trace.schema import SubcallRecord

# Bytes per token when sizing a slice without reading it (logs run ~3-4).
BYTES_PER_TOKEN = 3.0
MAX_CHUNKS = 512
EMPTY_ANSWER = "(the helper model gave an empty answer)"


class Subcalls:
    """llm_query and partition_map for every node of a run, with the sub-call cache's counts."""

    def __init__(
        self,
        run: RunServices,
        children: Children,
        cache: MemoryStore | None = None,
        cluster: DaskExecutor | None = None,
    ) -> None:
        self.run = run
        self.children = children
        self.cache = cache
        self.cache_hits = 0
        self.cache_saved_tokens = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cluster = cluster  # --executor dask://: the run's connection (the engine's to close)

    # -- llm_query ---------------------------------------------------------------
    def _slice(self, asker: Asker, args: dict[str, Any]) -> tuple[str, str, int, int]:
        """(description, kind, abs_start, abs_end) of what a sub-call asks about."""
        n = asker.scope.n_lines
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
        offset = asker.scope.first_line - 1
        return f"lines {start:,}-{end:,}", "lines", start + offset, end + offset

    def llm_query(self, asker: Asker, args: dict[str, Any]) -> str:
        question = str(args.get("question") or "").strip()
        if not question:
            raise RlmError("llm_query needs a question")
        _refuse_sql("llm_query", question)
        text = args.get("text")
        limit = self.run.sub_sizing.sub_prompt_tokens
        if text is not None:
            where = f"a text of {len(text):,} characters"
            tokens = count_text(text) if len(text) < limit * 8 else int(len(text) / BYTES_PER_TOKEN)
            if tokens <= limit:
                answer = self._plain_subcall(asker, question, where, text)
            else:
                answer = self.children.over_text(asker, question, text, tokens)
        else:
            where, _, a, b = self._slice(asker, args)
            with asker.scope.window(a, b) as window:
                est = int(window.window_bytes / BYTES_PER_TOKEN)
                excerpt = "\n".join(window.lines[:]) if est <= limit * 2 else None
            tokens = count_text(excerpt) if excerpt is not None else est
            if excerpt is not None and tokens <= limit:
                answer = self._plain_subcall(asker, question, where, excerpt)
            else:
                answer = self.children.over_lines(asker, question, a, b, tokens)
        return answer

    def _sub_messages(self, question: str, where: str, excerpt: str) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": prompts.SUBQUERY_SYSTEM},
            {"role": "user", "content": prompts.subquery_prompt(question, where, excerpt)},
        ]

    def _subquery_context(self, question: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """A sub-query's payload for the trace: isolated, it gets the question and its excerpt only."""
        return subquery_payload(question, messages, self.run.sub_sizing.sub_prompt_tokens).to_dict()

    def _check_window(self, messages: list[dict[str, Any]]) -> int:
        model = self.run.sub_model
        est = model.estimate_prompt_tokens(messages)
        window = model.context_window()
        if est + self.run.sub_sizing.reply_tokens > window:
            raise RlmError(
                f"the sub-call prompt (~{est:,} tokens) does not fit the sub-model's window ({window:,} tokens); "
                "narrow the slice"
            )
        return est

    def _plain_subcall(self, asker: Asker, question: str, where: str, excerpt: str) -> str:
        run = self.run
        messages = self._sub_messages(question, where, excerpt)
        est = self._check_window(messages)
        answer = self._cached_subcall(asker, question, where, messages)
        if answer is None:
            run.budget.admit(est)
            try:
                reply = run.sub_model.complete(messages, max_tokens=run.sub_sizing.reply_tokens)
            except RlmError:  # the model code sees the error and may go on: the call is not made
                run.budget.abandon()
                raise
            self._cache_subcall(messages, reply)
            answer = self._settle_subcall(asker, question, where, reply, messages)
        if answer != EMPTY_ANSWER:
            # The helper's answer is established like a child's: the synthesis answers from it.
            run.add_finding(
                f"{cap_words(question, 160)} ({where}) → {answer}", "subcall", asker.node_id, asker.step
            )
        return answer

    def _cached_subcall(
        self, asker: Asker, question: str, where: str, messages: list[dict[str, Any]]
    ) -> str | None:
        """The answer the same model gave to the same prompt in an earlier run (rlm.memory), if any:
        it is not asked, nor paid, again."""
        if self.cache is None:
            return None
        found = self.cache.cached(subcall_key(self.run.sub_model.model, messages))
        if found is None:
            return None
        answer, prompt_tokens, completion_tokens = found
        with self._lock:
            self.cache_hits += 1
            self.cache_saved_tokens += prompt_tokens + completion_tokens
        self.run.trace.add_subcall(
            {
                "node": asker.node_id,
                "step": asker.step,
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
        if self.cache is not None and reply.content.strip():
            model = self.run.sub_model.model
            self.cache.cache(
                subcall_key(model, messages),
                model,
                redact_text(reply.content.strip()),  # the cache keeps no key of the environment
                reply.prompt_tokens,
                reply.completion_tokens,
            )

    def _settle_subcall(
        self,
        asker: Asker,
        question: str,
        where: str,
        reply: Reply,
        messages: list[dict[str, Any]],
        ran_on: str | None = None,
        batch: str | None = None,
    ) -> str:
        """A sub-call's reply, paid for (the run's budget, the node's usage) and recorded in the
        trace; its answer. `ran_on`: the cluster worker that made it; `batch`: the Batch API job
        that answered it (rlm.run.batch)."""
        self.run.charge(asker.node_id, reply)
        answer = reply.content.strip()
        record: SubcallRecord = {
            "node": asker.node_id,
            "step": asker.step,
            "question": question,
            "slice": where,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "cost": reply.cost,
            "latency_s": round(reply.latency_s, 4),
            "answer": answer,  # whole: bounded by the reply size, and --rerun plays it back
            "context": self._subquery_context(question, messages),
        }
        if reply.deployment is not None:
            record["deployment"] = reply.deployment
        if ran_on:
            record["ran_on"] = ran_on  # the cluster worker that made the call (rlm.run.executor)
        if batch:
            record["batch"] = batch
        self.run.trace.add_subcall(record)
        return answer or EMPTY_ANSWER

    # -- partition_map ---------------------------------------------------------------
    def _chunks(self, asker: Asker, args: dict[str, Any]) -> list[tuple[int, int]]:
        """(abs_start, abs_end) line ranges covering the node's scope."""
        n = asker.scope.n_lines
        offset = asker.scope.first_line - 1
        if n == 0:
            raise RlmError("the context is empty")
        if args.get("by") == "file":
            return self._file_chunks(asker, offset, n)
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
                else int(self.run.sub_sizing.sub_prompt_tokens * BYTES_PER_TOKEN * 0.8)
            )
            with asker.scope.window(offset + 1, offset + n) as window:
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

    def _file_chunks(self, asker: Asker, offset: int, n: int) -> list[tuple[int, int]]:
        """partition_map(by="file"): one chunk per input file, cut to the node's scope."""
        parts = self.run.profile.parts
        if not parts:
            raise RlmError('partition_map(by="file") needs several input files; this run reads one')
        chunks = [
            (max(int(p["first_line"]), offset + 1), min(int(p["last_line"]), offset + n))
            for p in parts
            if int(p["first_line"]) <= offset + n and int(p["last_line"]) > offset
        ]
        if len(chunks) > MAX_CHUNKS:
            raise RlmError(
                f"{len(chunks):,} files is more than {MAX_CHUNKS} sub-calls; narrow the question first"
            )
        return chunks

    def _file_names(self, chunks: list[tuple[int, int]]) -> dict[int, str]:
        """The file each chunk of partition_map(by="file") is, by its first line."""
        parts = self.run.profile.parts or []
        return {
            a: str(p["name"])
            for a, _ in chunks
            for p in parts
            if int(p["first_line"]) <= a <= int(p["last_line"])
        }

    def partition_map(self, asker: Asker, args: dict[str, Any]) -> Partition:
        run = self.run
        question = str(args.get("question") or "").strip()
        if not question:
            raise RlmError("partition_map needs a question")
        _refuse_sql("partition_map", question)
        chunks = self._chunks(asker, args)
        prompts_: list[tuple[str, list[dict[str, Any]], int]] = []
        limit = run.sub_sizing.sub_prompt_tokens
        scope = asker.scope
        first = scope.first_line
        with scope.window(first, first + scope.n_lines - 1) as scope_text:
            avg = scope_text.window_bytes / max(1, scope.n_lines)
            widest = max(b - a + 1 for a, b in chunks)
            if widest * avg / BYTES_PER_TOKEN > limit * 2:
                # Chunks too big for one plain call are investigated, as llm_query does with a big slice.
                return self._partition_children(asker, question, chunks, avg)
            excerpts = ["\n".join(scope_text.lines[a - first : b - first + 1]) for a, b in chunks]
        names = self._file_names(chunks) if args.get("by") == "file" else {}
        for (a, b), excerpt in zip(chunks, excerpts, strict=True):
            rel = a - first + 1
            where = f"lines {rel:,}-{rel + b - a:,}"
            if a in names:
                where = f"{names[a]}, {where}"
            messages = self._sub_messages(question, where, excerpt)
            est = self._check_window(messages)
            if est > limit + 600:
                raise RlmError(
                    f"a chunk ({where}) is about {est:,} tokens, over the sub-call limit of {limit:,}; use smaller chunks"
                )
            prompts_.append((where, messages, est))
        total = sum(est + run.sub_sizing.reply_tokens // 4 for _, _, est in prompts_)
        room = run.budget.room_for(len(prompts_), max(1, total // len(prompts_)))
        if room < len(prompts_):
            raise RlmError(
                f"partition_map needs {len(prompts_)} sub-calls (~{total:,} tokens) but the budget has room for "
                f"{room}; use larger chunks or narrow the range"
            )
        reservation = run.budget.reserve(len(prompts_), total)
        run.progress(Fanout(node=asker.node_id, chunks=len(prompts_)))
        try:
            if run.settings.batch:  # one job of the provider's Batch API (rlm.run.batch)
                results = fan_out_as_batch(
                    run, _BatchKeeper(self, asker, question), asker, prompts_, reservation
                )
            elif run.settings.executor != LOCAL:
                results = self._fan_out_on_cluster(asker, question, prompts_, reservation)
            else:
                results = self._event_loop().run_until_complete(
                    self._fan_out(asker, question, prompts_, reservation)
                )
        finally:
            run.budget.release(reservation)
        return self._partition_result(asker, question, Partition([w for w, _, _ in prompts_], results))

    def _partition_result(self, asker: Asker, question: str, partition: Partition) -> Partition:
        results = partition.results
        failed = partition.failures()
        if failed:
            # The model reads each failure among the answers; the user is told too, as whatever
            # the fan-out concludes rests on the chunks that did answer.
            note = (
                f"partition_map of {asker.node_id}: {len(failed)} of {len(results)} chunks have no answer "
                f"({cap_line(failed[0], 200)}"
                f"{'' if len(failed) == 1 else '; and others'})"
            )
            self.run.trace.warn(note)
            self.run.progress(RunWarning(note))
        summary = "; ".join(f"[{i + 1}] {cap_line(r, 80)}" for i, r in enumerate(results))
        self.run.ledger.add(
            f"partition_map '{cap_words(question, 120)}' over {len(results)} chunks: {summary}",
            kind="subcall",
            evidence=f"{asker.node_id}.s{asker.step}",
            node=asker.node_id,
            step=asker.step,
        )
        self.run.trace.update(ledger=self.run.ledger.to_list())
        return partition

    def _partition_children(
        self, asker: Asker, question: str, chunks: list[tuple[int, int]], avg_bytes: float
    ) -> Partition:
        """One child investigation per chunk, `concurrency` at a time, one budget for the tree."""
        tokens = int(max(b - a + 1 for a, b in chunks) * avg_bytes / BYTES_PER_TOKEN)
        if asker.depth >= self.run.settings.max_depth:
            raise self.children.too_deep(asker, tokens)
        self.run.progress(Fanout(node=asker.node_id, chunks=len(chunks), children=True))
        first = asker.scope.first_line
        begun = [0]
        begun_lock = threading.Lock()

        def one(chunk: tuple[int, int]) -> str:
            a, b = chunk
            if self.run.budget.stopped is not None:  # the tree's budget is spent: no child begins
                raise self.run.budget.stopped
            with begun_lock:
                ways = len(chunks) - begun[0]  # this child and those yet to begin share what is left
                begun[0] += 1
            try:
                return self.children.over_lines(asker, question, a, b, tokens, ways)
            except RlmError as exc:  # one chunk's failure is that chunk's answer, as in a plain fan-out
                return chunk_error(f"lines {a - first + 1:,}-{b - first + 1:,}", exc.message)

        pool = ThreadPoolExecutor(
            max_workers=max(1, self.run.settings.concurrency), thread_name_prefix="rlm-child"
        )
        futures = [pool.submit(one, chunk) for chunk in chunks]
        try:
            # A budget stop in any child ends the fan-out as soon as it comes, whichever child it is:
            # the children not yet begun are cancelled, not started into a spent budget.
            wait(futures, return_when=FIRST_EXCEPTION)
            results = [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True)
        wheres = [f"lines {a - first + 1:,}-{b - first + 1:,}" for a, b in chunks]
        return self._partition_result(asker, question, Partition(wheres, results))

    async def _fan_out(
        self,
        asker: Asker,
        question: str,
        items: list[tuple[str, list[dict[str, Any]], int]],
        reservation: Reservation,
    ) -> list[str]:
        run = self.run
        sem = asyncio.Semaphore(run.settings.concurrency)

        async def one(where: str, messages: list[dict[str, Any]], est: int) -> str:
            async with sem:
                hit = self._cached_subcall(asker, question, where, messages)
                if hit is not None:
                    return hit
                run.budget.admit(est, reservation)
                try:
                    reply = await run.sub_model.acomplete(messages, max_tokens=run.sub_sizing.reply_tokens)
                except ProviderError as exc:
                    run.budget.abandon()
                    return chunk_error(where, exc.message)
                self._cache_subcall(messages, reply)
                return self._settle_subcall(asker, question, where, reply, messages)

        tasks = [asyncio.create_task(one(w, m, e)) for w, m, e in items]
        try:
            return list(await asyncio.gather(*tasks))
        except BudgetExceeded:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _fan_out_on_cluster(
        self,
        asker: Asker,
        question: str,
        items: list[tuple[str, list[dict[str, Any]], int]],
        reservation: Reservation,
    ) -> list[str]:
        """The fan-out's sub-calls as tasks of the Dask cluster (rlm.run.executor); the budget,
        the cache, the records and the answers' order are kept here as in `_fan_out`."""
        run = self.run
        assert self._cluster is not None  # made with the run (__init__)
        max_tokens = run.sub_sizing.reply_tokens
        results = [""] * len(items)

        def admit(call: Call) -> bool:
            hit = self._cached_subcall(asker, question, items[call.index][0], call.messages)
            if hit is not None:
                results[call.index] = hit
                return False
            run.budget.admit(call.est_tokens, reservation)
            return True

        def done(call: Call, out: dict[str, Any]) -> None:
            where = items[call.index][0]
            if "error" in out:
                run.budget.abandon()
                if out.get("kind") == "config":
                    raise ConfigError(str(out["error"]))
                results[call.index] = chunk_error(where, str(out["error"]))
                return
            reply = reply_of(out, run.sub_model.model)
            run.sub_model.record_elsewhere(call.messages, max_tokens, reply)
            self._cache_subcall(call.messages, reply)
            results[call.index] = self._settle_subcall(
                asker, question, where, reply, call.messages, ran_on=str(out.get("ran_on") or "")
            )

        self._cluster.run(
            ClientSpec.of(run.sub_model, run.settings.router_strategy),
            [Call(i, messages, est) for i, (_, messages, est) in enumerate(items)],
            max_tokens=max_tokens,
            concurrency=run.settings.concurrency,
            admit=admit,
            seconds_left=run.budget.time_left,
            done=done,
        )
        return results

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """One loop for the run: litellm keeps per-loop clients and workers, and a fresh
        loop per fan-out would pay their start-up and a slow shutdown every time."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
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


class _BatchKeeper:
    """A batch job's replies kept as a plain fan-out keeps its sub-calls (rlm.run.batch.Keeper)."""

    def __init__(self, subcalls: Subcalls, asker: Asker, question: str) -> None:
        self.subcalls, self.asker, self.question = subcalls, asker, question

    def cached(self, where: str, messages: list[dict[str, Any]]) -> str | None:
        return self.subcalls._cached_subcall(self.asker, self.question, where, messages)

    def settle(self, where: str, messages: list[dict[str, Any]], reply: Reply, batch_id: str) -> str:
        run = self.subcalls.run
        run.sub_model.record_elsewhere(messages, run.sub_sizing.reply_tokens, reply, batch=batch_id)
        self.subcalls._cache_subcall(messages, reply)
        return self.subcalls._settle_subcall(
            self.asker, self.question, where, reply, messages, batch=batch_id
        )


_SQL = re.compile(r"^\s*(?:SELECT|WITH)\s", re.I)


def _refuse_sql(name: str, question: str) -> None:
    """A query where a question in words belongs: helper models cannot run SQL, and a fan-out of
    them over the file would cost many calls to answer nothing. Say what runs it."""
    if _SQL.match(question):
        raise RlmError(
            f"{name} asks a helper model a question in words; that is SQL: run it with "
            f'sql("{" ".join(question.split())[:80]}") inside execute (it reads the table `log`)'
        )
