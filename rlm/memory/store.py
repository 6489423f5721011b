"""The memory database: findings that outlive their run, run records, and the sub-call cache.

One SQLite file (WAL, a busy timeout: concurrent runs wait for each other's
writes instead of failing), versioned with `PRAGMA user_version` and upgraded
by the migrations below on open.

Identity is the input's content, never its path. A memory belongs to the
sha256 of the file it was established on (and that file's size). It is
offered for an input when
- the input's sha256 is the same (a renamed or copied file matches), or
- the input is larger and its first `size` bytes hash to that sha256: a log
  that has only grown since still matches, for findings about its old part.
Any other change (an edited line, a truncated file) matches nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlm.memory import rules
from rlm.memory.tags import fts_query, tags_of

MIGRATIONS: list[str] = [
    # 1: memories with full-text search, runs, the sub-call cache
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        input_sha TEXT NOT NULL,
        input_size INTEGER NOT NULL,
        question TEXT NOT NULL,
        text TEXT NOT NULL,
        evidence TEXT NOT NULL,
        run_id TEXT NOT NULL,
        tags TEXT NOT NULL,
        created REAL NOT NULL,
        last_used REAL NOT NULL,
        score REAL NOT NULL DEFAULT 0.5,
        offered INTEGER NOT NULL DEFAULT 0,
        cited INTEGER NOT NULL DEFAULT 0,
        successes INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        tier TEXT NOT NULL DEFAULT 'working'
    );
    CREATE INDEX memories_input ON memories (input_sha);
    CREATE VIRTUAL TABLE memories_fts USING fts5 (text, question, tags, content='memories', content_rowid='id');
    CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts (rowid, text, question, tags) VALUES (new.id, new.text, new.question, new.tags);
    END;
    CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, text, question, tags)
        VALUES ('delete', old.id, old.text, old.question, old.tags);
    END;
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        input_sha TEXT,
        at REAL NOT NULL,
        offered TEXT NOT NULL,
        cited TEXT NOT NULL,
        stored TEXT NOT NULL,
        feedback TEXT
    );
    CREATE TABLE subcalls (
        key TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        answer TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        at REAL NOT NULL,
        hits INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 2: the sha256 of each file's first 64 KB, so a grown-log check hashes a whole prefix only
    # when the heads agree (an unrelated smaller file is ruled out in microseconds)
    """
    ALTER TABLE memories ADD COLUMN input_head TEXT NOT NULL DEFAULT '';
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
OFFER_LIMIT = 5  # memories offered to one run, at most
HEAD_BYTES = 65536


def default_memory_path() -> str:
    """`$RLM_MEMORY`, else memory.sqlite3 in the per-user data directory (beside the traces)."""
    env = os.environ.get("RLM_MEMORY")
    if env:
        return env
    from platformdirs import user_data_dir

    return os.path.join(user_data_dir("rlm", appauthor=False), "memory.sqlite3")


@dataclass(frozen=True)
class Memory:
    id: int
    input_sha: str
    input_size: int
    question: str
    text: str
    evidence: str
    run_id: str
    tags: str
    created: float
    last_used: float
    score: float
    offered: int
    cited: int
    successes: int
    failures: int
    tier: str
    input_head: str

    @property
    def ref(self) -> str:
        """How prompts and citations name it."""
        return f"M{self.id}"

    @property
    def confidence(self) -> float:
        return rules.confidence(self.successes, self.failures)


@dataclass(frozen=True)
class FeedbackChange:
    memory: int
    cited: bool
    before: rules.Standing
    after: rules.Standing


