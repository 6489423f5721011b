"""One RLM node: the turn loop over one context (the file, or a slice of it).

Each turn: build a bounded prompt (system, task, [ESTABLISHED] digest when
old turns were dropped, recent turns), ask the model for one action, run it,
append a capped observation. The loop ends at `final`, at the step cap, at a
budget stop or when the provider fails; the node never writes the answer
itself, synthesis does.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlm.model.budget import BudgetExceeded
from rlm.model.client import Reply
from rlm.model.tokens import count_message, count_messages
from rlm.run import prompts
from rlm.run.actions import Action, ParseError, parse_text, parse_tool_call, tool_schemas
from rlm.run.settings import sizing_for
from rlm.sandbox.client import Sandbox, WorkerLost, WorkerSpec
from rlm.text.textcap import cap_middle, cap_words
from rlm.trace.writer import preview

if TYPE_CHECKING:
    from rlm.run.engine import Engine

# A computed result's finding shows about 80 tokens of its output (the cut marked, the whole
# kept for the trace); a grep's shows its count and first matching lines.
RESULT_FINDING_CHARS = 320
GREP_FINDING_LINES = 3
GREP_FINDING_LINE_CHARS = 160
EMPTY_REPLIES_STOP = 3  # empty replies in a row that end a node's loop


@dataclass
class Turn:
    messages: list[dict[str, Any]]
    tokens: int
    step: int = 0


@dataclass(frozen=True)
class Done:
    """An action already run, to tell a true repeat from the same call against changed state."""

    step: int
    shown: str  # the first line of what it showed
    ok: bool
    state: int  # the worker state it left behind (Node.state after it ran)


@dataclass
class NodeResult:
    node_id: str
    draft: str | None
    stop: str  # final | max_steps | budget | provider | sandbox
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
    extra: dict[str, Any] = field(default_factory=dict)


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
                self.protocol, self.cap, engine.cell_seconds, s.memory_headroom_mb
            ),
        }
        self.task = {
            "role": "user",
            "content": prompts.task_prompt(question, scope.profile_block, scope.description),
        }
        self.turns: list[Turn] = []
        self.dropped = 0
        self.init_action_state(None)
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

    def init_action_state(self, sandbox: Sandbox | None) -> None:
        """What the action path (peek, grep, execute, restarts) keeps; `rlm replay --verify` runs
        recorded actions through a node set up by this alone."""
        self.sandbox = sandbox
        self.observed = False
        self.done: dict[str, Done] = {}
        # Bumped by anything that may change the worker's variables: a cell, a restart,
        # partition_map's result variable. The same code against a new state is not a repeat.
        self.state = 0

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
                self.sandbox = e.start_sandbox(self)
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
            if self.sandbox is not None:
                self.sandbox.close()

    def _result(self, draft: str | None, stop: str, steps: int, detail: str = "") -> NodeResult:
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
            assistant = {
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
            obs = {"role": "tool", "tool_call_id": call.id, "content": observation}
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
            if not self.observed:
                return Outcome(prompts.FIRST_FINAL_REFUSED, ok=False)
            self.engine.add_finding(args["answer"], "final_draft", self, step, topic="final_draft")
            return Outcome("final answer recorded", final=args["answer"])
        key = json.dumps([name, args], sort_keys=True)
        before = self.done.get(key)
        if before is not None and self._would_repeat(name, before):
            if before.ok:
                # Small models loop on one action; running it again would show them the same thing.
                return Outcome(prompts.repeated_action(before.step, before.shown), ok=False, repeated=True)
            # The same failing call, nothing changed since: say so, and do not end the run for it.
            return Outcome(prompts.repeated_failure(name, before.step, before.shown), ok=False)
        self.observed = True
        outcome = self._run_action(name, args, step)
        if name in ("execute", "partition_map"):
            self.state += 1
        first = next((ln for ln in outcome.observation.splitlines() if ln.strip()), "")
        self.done[key] = Done(step, cap_words(first, 120), outcome.ok, self.state)
        return outcome

    def _would_repeat(self, name: str, before: Done) -> bool:
        """True when running the action again would show what the model can still see."""
        visible_from = self.turns[0].step if self.turns else 0
        if before.step < visible_from:
            return False  # its result left the conversation: running it again is how to see it
        if name == "execute":
            return self.state == before.state  # a cell's result depends on the variables
        return True  # peek, grep and sub-calls depend on the file and the question only

    def _run_action(self, name: str, args: dict[str, Any], step: int) -> Outcome:
        if name in ("peek", "grep"):
            return self._worker_op(name, args, step)
        if name == "execute":
            return self._execute(args["code"], step)
        if name == "llm_query":
            return self._guarded_subcall(lambda: self.engine.llm_query(self, args, step), step)
        if name == "partition_map":
            return self._guarded_subcall(lambda: self.engine.partition_map(self, args, step), step)
        return Outcome(f"unknown action {name}", ok=False)

    def _guarded_subcall(self, call: Any, step: int) -> Outcome:
        from rlm.errors import RlmError

        try:
            text = call()
        except BudgetExceeded:
            raise
        except RlmError as exc:
            return Outcome(f"error: {exc.message}", ok=False)
        return Outcome(cap_middle(text, self.cap))

    def _worker_op(self, op: str, args: dict[str, Any], step: int) -> Outcome:
        reply = self._request(op, args, timeout=self._cell_seconds(grace=5))
        if isinstance(reply, Outcome):
            return reply
        if not reply.get("ok"):
            return Outcome(f"error: {reply.get('error')}", ok=False)
        output = reply.get("output", "")
        if op == "grep":
            total = reply.get("total", 0)
            what = f"grep /{args['pattern']}/{' (ignoring case)' if args['ignore_case'] else ''}"
            # The evidence with the count: the first matching lines, as numbered lines.
            shown = [cap_words(ln.strip(), GREP_FINDING_LINE_CHARS) for ln in output.splitlines()[1:]][
                :GREP_FINDING_LINES
            ]
            first = f"; first: {' / '.join(shown)}" if shown else ""
            self.engine.add_finding(
                f"{what} matches {total:,} line{'s' if total != 1 else ''}{first}",
                "grep",
                self,
                step,
                topic=what,
            )
        return Outcome(cap_middle(output, self.cap))

    def _execute(self, code: str, step: int) -> Outcome:
        seconds = self._cell_seconds()
        # The wall clock allows for the CPU timer and the kernel's kill that follows it.
        reply = self._request(
            "exec", {"code": code, "cpu_seconds": seconds}, timeout=self._cell_seconds(grace=4)
        )
        if isinstance(reply, Outcome):
            return reply
        for note in reply.get("notes") or []:
            self.engine.add_finding(str(note), "note", self, step)
        output = reply.get("output") or ""
        error = reply.get("error")
        parts = []
        if output:
            parts.append(cap_middle(output, self.cap))
        if error:
            parts.append(f"error: {error}")
            if error.startswith("SyntaxError") and _looks_like_prose(code):
                parts.append(prompts.PROSE_NOT_CODE)
        if not parts:
            parts.append(prompts.NO_OUTPUT)
        elif not error and output.strip():
            # Every computed result is a finding, capped for prompts (the cut marked, the whole kept).
            summary = _code_summary(code)
            self.engine.add_finding(
                f"`{summary}` gave: {output.strip()}",
                "result",
                self,
                step,
                topic=summary,
                cap=len(summary) + 9 + RESULT_FINDING_CHARS,
            )
        final = reply.get("final")
        if final:
            self.engine.add_finding(final, "final_draft", self, step, topic="final_draft")
        return Outcome("\n".join(parts), ok=not error, final=final or None)

    def _cell_seconds(self, grace: float = 0.0) -> float:
        """The per-cell limit (+ grace for the wall clock), cut to what is left of --max-time."""
        limit = self.engine.cell_seconds + grace
        budget = getattr(self.engine, "budget", None)  # replay --verify runs cells without one
        left = None if budget is None else budget.time_left()
        return limit if left is None else max(1.0, min(limit, left + min(grace, 1.0)))

    def _request(self, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any] | Outcome:
        assert self.sandbox is not None
        try:
            reply = self.sandbox.request(op, timeout=timeout, **args)
        except WorkerLost as exc:
            why = str(exc)
            try:
                self.sandbox.restart()
            except WorkerLost as again:
                return Outcome(
                    f"error: {why}; the sandbox could not be restarted", ok=False, fatal=str(again)
                )
            self.state += 1
            self.engine.note_restart(self, why)
            return Outcome(
                f"error: your code was stopped: {why}. The sandbox was restarted and all your variables "
                "are gone (context, context_lines and the helpers are back).",
                ok=False,
            )
        if reply.get("restarted"):
            why = str(reply["restarted"])
            self.state += 1
            self.engine.note_restart(self, why)
            reply["error"] = (
                f"{reply.get('error')}\n{why}; it was restarted and all your variables are gone "
                "(context, context_lines and the helpers are back). Keep less in memory."
            )
        # A fault of the sandbox's own is the user's business too, not only the model's.
        if reply.get("internal"):
            self.engine.report_internal(self, f"{op}: {reply.get('error')}")
        for module in reply.get("late_imports") or []:
            self.engine.report_internal(self, f"{op}: module {module!r} was imported after lock-down")
        return reply


def _looks_like_prose(code: str) -> bool:
    """A sentence where code should be: several words and none of Python's punctuation."""
    first = next((ln.strip() for ln in code.splitlines() if ln.strip()), "")
    words = first.split()
    return (
        len(words) >= 5
        and words[0][:1].isupper()
        and words[0] not in ("True", "False", "None")
        and "=" not in first
        and not re.match(r"^[\w.]+\(", first)
    )


def _code_summary(code: str) -> str:
    """The code behind a result, short enough for a finding: all of it if small, else first … last line."""
    lines = [ln.strip() for ln in code.strip().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    joined = "; ".join(lines)
    if len(joined) <= 160:
        return joined
    return f"{cap_words(lines[0], 70)}; …; {cap_words(lines[-1], 80)}"


@dataclass
class Outcome:
    observation: str
    ok: bool = True
    final: str | None = None
    fatal: str | None = None
    repeated: bool = False

    def preview(self) -> str:
        return preview(self.observation)
