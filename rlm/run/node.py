"""One RLM node: the turn loop over one context (the file, or a slice of it).

Each turn: build a bounded prompt, routed by the node's call spec
(rlm.run.routing: system, task with the memories offered, [ESTABLISHED]
findings of the turns dropped for room, recent turns verbatim), ask the model
for one action, run it, append a capped observation. The loop ends at `final`, at the step cap, at a
budget stop or when the provider fails; the node never writes the answer
itself, synthesis does.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rlm.errors import RlmError
from rlm.model.budget import BudgetExceeded
from rlm.model.client import Reply
from rlm.model.tokens import count_message, count_messages, count_text
from rlm.run import prompts
from rlm.run.actions import Action, ParseError, parse_tool_call, text_actions, tool_schemas
from rlm.run.context import Item, item_tokens
from rlm.run.framing import frame
from rlm.run.ledger import Finding
from rlm.run.queryhint import hint_for
from rlm.run.routing import SPECS, CallKind, Payload, Router, weight_of
from rlm.run.runner import REPEATS_STOP, ActionRunner, Outcome
from rlm.run.settings import sizing_for
from rlm.sandbox.client import WorkerLost, WorkerSpec
from rlm.trace.schema import StopReason

if TYPE_CHECKING:
    from rlm.run.engine import Engine

EMPTY_REPLIES_STOP = 3  # empty replies in a row that end a node's loop


@dataclass
class Turn:
    messages: list[dict[str, Any]]
    tokens: int
    step: int = 0
    observation: str = ""  # what the action showed, unframed (the synthesis frames it again)


@dataclass
class NodeResult:
    node_id: str
    draft: str | None
    stop: StopReason
    steps: int
    detail: str = ""
    largest_prompt: int = 0


@dataclass
class NodeScope:
    """What part of the input a node works on; line numbers are relative to it."""

    spec: WorkerSpec
    profile_block: str
    description: str | None = None  # e.g. "You work on lines 1001-2000 of access.log."
    first_line: int = 1  # absolute number of the scope's line 1
    n_lines: int = 0
    memories: tuple[tuple[str, str], ...] = ()  # (ref, line) offered from earlier runs (the root only)


class Node:
    def __init__(self, engine: Engine, node_id: str, depth: int, question: str, scope: NodeScope) -> None:
        self.engine = engine
        self.id = node_id
        self.depth = depth
        self.question = question
        self.scope = scope
        s = engine.settings
        self.model = engine.root_model if depth == 0 else engine.sub_model
        self.protocol = engine.protocol_for(self.model)
        self.tools = tool_schemas() if self.protocol == "tools" else None
        window = self.model.context_window()
        self.sizing = sizing_for(s, window)
        self.cap = self.sizing.observation_chars
        table = engine.profile.table if scope.spec.table_path else None
        # The text protocol shows it as the reply format's example; a tools model gets it in the task.
        hint = hint_for(question, table)
        self.hint = hint
        self.system = {
            "role": "system",
            "content": prompts.system_prompt(
                self.protocol,
                self.cap,
                engine.cell_seconds,
                s.memory_headroom_mb,
                has_table=scope.spec.table_path is not None,
                hint=hint,
            ),
        }
        task_hint = hint if self.protocol == "tools" else None
        profile_block = prompts.without_examples(scope.profile_block) if hint else scope.profile_block
        tools_tokens = self.model.estimate_prompt_tokens([], self.tools) if self.tools else 0
        bare = prompts.task_prompt(question, profile_block, scope.description, hint=task_hint)
        kind: CallKind = "root_turn" if depth == 0 else "child_turn"
        room = (
            window
            - self.sizing.reply_tokens
            - count_messages([self.system])
            - count_text(bare)
            - tools_tokens
        )
        routed = SPECS[kind].budget(room - 256, s.history_tokens)
        self.router = Router(kind, question, routed)
        self.memories = self._route_memories(scope.memories)
        established = (
            prompts.established_earlier(self.memories.assembly.text)
            if self.memories.assembly.included
            else None
        )
        self.task = {
            "role": "user",
            "content": prompts.task_prompt(
                question, profile_block, scope.description, established, hint=task_hint
            ),
        }
        self.turns: list[Turn] = []
        self.dropped_turns: list[Turn] = []  # kept for recall("T3")
        self.runner = ActionRunner(
            node_id,
            engine,
            self.cap,
            time_left=engine.budget.time_left,
            table_values=(table or {}).get("values"),
            answer_expr=hint.answer if hint else None,
        )
        self.largest_prompt = 0
        self.window = window
        self.fixed_tokens = count_messages([self.system, self.task]) + tools_tokens
        self.token_ratio = 1.0  # provider's prompt tokens / our estimate, learnt from each reply
        self.repeats = 0  # refused repeats in a row
        self.empties = 0  # empty replies in a row
        # What is routed each turn (findings of dropped turns, recent turns) shares what the
        # memories left of the routed budget.
        self.history_budget = max(600, routed - self.memories.assembly.tokens.get("memories", 0))
        self.payload: Payload | None = None  # the last turn's assembled context
        self._finding_tokens: dict[str, int] = {}

    @property
    def dropped(self) -> int:
        return len(self.dropped_turns)

    # -- prompt ---------------------------------------------------------------
    def _route_memories(self, memories: tuple[tuple[str, str], ...]) -> Payload:
        """The [ESTABLISHED earlier] block: memories within their share of the routed budget,
        assembled once (the prompt's start stays the same from turn to turn)."""
        items = self.router.items([(ref, line, -i / 100) for i, (ref, line) in enumerate(memories)])
        need = sum(item_tokens(i) for i in items)
        hungry = {name: self.router.budget for name in self.router.shares}
        allotted = self.router.allotments({**hungry, "memories": need}).get("memories", 0)
        return self.router.assemble({"memories": ("", items)}, budget=allotted)

    def _older_findings(self) -> list[Finding]:
        """This node's findings made in the turns no longer in view (or by a child, step unknown)."""
        if not self.dropped_turns:
            return []
        visible_from = self.turns[0].step if self.turns else self.dropped_turns[-1].step + 1
        found = []
        for f in self.engine.ledger.for_node(self.id):
            step = _step_of(f.evidence, self.id)
            if f.kind != "final_draft" and (step is None or step < visible_from):
                found.append(f)
        return found

    def _tokens_of(self, f: Finding) -> int:
        if f.id not in self._finding_tokens:
            self._finding_tokens[f.id] = item_tokens(Item(f.id, f.text, source=f"{f.kind}, {f.evidence}"))
        return self._finding_tokens[f.id]

    def _messages(self) -> list[dict[str, Any]]:
        # Drop the oldest turns until the recent turns fit their allotment; the findings of the
        # dropped turns then claim their share, which may drop one more.
        router, budget = self.router, self.history_budget
        while True:
            older = self._older_findings()
            needs = {
                "findings": sum(self._tokens_of(f) for f in older),
                "turns": sum(t.tokens for t in self.turns),
            }
            allotted = router.allotments(needs, budget)
            if len(self.turns) > 1 and (needs["turns"] > allotted["turns"] or self._over_window()):
                self.dropped_turns.append(self.turns.pop(0))
                continue
            break
        # Settled kinds first, then the newer; the question's focus adds to both.
        pairs = [(f.id, f.text, weight_of(f) + k / 1000) for k, f in enumerate(older)]
        source = {f.id: f"{f.kind}, {f.evidence}" for f in older}
        items = [replace(i, source=source[i.id]) for i in router.items(pairs)]
        payload = router.assemble({"findings": ("", items)}, budget=allotted["findings"])
        assembly = payload.assembly
        assembly.included = [
            *self.memories.assembly.included,
            *assembly.included,
            *(f"T{t.step}" for t in self.turns),
        ]
        assembly.excluded = [
            *self.memories.assembly.excluded,
            *assembly.excluded,
            *({"id": f"T{t.step}", "why": "over the turns budget"} for t in self.dropped_turns),
        ]
        assembly.tokens = {**self.memories.assembly.tokens, **assembly.tokens, "turns": needs["turns"]}
        assembly.allotted = {**self.memories.assembly.allotted, **allotted}
        payload.budget = self.router.budget
        payload.whole = {"system": count_messages([self.system]), "task": count_messages([self.task])}
        self.payload = payload
        messages = [self.system, self.task]
        if self.dropped_turns:
            left_out = [e["id"] for e in assembly.excluded if not e["id"].startswith("T")]
            block = assembly.text if assembly.included and older else ""
            messages.append(
                {
                    "role": "user",
                    "content": prompts.established_block(
                        block, [t.step for t in self.dropped_turns], left_out
                    ),
                }
            )
        for turn in self.turns:
            messages.extend(turn.messages)
        return messages

    def _over_window(self) -> bool:
        # tiktoken undercounts some models' tokenizers (Qwen by ~1.5x on log lines): the
        # provider's own counts correct the estimate, so a small window does not overflow.
        history = sum(t.tokens for t in self.turns)
        needed = (self.fixed_tokens + history) * self.token_ratio + self.sizing.reply_tokens
        return needed > self.window - 64

    def recall(self, ref: str) -> str:
        """recall(ref) from code: a finding, memory or dropped turn this node may see, granted
        from its allowance (rlm.run.routing)."""
        ref = str(ref).strip().upper()
        in_view = self.payload is not None and ref in self.payload.assembly.included
        text: str | None = None
        if ref.startswith("F"):
            ledger = self.engine.ledger
            pool = ledger.for_node(self.id) if self.router.spec.isolated else ledger.entries
            found = next((f for f in pool if f.id == ref), None)
            text = (found.full or found.text) if found else None
        elif ref.startswith("M") and not self.router.spec.isolated:
            found = next((f for f in self.engine.memory_findings if f.id == ref), None)
            text = found.text if found else None
        elif ref.startswith("T") and ref[1:].isdigit():
            turn = next((t for t in [*self.dropped_turns, *self.turns] if t.step == int(ref[1:])), None)
            text = _turn_text(turn) if turn else None
        try:
            return self.router.grant(ref, text, in_view=in_view)
        except LookupError:
            kinds = "a finding (F3), a dropped turn (T4)" + (
                "" if self.router.spec.isolated else " or a memory (M2)"
            )
            raise RlmError(
                f"recall: there is no {ref!r} this investigation can see; recall takes {kinds}"
            ) from None
        except OverflowError as exc:
            raise RlmError(f"recall: {exc}") from None

    def last_observations(self, count: int) -> list[str]:
        """What the model saw last (the end of the conversation), for the synthesis."""
        return [t.observation for t in self.turns[-count:] if t.messages]

    # -- the loop -------------------------------------------------------------
    def run(self) -> NodeResult:
        e = self.engine
        max_steps = e.settings.max_steps
        try:
            try:
                self.runner.sandbox = e.start_sandbox(self)
            except (WorkerLost, OSError) as exc:  # for a child, an observation of its parent
                return self._result(None, "sandbox", 0, f"the sandbox could not start: {exc}")
            for step in range(1, max_steps + 1):
                messages = self._messages()
                est = self.model.estimate_prompt_tokens(messages, self.tools)
                self.largest_prompt = max(self.largest_prompt, est)
                try:
                    e.budget.admit(est)
                except BudgetExceeded as exc:
                    return self._result(None, "budget", step - 1, exc.detail)
                started = time.monotonic()
                try:
                    e.progress("phase", {"what": f"waiting for the model ({self.id}, step {step})"})
                    reply = self.model.complete(
                        messages, tools=self.tools, max_tokens=self.sizing.reply_tokens
                    )
                except BudgetExceeded as exc:  # the time ran out (or the cost) while it was asked
                    return self._result(None, "budget", step - 1, exc.detail)
                e.budget.charge(reply.prompt_tokens, reply.completion_tokens, reply.cost)
                e.usage_for(self.id).add(reply.prompt_tokens, reply.completion_tokens, reply.cost)
                if reply.prompt_tokens and est and self.model.measures_usage:
                    self.token_ratio = min(3.0, max(1.0, reply.prompt_tokens / est))
                action, skipped = self._parse(reply)
                stopped: BudgetExceeded | None = None
                try:
                    if isinstance(action, Action):
                        e.progress("phase", {"what": f"running {action.name} ({self.id}, step {step})"})
                    outcome = self._act(action, step)
                except BudgetExceeded as exc:  # a sub-call hit a limit: this step is the last
                    stopped = exc
                    outcome = Outcome(f"stopped: {exc.detail}", ok=False)
                if skipped:
                    outcome.observation = prompts.ran_a_later_block(skipped) + outcome.observation
                self._remember(reply, action, outcome.observation, step, max_steps)
                e.record_step(self, step, messages, est, reply, action, outcome, time.monotonic() - started)
                if stopped is not None:
                    return self._result(None, "budget", step, stopped.detail)
                if outcome.final is not None:
                    return self._result(outcome.final, "final", step)
                if outcome.fatal:
                    return self._result(None, "sandbox", step, outcome.fatal)
                self.empties = 0 if (reply.content.strip() or reply.tool_calls) else self.empties + 1
                if self.empties >= EMPTY_REPLIES_STOP:
                    return self._result(
                        None, "stuck", step, f"the model gave an empty reply {self.empties} times in a row"
                    )
                self.repeats = self.repeats + 1 if outcome.repeated else 0
                if outcome.repeated and self.repeats >= REPEATS_STOP[outcome.repeated]:
                    return self._result(
                        None, "stuck", step, "the model kept repeating an action it had already run"
                    )
            return self._result(None, "max_steps", max_steps, f"the step limit of {max_steps} was reached")
        finally:
            if self.runner.sandbox is not None:
                self.runner.sandbox.close()

    def _result(self, draft: str | None, stop: StopReason, steps: int, detail: str = "") -> NodeResult:
        return NodeResult(self.id, draft, stop, steps, detail, self.largest_prompt)

    def _parse(self, reply: Reply) -> tuple[Action | ParseError, int]:
        """The action to run, and how many blocks written before it were passed over.

        A reply of several blocks is a plan written before any of its results were seen; when
        its first action repeats one already run, the first later block that does not is run
        instead (never a later final: it was written without the results before it)."""
        if reply.tool_calls:
            call = reply.tool_calls[0]
            return parse_tool_call(call.name, call.arguments, call.id), 0
        actions = list(text_actions(reply.content))
        visible_from = self.turns[0].step if self.turns else 0
        for n, action in enumerate(actions):
            if not isinstance(action, Action) or (n > 0 and _answers(action)):
                break
            if action.name == "final" or not self.runner.would_refuse(action.name, action.args, visible_from):
                return action, n
        return actions[0], 0

    def _remember(
        self, reply: Reply, action: Action | ParseError, observation: str, step: int, max_steps: int
    ) -> None:
        """Append the turn as the model will see it next time."""
        left = max_steps - step
        shown = observation
        # What the action showed is data (the file's lines, a cell's output): framed, so no line
        # of it can pass for rlm or the user; rlm's own hint stays outside the frame.
        observation = frame(observation)
        if 0 < left <= 2:
            observation += prompts.steps_left_hint(left)
        if reply.tool_calls and self.protocol == "tools":
            call = reply.tool_calls[0]  # one action per turn: later calls are dropped, unanswered
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": reply.content or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            }
            obs: dict[str, Any] = {"role": "tool", "tool_call_id": call.id, "content": observation}
        else:
            # Text after the first action is the model's own invention: keep only up to the action.
            content = reply.content or ""
            if isinstance(action, Action) and action.source_end:
                content = content[action.source_start : action.source_end]
            if reply.tool_calls:
                content = content or f"{reply.tool_calls[0].name}({reply.tool_calls[0].arguments})"
            assistant = {"role": "assistant", "content": content or "(empty reply)"}
            obs = {"role": "user", "content": observation}
        messages = [assistant, obs]
        self.turns.append(Turn(messages, sum(count_message(m) for m in messages), step, shown))

    # -- actions --------------------------------------------------------------
    def _act(self, action: Action | ParseError, step: int) -> Outcome:
        if isinstance(action, ParseError):
            return Outcome(f"Your reply could not be used: {action.message}.", ok=False)
        name, args = action.name, action.args
        if name == "final":
            if not self.runner.observed:
                return Outcome(prompts.FIRST_FINAL_REFUSED, ok=False)
            self.engine.add_finding(args["answer"], "final_draft", self.id, step, topic="final_draft")
            return Outcome("final answer recorded", final=args["answer"])
        visible_from = self.turns[0].step if self.turns else 0
        return self.runner.act(name, args, step, visible_from=visible_from, subcall=self._subcall)

    def _subcall(self, name: str, args: dict[str, Any], step: int) -> str:
        if name == "llm_query":
            return self.engine.llm_query(self, args, step)
        return str(self.engine.partition_map(self, args, step))


def _answers(action: Action) -> bool:
    """Whether the action gives an answer: final, or a cell that calls final()."""
    code = str(action.args.get("code", "")) if action.name == "execute" else ""
    return action.name == "final" or re.search(r"\bfinal\s*\(", code) is not None


def _step_of(evidence: str, node_id: str) -> int | None:
    """The step of this node a finding's evidence names ("n0.s3" -> 3), None for another source."""
    prefix = f"{node_id}.s"
    return (
        int(evidence[len(prefix) :])
        if evidence.startswith(prefix) and evidence[len(prefix) :].isdigit()
        else None
    )


def _turn_text(turn: Turn) -> str:
    """A turn as recall() shows it: the action the model took, then what it saw."""
    parts = []
    for m in turn.messages:
        calls = m.get("tool_calls") or []
        said = str(m.get("content") or "")
        if m["role"] == "assistant":
            said = said or "; ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls)
            parts.append(f"step {turn.step}, you: {said}")
        else:
            parts.append(f"result: {said}")
    return "\n".join(parts)