class MemoryStore:
    """An open memory database; use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            # Findings quote the user's data: the database is the user's alone (as the traces are).
            self.path.touch(mode=0o600)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA busy_timeout = 30000")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (concurrent runs queue here, within the busy timeout)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"the memory database {self.path} is from a newer rlm (schema {version})"
                )
            for number in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[number]):
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # -- identity ----------------------------------------------------------------------
    def inputs_matching(self, path: str, size: int, sha256: str) -> list[str]:
        """The input identities (sha256 values) whose memories apply to this file (see the module)."""
        keys = [sha256]
        smaller = self.db.execute(
            "SELECT DISTINCT input_sha, input_size, input_head FROM memories "
            "WHERE input_size < ? AND tier != 'retired' ORDER BY input_size DESC LIMIT 3",
            (size,),
        ).fetchall()
        head = head_sha256(path)
        for row in smaller:
            old_size = int(row["input_size"])
            if old_size >= HEAD_BYTES and row["input_head"] and row["input_head"] != head:
                continue  # another file: its first 64 KB differ
            if _prefix_sha256(path, old_size) == row["input_sha"]:
                keys.append(str(row["input_sha"]))
        return keys

    def has_memories_up_to(self, size: int) -> bool:
        """Whether any memory could match a file of this size (else its hash need not be awaited)."""
        row = self.db.execute(
            "SELECT 1 FROM memories WHERE input_size <= ? AND tier != 'retired' LIMIT 1", (size,)
        ).fetchone()
        return row is not None

    # -- memories ----------------------------------------------------------------------
    def add(
        self,
        *,
        input_sha: str,
        input_size: int,
        question: str,
        text: str,
        evidence: str,
        run_id: str,
        input_head: str = "",
    ) -> Memory:
        now = time.time()
        tags = " ".join(sorted(tags_of(f"{question} {text}")))
        with self._write() as db:
            existing = db.execute(
                "SELECT id FROM memories WHERE input_sha = ? AND text = ? AND tier != 'retired'",
                (input_sha, text),
            ).fetchone()
            if existing is not None:  # the same finding again: one memory, used once more
                db.execute("UPDATE memories SET last_used = ? WHERE id = ?", (now, existing["id"]))
                memory_id = int(existing["id"])
            else:
                cur = db.execute(
                    "INSERT INTO memories (input_sha, input_size, question, text, evidence, run_id, tags, "
                    "created, last_used, input_head) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (input_sha, input_size, question, text, evidence, run_id, tags, now, now, input_head),
                )
                memory_id = int(cur.lastrowid or 0)
        found = self.get(memory_id)
        assert found is not None
        return found

    def get(self, memory_id: int) -> Memory | None:
        row = self.db.execute("SELECT * FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return _memory(row) if row is not None else None

    def retrieve(self, inputs: list[str], question: str, limit: int = OFFER_LIMIT) -> list[Memory]:
        """Memories for these inputs, most tags shared with the question first (then score),
        filled up by full-text search; expired and retired ones are never offered."""
        if not inputs:
            return []
        now = time.time()
        marks = ",".join("?" * len(inputs))
        rows = self.db.execute(f"SELECT * FROM memories WHERE input_sha IN ({marks})", inputs).fetchall()
        live = [m for m in map(_memory, rows) if not rules.expired(m.tier, m.last_used, now)]
        wanted = tags_of(question)
        ranked = sorted(
            ((len(wanted & set(m.tags.split())), m) for m in live),
            key=lambda p: (-p[0], -p[1].score, -p[1].id),
        )
        chosen = [m for shared, m in ranked if shared > 0][:limit]
        query = fts_query(question)
        if len(chosen) < limit and query:
            by_id = {m.id: m for m in live}
            try:
                hits = self.db.execute(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT 50",
                    (query,),
                ).fetchall()
            except sqlite3.OperationalError:  # an FTS query it cannot parse finds nothing
                hits = []
            for hit in hits:
                m = by_id.get(int(hit["rowid"]))
                if m is not None and m not in chosen:
                    chosen.append(m)
                if len(chosen) >= limit:
                    break
        return chosen

    def record_run(
        self, run_id: str, input_sha: str | None, offered: list[int], cited: list[int], stored: list[int]
    ) -> None:
        """What a run was offered, cited and stored; bumps the counts and the last use of those memories."""
        now = time.time()
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO runs (run_id, input_sha, at, offered, cited, stored) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, input_sha, now, json.dumps(offered), json.dumps(cited), json.dumps(stored)),
            )
            for memory_id in offered:
                db.execute(
                    "UPDATE memories SET offered = offered + 1, last_used = ? WHERE id = ?", (now, memory_id)
                )
            for memory_id in dict.fromkeys([*cited, *stored]):
                db.execute(
                    "UPDATE memories SET cited = cited + 1, last_used = ? WHERE id = ?", (now, memory_id)
                )

    def run(self, run_id: str) -> dict[str, object] | None:
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        return {
            "run_id": row["run_id"],
            "offered": json.loads(row["offered"]),
            "cited": json.loads(row["cited"]),
            "stored": json.loads(row["stored"]),
            "feedback": row["feedback"],
        }

    def feedback(self, run_id: str, outcome: rules.Outcome) -> list[FeedbackChange]:
        """Apply the rules to every memory the run cited (or stored) and every one only offered to it.

        Feedback on a run is counted once: giving it again replaces nothing and changes nothing.
        """
        record = self.run(run_id)
        if record is None:
            raise KeyError(run_id)
        if record["feedback"] is not None:
            return []
        cited = set(record["cited"]) | set(record["stored"])  # type: ignore[call-overload]
        offered = set(record["offered"]) - cited  # type: ignore[call-overload]
        changes: list[FeedbackChange] = []
        with self._write() as db:
            for memory_id, was_cited in [
                *((m, True) for m in sorted(cited)),
                *((m, False) for m in sorted(offered)),
            ]:
                row = db.execute("SELECT * FROM memories WHERE id = ?", (memory_id,)).fetchone()
                if row is None:
                    continue
                before = _standing(row)
                after = rules.apply_feedback(before, outcome, cited=was_cited)
                db.execute(
                    "UPDATE memories SET score = ?, successes = ?, failures = ?, tier = ? WHERE id = ?",
                    (after.score, after.successes, after.failures, after.tier, memory_id),
                )
                changes.append(FeedbackChange(memory_id, was_cited, before, after))
            db.execute("UPDATE runs SET feedback = ? WHERE run_id = ?", (outcome, run_id))
        return changes

    def memories(self, input_sha: str | None = None) -> list[Memory]:
        if input_sha is None:
            rows = self.db.execute("SELECT * FROM memories ORDER BY id").fetchall()
        else:
            rows = self.db.execute(
                "SELECT * FROM memories WHERE input_sha = ? ORDER BY id", (input_sha,)
            ).fetchall()
        return [_memory(r) for r in rows]

    def forget(
        self, *, memory_id: int | None = None, input_sha: str | None = None, everything: bool = False
    ) -> int:
        """Delete one memory, those of one input, or all; returns how many."""
        with self._write() as db:
            if everything:
                cur = db.execute("DELETE FROM memories")
                db.execute("DELETE FROM subcalls")
            elif memory_id is not None:
                cur = db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            else:
                cur = db.execute("DELETE FROM memories WHERE input_sha = ?", (input_sha,))
            return int(cur.rowcount)

    def stats(self) -> list[dict[str, object]]:
        """Per memory: offered vs cited, score, tier (most offered and least cited first)."""
        rows = self.db.execute(
            "SELECT id, tier, score, offered, cited, successes, failures, text FROM memories "
            "ORDER BY offered - cited DESC, id"
        ).fetchall()
        return [dict(r) for r in rows]

    # -- the sub-call cache --------------------------------------------------------------
    def cached(self, key: str) -> tuple[str, int, int] | None:
        row = self.db.execute(
            "SELECT answer, prompt_tokens, completion_tokens FROM subcalls WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        with self._write() as db:
            db.execute("UPDATE subcalls SET hits = hits + 1 WHERE key = ?", (key,))
        return str(row["answer"]), int(row["prompt_tokens"]), int(row["completion_tokens"])

    def cache(self, key: str, model: str, answer: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO subcalls (key, model, answer, prompt_tokens, completion_tokens, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, answer, prompt_tokens, completion_tokens, time.time()),
            )


def subcall_key(model: str, messages: list[dict[str, object]]) -> str:
    """The cache key of a sub-call: the model and the whole prompt."""
    return hashlib.sha256(json.dumps([model, messages], sort_keys=True).encode()).hexdigest()


def _statements(script: str) -> list[str]:
    """Split a migration into statements (triggers hold `;` inside BEGIN ... END)."""
    out: list[str] = []
    current: list[str] = []
    for line in script.strip().splitlines():
        current.append(line)
        joined = "\n".join(current).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            out.append(joined)
            current = []
    return out


def head_sha256(path: str) -> str:
    """The sha256 of a file's first HEAD_BYTES bytes ('' when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()
    except OSError:
        return ""


def _prefix_sha256(path: str, size: int) -> str | None:
    h = hashlib.sha256()
    left = size
    try:
        with open(path, "rb") as fh:
            while left > 0:
                chunk = fh.read(min(left, 4 * 1024 * 1024))
                if not chunk:
                    return None
                h.update(chunk)
                left -= len(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _memory(row: sqlite3.Row) -> Memory:
    return Memory(**{k: row[k] for k in row.keys()})


def _standing(row: sqlite3.Row) -> rules.Standing:
    return rules.Standing(
        score=float(row["score"]),
        cited=int(row["cited"]),
        successes=int(row["successes"]),
        failures=int(row["failures"]),
        tier=row["tier"],
    )
