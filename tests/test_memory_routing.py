"""Memory routed by relevance (rlm.memory.relevance, rlm.memory.recall), through the CLI as users
run it: an earlier run's finding is offered only to a question that needs it, a few at most, each
with the standing its run gave it (the synthesis's confidence, grounding, citations, feedback),
its age and the question it answered; and never from a run that was still going when this one
began."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import FIXTURES, cli_env, run_cli, script_log, wait_for, write_script

from rlm.memory.store import MemoryStore, head_sha256

ACCESS = FIXTURES / "access.log"
COUNT_404 = 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'
TOP_AGENT = 'print(sql("SELECT agent, count(*) AS n FROM log GROUP BY 1 ORDER BY n DESC LIMIT 1")[0][0])'
TOP_404_IP = 'print(sql("SELECT ip, count(*) AS n FROM log WHERE status = 404 GROUP BY 1 ORDER BY n DESC LIMIT 1")[0][0])'
AGENT = "Mozilla/5.0 (Windows NT 6.1; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.107 Safari/537.36"
ASKED_A = "How many requests in this log got a 404 status?"
# Shares only a word with A ("requests"): it does not need A's count.
ASKED_B = "Which user agent made the most requests?"
# Names A's column and value (status, 404): A's count bears on it.
ASKED_A2 = "Which IP hit status 404 most often?"


def _db(home: Path) -> Path:
    return home / "memory.sqlite3"


def _script(home: Path, name: str, code: str, answer: str, cite: str = "F1") -> str:
    """A scripted run: one cell, final, then a synthesis citing `cite` with high confidence."""
    synthesis = {
        "answer": answer,
        "explanation": "From the query.",
        "citations": [cite],
        "confidence": "high",
        "confidence_reason": "an exact query",
    }
    return write_script(
        home / f"{name}.json",
        {
            "log": str(home / f"{name}.jsonl"),
            "replies": [
                {"tool": "execute", "args": {"code": code}},
                {"tool": "final", "args": {"answer": answer}},
                json.dumps(synthesis),
            ],
        },
    )


def _trace_of(home: Path, question: str) -> dict[str, Any]:
    """The newest trace of a run asked `question`."""
    traces = [json.loads(p.read_text()) for p in sorted((home / "traces").glob("*.json"))]
    return [t for t in traces if t.get("question") == question][-1]


def _prompts(home: Path, name: str) -> list[str]:
    """Every message of every model call of a scripted run, one string per call."""
    return [
        "\n".join(str(m.get("content") or "") for m in call["messages"])
        for call in script_log(home / f"{name}.jsonl")
    ]


def _ask(home: Path, name: str, question: str, code: str, answer: str) -> tuple[dict[str, Any], list[str]]:
    model = _script(home, name, code, answer)
    proc = run_cli(["ask", str(ACCESS), question, "-m", model], cwd=home, env={"RLM_MEMORY": str(_db(home))})
    assert proc.returncode == 0 and proc.stdout == f"{answer}\n", proc.stderr
    return _trace_of(home, question), _prompts(home, name)


def test_a_memory_is_not_offered_to_a_question_that_does_not_need_it(tmp_path: Path) -> None:
    first, _ = _ask(tmp_path, "a", ASKED_A, COUNT_404, "35")
    assert first["memory"]["stored"] == ["M1"] and first["synthesis"]["confidence"] == "high"
    # An unrelated question about the same file: A's count is not offered, in no prompt at all.
    other, prompts = _ask(tmp_path, "b", ASKED_B, TOP_AGENT, AGENT)
    assert other["memory"]["offered"] == [] and other["memory"]["passed_over"] == 1
    assert len(prompts) == 3
    for prompt in prompts:
        assert "[M1]" not in prompt and "ESTABLISHED earlier" not in prompt and "gave: 35" not in prompt


def test_a_related_question_is_offered_the_memory_with_its_real_standing_age_and_question(
    tmp_path: Path,
) -> None:
    first, _ = _ask(tmp_path, "a", ASKED_A, COUNT_404, "35")
    assert first["memory"]["stored"] == ["M1"]
    # A question naming A's column and value: offered, saying how the answer that rested on it stood.
    related, prompts = _ask(tmp_path, "a2", ASKED_A2, TOP_404_IP, "208.91.156.11")
    assert related["memory"]["offered"] == ["M1"]
    (line,) = [x for x in prompts[0].splitlines() if "[M1]" in x]
    assert "answer confidence high" in line and "confidence 0.00" not in line and "score 0.50" not in line
    assert f'for "{ASKED_A}"' in line and " s ago" in line and "gave: 35" in line
    assert "cited in 1 run;" in line and "no feedback yet" in line
    synthesis = prompts[-1]
    assert "answer confidence high" in synthesis and "gave: 35" in synthesis  # the synthesis sees it too
    relevance = related["memory"].get("relevance") or {}
    assert relevance["M1"]["score"] >= 1.0 and {"404", "status"} <= set(relevance["M1"]["shared"])

    # `rlm memory show` and `list` tell the same standing.
    env = {"RLM_MEMORY": str(_db(tmp_path))}
    shown = json.loads(run_cli(["memory", "show", "M1", "--json"], cwd=tmp_path, env=env).stdout)
    assert shown["answer_confidence"] == "high" and shown["question"] == ASKED_A
    # Grounding as the run judged it: whether the answer's values were in what its synthesis was
    # shown, and whether this finding holds them.
    grounded = first["synthesis"].get("grounded")
    assert shown["answer_grounded"] == grounded
    assert shown["holds_answer"] == (None if grounded is None else "F1" in first["synthesis"]["supporting"])
    assert shown["cited"] == 1 and shown["offered"] == 1
    assert shown["standing"].startswith("answer confidence high") and shown["standing"] in line
    listed = run_cli(["memory", "list", str(ACCESS)], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert shown["standing"] in listed.stdout and ASKED_A in listed.stdout, listed.stdout


def test_a_run_never_sees_memories_of_a_run_that_finished_after_it_began(tmp_path: Path) -> None:
    """The later run reads its input from stdin, held open until the other run has finished and
    kept its memory: its store is read after that, and still it is not offered."""
    env = cli_env(tmp_path, {"RLM_MEMORY": str(_db(tmp_path))})
    late = _script(tmp_path, "late", TOP_404_IP, "208.91.156.11")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm", "ask", "-", ASKED_A2, "-m", late],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Its trace's event log exists once it has begun (before it reads any input).
        wait_for(lambda: any((tmp_path / "traces").glob("*.jsonl")), proc, never="the run never began")  # type: ignore[arg-type]
        first, _ = _ask(tmp_path, "a", ASKED_A, COUNT_404, "35")
        assert first["memory"]["stored"] == ["M1"]
        out, err = proc.communicate(ACCESS.read_bytes(), timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == b"208.91.156.11\n", err.decode()
    trace = _trace_of(tmp_path, ASKED_A2)
    assert trace["memory"]["offered"] == [] and trace["memory"]["passed_over"] == 0
    assert all("[M1]" not in p for p in _prompts(tmp_path, "late"))
    # The same question asked now, after both runs finished, is offered the memories of both.
    again, _ = _ask(tmp_path, "again", ASKED_A2, TOP_404_IP, "208.91.156.11")
    assert sorted(again["memory"]["offered"]) == ["M1", "M2"]


def _seed(db: Path, texts: list[tuple[str, str]]) -> None:
    """Memories of access.log as earlier runs would have kept them: (question, text) each."""
    data = ACCESS.read_bytes()
    with MemoryStore(db) as store:
        for i, (question, text) in enumerate(texts):
            store.add(
                input_sha=hashlib.sha256(data).hexdigest(),
                input_size=len(data),
                question=question,
                text=text,
                evidence="n0.s1",
                run_id=f"seed-{i}",
                input_head=head_sha256(str(ACCESS)),
            )


def test_a_few_memories_at_most_the_most_relevant_first_and_none_the_question_does_not_need(
    tmp_path: Path,
) -> None:
    _seed(
        _db(tmp_path),
        [
            ("How many HEAD requests?", "`q1` gave: 7"),  # method's value HEAD: relevant
            ("How many GET requests had status 404?", "`q2` gave: 30"),  # GET, status, 404
            ("How many 404 responses were there?", "`q3` gave: 35"),  # 404
            ("Which path had status 404 most often?", "`q4` gave: /favicon.ico"),  # 404, status
            ("Which agent is most common?", "`q5` gave: Mozilla"),  # nothing this question names
            ("How many bytes were served in all?", "`q6` gave: 123456"),  # nothing
        ],
    )
    trace, prompts = _ask(tmp_path, "few", "How many GET or HEAD requests got status 404?", COUNT_404, "35")
    offered = trace["memory"]["offered"]
    assert offered == ["M2", "M4", "M1"], trace["memory"].get("relevance")  # three at most, best first
    assert trace["memory"]["passed_over"] == 3
    root = prompts[0]
    assert "[M5]" not in root and "[M6]" not in root and "[M3]" not in root
    # A memory made before its run recorded a confidence says so rather than show a number.
    assert "answer confidence not recorded" in root


def test_an_older_database_gains_the_standing_columns_unknown_until_a_run_sets_them(tmp_path: Path) -> None:
    from rlm.memory import store as store_mod

    db = _db(tmp_path)
    con = sqlite3.connect(db)
    for migration in store_mod.MIGRATIONS[:3]:
        con.executescript(migration)
    con.execute(
        "INSERT INTO memories (input_sha, input_size, question, text, evidence, run_id, tags, created, last_used) "
        "VALUES ('abc', 10, 'how many 404s?', 'kept across the upgrade', 'n0.s1', 'r1', '404', 0, 0)"
    )
    con.execute("PRAGMA user_version = 3")
    con.commit()
    con.close()
    env = {"RLM_MEMORY": str(db)}
    shown = run_cli(["memory", "show", "M1"], cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert (
        "answer_confidence: not recorded" in shown.stdout and "answer_grounded: not checked" in shown.stdout
    )
    assert "standing: answer confidence not recorded; cited in 0 runs; no feedback yet" in shown.stdout
    with MemoryStore(db) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == store_mod.SCHEMA_VERSION
        (kept,) = store.memories()
        assert kept.text == "kept across the upgrade" and kept.answer_confidence is None
