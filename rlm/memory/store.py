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
Any other change (an edited line, a truncated file) matches nothing. A memory that
matched only as a prefix is offered marked as about the file's first lines
(rlm.memory.recall), never as established about the whole of it.

A run's end is one transaction (`keep`): the findings its answer cited, each
with the standing the run gave it (schema 4), and its record. A run is offered
only memories kept before it started (`candidates(before=...)`), never those of
a run that was still going when it began.

Ids are never reused (AUTOINCREMENT, schema 3): a run record names memories by id,
and feedback on an old run must not move a memory made after it.

Damage heals: the file is checked on open (`PRAGMA quick_check`), and one that
cannot be used raises MemoryUnusable, which says whether setting the file aside
(`set_aside`, `rlm memory reset`) is the way out. The file is the user's alone:
created 0600 (O_EXCL|O_NOFOLLOW, before SQLite opens it; its -wal and -shm take
its mode) in a 0700 directory. `prune` keeps it bounded (rlm.memory.rules).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rlm.memory import rules
from rlm.memory.tags import tags_of

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
    # 3: ids never reused (a forgotten memory's id would else name the next one made, and
    # feedback on an old run would move it); the sequence starts past every id a run record
    # names, so an id reused before this migration is not handed out again either. And `meta`,
    # for the time of the last prune.
    """
    CREATE TABLE memories_v3 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
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
        tier TEXT NOT NULL DEFAULT 'working',
        input_head TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO memories_v3 (id, input_sha, input_size, question, text, evidence, run_id, tags, created,
        last_used, score, offered, cited, successes, failures, tier, input_head)
    SELECT id, input_sha, input_size, question, text, evidence, run_id, tags, created,
        last_used, score, offered, cited, successes, failures, tier, input_head FROM memories;
    DROP TRIGGER memories_ai;
    DROP TRIGGER memories_ad;
    DROP TABLE memories;
    ALTER TABLE memories_v3 RENAME TO memories;
    CREATE INDEX memories_input ON memories (input_sha);
    CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts (rowid, text, question, tags) VALUES (new.id, new.text, new.question, new.tags);
    END;
    CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, text, question, tags)
        VALUES ('delete', old.id, old.text, old.question, old.tags);
    END;
    DELETE FROM sqlite_sequence WHERE name = 'memories';
    INSERT INTO sqlite_sequence (name, seq) SELECT 'memories', max(
        (SELECT coalesce(max(id), 0) FROM memories),
        (SELECT coalesce(max(CAST(j.value AS INTEGER)), 0) FROM runs, json_each(runs.offered) AS j
            WHERE json_valid(runs.offered)),
        (SELECT coalesce(max(CAST(j.value AS INTEGER)), 0) FROM runs, json_each(runs.cited) AS j
            WHERE json_valid(runs.cited)),
        (SELECT coalesce(max(CAST(j.value AS INTEGER)), 0) FROM runs, json_each(runs.stored) AS j
            WHERE json_valid(runs.stored)));
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # 4: each memory's standing as the run that made it left it: the confidence its synthesis gave
    # the answer (high, medium, low), whether the answer's values were found in the findings it
    # was shown (answer_grounded), and whether this finding holds them (holds_answer). NULL for a
    # memory made before, or by a run that did not judge it: unknown, never shown as a value.
    # The full-text index goes: what is offered is chosen by relevance (rlm.memory.relevance),
    # which a word match alone never reaches.
    """
    ALTER TABLE memories ADD COLUMN answer_confidence TEXT;
    ALTER TABLE memories ADD COLUMN answer_grounded INTEGER;
    ALTER TABLE memories ADD COLUMN holds_answer INTEGER;
    DROP TRIGGER IF EXISTS memories_ai;
    DROP TRIGGER IF EXISTS memories_ad;
    DROP TABLE IF EXISTS memories_fts;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
HEAD_BYTES = 65536


