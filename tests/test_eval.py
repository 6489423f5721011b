"""`rlm eval` and the project's dev set (fixtures/eval)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli, write_script

from rlm.cli.evaluate import Task, normalize, score

EVAL = FIXTURES / "eval"


@pytest.mark.parametrize(
    ("name", "made_by", "at_least"), [("tasks", "tasks", 20), ("heldout", "heldout", 15)]
)
def test_the_dev_and_held_out_answers_are_the_ones_their_script_computes(
    name: str, made_by: str, at_least: int
) -> None:
    spec = importlib.util.spec_from_file_location("make_tasks", EVAL / "make_tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stored = [json.loads(line) for line in (EVAL / f"{name}.jsonl").read_text().splitlines()]
    assert stored == getattr(module, made_by)()
    assert len(stored) >= at_least
    for task in stored:
        assert (EVAL / task["file"]).is_file(), task


@pytest.mark.parametrize(("name", "size"), [("blind1", 16), ("blind2", 16), ("blind3", 16), ("blind4", 32)])
def test_the_blind_sets_answers_are_the_ones_their_scripts_compute(
    tmp_path: Path, name: str, size: int
) -> None:
    slices = {p: p.read_bytes() for p in (EVAL / "small4").glob("*")}  # blind4's script writes them again
    out = tmp_path / f"{name}.jsonl"
    subprocess.run([sys.executable, str(EVAL / f"make_{name}.py"), str(out)], check=True, capture_output=True)
    assert out.read_text() == (EVAL / f"{name}.jsonl").read_text()
    assert {p: p.read_bytes() for p in (EVAL / "small4").glob("*")} == slices
    stored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(stored) == size and all((EVAL / t["file"]).is_file() for t in stored)


@pytest.mark.parametrize(
    ("check", "expected", "got", "passed"),
    [
        ("number", 35, "35", True),
        ("number", 35, "35.", True),
        ("number", 438281483, "438,281,483", True),
        ("number", 35, "There are 35 such requests.", False),  # stdout must be usable as it is
        ("number", 35, "36", False),
        ("number", 84214.87, "84214.872", True),
        ("exact", "66.249.73.135", '"66.249.73.135"', True),
        ("exact", "Manhattan", "manhattan", True),
        ("exact", "root", "root [F2]", False),
        ("set", ["200", "404"], "404\n200\n", True),
        ("set", ["200", "404"], '["200", "404"]', True),
        ("set", ["200", "404"], "200\n404\n500", False),
        ("set", ["root", "admin"], "root, admin", True),  # one line, its items comma-separated
        ("set", ["Taiwan, Province of China", "Chad"], "Taiwan, Province of China\nChad", True),
        ("set", ["root", "admin"], "root, admin, guest", False),
        ("set", ["root", "admin"], "root and admin", False),
        ("contains", "ftpd", "The program is ftpd", True),
    ],
)
def test_scoring_is_strict_after_a_documented_normalisation(
    check: str, expected: object, got: str, passed: bool
) -> None:
    task = Task("t", Path("x"), "q", expected, check, 0.01 if isinstance(expected, float) else 0.0)
    assert score(task, got) is passed
    assert normalize('  "Yes."  ') == "yes"


def _rules_for(tasks: list[dict], answers: dict[str, str]) -> list[dict]:
    rules = [
        {
            "match": r"^system: You write the final answer.*Draft answer from the investigation: (.*?)\n\n"
            r"(?:Note: |Write the final answer)",
            "reply": r"\1",
        }
    ]
    for task in tasks:
        q = re.escape(task["question"])
        rules.append(
            {
                "match": rf"Question: {q}.*lines? match",
                "reply": {"tool": "final", "args": {"answer": answers[task["id"]]}},
            }
        )
        rules.append({"match": rf"Question: {q}", "reply": {"tool": "grep", "args": {"pattern": "a"}}})
    return rules


def test_rlm_eval_runs_the_tasks_and_scores_passes_and_failures(tmp_path: Path) -> None:
    # Tasks written here, answers computed here from the file: the harness is tested, not a set.
    log = FIXTURES / "access.log"
    lines = log.read_text().splitlines()
    not_found = sum(1 for line in lines if '" 404 ' in line)
    methods = sorted({line.split('"')[1].split()[0] for line in lines if '"' in line})
    chosen = [
        {"id": "a", "file": str(log), "question": "how many 404s?", "answer": not_found, "check": "number"},
        {
            "id": "b",
            "file": str(log),
            "question": "which client came most?",
            "answer": "192.0.2.1",
            "check": "exact",
            "tolerance": None,  # a tasks file may say no tolerance so
        },
        {"id": "c", "file": str(log), "question": "the methods?", "answer": methods, "check": "set"},
    ]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in chosen))
    answers = {"a": str(not_found), "b": "10.0.0.1", "c": "\n".join(reversed(methods))}
    model = write_script(tmp_path / "s.json", {"rules": _rules_for(chosen, answers)})

    proc = run_cli(["eval", str(tasks), "-m", model, "--json"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one task failed
    doc = json.loads(proc.stdout)
    assert (doc["passed"], doc["total"]) == (2, 3)
    by_id = {t["id"]: t for t in doc["tasks"]}
    assert by_id["a"]["passed"] and by_id["a"]["got"] == str(not_found)
    assert not by_id["b"]["passed"] and by_id["b"]["got"] == "10.0.0.1"
    assert by_id["c"]["passed"]  # a set, in another order
    assert all(Path(tmp_path / t["trace"]).is_file() for t in doc["tasks"])
    assert "b FAIL" in proc.stderr

    table = run_cli(["eval", str(tasks), "-m", model], cwd=tmp_path)
    assert table.returncode == 1
    assert "2/3 passed (67%)" in table.stdout and "10.0.0.1" in table.stdout


def test_rlm_eval_says_what_is_wrong_with_a_tasks_file(tmp_path: Path) -> None:
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"id": "x", "question": "q", "answer": 1}\n')
    proc = run_cli(["eval", str(bad), "-m", "scripted/none.json"], cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.strip() == f"rlm: {bad}:1: not a task (missing 'file')"
    missing = run_cli(["eval", str(tmp_path / "nope.jsonl")], cwd=tmp_path)
    assert missing.returncode == 3 and "no such tasks file" in missing.stderr


def test_rlm_eval_reports_the_grounded_rate_beside_accuracy(tmp_path: Path) -> None:
    """Two tasks answered right: one from a count a cell printed (grounded), one by a draft typed
    with no finding that holds it (right, but not grounded)."""
    access = (FIXTURES / "access.log").resolve()
    count = sum(1 for line in access.read_text().splitlines() if '" 404 ' in line)
    lines = len(access.read_text().splitlines())
    chosen = [
        {"id": "g1", "file": str(access), "question": "How many 404 responses?", "answer": count},
        {"id": "g2", "file": str(access), "question": "How many lines?", "answer": lines},
    ]
    for task in chosen:
        task["check"] = "number"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in chosen))
    rules = [
        {
            "match": r"^system: You write the final answer.*Draft answer from the investigation: (.*?)\n\n"
            r"(?:Note: |Write the final answer)",
            "reply": r"\1",
        },
        {
            "match": r"Question: How many 404.*not found:",
            "reply": {"tool": "final", "args": {"answer": str(count)}},
        },
        {
            "match": r"Question: How many 404",
            "reply": {
                "tool": "execute",
                "args": {"code": "print('not found:', sum(1 for l in context_lines if '\" 404 ' in l))"},
            },
        },
        {
            "match": r"Question: How many lines.*sampled 5",
            "reply": {"tool": "final", "args": {"answer": str(lines)}},
        },
        {
            "match": r"Question: How many lines",
            "reply": {"tool": "execute", "args": {"code": "print('sampled', len(context_lines[:5]))"}},
        },
    ]
    model = write_script(tmp_path / "s.json", {"rules": rules})
    proc = run_cli(["eval", str(tasks), "-m", model, "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["passed"], doc["grounded"], doc["grounded_rate"], doc["passed_and_grounded"]) == (
        2,
        1,
        0.5,
        1,
    )
    by_id = {t["id"]: t for t in doc["tasks"]}
    assert by_id["g1"]["grounded"] is True and by_id["g2"]["grounded"] is False
    table = run_cli(["eval", str(tasks), "-m", model], cwd=tmp_path)
    assert "2/2 passed (100%) · 1/2 grounded (50%)" in table.stdout


def test_rlm_eval_with_a_plain_baseline_reports_both_arms_side_by_side(tmp_path: Path) -> None:
    """Two questions over the country table. The investigation answers both right from what its
    cells printed; the plain call, shown the whole table, names NOR for both: right for the first,
    wrong for the second, grounded (NOR is in the table) but in doubt: a count was asked."""
    from rlm.run.plain import SYSTEM

    table = (FIXTURES / "data" / "iso3166" / "all.csv").resolve()
    oceania = sum(",Oceania," in line for line in table.read_text().splitlines())
    chosen = [
        {"id": "p1", "file": str(table), "question": "What is the alpha-3 code of Norway?", "answer": "NOR"},
        {"id": "p2", "file": str(table), "question": "How many countries are in Oceania?", "answer": oceania},
    ]
    chosen[1]["check"] = "number"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in chosen))
    rules = [
        {"match": "^system: " + re.escape(SYSTEM[:60]), "reply": "NOR"},
        {
            "match": r"^system: You write the final answer.*Draft answer from the investigation: (.*?)\n\n"
            r"(?:Note: |Write the final answer)",
            "reply": r"\1",
        },
        {
            "match": r"Question: What is the alpha-3.*code: NOR",
            "reply": {"tool": "final", "args": {"answer": "NOR"}},
        },
        {
            "match": r"Question: What is the alpha-3",
            "reply": {
                "tool": "execute",
                "args": {
                    "code": "print('code:', [l.split(',')[2] for l in context_lines if l.startswith('Norway,')][0])"
                },
            },
        },
        {
            "match": r"Question: How many countries.*in oceania:",
            "reply": {"tool": "final", "args": {"answer": str(oceania)}},
        },
        {
            "match": r"Question: How many countries",
            "reply": {
                "tool": "execute",
                "args": {"code": "print('in oceania:', sum(1 for l in context_lines if ',Oceania,' in l))"},
            },
        },
    ]
    model = write_script(tmp_path / "s.json", {"rules": rules})
    args = [
        "eval",
        str(tasks),
        "-m",
        model,
        "--baseline",
        "plain",
        "--protocol",
        "tools",
        "--max-time",
        "300",
    ]
    proc = run_cli([*args, "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # every task passed; the baseline's failures do not count
    doc = json.loads(proc.stdout)
    assert (doc["passed"], doc["grounded"], doc["confident_wrong"]) == (2, 2, 0)
    assert doc["baseline"] == "plain"
    assert (doc["baseline_passed"], doc["baseline_grounded"], doc["baseline_grounded_rate"]) == (1, 2, 1.0)
    assert doc["baseline_accuracy"] == 0.5
    # NOR where a count is asked holds no number: in doubt (rlm.run.answer_kind), not confident.
    assert doc["baseline_confident_wrong"] == 0 and doc["baseline_doubted"] == 1
    by_id = {t["id"]: t for t in doc["tasks"]}
    p1, p2 = by_id["p1"]["baseline"], by_id["p2"]["baseline"]
    assert (p1["passed"], p1["got"], p1["grounded"]) == (True, "NOR", True)
    assert (p2["passed"], p2["got"], p2["grounded"]) == (False, "NOR", True)
    assert isinstance(p1["seconds"], float) and p1["status"] == "final"
    # Each arm left its trace, both under the settings the command line gave.
    arms = [json.loads((tmp_path / t).read_text()) for t in (by_id["p1"]["trace"], p1["trace"])]
    assert [a["mode"] for a in arms] == ["rlm", "plain"]
    assert all(a["settings"]["protocol"] == "tools" and a["settings"]["max_time"] == 300 for a in arms)
    assert "p2 pass" in proc.stderr and "plain FAIL" in proc.stderr

    shown = run_cli(args, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["id"])
    assert header.split()[3] == "plain"  # the baseline's column, beside the run's pass and grounding
    assert "2/2 passed (100%) · 2/2 grounded (100%) · 0 grounded and wrong" in shown.stdout
    assert "plain baseline: 1/2 passed (50%) · 2/2 grounded (100%) · 0 grounded and wrong" in shown.stdout

    wrong = run_cli(["eval", str(tasks), "-m", model, "--baseline", "nothing"], cwd=tmp_path)
    assert wrong.returncode == 2 and "--baseline must be one of plain" in wrong.stderr


def test_rlm_eval_counts_the_grounded_wrong_answers_strict_would_still_print(tmp_path: Path) -> None:
    """`--mode plain` runs the tasks as plain calls; an answer the table holds that is not the
    task's is counted as grounded and wrong."""
    table = (FIXTURES / "data" / "iso3166" / "all.csv").resolve()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "w1", "file": str(table), "question": "Alpha-3 of Sweden?", "answer": "SWE"}) + "\n"
    )
    model = write_script(tmp_path / "s.json", {"default": "NOR"})
    proc = run_cli(["eval", str(tasks), "-m", model, "--mode", "plain", "--json"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["passed"], doc["grounded"], doc["confident_wrong"]) == (0, 1, 1)
    assert "baseline" not in doc and "baseline" not in doc["tasks"][0]
    assert json.loads((tmp_path / doc["tasks"][0]["trace"]).read_text())["mode"] == "plain"


def test_the_baseline_runs_after_every_task_file_by_file(tmp_path: Path) -> None:
    """Consecutive baseline calls over one file share their prompt's start (its text), which a
    model server's prompt cache keeps only while no other prompt comes between them."""
    from types import SimpleNamespace

    from rlm.cli.evaluate import run_tasks

    tasks = [Task(i, Path(f), "q", 1, "number") for i, f in (("a", "x.log"), ("b", "y.log"), ("c", "x.log"))]
    calls: list[str] = []

    def arm(name: str):  # type: ignore[no-untyped-def]
        def run(task: Task) -> SimpleNamespace:
            calls.append(f"{name}:{task.id}")
            return SimpleNamespace(
                answer="1", status="final", steps=1, usage={}, trace_path=None, grounded=True
            )

        return run

    results = run_tasks(tasks, arm("rlm"), baseline=arm("plain"))
    assert calls == ["rlm:a", "rlm:b", "rlm:c", "plain:a", "plain:c", "plain:b"]
    assert [r.id for r in results] == ["a", "b", "c"] and all(
        r.baseline and r.baseline.passed for r in results
    )
