"""What outlives a run can be trusted and heals: a damaged memory database is said in one line
and reset, ids are never reused, memory and traces are bounded, the database is the user's
alone, and a grown log's old findings are offered as about its first lines only. Through the
CLI, as users run it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli, write_script

ACCESS = FIXTURES / "access.log"
COUNT_404 = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _db(home: Path) -> Path:
    return home / ".data" / "rlm" / "memory.sqlite3"


def _traces(home: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((home / "traces").glob("*.json"))]


def _ask(
    home: Path, log: Path, name: str, code: str, answer: str, cite: str = "F1"
) -> tuple[dict, list[str]]:
    """One scripted `rlm ask` citing `cite`; returns its trace and the contents of every prompt."""
    calls = home / f"{name}.jsonl"
    model = write_script(
        home / f"{name}.json",
        {
            "log": str(calls),
            "replies": [
                {"tool": "execute", "args": {"code": code}},
                {"tool": "final", "args": {"answer": answer}},
                json.dumps({"answer": answer, "explanation": ".", "citations": [cite]}),
            ],
        },
    )
    proc = run_cli(["ask", str(log), f"question {name}?", "-m", model], cwd=home)
    assert proc.returncode == 0 and proc.stdout == f"{answer}\n", proc.stderr
    assert "Traceback" not in proc.stderr
    prompts = [json.dumps(json.loads(line)["messages"]) for line in calls.read_text().splitlines()]
    return _traces(home)[-1], prompts


def _garble_pages(db: Path, tables: list[str]) -> None:
    """Overwrite the root pages of these tables (and their indexes) with garbage."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    marks = ",".join("?" * len(tables))
    roots = [
        r[0] for r in con.execute(f"SELECT rootpage FROM sqlite_master WHERE tbl_name IN ({marks})", tables)
    ]
    con.close()
    with open(db, "r+b") as fh:
        for root in roots:
            if root:
                fh.seek((root - 1) * page)
                fh.write(bytes(range(256)) * (page // 256))


def _filled_db(home: Path) -> Path:
    """A real memory database (made the way runs make it), with memories and cached sub-calls."""
    db = home / "filled.sqlite3"
    script = (
        "import sys\nfrom rlm.memory.store import MemoryStore\n"
        "with MemoryStore(sys.argv[1]) as s:\n"
        "    for i in range(200):\n"
        "        s.add(input_sha=f'x{i % 7}', input_size=10, question='how many?', text=f'finding {i} ' * 30,"
        " evidence='e', run_id='r')\n"
        "        s.cache(f'k{i}', 'm', 'answer ' * 40, 10, 10)\n"
        "    s.db.execute('PRAGMA wal_checkpoint(TRUNCATE)')\n"
    )
    subprocess.run(
        [os.environ.get("PYTHON", "python"), "-c", script, str(db)], check=True, env={**os.environ}
    )
    return db


@pytest.fixture
def damaged(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Three kinds of damage: bytes that are no database, a database cut short, pages garbled."""
    good = _filled_db(tmp_path)
    noise = tmp_path / "noise.sqlite3"
    noise.write_bytes(bytes(range(256)) * 20)
    cut = tmp_path / "cut.sqlite3"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    garbled = tmp_path / "garbled.sqlite3"
    shutil.copy(good, garbled)
    _garble_pages(garbled, ["memories"])
    yield {"noise": noise, "cut": cut, "garbled": garbled}


@pytest.mark.parametrize("kind", ["noise", "cut", "garbled"])
def test_every_memory_command_ends_a_damaged_database_in_one_line_and_forget_all_resets_it(
    tmp_path: Path, damaged: dict[str, Path], kind: str
) -> None:
    db = damaged[kind]
    env = {"RLM_MEMORY": str(db)}
    for command in (["list"], ["show", "M1"], ["stats"], ["forget", "M1"]):
        proc = run_cli(["memory", *command], cwd=tmp_path, env=env)
        assert proc.returncode == 3, (command, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, (command, proc.stderr)
        assert str(db) in proc.stderr and "rlm memory reset" in proc.stderr, (command, proc.stderr)
    proc = run_cli(["memory", "forget", "--all"], cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    aside = list(tmp_path.glob(f"{db.name}.damaged-*"))
    assert len(aside) == 1 and "set aside" in proc.stdout, proc.stdout
    assert run_cli(["memory", "list"], cwd=tmp_path, env=env).stdout == "(no memories)\n"


def test_rlm_memory_reset_sets_a_damaged_database_aside(tmp_path: Path, damaged: dict[str, Path]) -> None:
    proc = run_cli(["memory", "reset"], cwd=tmp_path, env={"RLM_MEMORY": str(damaged["cut"])})
    assert proc.returncode == 0 and "set the memory database" in proc.stdout, proc.stderr
    assert list(tmp_path.glob("cut.sqlite3.damaged-*")) and not damaged["cut"].exists()


def test_ask_over_a_database_damaged_in_its_sub_call_cache_goes_on_and_says_so_once(tmp_path: Path) -> None:
    db = _filled_db(tmp_path)
    _garble_pages(db, ["subcalls"])
    model = write_script(
        tmp_path / "bots.json",
        {
            "replies": [
                {
                    "tool": "llm_query",
                    "args": {"question": "Which bots appear?", "start_line": 1, "end_line": 40},
                },
                {"tool": "final", "args": {"answer": "Googlebot"}},
                json.dumps({"answer": "Googlebot", "explanation": ".", "citations": ["F1"]}),
            ],
            "rules": [{"match": "Excerpt", "reply": "Googlebot and bingbot"}],
        },
    )
    proc = run_cli(["ask", str(ACCESS), "Which bots crawl?", "-m", model, "--memory", str(db)], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "Googlebot\n", proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert proc.stderr.count(str(db)) == 1 and "rlm memory reset" in proc.stderr, proc.stderr


def test_ids_are_never_reused_and_feedback_on_an_old_run_moves_only_its_own(tmp_path: Path) -> None:
    first, _ = _ask(tmp_path, ACCESS, "a", COUNT_404, "35")
    assert first["memory"]["stored"] == ["M1"]
    forgot = run_cli(["memory", "forget", "M1"], cwd=tmp_path)
    assert forgot.stdout == "forgot 1 memory\n", forgot.stderr
    second, _ = _ask(tmp_path, ACCESS, "b", "print(len(context_lines))", "2000")
    assert second["memory"]["stored"] == ["M2"], "the forgotten M1's id went to a new memory"
    proc = run_cli(["feedback", first["run_id"], "failed"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"run {first['run_id']}: no memories to adjust\n"
    shown = json.loads(run_cli(["memory", "show", "M2", "--json"], cwd=tmp_path).stdout)
    assert shown["score"] == 0.5


def test_an_older_database_is_migrated_past_every_id_its_runs_named(tmp_path: Path) -> None:
    db = _db(tmp_path)
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE memories (id INTEGER PRIMARY KEY, input_sha TEXT NOT NULL, input_size INTEGER NOT NULL,"
        " question TEXT NOT NULL, text TEXT NOT NULL, evidence TEXT NOT NULL, run_id TEXT NOT NULL,"
        " tags TEXT NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, score REAL NOT NULL DEFAULT 0.5,"
        " offered INTEGER NOT NULL DEFAULT 0, cited INTEGER NOT NULL DEFAULT 0,"
        " successes INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,"
        " tier TEXT NOT NULL DEFAULT 'working', input_head TEXT NOT NULL DEFAULT '');"
        "CREATE INDEX memories_input ON memories (input_sha);"
        "CREATE VIRTUAL TABLE memories_fts USING fts5 (text, question, tags, content='memories',"
        " content_rowid='id');"
        "CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN INSERT INTO memories_fts (rowid, text,"
        " question, tags) VALUES (new.id, new.text, new.question, new.tags); END;"
        "CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN INSERT INTO memories_fts (memories_fts,"
        " rowid, text, question, tags) VALUES ('delete', old.id, old.text, old.question, old.tags); END;"
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, input_sha TEXT, at REAL NOT NULL, offered TEXT NOT NULL,"
        " cited TEXT NOT NULL, stored TEXT NOT NULL, feedback TEXT);"
        "CREATE TABLE subcalls (key TEXT PRIMARY KEY, model TEXT NOT NULL, answer TEXT NOT NULL,"
        " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, at REAL NOT NULL,"
        " hits INTEGER NOT NULL DEFAULT 0);"
        "INSERT INTO runs VALUES ('old-run', 'x', 0, '[]', '[]', '[7]', NULL);"
        "PRAGMA user_version = 2;"
    )
    con.close()
    trace, _ = _ask(tmp_path, ACCESS, "a", COUNT_404, "35")
    assert trace["memory"]["stored"] == ["M8"], "an id an old run names was handed out again"


def _fake_traces(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(n):
        p = folder / f"2020-01-01T00-{i // 60:02d}-{i % 60:02d}-{i % 65536:04x}.json"
        p.write_text("{}")
        os.utime(p, (1_600_000_000 + i, 1_600_000_000 + i))
        made.append(p)
    return made


def _age_memories(home: Path, days: float) -> None:
    con = sqlite3.connect(_db(home))
    con.execute("UPDATE memories SET last_used = ?", (time.time() - days * 86400,))
    if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
        con.execute("DELETE FROM meta")  # as if the last prune was long ago
    con.commit()
    con.close()


def test_memory_and_traces_are_bounded_by_runs_once_a_day_and_by_prune(tmp_path: Path) -> None:
    _ask(tmp_path, ACCESS, "a", COUNT_404, "35")
    _age_memories(tmp_path, 40)
    second, _ = _ask(tmp_path, ACCESS, "b", "print(len(context_lines))", "2000")
    listed = json.loads(run_cli(["memory", "list", "--json"], cwd=tmp_path).stdout)["memories"]
    assert [m["id"] for m in listed] == ["M2"], "a run applies the bounds itself (once a day)"
    _age_memories(tmp_path, 40)
    folder = tmp_path / ".data" / "rlm" / "traces"  # rlm's own trace folder
    made = _fake_traces(folder, 1003)
    mine = folder / "notes.json"  # not a trace name: never rlm's to delete
    mine.write_text("keep me")
    os.utime(mine, (0, 0))
    proc = run_cli(["memory", "prune"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "removed 1 memory unused for 30 days: M2" in proc.stdout, proc.stdout
    assert "removed 3 traces" in proc.stdout, proc.stdout
    assert [p.exists() for p in made[:3]] == [False] * 3 and all(p.exists() for p in made[3:])
    assert mine.read_text() == "keep me"
    assert json.loads(run_cli(["memory", "list", "--json"], cwd=tmp_path).stdout) == {"memories": []}


@pytest.fixture
def shared_home() -> Iterator[Path]:
    """A home another user could reach (pytest's own tmp folders are 0700 and would hide all)."""
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as a second user")
    home = Path(tempfile.mkdtemp(prefix="rlm-trust-memory-", dir="/tmp"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_the_memory_database_is_the_users_alone(shared_home: Path) -> None:
    _ask(shared_home, ACCESS, "a", COUNT_404, "35")
    db = _db(shared_home)
    for target in (db, *[p for p in (Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]):
        assert oct(target.stat().st_mode & 0o777) == "0o600", target
        denied = subprocess.run([*NOBODY, "cat", str(target)], capture_output=True)
        assert denied.returncode != 0, f"another user read {target}"
    assert oct(db.parent.stat().st_mode & 0o777) == "0o700"
    listed = subprocess.run([*NOBODY, "ls", str(db.parent)], capture_output=True)
    assert listed.returncode != 0, "another user listed the memory's folder"


def test_a_symlink_where_the_database_goes_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.sqlite3"
    link = tmp_path / "memory.sqlite3"
    link.symlink_to(elsewhere)
    proc = run_cli(["memory", "list"], cwd=tmp_path, env={"RLM_MEMORY": str(link)})
    assert proc.returncode == 3 and "symbolic link" in proc.stderr, proc.stderr
    assert not elsewhere.exists()


def test_a_grown_logs_old_finding_is_offered_only_as_about_its_first_lines(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    shutil.copy(ACCESS, log)
    _ask(tmp_path, log, "a", COUNT_404, "35")
    with open(log, "ab") as fh:
        fh.write(ACCESS.read_bytes()[:20_000])  # the log grew: more lines, more 404s perhaps
    trace, prompts = _ask(tmp_path, log, "404s", "print(len(context_lines))", "2000", cite="M1")
    assert trace["memory"]["offered"] == ["M1"]
    scope = "first 2,000 lines only"
    root, synthesis = prompts[0], prompts[-1]
    assert "[M1]" in root and scope in root, root
    assert scope in synthesis and "gave: 35" in synthesis
