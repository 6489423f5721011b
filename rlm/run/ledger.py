"""The findings ledger: what the investigation has established, with evidence.

Every durable result becomes an entry with a stable id (F1, F2, ...): a
`note`, a sub-call's answer, a short computed result, a grep count, the
`final` draft. The ledger is what synthesis answers from and what replaces
old turns when the conversation is compacted. Errors are never findings: the
callers add only what a successful action produced. Whether a text is an error
comes from where it came from, never from how it reads ("ERROR lines: 1,532"
is a finding about a log).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

from rlm.text.textcap import cap_words
from rlm.trace.schema import FindingKind

FINDING_CHARS = 600


@dataclass(frozen=True)
class Finding:
    id: str
    kind: FindingKind
    text: str  # as prompts show it: capped, the cut marked
    evidence: str  # the step ("n0.s3") or child node ("n2") it came from
    node: str
    full: str | None = None  # the whole result when `text` is cut (kept for the trace, not prompts)
    topic: str | None = None  # what it is about (e.g. the code that computed it): a later one supersedes it
    superseded_by: str | None = None

    def line(self) -> str:
        return f"[{self.id}] ({self.kind}, {self.evidence}) {self.text}"


def _key(text: str) -> str:
    return " ".join(text.lower().split())


class Ledger:
    def __init__(self) -> None:
        self._entries: list[Finding] = []
        self._seen: dict[str, Finding] = {}
        self._lock = threading.Lock()

    def add(
        self,
        text: str,
        *,
        kind: FindingKind,
        evidence: str,
        node: str,
        topic: str | None = None,
        cap: int = FINDING_CHARS,
    ) -> Finding | None:
        """Record a finding; a duplicate returns the existing entry, a blank returns None.

        With a `topic` (the code behind a result, a grep's pattern), an earlier finding
        of the same node on the same topic is superseded: the same question asked
        again after a fix has one current answer, not two that disagree.
        """
        text = (text or "").strip()
        if not text:
            return None
        shown = cap_words(text, cap)
        key = _key(shown)
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
            )
            if topic is not None:
                for i, old in enumerate(self._entries):
                    if old.topic == topic and old.node == node and old.superseded_by is None:
                        self._entries[i] = replace(old, superseded_by=finding.id)
                        self._seen[_key(old.text)] = self._entries[i]
            self._entries.append(finding)
            self._seen[key] = finding
            return finding

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
        return [asdict(f) for f in self.entries]