def default_memory_path() -> str:
    """`$RLM_MEMORY`, else memory.sqlite3 in the per-user data directory (beside the traces)."""
    env = os.environ.get("RLM_MEMORY")
    if env:
        return env
    return _default_path()


def _default_path() -> str:
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
    answer_confidence: str | None = None  # high | medium | low, as its run's synthesis judged the answer
    answer_grounded: bool | None = None  # the answer's values were found in the findings shown
    holds_answer: bool | None = None  # this finding is one of those holding them

    @property
    def ref(self) -> str:
        """How prompts and citations name it."""
        return f"M{self.id}"

    @property
    def feedback_confidence(self) -> float:
        """The Wilson lower bound of its success rate under feedback (0 before any)."""
        return rules.confidence(self.successes, self.failures)


@dataclass(frozen=True)
class Kept:
    """A finding an answer cited, to be kept as a memory, with the standing its run gave it."""

    text: str
    evidence: str
    answer_confidence: str | None = None
    answer_grounded: bool | None = None
    holds_answer: bool | None = None


class MemoryUnusable(sqlite3.DatabaseError):
    """The memory database cannot be used: damaged, not a database, locked, unreadable, not a
    regular file. `damaged` says whether setting the file aside (`rlm memory reset`) is the way
    out; `str()` is the reason, fit for one line."""

    def __init__(self, path: str | os.PathLike[str], reason: str, *, damaged: bool) -> None:
        self.path = Path(path)
        self.reason = reason
        self.damaged = damaged
        hint = "; `rlm memory reset` sets it aside and starts afresh" if damaged else ""
        super().__init__(f"{'damaged: ' if damaged else ''}{reason}{hint}")


# SQLite errors that say the file is fine but cannot be reached now (anything else is damage).
_NOT_DAMAGE = ("locked", "busy", "unable to open", "readonly", "read-only", "disk i/o", "permission", "full")


def unusable(path: str | os.PathLike[str], exc: BaseException) -> MemoryUnusable:
    """The MemoryUnusable for an error met while using the database at `path`."""
    if isinstance(exc, MemoryUnusable):
        return exc
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    damaged = isinstance(exc, sqlite3.DatabaseError) and not any(w in reason.lower() for w in _NOT_DAMAGE)
    return MemoryUnusable(path, reason, damaged=damaged)


def set_aside(path: str | os.PathLike[str], why: str = "damaged") -> Path | None:
    """Move the database (and its -wal, -shm) to `<name>.<why>-<time>`: the next open starts
    afresh, and nothing is deleted. None when there is no database; MemoryUnusable when the
    path is not a regular file (rlm moves only what it made)."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise MemoryUnusable(p, "it is not a regular file; rlm leaves it alone", damaged=False)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = p.with_name(f"{p.name}.{why}-{stamp}")
    n = 1
    while os.path.lexists(target):
        n += 1
        target = p.with_name(f"{p.name}.{why}-{stamp}-{n}")
    os.rename(p, target)
    for suffix in ("-wal", "-shm", "-journal"):
        side = p.with_name(p.name + suffix)
        if os.path.lexists(side) and stat.S_ISREG(os.lstat(side).st_mode):
            os.rename(side, target.with_name(target.name + suffix))
    return target


def _prepare(path: Path) -> None:
    """Create the database file 0600 in a 0700 directory, without following a symlink, before
    SQLite opens it (its -wal and -shm are then made with the same mode)."""
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, mode=0o700)
        os.chmod(parent, 0o700)  # the mode given to mkdir is narrowed by the umask, never widened
    elif parent == Path(_default_path()).parent:
        _tighten(parent, 0o700)  # rlm's own directory, perhaps made by an older rlm with 0755
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise MemoryUnusable(path, exc.strerror or str(exc), damaged=False) from exc
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise MemoryUnusable(path, "it is a symbolic link, which rlm does not follow", damaged=False)
    if not stat.S_ISREG(st.st_mode):
        raise MemoryUnusable(path, "it is not a regular file", damaged=False)
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        _tighten(p, 0o600)  # a database an older rlm made 0644


def _tighten(path: Path, mode: int) -> None:
    """chmod a file or directory of the user's own to `mode` when it is more open (never a symlink)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & ~mode:
            os.chmod(path, mode)
    except OSError:
        pass


