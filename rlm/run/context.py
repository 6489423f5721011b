"""Context assembly: a prompt block built from categories within a token budget.

A call's context is not concatenated, it is assembled. Each category (the
draft, the findings, the last observations, ...) has a share of the budget.
A category that needs less than its share leaves slack; the slack flows to
the categories that need more, each growing by at most half its share, so one
category can never crowd out the others. Items keep their stable ids; an item
larger than what its category has left keeps its first and last lines, the
middle left out and its size marked (a result is printed last), when at least
a useful part fits, otherwise left out, and every
exclusion is recorded with its reason. The item that matters most is put at
the start of the block and again at its end, where models attend best.

An item's text is never rlm's own (a cell's output, a file line, a model's
note): each is shown as `[id] (source)` written by rlm, then its text in a
frame (rlm.run.framing), so a printed line that reads like an entry stays
inside the entry that printed it. The frame is counted in the item's cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm.model.tokens import count_text
from rlm.run.framing import frame
from rlm.text.textcap import cap_ends

MAX_GROWTH = 0.5  # a category absorbing slack grows by at most this share of its own allotment
MIN_USEFUL_TOKENS = 24  # a cut item shorter than this is left out rather than shown


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    priority: float = 0.0  # higher first
    source: str = ""  # where it came from, as rlm names it ("result, n0.s2"): shown before its frame


def render(item: Item, text: str | None = None) -> str:
    """An item as a prompt shows it: its id and source, then its text (or `text`, a cut of it) framed."""
    head = " ".join([f"[{item.id}]"] * bool(item.id) + [f"({item.source})"] * bool(item.source))
    body = frame(item.text if text is None else text)
    return f"{head} {body}" if head else body


def item_tokens(item: Item, text: str | None = None) -> int:
    """What an item costs in a block: its rendered line and the newline between lines."""
    return count_text(render(item, text)) + 1


@dataclass
class Category:
    name: str
    share: float  # of the budget
    items: list[Item]
    heading: str = ""


@dataclass
class Assembly:
    text: str
    included: list[str] = field(default_factory=list)
    excluded: list[dict[str, str]] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    allotted: dict[str, int] = field(default_factory=dict)
    top: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "included": self.included,
            "excluded": self.excluded,
            "tokens": self.tokens,
            "allotted": self.allotted,
            "top": self.top,
        }


def _need(category: Category) -> int:
    return sum(item_tokens(i) for i in category.items)


def allot(categories: list[Category], budget: int) -> dict[str, int]:
    """Tokens per category: its share, plus slack from the others, growth capped at MAX_GROWTH."""
    return allot_tokens({c.name: c.share for c in categories}, {c.name: _need(c) for c in categories}, budget)


def allot_tokens(shares: dict[str, float], need: dict[str, int], budget: int) -> dict[str, int]:
    """`allot` for categories known by their share and their need in tokens."""
    total_share = sum(shares.values()) or 1.0
    base = {name: int(budget * share / total_share) for name, share in shares.items()}
    allotted = {name: min(base[name], need.get(name, 0)) for name in base}
    slack = sum(base.values()) - sum(allotted.values())
    hungry = [name for name in shares if need.get(name, 0) > base[name]]
    while slack > 0 and hungry:
        per = max(1, slack // len(hungry))
        still = []
        for name in hungry:
            cap = int(base[name] * (1 + MAX_GROWTH))
            room = min(cap, need[name]) - allotted[name]
            give = min(per, room, slack)
            allotted[name] += give
            slack -= give
            if allotted[name] < min(cap, need[name]):
                still.append(name)
        if still == hungry and per == 1 and slack <= len(hungry):
            break
        hungry = still
    return allotted


def assemble(categories: list[Category], budget: int, top: Item | None = None) -> Assembly:
    """The block for a prompt; `top` (the most important item) opens it and closes it."""
    allotted = allot(categories, budget)
    out = Assembly(text="", allotted=allotted)
    blocks: list[str] = []
    for category in categories:
        left = allotted[category.name]
        used = 0
        lines: list[str] = []
        for item in sorted(category.items, key=lambda i: -i.priority):
            cost = item_tokens(item)
            text = item.text
            if cost > left and left >= MIN_USEFUL_TOKENS:
                # Cut to what is left (characters per token as measured on this text); the
                # cut's mark costs tokens too, so shrink until it fits.
                chars = int(len(text) * (left - 4) / max(1, cost - 4))
                while chars >= 40 and cost > left:
                    text = cap_ends(item.text, chars)
                    cost = item_tokens(item, text)
                    chars = int(chars * 0.85)
            if cost > left:
                out.excluded.append({"id": item.id, "why": f"over the {category.name} budget"})
                continue
            lines.append(render(item, text))
            out.included.append(item.id)
            used += cost
            left -= cost
        out.tokens[category.name] = used
        if lines:
            blocks.append((f"{category.heading}\n" if category.heading else "") + "\n".join(lines))
    if top is not None and blocks:
        out.top = top.id
        line = render(top, cap_ends(top.text, 600))
        blocks.insert(0, f"Most important: {line}")
        blocks.append(f"Again, most important: {line}")
    out.text = "\n\n".join(blocks)
    return out
