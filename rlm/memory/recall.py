"""A run's use of memory: what it is offered at its start, and what it keeps at its end.

`recall` finds the memories that apply to the input (by content, see
rlm.memory.store) and to the question; `offer_lines` words them for the root
prompt (rlm.run.routing fits them into their share of it); `keep` stores the findings the answer cited
and records what was offered and cited, for feedback.

A memory of a file this one only begins with (a log that has grown since) is offered
with its text marked as about the first N lines: the model and the synthesis see it
as a finding over that part, never as established about the whole file.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlm.memory.store import Memory, MemoryStore, head_sha256

MEMORY_TEXT_CHARS = 300  # one memory's text in the prompt


@dataclass
class Recall:
    """What one run got from memory and gave back to it."""

    store: MemoryStore
    path: str = ""  # the input as opened (for the head hash kept with new memories)
    inputs: list[str] = field(default_factory=list)  # the input identities that matched
    offered: list[Memory] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)


def recall(store: MemoryStore, *, path: str, size: int, sha256: Callable[[], str], question: str) -> Recall:
    """Memories for this input and question. The input's sha256 is awaited only when some
    memory could match a file of its size (a first question about a new file pays nothing).
    The database's bounds are applied first, at most once a day (MemoryStore.prune_if_due)."""
    store.prune_if_due()
    if not store.has_memories_up_to(size):
        return Recall(store, path)
    digest = sha256()
    if not digest or digest.startswith("unavailable"):
        return Recall(store, path)
    prefixes = store.prefixes_matching(path, size)
    inputs = [digest, *prefixes]
    offered = [
        m if m.input_sha == digest or m.input_sha not in prefixes else _about_prefix(m, path)
        for m in store.retrieve(inputs, question)
    ]
    return Recall(store, path, inputs, offered)


def _about_prefix(m: Memory, path: str) -> Memory:
    """The memory, its text marked as holding for the file's first lines only (it was made when
    the file was `m.input_size` bytes long)."""
    lines = _lines_in(path, m.input_size)
    return dataclasses.replace(
        m,
        text=f"[holds for the file's first {lines:,} lines only: it has grown since] {m.text}",
    )


def _lines_in(path: str, size: int) -> int:
    """Lines in the first `size` bytes of the file (a last line without its newline counts)."""
    count, last, left = 0, b"\n", size
    with open(path, "rb") as fh:
        while left > 0 and (chunk := fh.read(min(left, 4 * 1024 * 1024))):
            count += chunk.count(b"\n")
            last = chunk[-1:]
            left -= len(chunk)
    return count + (last != b"\n")


def offer_lines(memories: list[Memory], now: float | None = None) -> list[tuple[str, str]]:
    """(ref, line) per memory for the [ESTABLISHED earlier] block, best first."""
    now = time.time() if now is None else now
    lines: list[tuple[str, str]] = []
    for m in memories:
        text = " ".join(m.text.split())
        if len(text) > MEMORY_TEXT_CHARS:
            text = text[: MEMORY_TEXT_CHARS - 1] + "…"
        line = (
            f"({age_text(now - m.created)} ago, score {m.score:.2f}, confidence {m.confidence:.2f}; "
            f'asked: "{" ".join(m.question.split())[:120]}") {text}'
        )
        lines.append((m.ref, line))
    return lines


def keep(
    r: Recall,
    *,
    run_id: str,
    input_sha: str | None,
    input_size: int,
    question: str,
    cited_findings: list[tuple[str, str]],
    cited_refs: list[str],
) -> None:
    """Store the findings the answer cited ((text, evidence) pairs) and record the run."""
    if input_sha and not input_sha.startswith("unavailable"):
        head = head_sha256(r.path) if r.path and cited_findings else ""
        for text, evidence in cited_findings:
            memory = r.store.add(
                input_sha=input_sha,
                input_size=input_size,
                question=question,
                text=text,
                evidence=f"{evidence} of run {run_id}",
                run_id=run_id,
                input_head=head,
            )
            r.stored.append(memory.id)
    offered = {m.ref: m.id for m in r.offered}
    r.cited = [offered[ref] for ref in cited_refs if ref in offered]
    r.store.record_run(run_id, input_sha, [m.id for m in r.offered], r.cited, r.stored)


def age_text(seconds: float) -> str:
    """A short age for people: 45 s, 12 min, 5 h, 3 days."""
    if seconds < 90:
        return f"{max(0, int(seconds))} s"
    if seconds < 5400:
        return f"{int(seconds // 60)} min"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"