@dataclass(frozen=True)
class FeedbackChange:
    memory: int
    cited: bool
    before: rules.Standing
    after: rules.Standing


class MemoryStore:
    """An open memory database; use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open (creating it private) and check the database; MemoryUnusable says why it cannot be."""
        self.path = Path(path)
        _prepare(self.path)
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise unusable(self.path, exc) from exc
        try:
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA busy_timeout = 30000")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            # A damaged page would else surface as a traceback in the middle of some later
            # query; the check costs milliseconds on a database kept small by `prune`.
            problem = str(self.db.execute("PRAGMA quick_check(1)").fetchone()[0])
            if problem != "ok":
                raise sqlite3.DatabaseError("failed its integrity check: " + " ".join(problem.split())[:200])
            self._migrate()
        except MemoryUnusable:
            self.db.close()
            raise
        except sqlite3.Error as exc:
            self.db.close()
            raise unusable(self.path, exc) from exc

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
                raise MemoryUnusable(self.path, f"it is from a newer rlm (schema {version})", damaged=False)
            for number in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[number]):
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # -- identity ----------------------------------------------------------------------
    def inputs_matching(self, path: str, size: int, sha256: str) -> list[str]:
        """The input identities (sha256 values) whose memories apply to this file (see the module)."""
        return [sha256, *self.prefixes_matching(path, size)]

    def prefixes_matching(self, path: str, size: int) -> dict[str, int]:
        """The identities of smaller files this one begins with: sha256 -> that file's size. Their
        memories hold for this file's first `size` bytes only."""
        keys: dict[str, int] = {}
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
                keys[str(row["input_sha"])] = old_size
        return keys

    def has_memories_like(self, size: int, head: str) -> bool:
        """Whether a memory was kept of a file of this size beginning with these bytes (`head`:
        head_sha256; a memory kept before heads were recorded has none and may match). Only
        then can its memories be this file's, and its whole hash is worth waiting for."""
        row = self.db.execute(
            "SELECT 1 FROM memories WHERE input_size = ? AND input_head IN (?, '') AND tier != 'retired' LIMIT 1",
            (size, head),
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
        """Keep one finding as a memory (the same text again: the memory kept before, used once more)."""
        with self._write() as db:
            memory_id = _add(
                db, time.time(), input_sha, input_size, input_head, question, run_id, Kept(text, evidence)
            )
        found = self.get(memory_id)
        assert found is not None
        return found

    def keep(
        self,
        *,
        run_id: str,
        input_sha: str | None,
        input_size: int,
        input_head: str,
        question: str,
        kept: list[Kept],
        offered: list[int],
        cited: list[int],
    ) -> list[int]:
        """A run's end, in one transaction: the findings its answer cited become memories (their
        ids returned), and the run is recorded. One transaction with one time, so a run that
        started before it sees none of them, and one that started after sees all
        (`candidates(before=...)`)."""
        now = time.time()
        stored: list[int] = []
        with self._write() as db:
            if input_sha:
                stored = [_add(db, now, input_sha, input_size, input_head, question, run_id, k) for k in kept]
            _record(db, now, run_id, input_sha, offered, cited, stored)
        return stored

    def get(self, memory_id: int) -> Memory | None:
        row = self.db.execute("SELECT * FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return _memory(row) if row is not None else None

    def candidates(self, inputs: list[str], before: float | None = None) -> list[Memory]:
        """The memories of these inputs that may be offered: neither expired nor retired, and made
        at or before `before` (a run's start: a run sees only what runs finished before it
        started had kept), oldest first."""
        if not inputs:
            return []
        now = time.time()
        marks = ",".join("?" * len(inputs))
        rows = self.db.execute(
            f"SELECT * FROM memories WHERE input_sha IN ({marks}) AND created <= ? ORDER BY id",
            [*inputs, now if before is None else before],
        ).fetchall()
        return [m for m in map(_memory, rows) if not rules.expired(m.tier, m.last_used, now)]

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
            # A memory made after the run cannot be one it recorded (an id reused by a database
            # from before schema 3): feedback on the run leaves it alone.
            ran_at = float(db.execute("SELECT at FROM runs WHERE run_id = ?", (run_id,)).fetchone()["at"])
            for memory_id, was_cited in [
                *((m, True) for m in sorted(cited)),
                *((m, False) for m in sorted(offered)),
            ]:
                row = db.execute(
                    "SELECT * FROM memories WHERE id = ? AND created <= ?", (memory_id, ran_at)
                ).fetchone()
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
    # Both are an economy, never a condition of the run: a database that fails here (damaged, or
    # locked past the busy timeout) costs the saving only, and `at` is the entry's last use.
    def cached(self, key: str) -> tuple[str, int, int] | None:
        try:
            row = self.db.execute(
                "SELECT answer, prompt_tokens, completion_tokens FROM subcalls WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            with self._write() as db:
                db.execute("UPDATE subcalls SET hits = hits + 1, at = ? WHERE key = ?", (time.time(), key))
        except (sqlite3.OperationalError, sqlite3.DatabaseError):
            return None
        return str(row["answer"]), int(row["prompt_tokens"]), int(row["completion_tokens"])

    def cache(self, key: str, model: str, answer: str, prompt_tokens: int, completion_tokens: int) -> None:
        try:
            with self._write() as db:
                db.execute(
                    "INSERT OR REPLACE INTO subcalls (key, model, answer, prompt_tokens, completion_tokens, at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (key, model, answer, prompt_tokens, completion_tokens, time.time()),
                )
        except (sqlite3.OperationalError, sqlite3.DatabaseError):
            pass

    # -- bounds ------------------------------------------------------------------------------
    def prune(self, now: float | None = None) -> Pruned:
        """Delete what the bounds of rlm.memory.rules no longer keep; returns what went."""
        now = time.time() if now is None else now
        with self._write() as db:
            unused = [
                int(r["id"])
                for r in db.execute(
                    "SELECT id FROM memories WHERE tier != 'pattern' AND last_used < ? ORDER BY id",
                    (now - rules.MEMORY_UNUSED_DAYS * 86400,),
                )
            ]
            for memory_id in unused:
                db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            (count,) = db.execute("SELECT count(*) FROM memories").fetchone()
            over = [
                int(r["id"])
                for r in db.execute(
                    "SELECT id FROM memories ORDER BY (tier = 'retired') DESC, last_used, id LIMIT ?",
                    (max(0, int(count) - rules.MAX_MEMORIES),),
                )
            ]
            for memory_id in over:
                db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
            runs = db.execute("DELETE FROM runs WHERE at < ?", (now - rules.RUN_DAYS * 86400,)).rowcount
            runs += _over_cap(db, "runs", "run_id", "at", rules.MAX_RUNS)
            subcalls = db.execute(
                "DELETE FROM subcalls WHERE at < ?", (now - rules.SUBCALL_UNUSED_DAYS * 86400,)
            ).rowcount
            subcalls += _over_cap(db, "subcalls", "key", "at", rules.MAX_SUBCALLS)
            kept = 0
            too_much: list[str] = []
            for row in db.execute("SELECT key, length(answer) AS n FROM subcalls ORDER BY at DESC"):
                kept += int(row["n"] or 0)
                if kept > rules.MAX_SUBCALL_BYTES:
                    too_much.append(str(row["key"]))
            for key in too_much:
                db.execute("DELETE FROM subcalls WHERE key = ?", (key,))
            subcalls += len(too_much)
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('pruned_at', ?)", (repr(now),))
        return Pruned(unused=unused, over_cap=sorted(over), runs=runs, subcalls=subcalls)

    def compact(self) -> None:
        """Give the pages freed by deletions back to the file system (VACUUM keeps the file's mode)."""
        self.db.execute("VACUUM")

    def prune_if_due(self, now: float | None = None) -> Pruned | None:
        """`prune`, at most once a day (every run asks; all but the first of the day pay one read)."""
        now = time.time() if now is None else now
        row = self.db.execute("SELECT value FROM meta WHERE key = 'pruned_at'").fetchone()
        try:
            last = float(row["value"]) if row is not None else 0.0
        except ValueError:
            last = 0.0
        if 0 <= now - last < 86400:
            return None
        return self.prune(now)


@dataclass(frozen=True)
class Pruned:
    """What one prune removed: memory ids (unused too long; past the cap) and counts of the rest."""

    unused: list[int] = field(default_factory=list)
    over_cap: list[int] = field(default_factory=list)
    runs: int = 0
    subcalls: int = 0


def _over_cap(db: sqlite3.Connection, table: str, key: str, first_out: str, cap: int) -> int:
    """Delete the rows of `table` past the newest `cap` (those sorting first by `first_out` go)."""
    (count,) = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    if int(count) <= cap:
        return 0
    return int(
        db.execute(
            f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} ORDER BY {first_out} LIMIT ?)",
            (int(count) - cap,),
        ).rowcount
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


def _add(
    db: sqlite3.Connection,
    now: float,
    input_sha: str,
    input_size: int,
    input_head: str,
    question: str,
    run_id: str,
    k: Kept,
) -> int:
    """Insert one memory in the open transaction; the id of the live memory of the same text
    about the same input when there is one (its standing stays that of the run that made it,
    about its own question: a later run's use is counted as a citation)."""
    existing = db.execute(
        "SELECT id FROM memories WHERE input_sha = ? AND text = ? AND tier != 'retired'", (input_sha, k.text)
    ).fetchone()
    if existing is not None:
        db.execute("UPDATE memories SET last_used = ? WHERE id = ?", (now, existing["id"]))
        return int(existing["id"])
    tags = " ".join(sorted(tags_of(f"{question} {k.text}")))
    cur = db.execute(
        "INSERT INTO memories (input_sha, input_size, question, text, evidence, run_id, tags, created, "
        "last_used, input_head, answer_confidence, answer_grounded, holds_answer) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            input_sha,
            input_size,
            question,
            k.text,
            k.evidence,
            run_id,
            tags,
            now,
            now,
            input_head,
            k.answer_confidence,
            k.answer_grounded,
            k.holds_answer,
        ),
    )
    return int(cur.lastrowid or 0)


def _record(
    db: sqlite3.Connection,
    now: float,
    run_id: str,
    input_sha: str | None,
    offered: list[int],
    cited: list[int],
    stored: list[int],
) -> None:
    """Record a run in the open transaction; bump the counts and last use of its memories."""
    db.execute(
        "INSERT OR REPLACE INTO runs (run_id, input_sha, at, offered, cited, stored) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, input_sha, now, json.dumps(offered), json.dumps(cited), json.dumps(stored)),
    )
    for memory_id in offered:
        db.execute("UPDATE memories SET offered = offered + 1, last_used = ? WHERE id = ?", (now, memory_id))
    for memory_id in dict.fromkeys([*cited, *stored]):
        db.execute("UPDATE memories SET cited = cited + 1, last_used = ? WHERE id = ?", (now, memory_id))


_FLAGS = ("answer_grounded", "holds_answer")  # 0/1/NULL in SQLite, bool | None in a Memory


def _memory(row: sqlite3.Row) -> Memory:
    values = {k: row[k] for k in row.keys()}
    for name in _FLAGS:
        values[name] = None if values[name] is None else bool(values[name])
    return Memory(**values)


def _standing(row: sqlite3.Row) -> rules.Standing:
    return rules.Standing(
        score=float(row["score"]),
        cited=int(row["cited"]),
        successes=int(row["successes"]),
        failures=int(row["failures"]),
        tier=row["tier"],
    )
