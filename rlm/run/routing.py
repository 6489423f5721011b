"""Context routing: what each kind of model call is given, and within what budget.

A model call is never handed "everything so far". Each call kind has a declared
spec (`SPECS`): the parts it always gets whole (the question, the profile of
its file or slice, an excerpt), the categories routed into the rest of its
budget with their shares, and whether it is isolated (it sees only its own
node's findings and turns, never its parent's or the memories of earlier runs).

    root_turn   question, file profile | memories, findings of dropped turns, recent turns
    child_turn  question, slice profile | its own findings of dropped turns, its own recent turns
    subquery    question, excerpt       | nothing else: isolated
    synthesis   question, draft         | findings, memories, last observations

The shares bend to the question (`Focus`): a time question ("after 14:02",
"per hour") gives findings more room and ranks time-anchored ones first; a
question naming entities (an IP, a status, a user) ranks findings that name
them first. What a call leaves out stays reachable: code can `recall("F3")`
(a finding), `recall("M2")` (a memory) or `recall("T4")` (a dropped turn),
granted from a per-node allowance until it is spent. Every assembled payload
goes to the trace with its spec, focus, allotments and exclusions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm.memory.tags import entities_of, tags_of
from rlm.model.tokens import count_text
from rlm.run.context import MIN_USEFUL_TOKENS, Assembly, Category, Item, allot_tokens, assemble
from rlm.run.ledger import Finding
from rlm.text.textcap import cap_words

CallKind = Literal["root_turn", "child_turn", "subquery", "synthesis"]


@dataclass(frozen=True)
class CallSpec:
    kind: CallKind
    whole: tuple[str, ...]  # always given whole, outside the routed budget
    shares: dict[str, float]  # routed categories and their share of the call's budget
    isolated: bool  # only its own node's findings and turns; no memories of earlier runs
    # The routed budget: this share of the room (the model's window less its reply and the parts
    # given whole), at least `floor` tokens, at most `ceiling` (None: the setting that bounds it,
    # history_tokens for turns, sub_prompt_tokens for a sub-query's excerpt).
    room_share: float = 1.0
    floor: int = 600
    ceiling: int | None = None
    recall_share: float = 0.0  # of the node's routed budget, granted over its life by recall()

    def budget(self, room: int, setting: int | None = None) -> int:
        """Tokens routed into a call of this kind with `room` tokens to spare."""
        ceiling = self.ceiling if self.ceiling is not None else setting
        share = int(room * self.room_share)
        return max(self.floor, share if ceiling is None else min(ceiling, share))


SPECS: dict[CallKind, CallSpec] = {
    "root_turn": CallSpec(
        "root_turn",
        whole=("system", "question", "profile"),
        shares={"memories": 0.15, "findings": 0.25, "turns": 0.60},
        isolated=False,
        recall_share=0.5,
    ),
    "child_turn": CallSpec(
        "child_turn",
        whole=("system", "question", "slice profile"),
        shares={"findings": 0.30, "turns": 0.70},
        isolated=True,
        recall_share=0.5,
    ),
    "subquery": CallSpec(
        "subquery", whole=("system", "question", "excerpt"), shares={}, isolated=True, floor=400
    ),
    "synthesis": CallSpec(
        "synthesis",
        whole=("system", "question", "draft"),
        shares={"findings": 0.60, "memories": 0.15, "observations": 0.25},
        isolated=False,
        room_share=0.5,  # half the window: the answer is written from a digest, not a transcript
        ceiling=6000,
    ),
}

# A time question: a clock time, a date, "per hour", "hourly", "after/before/since/until" a time.
_TIME_QUESTION = re.compile(
    r"\b\d{1,2}:\d{2}\b|\b\d{4}-\d{2}-\d{2}\b|\bper\s+(?:second|minute|hour|day|week|month)\b"
    r"|\b(?:hourly|daily|minutely|timeline|peak|busiest|first|last|earliest|latest)\b"
    r"|\b(?:after|before|since|until|between|during)\b"
    r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\s+\d{1,2}\b",
    re.I,
)
# A time-anchored finding: it names a clock time, a date or an hour.
_TIME_ANCHOR = re.compile(
    r"\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{2}/[A-Z][a-z]{2}/\d{4}\b|\bhour\b", re.I
)
TIME_BOOST = 2.0  # priority added to a time-anchored item for a time question
ENTITY_BOOST = 1.0  # per entity of the question an item names, up to ENTITY_BOOST_MAX
ENTITY_BOOST_MAX = 3.0
FOCUS_GROWTH = 1.5  # a focused question widens the findings' and memories' shares by this
# The kinds of finding that settle answers weigh more when the budget forces a choice.
KIND_WEIGHT = {"result": 3.0, "subcall": 3.0, "note": 3.0, "grep": 2.5, "memory": 2.0, "final_draft": 1.0}


@dataclass(frozen=True)
class Focus:
    """What a question is about, for routing: time, and the entities it names."""

    time: bool
    entities: frozenset[str]

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "entities": sorted(self.entities)}


def focus_of(question: str) -> Focus:
    """The focus of a question. Its entities are what it names rather than asks: quoted text,
    numbers, IPs, times, paths, identifiers (src_ip) and capitalised names (Googlebot), as tags."""
    return Focus(bool(_TIME_QUESTION.search(question)), frozenset(entities_of(question)))


def relevance(text: str, focus: Focus) -> float:
    """Priority an item gains from the question's focus."""
    gain = 0.0
    if focus.time and _TIME_ANCHOR.search(text):
        gain += TIME_BOOST
    if focus.entities:
        shared = len(focus.entities & tags_of(text))
        gain += min(ENTITY_BOOST_MAX, ENTITY_BOOST * shared)
    return gain


