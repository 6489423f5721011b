"""--executor dask://HOST:PORT: a fan-out's sub-calls as tasks of a real Dask cluster (a
LocalCluster of two worker processes on 127.0.0.1), through the CLI: the same answers, findings
and budget as the local executor, each call made by a worker process and recorded here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bigfiles
import pytest
from conftest import latest_trace, run_cli, write_script

CHUNKS = 16


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address.replace("tcp://", "dask://")


def _fan_out(tmp_path: Path, apache_log: Path, *extra: str) -> tuple[dict[str, Any], str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    lines = apache_log.read_text().splitlines(keepends=True)[: CHUNKS * 25]
    log = tmp_path / "part.log"
    log.write_text("".join(lines))
    script = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {
                    "tool": "execute",
                    "args": {"code": 'print(partition_map("which lines is this?", chunk_lines=25))'},
                },
                {"tool": "final", "args": {"answer": "16 chunks"}},
                json.dumps({"answer": "16 chunks", "citations": ["F1"]}),
            ],
            # each helper answers with the lines it was shown, as its prompt names them
            "rules": [{"match": r"\(lines ([\d,]+-[\d,]+)\)", "reply": r"seen \1"}],
        },
    )
    proc = run_cli(["ask", str(log), "which lines?", "-m", script, "--no-memory", *extra], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return latest_trace(tmp_path), proc.stdout


def test_a_fan_out_on_a_dask_cluster_answers_as_the_local_one(
    tmp_path: Path, apache_log: Path, scheduler: str
) -> None:
    here, here_out = _fan_out(tmp_path / "local", apache_log)
    there, there_out = _fan_out(tmp_path / "dask", apache_log, "--executor", scheduler)
    assert there_out == here_out == "16 chunks\n"
    shown = there["steps"][0]["observation"]["preview"]
    assert shown == here["steps"][0]["observation"]["preview"]
    assert shown.startswith("['seen 1-25', 'seen 26-50'") and "'seen 376-400']" in shown
    assert [f["text"] for f in there["ledger"]] == [f["text"] for f in here["ledger"]]
    assert there["totals"]["calls"] == here["totals"]["calls"] == CHUNKS + 3  # two turns, the synthesis
    # every sub-call was made by one of the two worker processes, neither of them rlm's
    ran_on = {s["ran_on"] for s in there["subcalls"]}
    assert len(there["subcalls"]) == CHUNKS and len(ran_on) == 2, ran_on
    assert str(there["pid"]) not in {r.rsplit(":", 1)[1] for r in ran_on}
    assert all("ran_on" not in s for s in here["subcalls"])
    # recorded here as if made here: --rerun can serve them
    assert len([c for c in there["cassette"]["calls"] if "reply" in c]) == CHUNKS + 3


def test_an_executor_nobody_answers_at_is_one_line(tmp_path: Path, apache_log: Path) -> None:
    bad = run_cli(
        ["ask", str(apache_log), "q?", "-m", "scripted/x.json", "--executor", "dask:/nowhere"], cwd=tmp_path
    )
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "rlm: --executor must be local or dask://HOST:PORT, not 'dask:/nowhere'"
    )
    small = tmp_path / "small.log"
    small.write_text("".join(apache_log.read_text().splitlines(keepends=True)[:40]))
    script = write_script(
        tmp_path / "s.json",
        [{"tool": "execute", "args": {"code": 'print(partition_map("q?", chunk_lines=20))'}}],
    )
    gone = run_cli(["ask", str(small), "q?", "-m", script, "--executor", "dask://127.0.0.1:9"], cwd=tmp_path)
    assert "Traceback" not in gone.stderr
    assert "no Dask scheduler answers at tcp://127.0.0.1:9" in gone.stderr, gone.stderr
    assert gone.returncode == 4


# Children of a fan-out on the cluster: each child greps, counts with sql(), and answers with
# what it saw (the scripted model fills its answer from its own observations).
_CHILD = r"You work on lines"
_COUNT = (
    'r = sql("SELECT count(*) FILTER (WHERE status >= 400), min(line_no), max(line_no) FROM log")\n'
    'print(f"errors={r[0][0]} first={r[0][1]} last={r[0][2]}")'
)


def _children_script(directory: Path, chunk: int) -> str:
    return write_script(
        directory / "s.json",
        {
            "log": "calls.jsonl",
            "rules": [
                {
                    "match": r"^system: You write the final answer.*Draft answer from the investigation: ([^\n]*)",
                    "reply": r"\1",
                },
                # A child stopped by the budget before its final answer has no draft: its synthesis
                # is asked all the same (and, unscripted, would take the root's replies).
                {"match": r"^system: You write the final answer", "reply": "stopped before an answer"},
                {
                    "match": _CHILD + r".*?([\d,]+) lines? match /GET/.*?errors=(\d+) first=(\d+) last=(\d+)",
                    "reply": {"tool": "final", "args": {"answer": r"\1 GET, \2 errors, lines \3-\4"}},
                },
                {
                    "match": _CHILD + r".*lines? match /GET/",
                    "reply": {"tool": "execute", "args": {"code": _COUNT}},
                },
                {"match": _CHILD, "reply": {"tool": "grep", "args": {"pattern": "GET"}}},
            ],
            "replies": [
                {
                    "tool": "partition_map",
                    "args": {"question": "How many GET requests and errors?", "chunk_lines": chunk},
                },
                {"tool": "final", "args": {"answer": "16 chunks"}},
            ],
        },
    )


def _children_run(directory: Path, log: Path, chunk: int, *extra: str) -> tuple[Any, dict[str, Any], int]:
    directory.mkdir(parents=True, exist_ok=True)
    script = _children_script(directory, chunk)
    proc = run_cli(
        ["ask", str(log), "q", "-m", script, "--no-memory", "--concurrency", "4", *extra],
        cwd=directory,
        timeout=600,
    )
    made = len((directory / "calls.jsonl").read_text().splitlines())
    return proc, latest_trace(directory), made


@pytest.mark.slow  # two runs of 16 child investigations, each with a sandboxed worker of its own
def test_child_investigations_on_a_dask_cluster_answer_as_at_home(tmp_path: Path, scheduler: str) -> None:
    log = tmp_path / "access.log"
    bigfiles.apache_log(log, 4_000_000)  # 16 chunks of ~250 KB: each too big for one plain call
    lines = log.read_text().splitlines()
    chunk = -(-len(lines) // CHUNKS)
    expected = []
    for start in range(0, len(lines), chunk):
        part = lines[start : start + chunk]
        statuses = [re.search(r'" (\d{3}) ', line) for line in part]
        errors = sum(1 for s in statuses if s and int(s[1]) >= 400)
        expected.append(f"{sum('GET' in line for line in part):,} GET, {errors} errors, lines 1-{len(part)}")

    home, here, made_here = _children_run(tmp_path / "local", log, chunk)
    away, there, made_there = _children_run(tmp_path / "dask", log, chunk, "--executor", scheduler)
    for proc, trace in ((home, here), (away, there)):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "16 chunks\n"
        assert "Traceback" not in proc.stderr and trace["warnings"] == [], (proc.stderr, trace["warnings"])
        children = sorted(
            (n for n in trace["nodes"] if n["depth"] == 1), key=lambda n: n["slice"]["start_line"]
        )
        # each child's answer is what its slice holds: grep's count, sql()'s count and line numbers
        assert [c["answer"] for c in children] == expected
        assert all(c["status"] == "final" and c["steps"] == 3 for c in children)
    # the same observation of the fan-out, findings, calls and steps wherever the children ran
    fan_out = [[s["observation"]["preview"] for s in t["steps"] if s["node"] == "n0"] for t in (here, there)]
    assert fan_out[0] == fan_out[1] and fan_out[0][0].startswith("16 chunks"), fan_out
    assert sorted(f["text"] for f in there["ledger"]) == sorted(f["text"] for f in here["ledger"])
    assert there["totals"]["calls"] == here["totals"]["calls"] == made_there == made_here == 2 + 1 + 16 * 4
    assert len(there["steps"]) == len(here["steps"]) == 2 + 16 * 3
    assert len([c for c in there["cassette"]["calls"] if "reply" in c]) == there["totals"]["calls"]
    # every child ran on one of the two worker processes, neither of them rlm's
    ran_on = {n.get("ran_on") for n in there["nodes"] if n["depth"] == 1}
    # (which of the two takes each is the scheduler's choice: on a loaded machine one may take all)
    assert ran_on and str(there["pid"]) not in {str(r).rsplit(":", 1)[1] for r in ran_on}, ran_on
    assert None not in ran_on and len(ran_on) <= 2, ran_on
    assert all("ran_on" not in n for n in here["nodes"])
    # each child's steps are recorded under its own node, as at home
    assert sorted(s["node"] for s in there["steps"]) == sorted(s["node"] for s in here["steps"])

    # One budget for the tree: each child is sent with a share of it, and a call limit far
    # below what the 16 children would make stops the run with every call counted.
    limited, trace, made = _children_run(
        tmp_path / "limited", log, chunk, "--executor", scheduler, "--max-calls", "30"
    )
    kids = [(n["id"], n["status"], n.get("steps"), n.get("answer", "")[:120]) for n in trace["nodes"]]
    assert limited.returncode == 6, (limited.stderr, kids)
    assert "model calls" in limited.stderr and "Traceback" not in limited.stderr
    # every call the provider served is counted, and none of them failed
    assert made == trace["totals"]["calls"] <= 30 and trace["totals"]["failed_requests"] == 0, (
        made,
        trace["totals"],
    )
    assert 1 < len([n for n in trace["nodes"] if n["depth"] == 1]) < 16
    # a child that waited for a share and never went is recorded as stopped by the budget
    assert all(n["status"] != "running" for n in trace["nodes"]), kids


def test_a_child_over_a_text_the_code_built_runs_on_the_cluster(tmp_path: Path, scheduler: str) -> None:
    """llm_query(text=...) with a text too big for one sub-call: a child investigation, sent to a
    worker with its text, answering from what it found there."""
    log = tmp_path / "access.log"
    bigfiles.apache_log(log, 3_000_000)
    posts = sum('"POST ' in line for line in log.read_text().splitlines())
    child = "built by the parent investigation"
    script = write_script(
        tmp_path / "s.json",
        {
            "rules": [
                {
                    "match": r"^system: You write the final answer.*Draft answer from the investigation: ([^\n]*)",
                    "reply": r"\1",
                },
                {
                    "match": child + r".*?([\d,]+) lines? match /\"POST /",
                    "reply": {"tool": "final", "args": {"answer": r"\1 POST lines"}},
                },
                {"match": child, "reply": {"tool": "grep", "args": {"pattern": '"POST '}}},
            ],
            "replies": [
                {
                    "tool": "execute",
                    "args": {
                        "code": "print(llm_query('how many POST lines?', text='\\n'.join(context_lines)))"
                    },
                },
                {"tool": "final", "args": {"answer": "done"}},
            ],
        },
    )
    proc = run_cli(["ask", str(log), "q", "-m", script, "--no-memory", "--executor", scheduler], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    trace = latest_trace(tmp_path)
    root = [s["observation"]["preview"] for s in trace["steps"] if s["node"] == "n0"]
    assert root[0] == f"{posts} POST lines\n", root
    (child_node,) = [n for n in trace["nodes"] if n["depth"] == 1]
    assert child_node["status"] == "final" and child_node["slice"]["text_chars"] > 2_900_000
    assert child_node["ran_on"].rsplit(":", 1)[1] != str(trace["pid"])
    assert [s["node"] for s in trace["steps"]].count("n1") == 2  # its grep and its final, recorded here


def test_a_slice_sent_to_the_cluster_names_each_line_s_file_and_number_as_at_home() -> None:
    """slice_parts: a child's window of several files, some kept in part by a time range (runs of
    their own line numbers), renumbered from the slice's first line; every line of every window
    is named (file, its own number) as the worker at home names it over the whole text."""
    import random

    from rlm.run.remote_child import slice_parts
    from rlm.sandbox.worker.files import part_locator, window_parts

    rng = random.Random(7)
    for _ in range(200):
        parts, first = [], 1
        for k in range(rng.randint(1, 5)):
            n = rng.randint(1, 40)
            part: list[Any] = [f"f{k}.log", first, first + n - 1]
            if rng.random() < 0.5:  # kept in runs of its own line numbers
                runs, own, left = [], rng.randint(1, 9), n
                while left:
                    count = rng.randint(1, left)
                    runs.append([own, count])
                    own += count + rng.randint(1, 5)
                    left -= count
                part.append(runs)
            parts.append(part)
            first += n
        total = first - 1
        a = rng.randint(1, total)
        b = rng.randint(a, total)
        sent = slice_parts(parts, a, b)
        at_home, there = part_locator(parts, a), part_locator(sent, None)
        assert at_home is not None and there is not None
        assert [there(i) for i in range(1, b - a + 2)] == [at_home(i) for i in range(1, b - a + 2)]
        assert window_parts(sent, None, None) == window_parts(parts, a, b)


def test_children_waited_for_at_once_each_get_their_own_outcome(scheduler: str) -> None:
    """Four threads wait on children at once, as a run's fan-out does (--concurrency 4), each
    child's outcome megabytes long so its transfer takes a while: every wait gets the outcome
    its child returned. (Waiting by Future.result(timeout) raced: Dask shares one transfer
    between the threads gathering, and a wait that timed out cancelled the others' transfer.)"""
    import threading
    from types import SimpleNamespace

    from rlm.run.executor import DaskExecutor

    def child(task: Any) -> dict[str, Any]:
        import time

        time.sleep(0.05 * (task.n % 4))
        return {"n": task.n, "payload": str(task.n) * 4_000_000}

    executor = DaskExecutor(scheduler, child_runner=child)
    outcomes: dict[int, dict[str, Any]] = {}

    def wait_on(first: int) -> None:
        for n in range(first, 24, 4):
            task = SimpleNamespace(n=n, stop_event=f"stop-{n}")
            outcomes[n] = executor.investigate(task, lambda: False)  # type: ignore[arg-type]

    try:
        threads = [threading.Thread(target=wait_on, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        executor.close()
    assert sorted(outcomes) == list(range(24))
    for n, out in outcomes.items():
        assert "error" not in out, (n, out.get("error"))
        assert out["n"] == n and out["payload"] == str(n) * 4_000_000
