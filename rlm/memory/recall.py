"""A run's use of memory: what it is offered at its start, and what it keeps at its end.

`recall` finds the memories that apply to the input (by content, see
rlm.memory.store), that were kept before the run started, and that the question
needs (rlm.memory.relevance: a threshold, then the most relevant few);
`offer_line` words one for the root prompt and its synthesis with its real
standing (rlm.run.routing fits them into the memories' share); `keep` stores the
findings the answer cited, with the standing the run gave them, and records what
was offered and cited, for feedback.

A memory of a file this one only begins with (a log that has grown since) is offered
with its text marked as about the first N lines: the model and the synthesis see it
as a finding over that part, never as established about the whole file.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlm.memory import rules
from rlm.memory.relevance import FileTerms, Relevance, question_terms, relevance
from rlm.memory.store import Kept, Memory, MemoryStore, head_sha256
from rlm.text.textcap import cap_ends

# Memories offered to one run, at most. A line (its age, question, standing and text) is 60-90
# tokens. With the offline model's 4,096-token window the memories' share is about 170 tokens of
# the root's prompt (two lines; a third is reached with recall("M3")) and about 270 of its
# synthesis (three lines), measured with a focused question; a hosted model's window holds them
# whole. Past the few most relevant, a memory of the same file mostly repeats what they say.
OFFER_LIMIT = 3
MEMORY_TEXT_CHARS = 300  # one memory's text in a prompt (its start and its end: the value it gave)
QUESTION_CHARS = 120
# A memory's standing orders memories of equal relevance: a confident answer's finding first.
_CONFIDENCE_RANK = {"high": 3, "medium": 2, None: 1, "low": 0}


@dataclass
class Recall:
    """What one run got from memory and gave back to it."""

    store: MemoryStore
    path: str = ""  # the input as opened (for the head hash kept with new memories)
    inputs: list[str] = field(default_factory=list)  # the input identities that matched
    offered: list[Memory] = field(default_factory=list)
    relevance: dict[str, Relevance] = field(default_factory=dict)  # of each offered memory, by ref
    passed_over: int = 0  # memories of this input the question did not need (or beyond the few)
    stored: list[int] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)


def recall(
    store: MemoryStore,
    *,
    path: str,
    size: int,
    sha256: Callable[[], str],
    question: str,
    terms: FileTerms | None = None,
    before: float | None = None,
) -> Recall:
    """The memories this question needs, of this input, kept before `before` (the run's start).

    `terms` are the input's table columns and values, which make a question's words anchors.
    The input's sha256 (a scan of the whole file, which starts once its table is built) is
    awaited only when a memory was kept of a file of the same size and first bytes: a first
    question about a new file waits for neither, however many other files memory knows. The
    database's bounds are applied first, at most once a day (MemoryStore.prune_if_due)."""
    store.prune_if_due()
    prefixes = store.prefixes_matching(path, size)
    digest = sha256() if store.has_memories_like(size, head_sha256(path)) else ""
    if digest.startswith("unavailable"):
        digest = ""
    inputs = [digest, *prefixes] if digest else list(prefixes)
    if not inputs:
        return Recall(store, path)
    file = terms or FileTerms()
    asked = question_terms(question, file)
    candidates = store.candidates(inputs, before)
    scored = [(relevance(asked, m.question, m.text, file), m) for m in candidates]
    needed = sorted(
        ((r, m) for r, m in scored if r.offered),
        key=lambda p: (-p[0].score, -_standing_rank(p[1]), -p[1].score, -p[1].id),
    )[:OFFER_LIMIT]
    offered = [
        m if m.input_sha == digest or m.input_sha not in prefixes else _about_prefix(m, path)
        for _, m in needed
    ]
    return Recall(
        store,
        path,
        inputs,
        offered,
        {m.ref: r for r, m in needed},
        passed_over=len(candidates) - len(offered),
    )


def may_recall(where: str, path: str, size: int) -> bool:
    """Whether the memory at `where` holds a memory of a file of this size and first bytes: the
    run then waits for the input's whole sha256 before the model's first turn (recall). False
    when the database cannot be read now; recall says why."""
    try:
        store = MemoryStore(where)
    except (sqlite3.Error, OSError):
        return False
    try:
        return store.has_memories_like(size, head_sha256(path))
    except (sqlite3.Error, OSError):
        return False
    finally:
        store.close()


def _standing_rank(m: Memory) -> int:
    """A confident answer's finding first; one whose answer was not grounded last."""
    return _CONFIDENCE_RANK.get(m.answer_confidence, 1) - (4 if m.answer_grounded is False else 0)


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


def offer_line(m: Memory, now: float | None = None) -> str:
    """One memory as a prompt shows it (after its `[M12]`): its age, the question it answered,
    its standing, then its text cut to its start and its end (the value it gave is at the end)."""
    about, text = offer_parts(m, now)
    return f"{about}: {text}"


def offer_parts(m: Memory, now: float | None = None) -> tuple[str, str]:
    """A memory's line in two: what rlm knows of it (age, question, standing) and what it says.
    Only the second is evidence: an age or a count of citations is no value an answer can rest on."""
    now = time.time() if now is None else now
    question = " ".join(m.question.split())
    if len(question) > QUESTION_CHARS:
        question = question[: QUESTION_CHARS - 1] + "…"
    text = " ".join(cap_ends(m.text, MEMORY_TEXT_CHARS).split())
    return f'{age_text(now - m.created)} ago, for "{question}" ({standing_text(m)})', text


def offer_lines(memories: list[Memory], now: float | None = None) -> list[tuple[str, str]]:
    """(ref, line) per memory for the [ESTABLISHED earlier] block, most relevant first."""
    now = time.time() if now is None else now
    return [(m.ref, offer_line(m, now)) for m in memories]


def standing_text(m: Memory) -> str:
    """What a memory's standing is, in words: the confidence and grounding of the answer that
    rested on it, how many runs cited it, and its feedback. Unknown is said, never a number."""
    answer = f"answer confidence {m.answer_confidence or 'not recorded'}"
    grounding = grounding_text(m)
    if grounding:
        answer += f", {grounding}"
    runs = f"cited in {m.cited} run{'' if m.cited == 1 else 's'}"
    return f"{answer}; {runs}; {feedback_text(m)}"


def grounding_text(m: Memory) -> str | None:
    """Whether the answer's values were found in its findings, and whether this one holds them;
    None when the run did not check."""
    if m.answer_grounded is None:
        return None
    if not m.answer_grounded:
        return "answer not grounded"
    return "holds the answer's values" if m.holds_answer else "answer grounded in other findings"


def feedback_text(m: Memory) -> str:
    """The feedback a memory has had: its score and the outcomes behind it, or none."""
    if not (m.successes or m.failures or m.score != rules.START_SCORE):
        return "no feedback yet"
    return f"feedback score {m.score:.2f} ({m.successes} worked, {m.failures} failed)"


def keep(
    r: Recall,
    *,
    run_id: str,
    input_sha: str | None,
    input_size: int,
    question: str,
    cited: list[Kept],
    cited_refs: list[str],
) -> None:
    """Store the findings the answer cited (with their standing) and record the run, in one go."""
    known = bool(input_sha) and not str(input_sha).startswith("unavailable")
    offered = {m.ref: m.id for m in r.offered}
    r.cited = [offered[ref] for ref in cited_refs if ref in offered]
    r.stored = r.store.keep(
        run_id=run_id,
        input_sha=input_sha,
        input_size=input_size,
        input_head=head_sha256(r.path) if known and r.path and cited else "",
        question=question,
        kept=[dataclasses.replace(k, evidence=f"{k.evidence} of run {run_id}") for k in cited]
        if known
        else [],
        offered=[m.id for m in r.offered],
        cited=r.cited,
    )


def age_text(seconds: float) -> str:
    """A short age for people: 45 s, 12 min, 5 h, 3 days."""
    if seconds < 90:
        return f"{max(0, int(seconds))} s"
    if seconds < 5400:
        return f"{int(seconds // 60)} min"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"
