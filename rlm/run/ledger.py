"""The findings ledger: what the investigation has established, with evidence.

Every durable result becomes an entry with a stable id (F1, F2, ...): a
`note`, a sub-call's answer, a short computed result, a grep count, the
`final` draft. The ledger is what synthesis answers from and what replaces
old turns when the conversation is compacted. Errors are never findings: the
callers add only what a successful action produced. Whether a text is an error
comes from where it came from, never from how it reads ("ERROR lines: 1,532"
is a finding about a log).

A computed result keeps the head and the tail of what its cell printed, the
middle left out and marked with its size (rlm.text.textcap.cap_ends): the last
line printed is never the part cut. When the draft arrives, a result whose
shown text lacks a value of the draft that its whole output holds is cut again
to keep the lines holding it.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

from rlm.run.grounding import values_counter
from rlm.text.textcap import cap_ends, cap_words
from rlm.trace.schema import FindingKind

FINDING_CHARS = 600
RESULT_FINDING_CHARS = 600  # of a cell's printed output, past its code's summary


@dataclass(frozen=True)
class Finding:
    id: str
    kind: FindingKind
    text: str  # as prompts show it: capped, the cut marked
    evidence: str  # the step ("n0.s3") or child node ("n2") it came from, as traces and prompts show it
    node: str  # the node it belongs to (a child's answer belongs to its parent)
    full: str | None = None  # the whole result when `text` is cut (kept for the trace, not prompts)
    topic: str | None = None  # what it is about (e.g. the code that computed it): a later one supersedes it
    superseded_by: str | None = None
    # The step of `node` that made it; None for a child's answer or a memory. Typed, so no one
    # parses it back out of `evidence`; not written to traces, which carry it in `evidence`.
    step: int | None = None
    # A computed result's code (its summary), which `text` shows as "`<code>` gave: <output>";
    # None for every other kind. Typed, so no one parses the code back out of the text.
    code: str | None = None

    def line(self) -> str:
        return f"[{self.id}] ({self.kind}, {self.evidence}) {self.text}"

    def said(self, text: str | None = None) -> str:
        """What the finding states (`text`: a cut of it as shown; by default all of it), without
        a computed result's code: the code is how a value was found, not a value found."""
        text = (self.full or self.text) if text is None else text
        head = result_head(self.code) if self.code is not None else ""
        return text[len(head) :] if head and text.startswith(head) else text


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def result_head(code: str) -> str:
    """How a computed result's finding opens: its code's summary, then what the code printed."""
    return f"`{code}` gave: "


def cap_finding(
    text: str, kind: FindingKind, cap: int, draft: str | None = None, code: str | None = None
) -> str:
    """A finding's text as prompts show it within `cap` characters.

    A computed result keeps its code's summary (`code`: the text opens with `result_head(code)`),
    then the head and the tail of what it printed with the middle left out (the lines holding
    the draft's values kept); any other kind is cut at a word boundary.
    """
    if kind != "result":
        return cap_words(text, cap)
    prefix = result_head(code) if code is not None and text.startswith(result_head(code)) else ""
    held = values_counter(draft)
    wanted = (lambda line: held(line) > 0) if draft else None
    return prefix + cap_ends(text[len(prefix) :], max(120, cap - len(prefix)), wanted)


class Ledger:
    def __init__(self) -> None:
        self._entries: list[Finding] = []
        # A finding by its node and its text: the same text found by two nodes is a finding of
        # each (a child's synthesis reads its own node's findings only).
        self._seen: dict[tuple[str, str], Finding] = {}
        self._lock = threading.Lock()
        self._caps: dict[str, int] = {}  # a cut result's cap, to cut it again around the draft

    def add(
        self,
        text: str,
        *,
        kind: FindingKind,
        evidence: str,
        node: str,
        step: int | None = None,
        topic: str | None = None,
        cap: int = FINDING_CHARS,
        code: str | None = None,
    ) -> Finding | None:
        """Record a finding; a duplicate (the same text, of the same node) returns the existing
        entry, a blank returns None.

        With a `topic` (the code behind a result, a grep's pattern), an earlier finding
        of the same node on the same topic is superseded: the same question asked
        again after a fix has one current answer, not two that disagree. With a `code` (a
        computed result), `text` is what the code printed and the finding shows both.
        """
        text = (text or "").strip()
        if not text:
            return None
        if code is not None:
            text = result_head(code) + text
        shown = cap_finding(text, kind, cap, code=code)
        key = (node, _key(shown))
        with self._lock:
            if key in self._seen and self._seen[key].superseded_by is None:
                return self._seen[key]
            finding = Finding(
                f"F{len(self._entries) + 1}",
                kind,
                shown,
                evidence,
                node,
                full=text if shown != text else None,
                topic=topic,
                step=step,
                code=code,
            )
            if topic is not None:
                for i, old in enumerate(self._entries):
                    if old.topic == topic and old.node == node and old.superseded_by is None:
                        self._entries[i] = replace(old, superseded_by=finding.id)
                        self._seen[(node, _key(old.text))] = self._entries[i]
            self._entries.append(finding)
            self._seen[key] = finding
            if finding.full is not None:
                self._caps[finding.id] = cap
            if kind == "final_draft":
                self._keep_draft_values(text)
            return finding

    def adopt(self, found: Finding) -> Finding | None:
        """A finding another ledger made (a child's on another machine), as it stands there
        (its text already cut, its evidence and node kept), under an id of this ledger; a
        duplicate returns the existing entry."""
        key = (found.node, _key(found.text))
        if not key[1]:
            return None
        with self._lock:
            if key in self._seen and self._seen[key].superseded_by is None:
                return self._seen[key]
            finding = replace(found, id=f"F{len(self._entries) + 1}", superseded_by=None)
            self._entries.append(finding)
            self._seen[key] = finding
            return finding

    def _keep_draft_values(self, draft: str) -> None:
        """Cut the results again whose shown text lacks a value of `draft` their output holds."""
        held_in = values_counter(draft)
        for i, old in enumerate(self._entries):
            if old.kind != "result" or old.full is None or old.superseded_by is not None:
                continue
            held = [ln for ln in old.full.splitlines() if held_in(ln)]
            if not held or all(ln in old.text for ln in held):
                continue
            text = cap_finding(old.full, "result", self._caps.get(old.id, FINDING_CHARS), draft, old.code)
            if text != old.text:
                self._seen.pop((old.node, _key(old.text)), None)
                self._entries[i] = replace(old, text=text)
                self._seen[(old.node, _key(text))] = self._entries[i]

    @property
    def current(self) -> list[Finding]:
        """The findings that stand (none superseded)."""
        return [f for f in self.entries if f.superseded_by is None]

    @property
    def entries(self) -> list[Finding]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def for_node(self, node: str) -> list[Finding]:
        return [f for f in self.current if f.node == node]

    def to_list(self) -> list[dict[str, Any]]:
        """The findings as the trace keeps them: `step` and `code` are left out, the trace format
        has them in `evidence` and `text`."""
        return [{k: v for k, v in asdict(f).items() if k not in ("step", "code")} for f in self.entries]
