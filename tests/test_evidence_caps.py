"""What model code gets back from grep() and sql() is all there is: every matching line, every
row, each value of a printed table whole. Each run goes through the CLI with the scripted model
and the real locked-down worker, at default settings, over a 40 MB log of real Apache lines; the
figures are checked against `grep` itself and against DuckDB's own count over the same table.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bigfiles import apache_log
from conftest import exec_cell, latest_trace, product_worker, run_cli, script_log, write_script

MB = 1024 * 1024


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 MB of real Apache lines (about 177,000), built once for the module; its index and table
    are built by the first run and kept in one cache beside it for the others."""
    path = tmp_path_factory.mktemp("caps") / "access.log"
    apache_log(path, 40 * MB)
    return path


def ask(
    big_log: Path, tmp_path: Path, code: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """One cell, then final: the process, its trace and what the cell's output looked like to the
    model (the observation in the next prompt, as the scripted provider received it)."""
    script = {
        "log": "calls.jsonl",
        "replies": [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": "see F1"}},
            '{"answer": "see F1", "citations": ["F1"], "confidence": "high"}',
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(
        ["ask", str(big_log), "how many?", "-m", model],
        cwd=tmp_path,
        env={"RLM_CACHE_DIR": str(big_log.parent / "cache")},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    calls = script_log(tmp_path / "calls.jsonl")
    seen = "\n".join(str(m.get("content") or "") for m in calls[1]["messages"])
    return proc, latest_trace(tmp_path), seen


def cell_output(trace: dict[str, Any]) -> str:
    """The execute step's observation as the trace keeps it."""
    step = next(s for s in trace["steps"] if s["action"]["name"] == "execute")
    assert step["observation"]["ok"], step["observation"]
    text: str = step["observation"]["preview"]
    return text


def result_finding(trace: dict[str, Any]) -> str:
    found = next(f for f in trace["ledger"] if f["kind"] == "result")
    text: str = found["full"] or found["text"]
    return text


def grep_c(pattern: str, path: Path, *extended: str) -> tuple[int, int]:
    """(`grep -c`'s count, the last matching line's number) by the system's own grep."""
    count = int(
        subprocess.run(["grep", *extended, "-c", pattern, str(path)], capture_output=True, text=True).stdout
    )
    numbered = subprocess.run(
        ["grep", *extended, "-n", pattern, str(path)], capture_output=True, text=True
    ).stdout
    return count, int(numbered.rstrip("\n").rsplit("\n", 1)[-1].split(":", 1)[0])


# A literal (found by vectorised byte comparisons), a regex (by the regex engine), and a pattern
# on nearly every line of the file: the result holds 177,000 matches without a memory error.
LITERAL, REGEX, COMMON = "GET /images/", r'HTTP/1\.[01]" 30[14] ', "HTTP/1"


def test_len_of_grep_in_code_is_the_count_grep_c_gives(big_log: Path, tmp_path: Path) -> None:
    truth = {p: grep_c(p, big_log, *(["-E"] if p == REGEX else [])) for p in (LITERAL, REGEX, COMMON)}
    assert all(count > 2000 for count, _ in truth.values()), truth
    assert truth[COMMON][0] > 150_000
    code = (
        f"for p in [{LITERAL!r}, {REGEX!r}, {COMMON!r}]:\n"
        "    r = grep(p)\n"
        "    print('matching lines:', len(r), 'looped:', sum(1 for _ in r), 'last line:', r[-1][0])\n"
        f"grep({LITERAL!r})"
    )
    proc, trace, seen = ask(big_log, tmp_path, code)
    printed = cell_output(trace).splitlines()
    expected = [f"matching lines: {n} looped: {n} last line: {last}" for n, last in truth.values()]
    assert printed[:3] == expected, printed[:3]
    # The figure is what the run established: the cell's finding holds it.
    assert all(line in result_finding(trace) for line in expected)
    # The echo shows a head, the total, and that the list holds every match.
    n = truth[LITERAL][0]
    assert printed[3] == f"{n:,} lines match /{LITERAL}/ (showing the first 50)"
    assert f"(the returned list holds all {n:,} matching lines" in seen


def test_sql_returns_every_row_so_a_distinct_count_from_the_rows_is_right(
    big_log: Path, tmp_path: Path
) -> None:
    code = (
        'rows = sql("SELECT ts FROM log WHERE status = 200")\n'
        "print('rows:', len(rows), 'distinct:', len(set(r[0] for r in rows)))\n"
        'n, distinct = sql("SELECT count(*), count(DISTINCT ts) FROM log WHERE status = 200")[0]\n'
        "print('duckdb:', n, 'distinct:', distinct)"
    )
    _, trace, _ = ask(big_log, tmp_path, code)
    got, duckdb = cell_output(trace).splitlines()[:2]
    n, distinct = (int(x) for x in re.findall(r"\d+", duckdb))
    assert n > 150_000 and distinct > 50_000, duckdb
    assert got == f"rows: {n} distinct: {distinct}"
    assert got in result_finding(trace)


def test_a_result_past_the_cap_is_an_error_that_names_it_never_a_short_list(
    big_log: Path, tmp_path: Path
) -> None:
    # About 1.8 million rows of two columns: 3.5 million values, over the 3 million sql() returns.
    code = "rows = sql(\"SELECT line_no, ip FROM log, range(10)\")\nprint('returned', len(rows))"
    _, trace, seen = ask(big_log, tmp_path, code)
    step = next(s for s in trace["steps"] if s["action"]["name"] == "execute")
    said = step["observation"]["preview"]
    assert not step["observation"]["ok"] and not re.search(r"^returned \d", said, re.M), said
    assert "more than 3,000,000 values (rows x columns)" in said and "LIMIT" in said, said
    assert "more than 3,000,000 values" in seen


def test_a_long_value_in_a_printed_sql_result_is_whole(big_log: Path, tmp_path: Path) -> None:
    code = (
        'sql("SELECT line_no, referrer, agent FROM log '
        'WHERE length(agent) > 100 AND length(referrer) > 60 ORDER BY line_no LIMIT 3")'
    )
    _, trace, seen = ask(big_log, tmp_path, code)
    lines = big_log.read_text(encoding="utf-8").splitlines()
    # The last two quoted fields of a combined-format line: the referrer and the user agent.
    wanted = [
        (i, fields[-4], fields[-2])
        for i, line in enumerate(lines[:20_000], 1)
        if len(fields := line.split('"')) >= 7 and len(fields[-2]) > 100 and len(fields[-4]) > 60
    ][:3]
    assert len(wanted) == 3
    finding = result_finding(trace)
    for number, referrer, agent in wanted:
        row = next(r for r in seen.splitlines() if r.startswith(f"{number} "))
        assert referrer in row and agent in row, row
        assert agent in finding
    table = seen[seen.index("line_no | referrer") :].split("(3 rows", 1)[0]
    assert "…" not in table, table


def test_a_grep_result_reads_as_the_list_of_every_match_in_the_locked_down_worker(
    big_log: Path, tmp_path: Path
) -> None:
    """What code does with a list: index from the end, slice, compare, copy; and what it may not
    (change it) is said in words. max_matches is how many lines the echo shows, never a bound."""
    lines = big_log.read_text(encoding="utf-8").splitlines()
    wanted = [(i, line) for i, line in enumerate(lines, 1) if LITERAL in line]
    sandbox = product_worker(big_log, tmp_path / "cache")
    try:
        code = (
            f"r = grep({LITERAL!r}, 3)\n"
            "print(len(r), r.total, r[-1], r[1000:1002] == list(r)[1000:1002], r == list(r))\n"
            "try:\n    r.sort()\nexcept TypeError as e:\n    print(e)\n"
            "mine = list(r)\nmine.sort(reverse=True)\nprint(mine[0][0])\n"
            "r"
        )
        kind, reply = exec_cell(sandbox, code, wall=60, cpu=30)
    finally:
        sandbox.kill()
    assert kind == "reply" and reply["ok"], reply
    printed = reply["output"].splitlines()
    assert printed[0] == f"{len(wanted)} {len(wanted)} {wanted[-1]} True True"
    assert printed[1] == "a grep() result is read-only: list(result) copies it into a list you can change"
    assert printed[2] == str(wanted[-1][0])
    assert printed[3] == f"{len(wanted):,} lines match /{LITERAL}/ (showing the first 3)"
    assert printed[4:7] == [f"{n:>7}| {line}" for n, line in wanted[:3]]
    assert printed[7].startswith(f"(the returned list holds all {len(wanted):,} matching lines")
