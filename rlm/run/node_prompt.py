"""A node's prompt from turn to turn: its fixed start, the turn window, and what stands in for dropped turns.

Routed by the node's call spec (rlm.run.routing): the system prompt, the task
with the memories offered ([ESTABLISHED earlier]), an [ESTABLISHED] digest of
the findings made in turns dropped for room, then the recent turns verbatim.
recall() brings back, within an allowance, a finding, a memory or a dropped
turn the prompt left out. The node (rlm.run.node) asks for the messages of each
turn and hands back each turn it took.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rlm.errors import RlmError
from rlm.model.client import Reply
from rlm.model.tokens import count_message, count_messages, count_text
from rlm.run import prompts
from rlm.run.actions import Action, ParseError
from rlm.run.context import Item, item_tokens
from rlm.run.framing import frame
from rlm.run.host import FindingsView
from rlm.run.ledger import Finding
from rlm.run.routing import SPECS, CallKind, Payload, Router, weight_of
from rlm.run.scope import NodeScope
from rlm.run.settings import Settings, Sizing


@dataclass
class Turn:
    messages: list[dict[str, Any]]
    tokens: int
    step: int = 0
    observation: str = ""  # what the action showed, unframed (the synthesis frames it again)


@dataclass(frozen=True)
class PromptShape:
    """What fixes a node's prompt before its first turn: how it talks to its model, and how much fits."""

    protocol: str  # "tools", "text" or "typed"
    sizing: Sizing
    window: int  # the model's context window, in tokens
    tools_tokens: int  # what the tool schemas take of the window (0 for the text protocol)
    cell_seconds: float
    typed_actions: str = ""  # the typed protocol's actions, written on the table (rlm.run.typed)


class NodePrompt:
    """The messages of each turn of one node, bounded by its model's window and its routed budget."""

    def __init__(
        self,
        node_id: str,
        depth: int,
        question: str,
        scope: NodeScope,
        shape: PromptShape,
        settings: Settings,
        findings: FindingsView,
    ) -> None:
        self.node_id = node_id
        self.findings = findings
        self.sizing = shape.sizing
        self.window = shape.window
        self.system = {
            "role": "system",
            "content": prompts.system_prompt(
                shape.protocol,
                shape.sizing.observation_chars,
                shape.cell_seconds,
                settings.memory_headroom_mb,
                has_table=scope.spec.table_path is not None or scope.spec.table_pending,
                typed_actions=shape.typed_actions,
            ),
        }
        typed = shape.protocol == "typed"
        # A small model (the typed protocol's) reads the question again last, each turn.
        self.question = question
        self.restate = typed
        profile_block = prompts.without_examples(scope.profile_block) if typed else scope.profile_block
        bare = prompts.task_prompt(question, profile_block, scope.description, restate=typed)
        kind: CallKind = "root_turn" if depth == 0 else "child_turn"
        room = (
            shape.window
            - shape.sizing.reply_tokens
            - count_messages([self.system])
            - count_text(bare)
            - shape.tools_tokens
        )
        routed = SPECS[kind].budget(room - 256, settings.history_tokens)
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
                question, profile_block, scope.description, established, restate=typed
            ),
        }
        self.turns: list[Turn] = []
        self.dropped_turns: list[Turn] = []  # kept for recall("T3")
        self.fixed_tokens = count_messages([self.system, self.task]) + shape.tools_tokens
        if self.restate:
            self.fixed_tokens += count_text(prompts.question_again(question))
        self.token_ratio = 1.0  # provider's prompt tokens / our estimate, learnt from each reply
        # What is routed each turn (findings of dropped turns, recent turns) shares what the
        # memories left of the routed budget.
        self.history_budget = max(600, routed - self.memories.assembly.tokens.get("memories", 0))
        self.payload: Payload | None = None  # the last turn's assembled context
        self._finding_tokens: dict[str, int] = {}

    @property
    def dropped(self) -> int:
        return len(self.dropped_turns)

    def visible_from(self) -> int:
        """The first step whose turn is still in the conversation (0 before any)."""
        return self.turns[0].step if self.turns else 0

    def learn_ratio(self, prompt_tokens: int, estimate: int) -> None:
        """Correct our token estimate by the provider's own count of a prompt."""
        if prompt_tokens and estimate:
            self.token_ratio = min(3.0, max(1.0, prompt_tokens / estimate))

    def last_observations(self, count: int) -> list[str]:
        """What the model saw last (the end of the conversation), for the synthesis."""
        return [t.observation for t in self.turns[-count:] if t.messages]

    # -- the messages of a turn -------------------------------------------------------
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
        return [
            f
            for f in self.findings.findings_of(self.node_id)
            if f.kind != "final_draft" and (f.step is None or f.step < visible_from)
        ]

    def _tokens_of(self, f: Finding) -> int:
        if f.id not in self._finding_tokens:
            self._finding_tokens[f.id] = item_tokens(Item(f.id, f.text, source=f"{f.kind}, {f.evidence}"))
        return self._finding_tokens[f.id]

    def messages(self) -> list[dict[str, Any]]:
        """This turn's messages; drops the oldest turns that no longer fit."""
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
        if self.restate and self.turns:
            # After the newest result, not stored with it: the turns before stay as they were
            # sent, so a server's cache of the conversation's start still holds.
            last = messages[-1]
            messages[-1] = {**last, "content": str(last["content"]) + prompts.question_again(self.question)}
        return messages

    def _over_window(self) -> bool:
        # tiktoken undercounts some models' tokenizers (Qwen by ~1.5x on log lines): the
        # provider's own counts correct the estimate, so a small window does not overflow.
        history = sum(t.tokens for t in self.turns)
        needed = (self.fixed_tokens + history) * self.token_ratio + self.sizing.reply_tokens
        return needed > self.window - 64

    def remember(
        self,
        reply: Reply,
        action: Action | ParseError,
        observation: str,
        step: int,
        steps_left: int,
        tools: bool,
    ) -> None:
        """Append the turn as the model will see it next time (`tools`: as native tool calls)."""
        shown = observation
        # What the action showed is data (the file's lines, a cell's output): framed, so no line
        # of it can pass for rlm or the user; rlm's own hint stays outside the frame.
        observation = frame(observation)
        if 0 < steps_left <= 2:
            observation += prompts.steps_left_hint(steps_left)
        if reply.tool_calls and tools:
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

    # -- recall -------------------------------------------------------------------------
    def recall(self, ref: str) -> str:
        """recall(ref) from code: a finding, memory or dropped turn this node may see, granted
        from its allowance (rlm.run.routing)."""
        ref = str(ref).strip().upper()
        in_view = self.payload is not None and ref in self.payload.assembly.included
        text: str | None = None
        if ref.startswith("F"):
            isolated = self.router.spec.isolated
            pool = self.findings.findings_of(self.node_id) if isolated else self.findings.all_findings()
            found = next((f for f in pool if f.id == ref), None)
            text = (found.full or found.text) if found else None
        elif ref.startswith("M") and not self.router.spec.isolated:
            found = next((f for f in self.findings.memories() if f.id == ref), None)
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
