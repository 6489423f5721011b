"""The engine of one `rlm ask`: the root node, the run's shared services, the synthesis and the result.

wiring -> engine -> {node, children, subcalls, node_synthesis, services, workers, sandbox, model, trace}.
The engine is the `NodeHost` (rlm.run.host) of every node of the run: it records
their steps and findings, starts their workers, and hands their sub-calls to
rlm.run.subcalls, which it holds (child nodes in rlm.run.children, each node's
answer in rlm.run.node_synthesis). Nothing here prints; progress goes to an
optional `Progress` (rlm.run.events) the CLI renders.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, cast

from rlm.errors import ExitCode, InputError, ProviderError
from rlm.input.source import Profile
from rlm.input.tables import describe_table
from rlm.memory.store import MemoryStore
from rlm.model.budget import Budget, BudgetExceeded
from rlm.model.client import ModelClient, Reply
from rlm.model.tokens import count_message
from rlm.run import prompts
from rlm.run.actions import Action, ParseError
from rlm.run.answer_kind import as_asked, wrong_kinds
from rlm.run.children import Children
from rlm.run.count_answer import count_for_values
from rlm.run.doubts import doubt_sentence, kind_doubt
from rlm.run.events import Progress, Restart, RunWarning, Step, no_progress
from rlm.run.executor import LOCAL, ChildRunner, DaskExecutor
from rlm.run.grounding import Grounding, ground
from rlm.run.host import Bridge, Partition, StepDone
from rlm.run.ledger import FINDING_CHARS, Finding, Ledger
from rlm.run.node import Node
from rlm.run.node_synthesis import NodeSynthesis
from rlm.run.scope import Asker, NodeResult, NodeScope
from rlm.run.services import RunServices
from rlm.run.settings import Settings, cell_seconds_for
from rlm.run.subcalls import Subcalls
from rlm.run.synthesis import Synthesis
from rlm.run.workers import worker_spec_for
from rlm.sandbox.client import Sandbox, WorkerSpec
from rlm.trace.schema import BridgeCallRecord, FindingKind, ReplyRecord, RunStatus, StepRecord, StopReason
from rlm.trace.writer import TraceWriter, preview

__all__ = ["Engine", "Progress", "RunResult"]


@dataclass
class RunResult:
    answer: str | None
    status: RunStatus
    exit_code: int
    message: str  # one line for stderr
    findings: list[Finding] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    steps: int = 0
    trace_path: str | None = None
    largest_prompt: int = 0
    stop: StopReason | None = None
    sandbox_missing: list[Any] = field(default_factory=list)
    explanation: str = ""
    citations: list[str] = field(default_factory=list)
    confidence: str | None = None  # high | medium | low, as the synthesis judged its answer
    # Whether every value of the answer was found in the findings the synthesis was shown, and
    # the ids of those that hold them (rlm.run.grounding); None when there is no answer.
    grounded: bool | None = None
    supporting: list[str] = field(default_factory=list)
    # Conditions the question names that the query behind the answer left out (rlm.run.typed.
    # conditions): the answer is in doubt, its confidence low, and --strict withholds it.
    doubts: list[str] = field(default_factory=list)


def budget_for(settings: Settings) -> Budget:
    """A run's budget from its settings: every limit, and the share kept for the answer."""
    return Budget(
        max_calls=settings.max_calls,
        max_tokens=settings.max_tokens,
        max_cost=settings.max_cost,
        max_time=settings.max_time,
        synthesis_tokens=min(8000, settings.max_tokens // 4),
    )


class Engine:
    """One run: the root node, the host its nodes ask, the synthesis and the result."""

    def __init__(
        self,
        settings: Settings,
        *,
        path: str,
        profile: Profile,
        question: str,
        root_model: ModelClient,
        sub_model: ModelClient,
        trace: TraceWriter,
        progress: Progress | None = None,
        memories: list[Finding] | None = None,
        memory_lines: list[tuple[str, str]] | None = None,
        subcall_cache: MemoryStore | None = None,
        budget: Budget | None = None,
        child_runner: ChildRunner | None = None,
    ) -> None:
        self.settings = settings
        self.path = path
        self.profile = profile
        self.question = question
        self.root_model = root_model
        self.sub_model = sub_model
        self.trace = trace
        self.progress: Progress = progress or no_progress
        self.budget = budget or budget_for(settings)
        self.services = RunServices(
            settings=settings,
            profile=profile,
            root_model=root_model,
            sub_model=sub_model,
            trace=trace,
            progress=self.progress,
            budget=self.budget,
            memory_findings=list(memories or []),
        )
        self.ledger: Ledger = self.services.ledger
        # Offered to the root's prompt as [ESTABLISHED earlier]; the findings are in self.services.
        self.memory_lines = tuple(memory_lines or ())
        self.node_synthesis = NodeSynthesis(self.services)
        self.cluster: DaskExecutor | None = None
        if settings.executor != LOCAL:
            # Connected before the first step: a cluster nobody answers at is the run's one line
            # (exit 4), not an error each fan-out would hand the model.
            self.cluster = DaskExecutor(settings.executor, child_runner)
            self.cluster.connect()
        self.children = Children(self.services, self, self.node_synthesis, self.cluster)
        self.subcalls = Subcalls(self.services, self.children, subcall_cache, self.cluster)
        self._lock = threading.Lock()
        # Held while the profile takes its line index or its table (reentrant: the table's wait
        # takes the index first).
        self._table_lock = threading.RLock()
        self._root_scope: NodeScope | None = None  # settled in place once the line index is made
        self._input_changed: InputError | None = None  # found by a table built as the run went
        self._protocols: dict[int, str] = {}
        self.sandbox_report: dict[str, Any] = {}
        self.cell_seconds = cell_seconds_for(settings, profile.size)
        self.steps_total = 0
        self.largest_prompt = 0
        self.restarts = 0

    # -- what wiring reads ---------------------------------------------------------
    @property
    def nodes_started(self) -> int:
        return self.services.nodes_started

    @property
    def cache_hits(self) -> int:
        return self.subcalls.cache_hits

    @property
    def cache_saved_tokens(self) -> int:
        return self.subcalls.cache_saved_tokens

    # -- the NodeHost: what a node may ask of its run (rlm.run.host) ----------------
    @property
    def table(self) -> dict[str, Any] | None:
        return self.profile.table

    # -- a line index still being made as the run started (rlm.input.glance) --------------
    def index_wait(self) -> None:
        """Wait for the input's line index still being made: a worker's start, a table, a
        child. The profile then holds the line count, and the root's scope its worker's index;
        a file appended to as it was indexed is said here. Raises InputError (exit 3) when
        the file was rewritten while it was indexed."""
        with self._table_lock:
            job = self.profile.index_job
            if job is None:
                return
            self.profile = self.profile.with_index()
            self.services.profile = self.profile
            self.trace.update(line_index={"background": True, "seconds": round(job.result().seconds, 3)})
            if self.profile.snapshot:
                note = self.profile.appended_note()
                self.trace.warn(note)
                self.progress(RunWarning(note))
            scope = self._root_scope
            if scope is not None:
                scope.spec = self.index_settled(scope.spec)
                scope.n_lines = self.profile.lines

    def index_settled(self, spec: WorkerSpec) -> WorkerSpec:
        """`spec` over the input's line index, waiting for one still being made (what the
        worker maps: the input, or the snapshot of a file that grew as it was indexed)."""
        if not spec.index_pending:
            return spec
        self.index_wait()
        return replace(
            spec, path=self.profile.work_path, index_path=self.profile.index_path, index_pending=False
        )

    # -- a table still being built as the run started (rlm.input.tablejob) -----------------
    def table_wait(self) -> tuple[str | None, str | None]:
        """(path, error) of the input's table, waiting for one still being built: a worker's
        first sql(), a child about to start. Its outcome is taken once: a failed build is said
        on stderr and in the trace, as a table that could not be built before the run."""
        with self._table_lock:
            self.index_wait()
            job = self.profile.table_job
            if job is not None:
                try:
                    self.profile = self.profile.with_table()
                except InputError as exc:  # the file changed: the root's turn ends the run (table_news)
                    self._input_changed = exc
                    self.profile = replace(self.profile, table_job=None, table_error=exc.message)
                self.services.profile = self.profile
                took = (job.finished or time.monotonic()) - job.started
                self.trace.update(table_build={"background": True, "seconds": round(took, 3)})
                if self.profile.table_error and self._input_changed is None:
                    note = (
                        f"no table for {self.profile.display_name}: {self.profile.table_error}; "
                        "sql() is unavailable in this run"
                    )
                    self.trace.warn(note)
                    self.progress(RunWarning(note))
        return self.profile.table_path, self.profile.table_error

    def table_for_worker(self, whole: bool) -> tuple[str | None, str | None, bool]:
        """(path, error, early) for a worker's sql(): the whole table (table_wait), or with
        `whole` False the table without its format's later columns if it is stored first
        (rlm.input.tables.build_early): queries on its other columns need not wait."""
        if not whole:
            if self.profile.index_job is not None:  # else no lock: a child may hold it, waiting for the whole
                self.index_wait()
            job = self.profile.table_job
            if job is not None and (early := job.early()) is not None:
                return early, None, True
        path, error = self.table_wait()
        return path, error, False

    def settled_spec(self, spec: WorkerSpec) -> WorkerSpec:
        """`spec` with the input's table once built (waiting for it): a child's worker opens it
        as it starts, as every worker of a run whose table was ready did."""
        spec = self.index_settled(spec)
        if not spec.table_pending:
            return spec
        path, error = self.table_wait()
        return replace(spec, table_path=path, table_error=error, table_pending=False)

    def table_news(self) -> str | None:
        """What the next observation tells of a table that was being built as the run started,
        once it is built (its columns and common values, or why there is none); None while it
        is still building. Raises InputError when the file changed as the table was built."""
        job = self.profile.table_job
        if job is not None and not job.done():
            return None
        self.table_wait()  # built: nothing to wait for
        if self._input_changed is not None:
            raise self._input_changed
        if self.profile.table is None:
            return prompts.table_not_built(self.profile.table_error or "no table was built")
        from rlm.input.summary import summary_or_warn  # stats and DuckDB: only when a summary is made

        return prompts.table_ready(
            describe_table(self.profile.table), summary_or_warn(self.profile, self.trace.warn)
        )

    def model_for(self, depth: int) -> ModelClient:
        return self.services.model_for(depth)

    def protocol_for(self, model: ModelClient) -> str:
        key = id(model)
        if key not in self._protocols:
            chosen = self.settings.protocol
            if chosen == "auto":
                # The offline model acts in typed actions held by its server's grammar (it writes
                # poor free Python); a node without a table falls back to text (rlm.run.node).
                chosen = "typed" if model.small else "tools" if model.supports_tools() else "text"
            self._protocols[key] = chosen
        return self._protocols[key]

    def charge(self, node_id: str, reply: Reply) -> None:
        self.services.charge(node_id, reply)

    def findings_of(self, node_id: str) -> list[Finding]:
        return self.ledger.for_node(node_id)

    def all_findings(self) -> list[Finding]:
        return self.ledger.entries

    def memories(self) -> list[Finding]:
        return self.services.memory_findings

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
        return self.services.add_finding(text, kind, node_id, step, topic=topic, cap=cap, code=code)

    def llm_query(self, asker: Asker, args: dict[str, Any]) -> str:
        return self.subcalls.llm_query(asker, args)

    def partition_map(self, asker: Asker, args: dict[str, Any]) -> Partition:
        return self.subcalls.partition_map(asker, args)

    def launch_sandbox(self, spec: WorkerSpec, bridge: Bridge) -> Sandbox:
        sandbox = Sandbox(
            spec,
            bridge=bridge,
            table=self.table_for_worker if spec.table_pending else None,
            settle=self.index_settled if spec.index_pending else None,
        )
        sandbox.launch()
        return sandbox

    def sandbox_ready(self, sandbox: Sandbox) -> None:
        ready = sandbox.wait_ready()
        report = ready.get("sandbox") or {}
        if not self.sandbox_report:
            self.sandbox_report = report
            self.trace.update(sandbox={"startup_s": round(sandbox.startup_s, 4), **report})
            for layer, why in report.get("missing") or []:
                msg = f"sandbox layer unavailable: {layer} ({why})"
                self.trace.warn(msg)
                self.progress(RunWarning(msg))

    def note_steps_elsewhere(self, steps: int, largest_prompt: int) -> None:
        """Steps a child made on another machine, recorded with it (rlm.run.remote_child)."""
        with self._lock:
            self.steps_total += steps
            self.largest_prompt = max(self.largest_prompt, largest_prompt)

    def note_restart(self, node_id: str, why: str) -> None:
        self.restarts += 1
        self.progress(Restart(node=node_id, why=why))

    def report_internal(self, node_id: str, message: str) -> None:
        """An internal error of the sandbox: a warning in the trace and on stderr, not only an observation."""
        msg = f"internal error in the sandbox ({node_id}): {message}"
        self.trace.warn(msg)
        self.progress(RunWarning(msg))

    def record_bridge_call(self, record: BridgeCallRecord) -> None:
        self.trace.add_bridge_call(record)

    def record_step(self, done: StepDone) -> None:
        reply, action, outcome = done.reply, done.action, done.outcome
        with self._lock:
            self.steps_total += 1
            self.largest_prompt = max(self.largest_prompt, reply.prompt_tokens, done.est_tokens)
        entry: StepRecord = {
            "node": done.node_id,
            "index": done.step,
            "model_call": {
                # The messages sent, summarised: role, position and size; the content is in earlier steps.
                "messages": [{"role": m["role"], "tokens": count_message(m)} for m in done.messages],
                "dropped_turns": done.dropped_turns,
                "context": done.context,
                "prompt_tokens": reply.prompt_tokens,
                "prompt_tokens_est": done.est_tokens,
                "completion_tokens": reply.completion_tokens,
                "cost": reply.cost,
                "latency_s": round(reply.latency_s, 4),
                "reply": cast(ReplyRecord, reply.to_dict()),
            },
            "action": action.to_dict() if isinstance(action, Action) else None,
            "parse_error": action.message if isinstance(action, ParseError) else None,
            "observation": {
                "preview": preview(outcome.observation),
                "chars": len(outcome.observation),
                "ok": outcome.ok,
            },
            "duration_s": round(done.duration, 4),
        }
        if reply.deployment is not None:
            entry["model_call"]["deployment"] = reply.deployment
        if done.told is not None:
            entry["told"] = preview(done.told)
        self.trace.add_step(entry)
        self.progress(
            Step(
                node=done.node_id,
                depth=done.depth,
                step=done.step,
                action=action,
                outcome=outcome,
                usage=self.budget.usage.to_dict(),
            )
        )

    # -- the run ---------------------------------------------------------------------
    def _warn_unpriced(self) -> None:
        if self.settings.max_cost is None:
            return
        for model in {id(m): m for m in (self.root_model, self.sub_model)}.values():
            if not model.priced():
                msg = f"the price of {model.model} is unknown: --max-cost cannot limit its calls"
                self.trace.warn(msg)
                self.progress(RunWarning(msg))

    def run(self) -> RunResult:
        started = time.monotonic()
        self._warn_unpriced()
        if self.protocol_for(self.root_model) == "typed":
            self.table_wait()  # typed actions are written on the table's columns: they wait for it
        root_scope = NodeScope(
            spec=worker_spec_for(self.profile, self.settings),
            profile_block=self.profile.prompt_block(),
            first_line=1,
            n_lines=self.profile.lines,  # an estimate until the line index is made (index_wait)
            memories=self.memory_lines,
        )
        self._root_scope = root_scope
        root = Node(self, self.services.new_node_id(), 0, self.question, root_scope)
        self.children.register(root, None, None)
        provider_error: str | None = None
        try:
            result = root.run()
        except ProviderError as exc:
            provider_error = exc.message
            result = NodeResult(root.id, None, "provider", self.steps_total, exc.message, root.largest_prompt)
        except BudgetExceeded as exc:
            result = NodeResult(root.id, None, "budget", self.steps_total, exc.detail, root.largest_prompt)
        self.trace.update_node(
            root.id, status=result.stop, steps=result.steps, usage=self.services.usage_for(root.id).to_dict()
        )
        draft = result.draft
        if draft is None:
            drafts = [f for f in self.ledger.for_node(root.id) if f.kind == "final_draft"]
            draft = drafts[-1].text if drafts else None
        synthesis = self.node_synthesis.synthesize(
            root, NodeResult(root.id, draft, result.stop, result.steps, result.detail)
        )
        grounding = self._grounding(synthesis)  # of the value as the synthesis wrote it
        formed = as_asked(self.question, synthesis.answer)
        if formed is not None:
            self.trace.warn(formed.note)
            self.progress(RunWarning(formed.note))
            synthesis = replace(synthesis, answer=formed.answer)
        doubts = list(result.doubts) if synthesis.answer is not None else []
        doubts += [kind_doubt(note) for note in wrong_kinds(self.question, synthesis.answer)]
        findings = [f.said() for f in self.ledger.current if f.kind != "final_draft"]
        if synthesis.answer is not None and (
            counted := count_for_values(self.question, synthesis.answer, findings)
        ):
            doubts.append(kind_doubt(counted))
        if doubts:
            # An answer no finding holds keeps that reason first: it is the graver of the two.
            unheld = (
                [synthesis.confidence_reason]
                if grounding is not None and grounding.grounded is False and synthesis.confidence_reason
                else []
            )
            synthesis = replace(
                synthesis,
                confidence="low",
                confidence_reason="; ".join([*unheld, doubt_sentence(doubts)]),
            )
        self.trace.update(
            synthesis={
                "source": synthesis.source,
                "error": synthesis.error,
                "reply": synthesis.reply.to_dict() if synthesis.reply else None,
                "prompt_tokens": synthesis.reply.prompt_tokens if synthesis.reply else None,
                "prompt_tokens_est": synthesis.prompt_tokens_est,
                "answer": synthesis.answer,
                "explanation": synthesis.explanation,
                "citations": synthesis.citations,
                "unknown_citations": synthesis.unknown_citations,
                "payload": synthesis.payload,
                "confidence": synthesis.confidence,
                "confidence_reason": synthesis.confidence_reason,
                "first_attempt": synthesis.first_attempt,
                "stated_confidence": synthesis.stated_confidence,
                "doubts": doubts,
                **(grounding.to_dict() if grounding else {"grounded": None, "supporting": [], "missing": []}),
            }
        )
        status, code, message = self._classify(result, synthesis, provider_error)
        out = RunResult(
            answer=synthesis.answer if code != ExitCode.NO_ANSWER else None,
            explanation=synthesis.explanation,
            citations=synthesis.citations,
            confidence=synthesis.confidence,
            grounded=grounding.grounded if grounding and code != ExitCode.NO_ANSWER else None,
            supporting=grounding.supporting if grounding and code != ExitCode.NO_ANSWER else [],
            doubts=doubts if code != ExitCode.NO_ANSWER else [],
            status=status,
            exit_code=int(code),
            message=message,
            findings=[*self.services.memory_findings, *self.ledger.entries],
            usage=self.budget.usage.to_dict(),
            elapsed_s=time.monotonic() - started,
            steps=self.steps_total,
            trace_path=str(self.trace.path) if self.trace.path else None,
            largest_prompt=self.largest_prompt,
            stop=result.stop,
            sandbox_missing=list(self.sandbox_report.get("missing") or []),
        )
        return out

    def _grounding(self, synthesis: Synthesis) -> Grounding | None:
        """The answer's grounding: as the synthesis measured it in what its prompt showed, or, for an
        answer that is the investigation's own draft (the synthesis failed or was refused), in
        every finding of the run; None without an answer."""
        if synthesis.answer is None:
            return None
        if synthesis.grounding is not None:
            return synthesis.grounding
        evidence = {
            f.id: f.said()
            for f in [*self.services.memory_findings, *self.ledger.current]
            if f.kind != "final_draft"  # the draft is the claim, not its evidence
        }
        return ground(synthesis.answer, evidence, self.question)

    def _classify(
        self, result: NodeResult, synthesis: Synthesis, provider_error: str | None
    ) -> tuple[RunStatus, int, str]:
        if synthesis.answer is None:
            # Nothing goes to stdout (DESIGN rules 6 and 10): what was established, if anything,
            # is told on stderr with the reason, and is in --json's findings.
            known = _established(synthesis)
            if provider_error:
                return (
                    "provider_error",
                    ExitCode.PROVIDER,
                    provider_error + (f"; no answer was written{known}" if known else ""),
                )
            if result.stop == "budget":
                if known:
                    return "budget", ExitCode.BUDGET, f"{result.detail}; no answer was written{known}"
                return "budget", ExitCode.BUDGET, f"{result.detail}; nothing was established before it"
            why = synthesis.error if known and synthesis.error else result.detail or result.stop
            return "no_answer", ExitCode.NO_ANSWER, f"no answer could be established ({why}){known}"
        if provider_error:
            return "provider_error", ExitCode.PROVIDER, f"{provider_error}; a partial answer was printed"
        if result.stop == "budget":
            return (
                "budget",
                ExitCode.BUDGET,
                f"{result.detail}; the answer is from what was established before",
            )
        if synthesis.source != "synthesis":
            note = f" ({synthesis.error})" if synthesis.error else ""
            return "partial", ExitCode.OK, f"synthesis failed{note}; the answer is the investigation's own"
        if result.stop == "final":
            return "final", ExitCode.OK, "answered"
        return (
            "forced",
            ExitCode.OK,
            f"answered from the findings after the loop stopped: {result.detail or result.stop}",
        )

    def close(self) -> None:
        self.subcalls.close()
        self.children.close()
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.close()


def _established(synthesis: Synthesis) -> str:
    """What the investigation established, for the message of a run with no answer ("" if nothing):
    indented under the message's first line, so no line of it passes for one of rlm's own."""
    if not synthesis.established:
        return ""
    lines = "\n".join(f"  {line}" for line in synthesis.established.splitlines())
    return f"; established so far (not an answer):\n{lines}"