def shares_for(spec: CallSpec, focus: Focus) -> dict[str, float]:
    """The spec's shares adapted to the question: a focused question gives more to what was
    established (findings, memories) and less to the verbatim record of turns."""
    shares = dict(spec.shares)
    if focus.time or focus.entities:
        for name in ("findings", "memories"):
            if name in shares:
                shares[name] *= FOCUS_GROWTH
    return shares


def weight_of(finding: Finding) -> float:
    """A finding's own weight: its kind's."""
    return KIND_WEIGHT.get(finding.kind, 1.0)


@dataclass
class Payload:
    """One assembled context: the spec it followed and what went in and what did not."""

    kind: CallKind
    budget: int
    focus: Focus
    assembly: Assembly
    whole: dict[str, int] = field(default_factory=dict)  # tokens of the parts given whole

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "budget": self.budget,
            "focus": self.focus.to_dict(),
            "whole": self.whole,
            **self.assembly.to_dict(),
        }


class Router:
    """The routing of one node's calls (or one synthesis): its spec, focus and recall allowance."""

    def __init__(self, kind: CallKind, question: str, budget: int) -> None:
        self.spec = SPECS[kind]
        self.focus = focus_of(question)
        self.budget = max(0, budget)
        self.shares = shares_for(self.spec, self.focus)
        self.recall_left = int(self.budget * self.spec.recall_share)
        self.recalled: list[str] = []

    def items(self, pairs: list[tuple[str, str, float]]) -> list[Item]:
        """Items ranked by their own weight plus what the question's focus adds."""
        return [Item(ref, text, weight + relevance(text, self.focus)) for ref, text, weight in pairs]

    def allotments(self, needs: dict[str, int], budget: int | None = None) -> dict[str, int]:
        """Tokens for the routed categories named in `needs` (category -> tokens it needs), from
        `budget` (the whole routed budget by default), by their shares."""
        shares = {name: share for name, share in self.shares.items() if name in needs}
        return allot_tokens(shares, needs, self.budget if budget is None else budget)

    def assemble(
        self,
        pools: dict[str, tuple[str, list[Item]]],
        budget: int | None = None,
        top: Item | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> Payload:
        """The routed block from `pools` (category -> (heading, items)); only the spec's categories."""
        categories = [
            Category(name, self.shares[name], items, heading)
            for name, (heading, items) in pools.items()
            if name in self.shares
        ]
        size = self.budget if budget is None else budget
        return Payload(self.spec.kind, size, self.focus, assemble(categories, size, top=top, keep=keep))

    def grant(self, ref: str, text: str | None, *, in_view: bool = False) -> str:
        """What recall(ref) returns: the item, cut to what is left of the allowance, or why not."""
        if text is None:
            raise LookupError(ref)
        if in_view:
            return f"[{ref}] (already in view) {text}"
        cost = count_text(text)
        if self.recall_left < MIN_USEFUL_TOKENS:
            raise OverflowError(
                f"the recall budget of this investigation is spent ({len(self.recalled)} items granted): "
                "work from what is in view"
            )
        if cost > self.recall_left:
            text = cap_words(text, max(40, int(len(text) * self.recall_left / max(1, cost))))
            cost = self.recall_left
        self.recall_left -= cost
        self.recalled.append(ref)
        return f"[{ref}] {text}"


def subquery_payload(question: str, messages: list[dict[str, Any]], budget: int) -> Payload:
    """A sub-query's payload: isolated, it is given its question and its excerpt, nothing else."""
    system, user = (count_text(str(m.get("content") or "")) for m in messages[:2])
    asked = count_text(question)
    whole = {"system": system, "question": asked, "excerpt": max(0, user - asked)}
    return Payload("subquery", budget, focus_of(question), Assembly(text=""), whole=whole)
