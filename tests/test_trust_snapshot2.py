"""One snapshot per run, the harder changes: a file replaced by a rename while its table is
being built, and a copytruncate under a worker that has the file mapped.

The CLI as users run it, on real files: the run never answers about a mix of two files, a
table built while the file was swapped is never served later as the table of either file, and
a worker killed because the input shrank under it is said plainly, with nothing kept in memory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from bigfiles import apache_log
from conftest import FIXTURES, run_cli, start_cli, table_building, traces_in, wait_for, write_script

ACCESS = FIXTURES / "access.log"
COUNT = 'print("rows", sql("SELECT count(*) FROM log")[0][0])'
BIG = 120 * 1024 * 1024  # a table build of a few seconds on two shared cores
QUESTION = "How many requests are there?"


def _rows(tmp_path: Path, log: Path) -> tuple[int, str]:
    """A run that counts the table's rows: (the lines rlm indexed, what the count printed)."""
    model = write_script(tmp_path / "count.json", [{"tool": "execute", "args": {"code": COUNT}}, "x"])
    done = run_cli(["ask", str(log), QUESTION, "-m", model, "--no-memory"], cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr  # the script's end is not this test's business
    trace = traces_in(tmp_path)[-1]
    return trace["input"]["lines"], json.dumps(trace["steps"])


def test_a_file_replaced_during_the_table_build_is_refused_and_its_table_never_served(
    tmp_path: Path, huge_files: Callable[..., Path]
) -> None:
    big = huge_files("access-120m.log", apache_log, BIG)
    log = tmp_path / "access.log"
    os.link(big, log)  # the same inode: moved away and back, it is the same file, mtime and all
    new = tmp_path / "access.log.new"
    new.write_bytes(ACCESS.read_bytes())
    model = write_script(tmp_path / "s.json", [{"tool": "execute", "args": {"code": COUNT}}, "x"])
    proc = start_cli(["ask", str(log), QUESTION, "-m", model], cwd=tmp_path)
    wait_for(lambda: table_building(tmp_path / ".cache"), proc)
    time.sleep(0.3)  # the parts' queries are reading the file by its name
    os.replace(new, log)  # a rename over the path: another inode, another file
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert err.strip().splitlines() == [
        f"rlm: {log} was replaced while it was being read: ask again once it is stable"
    ], err
    assert out == ""
    [trace] = traces_in(tmp_path)
    assert trace["exit_code"] == 3 and "was replaced while it was being read" in json.dumps(trace)

    # The new file: its own table, of its own lines.
    lines, steps = _rows(tmp_path, log)
    assert lines == len(ACCESS.read_bytes().splitlines())
    assert f"rows {lines}" in steps, steps[:600]
    # The old file back at its name (same inode, size and mtime): the table built while it
    # was being swapped, part old and part new, is not served as its table.
    os.unlink(log)
    os.link(big, log)
    lines, steps = _rows(tmp_path, log)
    assert f"rows {lines}" in steps, steps[:600]


SLOW_LAST_LINE = """import time
t = time.time()
while time.time() - t < 2.5:
    pass
print("last", context_lines[-1][:60])"""


def test_a_copytruncate_under_a_cell_is_said_and_the_answer_not_presented_as_clean(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_bytes(ACCESS.read_bytes())
    calls = tmp_path / "calls.jsonl"
    script = {
        "log": str(calls),
        "replies": [
            {
                "tool": "execute",
                "args": {"code": 'print(sql("SELECT count(*) FROM log WHERE status = 404")[0][0])'},
            },
            # The file is emptied in place (logrotate's copytruncate) while this cell spins;
            # then it reads the last line, in the region cut off its mapping.
            {"tool": "execute", "args": {"code": SLOW_LAST_LINE}},
            {"tool": "final", "args": {"answer": "35"}},
            json.dumps({"answer": "35", "explanation": "Counted by SQL.", "citations": ["F1"]}),
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = start_cli(["ask", str(log), QUESTION, "-m", model, "--json"], cwd=tmp_path)
    wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) >= 2, proc)
    time.sleep(1.0)  # the second cell is spinning
    with open(log, "r+b") as fh:
        fh.truncate(0)
        fh.write(b'127.0.0.1 - - [01/Jan/2025:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "x"\n')
    out, err = proc.communicate(timeout=120)
    # The count was made before the cut, but the next step died of it (SIGBUS) and a restarted
    # worker would map a one-line file under a 2,000-line index: the run ends as an input
    # error, its answer not presented as one.
    assert proc.returncode == 3, err
    said = "the input changed during the run (the sandbox worker was killed by SIGBUS"
    assert "Traceback" not in err
    [last] = [ln for ln in err.splitlines() if ln.startswith("rlm: ")]
    assert said in last and "ask again once it is stable" in last, err
    doc = json.loads(out)
    assert doc["answer"] is None and doc["exit_code"] == 3 and said in doc["error"], doc
    [trace] = traces_in(tmp_path)
    assert trace["status"] == "error" and trace["exit_code"] == 3 and said in trace["error"]
    assert not (trace.get("memory") or {}).get("stored")
    listed = run_cli(["memory", "list", "--json"], cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout) in ([], {"memories": []}), listed.stdout
