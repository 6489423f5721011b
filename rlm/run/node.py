"""One RLM node: the turn loop over one context (the file, or a slice of it).

Each turn: build a bounded prompt (system, task, [ESTABLISHED] digest when
old turns were dropped, recent turns), ask the model for one action, run it,
append a capped observation. The loop ends at `final`, at the step cap, at a
budget stop or when the provider fails; the node never writes the answer
itself, synthesis does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlm.model.budget import BudgetExceeded
from rlm.model.client import Reply
from rlm.model.tokens import count_message, count_messages
from rlm.run import prompts
from rlm.run.actions import Action, ParseError, parse_text, parse_tool_call, tool_schemas
from rlm.run.runner import ActionRunner, Outcome
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
    established: str | None = None  # [ESTABLISHED earlier]: memories of earlier runs (the root only)


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
        self.system = {
            "role": "system",
            "content": prompts.system_prompt(
                self.protocol,
                self.cap,
                engine.cell_seconds,
                s.memory_headroom_mb,
                has_table=scope.spec.table_path is not None,
            ),
        }
        self.task = {
            "role": "user",
            "content": prompts.task_prompt(
                question, scope.profile_block, scope.description, scope.established
            ),
        }
        self.turns: list[Turn] = []
        self.dropped = 0
        self.runner = ActionRunner(node_id, engine, self.cap, time_left=engine.budget.time_left)
        self.largest_prompt = 0
        fixed = count_messages([self.system, self.task]) + (
            self.model.estimate_prompt_tokens([], self.tools) if self.tools else 0
        )
        self.window = window
        self.fixed_tokens = fixed
        self.token_ratio = 1.0  # provider's prompt tokens / our estimate, learnt from each reply
        self.repeats = 0  # refused repeats in a row
        self.empties = 0  # empty replies in a row
        self.history_budget = max(600, min(s.history_tokens, window - self.sizing.reply_tokens - fixed - 256))

    # -- prompt ---------------------------------------------------------------
    def _over_budget(self) -> bool:
        history = sum(t.tokens for t in self.turns)
        if history > self.history_budget:
            return True
        # tiktoken undercounts some models' tokenizers (Qwen by ~1.5x on log lines): the
        # provider's own counts correct the estimate, so a small window does not overflow.
        needed = (self.fixed_tokens + history) * self.token_ratio + self.sizing.reply_tokens
        return needed > self.window - 64

    def _messages(self) -> list[dict[str, Any]]:
        while len(self.turns) > 1 and self._over_budget():
            self.turns.pop(0)
            self.dropped += 1
        messages = [self.system, self.task]
        if self.dropped:
            digest = self.engine.ledger.digest(max_chars=2000, node=self.id)
            messages.append({"role": "user", "content": prompts.established_block(digest, self.dropped)})
        for turn in self.turns:
            messages.extend(turn.messages)
        return messages

    def last_observations(self, count: int) -> list[str]:
        """What the model saw last (the end of the conversation), for the synthesis."""
        return [t.messages[-1]["content"] for t in self.turns[-count:] if t.messages]

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
                action = self._parse(reply)
                stopped: BudgetExceeded | None = None
                try:
                    if isinstance(action, Action):
                        e.progress("phase", {"what": f"running {action.name} ({self.id}, step {step})"})
                    outcome = self._act(action, step)
                except BudgetExceeded as exc:  # a sub-call hit a limit: this step is the last
                    stopped = exc
                    outcome = Outcome(f"stopped: {exc.detail}", ok=False)
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
                if self.repeats >= 2:
                    # Told twice to use the result it has; more turns only burn tokens.
                    return self._result(
                        None, "stuck", step, "the model kept repeating an action it had already run"
                    )
            return self._result(None, "max_steps", max_steps, f"the step limit of {max_steps} was reached")
        finally:
            if self.runner.sandbox is not None:
                self.runner.sandbox.close()

    def _result(self, draft: str | None, stop: StopReason, steps: int, detail: str = "") -> NodeResult:
        return NodeResult(self.id, draft, stop, steps, detail, self.largest_prompt)

    def _parse(self, reply: Reply) -> Action | ParseError:
        if reply.tool_calls:
            call = reply.tool_calls[0]
            return parse_tool_call(call.name, call.arguments, call.id)
        return parse_text(reply.content)

    def _remember(
        self, reply: Reply, action: Action | ParseError, observation: str, step: int, max_steps: int
    ) -> None:
        """Append the turn as the model will see it next time."""
        left = max_steps - step
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
                content = content[: action.source_end]
            if reply.tool_calls:
                content = content or f"{reply.tool_calls[0].name}({reply.tool_calls[0].arguments})"
            assistant = {"role": "assistant", "content": content or "(empty reply)"}
            obs = {"role": "user", "content": observation}
        messages = [assistant, obs]
        self.turns.append(Turn(messages, sum(count_message(m) for m in messages), step))

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
