"""Context assembly: a prompt block built from categories within a token budget.

A call's context is not concatenated, it is assembled. Each category (the
draft, the findings, the last observations, ...) has a share of the budget.
A category that needs less than its share leaves slack; the slack flows to
the categories that need more, each growing by at most half its share while
another is still hungry, so one category can never crowd out the others; what
none of them can take then goes to whichever still needs it. Items keep their stable ids; whole items
are preferred to cut ones, and an item that does not fit whole keeps, from
what its category has left, its first and last lines and the lines the caller
wants (the middle left out and its size marked: a result is printed last), when
at least a useful part fits, otherwise left out, and every exclusion is
recorded with its reason. The item that matters most is shown at the start of
the block and again at its end, where models attend best, and not a third
time in between.

An item's text is never rlm's own (a cell's output, a file line, a model's
note): each is shown as `[id] (source)` written by rlm, then its text in a
frame (rlm.run.framing), so a printed line that reads like an entry stays
inside the entry that printed it. The frame is counted in the item's cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm.model.tokens import count_text
from rlm.run.framing import frame
from rlm.text.textcap import LEFT_OUT as _LEFT_OUT
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
    # Each included item's text as the block shows it (cut or whole): what grounding looks in.
    shown: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "included": self.included,
            "excluded": self.excluded,
            "tokens": self.tokens,
            "allotted": self.allotted,
            "top": self.top,
        }


def _need(category: Category, top: str | None = None) -> int:
    """What a category's items cost whole; the top item is shown twice."""
    return sum(item_tokens(i) * (2 if i.id == top else 1) for i in category.items)


def allot(categories: list[Category], budget: int, top: str | None = None) -> dict[str, int]:
    """Tokens per category: its share, plus slack from the others, growth capped at MAX_GROWTH."""
    needs = {c.name: _need(c, top) for c in categories}
    return allot_tokens({c.name: c.share for c in categories}, needs, budget)


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
    # Slack no capped category can take goes on to those that still need more: the cap keeps one
    # category from crowding out another, not from using room nobody else wants.
    for name in shares:
        give = min(slack, need.get(name, 0) - allotted[name])
        if give > 0:
            allotted[name] += give
            slack -= give
    return allotted


def assemble(
    categories: list[Category],
    budget: int,
    top: Item | None = None,
    keep: Callable[[str], bool] | None = None,
) -> Assembly:
    """The block for a prompt; `top` (the item that matters most) opens it and closes it, shown
    there only, each showing counted against its category.

    Whole items are preferred to cut ones: in order of priority, every item that fits whole goes
    in; what is left of a category's allotment then goes to the items that did not fit, cut to
    their ends and to the lines `keep` picks (those holding the draft's values).
    """
    allotted = allot(categories, budget, top.id if top is not None else None)
    out = Assembly(text="", allotted=allotted)
    blocks: list[str] = []
    top_text: str | None = None
    for category in categories:
        left = allotted[category.name]
        ranked = sorted(category.items, key=lambda i: -i.priority)
        chosen: dict[str, str] = {}
        deferred: list[Item] = []
        for item in ranked:
            times = 2 if top is not None and item.id == top.id else 1
            cost = times * item_tokens(item)
            if cost <= left:
                chosen[item.id] = item.text
                left -= cost
            else:
                deferred.append(item)
        for item in deferred:
            times = 2 if top is not None and item.id == top.id else 1
            text, cost = _cut_to(item, left // times, keep)
            if text is None:
                out.excluded.append({"id": item.id, "why": f"over the {category.name} budget"})
                continue
            chosen[item.id] = text
            left -= times * cost
        lines = []
        for item in ranked:
            if item.id not in chosen:
                continue
            out.included.append(item.id)
            out.shown[item.id] = chosen[item.id]
            if top is not None and item.id == top.id:
                top_text = chosen[item.id]
            else:
                lines.append(render(item, chosen[item.id]))
        out.tokens[category.name] = allotted[category.name] - left
        if lines:
            blocks.append((f"{category.heading}\n" if category.heading else "") + "\n".join(lines))
    if top is not None and top_text is not None:
        out.top = top.id
        line = render(top, top_text)
        blocks.insert(0, f"Most important: {line}")
        blocks.append(f"Again, most important: {line}")
    out.text = "\n\n".join(blocks)
    return out


def _cut_to(item: Item, left: int, keep: Callable[[str], bool] | None) -> tuple[str | None, int]:
    """The item cut to `left` tokens (characters per token as measured on its text; the cut's
    mark costs tokens too, so it shrinks until it fits), or None when no useful part fits."""
    if left < MIN_USEFUL_TOKENS:
        return None, 0
    cost = item_tokens(item)
    chars = int(len(item.text) * (left - 4) / max(1, cost - 4))
    while chars >= 40:
        text = cap_ends(item.text, chars, keep)
        cost = item_tokens(item, text)
        if cost <= left:
            # A cut that kept no line of the item (only the mark of what was left out) shows nothing.
            return (text, cost) if _LEFT_OUT.sub("", text).strip() else (None, 0)
        chars = int(chars * 0.85)
    return None, 0
