"""Memory across runs (rlm.memory), through the CLI as users run it: what a run establishes is
offered to the next run over the same content, earns or loses its place by feedback, and
sub-calls answered once are not paid for again."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, cli_env, run_cli, write_script

from rlm.memory import rules
from rlm.memory.store import MemoryStore

ACCESS = FIXTURES / "access.log"
COUNT_404 = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'


def _traces(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "traces").glob("*.json"))]


def _first_run(tmp_path: Path, log: Path) -> dict:
    model = write_script(
        tmp_path / "first.json",
        [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "final", "args": {"answer": "35"}},
            json.dumps({"answer": "35", "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    )
    proc = run_cli(["ask", str(log), "How many requests returned status 404?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "35\n"
    return _traces(tmp_path)[-1]


def _second_run(
    tmp_path: Path, log: Path, *flags: str, cite: str = "M1"
) -> tuple[subprocess.CompletedProcess, dict, str]:
    script = {
        "log": str(tmp_path / "second-calls.jsonl"),
        "replies": [
            {"tool": "peek", "args": {"start": 1, "length": 2}},
            {"tool": "final", "args": {"answer": "35"}},
            json.dumps({"answer": "35", "explanation": "Established earlier.", "citations": [cite]}),
        ],
    }
    model = write_script(tmp_path / "second.json", script)
    (tmp_path / "second-calls.jsonl").unlink(missing_ok=True)
    proc = run_cli(["ask", str(log), "Were there many 404 responses?", "-m", model, *flags], cwd=tmp_path)
    prompt = json.loads((tmp_path / "second-calls.jsonl").read_text().splitlines()[0])["messages"][1][
        "content"
    ]
    return proc, _traces(tmp_path)[-1], prompt


def test_a_second_question_gets_the_first_runs_cited_finding_and_can_cite_it(tmp_path: Path) -> None:
    first = _first_run(tmp_path, ACCESS)
    assert first["memory"]["stored"] == ["M1"] and first["memory"]["offered"] == []
    proc, second, prompt = _second_run(tmp_path, ACCESS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "35\n"
    assert "[ESTABLISHED earlier]" in prompt and "[M1]" in prompt and "gave: 35" in prompt
    assert "How many requests returned status 404?" in prompt  # the question it answered
    assert second["memory"]["offered"] == ["M1"] and second["memory"]["cited"] == ["M1"]
    assert second["synthesis"]["citations"] == ["M1"] and second["status"] == "final"
    with MemoryStore(tmp_path / ".data" / "rlm" / "memory.sqlite3") as store:
        m = store.get(1)
        assert m is not None and m.offered == 1 and m.cited == 2  # stored by run 1, cited by run 2
        assert store.run(second["run_id"]) == {
            "run_id": second["run_id"],
            "offered": [1],
            "cited": [1],
            "stored": [],
            "feedback": None,
        }


def test_identity_is_the_content_renamed_matches_grown_matches_changed_does_not(tmp_path: Path) -> None:
    original = tmp_path / "access.log"
    shutil.copy(ACCESS, original)
    _first_run(tmp_path, original)
    renamed = tmp_path / "renamed-copy.log"
    shutil.copy(ACCESS, renamed)
    _, second, prompt = _second_run(tmp_path, renamed)
    assert second["memory"]["offered"] == ["M1"], "a renamed copy is the same content"
    grown = tmp_path / "grown.log"
    grown.write_bytes(ACCESS.read_bytes() + ACCESS.read_bytes().splitlines(keepends=True)[0] * 3)
    _, third, _ = _second_run(tmp_path, grown)
    assert third["memory"]["offered"] == ["M1"], "a log that only grew keeps what held for its old part"
    changed = tmp_path / "changed.log"
    data = bytearray(ACCESS.read_bytes())
    data[100:103] = b"XYZ"
    changed.write_bytes(bytes(data))
    proc, fourth, prompt = _second_run(tmp_path, changed, cite="F1")
    assert fourth["memory"]["offered"] == [] and "[ESTABLISHED earlier]" not in prompt
    assert proc.returncode == 0


def test_no_memory_makes_a_run_independent_of_history(tmp_path: Path) -> None:
    _first_run(tmp_path, ACCESS)
    db = tmp_path / ".data" / "rlm" / "memory.sqlite3"
    before = db.read_bytes()
    proc, second, prompt = _second_run(tmp_path, ACCESS, "--no-memory", cite="F1")
    assert proc.returncode == 0, proc.stderr
    assert "[ESTABLISHED earlier]" not in prompt and "memory" not in second
    with MemoryStore(db) as store:
        assert [m.id for m in store.memories()] == [1] and store.run(second["run_id"]) is None
    assert before  # the database was there and was neither read into the run nor written by it


FEEDBACK_RULES = [
    # (standing before, outcome, cited, score after, tier after)
    (rules.Standing(0.5, 1, 0, 0, "working"), "worked", True, 0.7, "working"),  # cited once: stays working
    (rules.Standing(0.5, 2, 0, 0, "working"), "worked", True, 0.7, "history"),  # >= 0.7 and cited twice
    (rules.Standing(0.5, 2, 0, 0, "working"), "failed", True, 0.2, "working"),
    (rules.Standing(0.4, 2, 0, 0, "working"), "failed", True, 0.1, "retired"),  # below 0.2: retired
    (rules.Standing(0.5, 2, 0, 0, "working"), "partial", True, 0.55, "working"),
    (rules.Standing(0.5, 2, 0, 0, "working"), "worked", False, 0.45, "working"),  # offered, not cited
    (rules.Standing(0.8, 3, 4, 0, "history"), "worked", True, 1.0, "pattern"),  # 5 successes, cited 3
    (rules.Standing(0.8, 3, 3, 0, "history"), "worked", True, 1.0, "history"),  # only 4 successes
    (rules.Standing(0.6, 5, 6, 0, "pattern"), "failed", True, 0.3, "history"),  # demoted below 0.4
    (rules.Standing(0.95, 5, 6, 0, "pattern"), "worked", True, 1.0, "pattern"),  # capped at 1
    (rules.Standing(0.02, 5, 0, 9, "history"), "worked", False, 0.0, "retired"),  # floored at 0
]


@pytest.mark.parametrize(("before", "outcome", "cited", "score", "tier"), FEEDBACK_RULES)
def test_feedback_moves_score_and_tier_by_the_rules(
    before: rules.Standing, outcome: rules.Outcome, cited: bool, score: float, tier: str
) -> None:
    after = rules.apply_feedback(before, outcome, cited=cited)
    assert after.score == pytest.approx(score) and after.tier == tier


def test_feedback_through_the_cli_and_memory_commands(tmp_path: Path) -> None:
    first = _first_run(tmp_path, ACCESS)
    _, second, _ = _second_run(tmp_path, ACCESS)
    proc = run_cli(["feedback", "last", "worked"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "M1: cited; score 0.50 -> 0.70, working -> history\n"  # cited twice now
    again = run_cli(["feedback", second["run_id"], "failed"], cwd=tmp_path)
    assert again.returncode == 0 and "already had feedback (worked)" in again.stdout
    proc = run_cli(["feedback", first["run_id"], "failed"], cwd=tmp_path)
    assert proc.stdout == "M1: cited; score 0.70 -> 0.40, history -> history\n"
    listed = json.loads(run_cli(["memory", "list", str(ACCESS), "--json"], cwd=tmp_path).stdout)
    assert [(m["id"], m["tier"], m["score"]) for m in listed["memories"]] == [("M1", "history", 0.4)]
    shown = run_cli(["memory", "show", "M1"], cwd=tmp_path).stdout
    assert "text: `print(sql(" in shown and "gave: 35" in shown and f"of run {first['run_id']}" in shown
    stats = run_cli(["memory", "stats"], cwd=tmp_path).stdout
    assert stats.startswith("1 memories; offered 1 times, cited 2 times")
    assert run_cli(["feedback", "no-such-run", "worked"], cwd=tmp_path).returncode == 3
    assert run_cli(["feedback", "last", "great"], cwd=tmp_path).returncode == 2
    assert run_cli(["memory", "forget"], cwd=tmp_path).returncode == 2
    gone = run_cli(["memory", "forget", "--file", str(ACCESS)], cwd=tmp_path)
    assert gone.stdout == "forgot 1 memory\n"
    assert json.loads(run_cli(["memory", "list", "--json"], cwd=tmp_path).stdout) == {"memories": []}


def test_a_sub_call_answered_before_is_not_sent_again(tmp_path: Path) -> None:
    def run(name: str, *flags: str) -> tuple[dict, list[dict]]:
        calls = tmp_path / f"{name}.jsonl"
        script = {
            "log": str(calls),
            "replies": [
                {
                    "tool": "llm_query",
                    "args": {"question": "Which bots appear?", "start_line": 1, "end_line": 40},
                },
                {"tool": "final", "args": {"answer": "Googlebot"}},
                json.dumps({"answer": "Googlebot", "explanation": "From the sub-call.", "citations": ["F1"]}),
            ],
            "rules": [{"match": "Excerpt", "reply": "Googlebot and bingbot"}],
        }
        # One script file: the model string, half of the cache's key, is the same each time.
        model = write_script(tmp_path / "bots.json", script)
        proc = run_cli(["ask", str(ACCESS), "Which bots crawl the site?", "-m", model, *flags], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return _traces(tmp_path)[-1], [json.loads(x) for x in calls.read_text().splitlines()]

    first, first_calls = run("a")
    second, second_calls = run("b")
    excerpt = [c for c in first_calls if "Excerpt" in json.dumps(c)]
    assert len(excerpt) == 1 and not [c for c in second_calls if "Excerpt" in json.dumps(c)]
    assert (
        second["subcalls"][0]["cached"] is True and second["subcalls"][0]["answer"] == "Googlebot and bingbot"
    )
    saved = first["subcalls"][0]["prompt_tokens"] + first["subcalls"][0]["completion_tokens"]
    assert second["memory"]["cache_hits"] == 1 and second["memory"]["cache_saved_tokens"] == saved > 0
    assert second["totals"]["calls"] == first["totals"]["calls"] - 1
    third, third_calls = run("c", "--no-cache")
    assert (
        len([c for c in third_calls if "Excerpt" in json.dumps(c)]) == 1
        and "cached" not in third["subcalls"][0]
    )


def test_two_concurrent_runs_write_the_database_without_loss(tmp_path: Path) -> None:
    """Two `rlm ask` at once, each storing its finding, then two writers hammering the store."""
    models = []
    for i, code in enumerate(
        ('print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])', "print(len(context_lines))")
    ):
        models.append(
            write_script(
                tmp_path / f"c{i}.json",
                [
                    {"tool": "execute", "args": {"code": code}},
                    {"tool": "final", "args": {"answer": "x"}},
                    json.dumps({"answer": ["35", "2000"][i], "explanation": ".", "citations": ["F1"]}),
                ],
            )
        )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rlm", "ask", str(ACCESS), f"question {i}", "-m", m],
            cwd=tmp_path,
            env=cli_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, m in enumerate(models)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    db = tmp_path / ".data" / "rlm" / "memory.sqlite3"
    with MemoryStore(db) as store:
        assert sorted(m.text.split("gave: ")[1] for m in store.memories()) == ["2000", "35"]
    writer = (
        "import sys\nfrom rlm.memory.store import MemoryStore\n"
        "with MemoryStore(sys.argv[1]) as s:\n"
        "    for i in range(100):\n"
        "        s.add(input_sha='x', input_size=1, question='q', text=f'{sys.argv[2]}-{i}', evidence='e', run_id='r')\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(db), name]) for name in ("a", "b")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with MemoryStore(db) as store:
        assert len(store.memories("x")) == 200


def test_a_memory_database_that_cannot_be_used_is_said_and_the_run_goes_on(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.sqlite3"
    bad.write_text("this is not sqlite")
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "final", "args": {"answer": "35"}},
            json.dumps({"answer": "35", "explanation": ".", "citations": ["F1"]}),
        ],
    )
    proc = run_cli(["ask", str(ACCESS), "404s?", "-m", model, "--memory", str(bad)], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "35\n"
    assert f"the memory {bad} cannot be used" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(sqlite3.DatabaseError):
        MemoryStore(bad)


def test_a_low_confidence_answer_gets_one_widened_pass(tmp_path: Path) -> None:
    """The synthesis calls its first answer unsure: one more pass, with twice the context and the
    first answer and its reason in view, writes the answer; the trace keeps both. --no-reroute
    keeps the first."""
    unsure = json.dumps(
        {
            "answer": "35",
            "explanation": ".",
            "citations": ["F1"],
            "confidence": "low",
            "confidence_reason": "the grep and the count may differ",
        }
    )
    sure = json.dumps(
        {
            "answer": "35",
            "explanation": "The SQL count settles it.",
            "citations": ["F1"],
            "confidence": "high",
            "confidence_reason": "an exact count",
        }
    )

    def run(name: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
        calls = tmp_path / f"{name}.jsonl"
        script = {
            "log": str(calls),
            "replies": [
                {"tool": "execute", "args": {"code": COUNT_404}},
                {"tool": "final", "args": {"answer": "35"}},
                unsure,
                sure,
            ],
        }
        model = write_script(tmp_path / f"{name}.json", script)
        proc = run_cli(["ask", str(ACCESS), "404s?", "-m", model, "--no-memory", *flags], cwd=tmp_path)
        asked = [json.loads(x)["messages"][-1]["content"] for x in calls.read_text().splitlines()]
        return proc, _traces(tmp_path)[-1], asked

    proc, trace, asked = run("widened")
    assert proc.returncode == 0 and proc.stdout == "35\n", proc.stderr
    synthesis = trace["synthesis"]
    assert synthesis["confidence"] == "high" and synthesis["explanation"] == "The SQL count settles it."
    assert synthesis["first_attempt"]["confidence"] == "low"
    assert synthesis["first_attempt"]["confidence_reason"] == "the grep and the count may differ"
    assert "low confidence (the grep and the count may differ)" in asked[-1]
    assert trace["totals"]["calls"] == 4
    proc, trace, asked = run("kept", "--no-reroute")
    assert proc.stdout == "35\n" and trace["synthesis"]["confidence"] == "low"
    assert trace["synthesis"]["first_attempt"] is None and trace["totals"]["calls"] == 3


def test_an_older_database_is_migrated_and_an_unrelated_file_is_ruled_out_by_its_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm.memory import store as store_mod

    db = tmp_path / "old.sqlite3"
    con = sqlite3.connect(db)
    con.executescript(store_mod.MIGRATIONS[0] + "PRAGMA user_version = 1;")
    con.execute(
        "INSERT INTO memories (input_sha, input_size, question, text, evidence, run_id, tags, created, last_used) "
        "VALUES ('abc', 100000, 'q', 'kept across the upgrade', 'n0.s1', 'r1', 'kept', 0, 0)"
    )
    con.commit()
    con.close()
    with MemoryStore(db) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION == 4
        (old,) = store.memories()
        assert old.text == "kept across the upgrade" and old.input_head == ""
    # A smaller file with other first bytes is not hashed whole to compare prefixes.
    big = tmp_path / "big.log"
    big.write_bytes(b"B" * 300_000)
    other = tmp_path / "other.log"
    other.write_bytes(b"O" * 200_000)
    hashed: list[int] = []
    real = store_mod._prefix_sha256
    monkeypatch.setattr(
        store_mod, "_prefix_sha256", lambda path, size: hashed.append(size) or real(path, size)
    )
    with MemoryStore(tmp_path / "new.sqlite3") as store:
        import hashlib

        store.add(
            input_sha=hashlib.sha256(other.read_bytes()).hexdigest(),
            input_size=200_000,
            question="q",
            text="about the other file",
            evidence="e",
            run_id="r",
            input_head=store_mod.head_sha256(str(other)),
        )
        grown = tmp_path / "grown.log"
        grown.write_bytes(other.read_bytes() + b"O" * 1000)
        assert len(store.inputs_matching(str(big), 300_000, "x")) == 1 and hashed == []
        assert len(store.inputs_matching(str(grown), 201_000, "y")) == 2 and hashed == [200_000]


def test_a_rerun_neither_reads_nor_adds_to_the_memory(tmp_path: Path) -> None:
    first = _first_run(tmp_path, ACCESS)
    db = tmp_path / ".data" / "rlm" / "memory.sqlite3"
    assert oct(db.stat().st_mode & 0o777) == "0o600"  # findings quote the user's data
    proc = run_cli(["replay", "last", "--rerun"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rerun = _traces(tmp_path)[-1]
    assert rerun["run_id"] != first["run_id"] and "memory" not in rerun
    with MemoryStore(db) as store:
        assert [m.id for m in store.memories()] == [1] and store.run(rerun["run_id"]) is None


def test_a_new_file_is_not_hashed_whole_for_memories_of_other_files(tmp_path: Path) -> None:
    """recall() awaits the input's whole sha256 (a scan that starts once the table is built)
    only when memory holds a file of the same size and first bytes: memories of other files,
    however many, leave a first question about a new file waiting for neither. The same file,
    and a file it grew from, are still recalled."""
    import hashlib

    from rlm.memory.recall import recall
    from rlm.memory.store import head_sha256

    new = tmp_path / "new.log"
    new.write_bytes(b"N" * 300_000)
    same_size = tmp_path / "same_size.log"
    same_size.write_bytes(b"S" * 300_000)
    smaller = tmp_path / "smaller.log"
    smaller.write_bytes(b"M" * 100_000)
    tiny = tmp_path / "tiny.log"
    tiny.write_bytes(b"T" * 100)
    hashed: list[str] = []

    def whole_hash(path: Path) -> Any:
        def run() -> str:
            hashed.append(path.name)
            return hashlib.sha256(path.read_bytes()).hexdigest()

        return run

    def remember(store: MemoryStore, path: Path, text: str, head: str | None = None) -> None:
        store.add(
            input_sha=hashlib.sha256(path.read_bytes()).hexdigest(),
            input_size=path.stat().st_size,
            question="how many 404s?",
            text=text,
            evidence="n0.s1",
            run_id=f"r-{path.name}",
            input_head=head_sha256(str(path)) if head is None else head,
        )

    def offered(store: MemoryStore, path: Path) -> list[str]:
        found = recall(
            store, path=str(path), size=path.stat().st_size, sha256=whole_hash(path), question="404s?"
        )
        return [m.text for m in found.offered]

    with MemoryStore(tmp_path / "memory.sqlite3") as store:
        for other, text in ((same_size, "404s in the same-size file"), (smaller, "404s in the smaller file")):
            remember(store, other, text)
        remember(store, tiny, "404s in the tiny file")
        assert offered(store, new) == [] and hashed == []
        # the file itself: hashed whole, its memory offered
        remember(store, new, "404s in the new file")
        assert offered(store, new) == ["404s in the new file"] and hashed == ["new.log"]
        # a file it grew from: its memory offered for its first lines, without the whole hash
        grown = tmp_path / "grown.log"
        grown.write_bytes(new.read_bytes() + b"N" * 1000)
        hashed.clear()
        assert offered(store, grown) == [
            "[holds for the file's first 1 lines only: it has grown since] 404s in the new file"
        ]
        assert hashed == []
        # a memory kept before first bytes were recorded may be this file's: hashed whole
        remember(store, same_size, "404s, recorded without a head", head="")
        hashed.clear()
        offered(store, new)
        assert hashed == ["new.log"]
