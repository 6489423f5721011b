"""The first question about a file rlm has not seen: the table build a user waits for is told as it
goes (the live status line, `--jsonl` events), and stops at once when asked to."""

from __future__ import annotations

import json
from pathlib import Path

import bigfiles
from conftest import run_cli, write_script

MB = 1 << 20


def test_jsonl_tells_the_table_build_as_it_goes(tmp_path: Path) -> None:
    """A CSV big enough for a build of a few seconds: `table_build` events, each with its share
    done rising, the file's bytes, the seconds so far and (once the pace is known) the seconds
    left; then the run's answer, counted over the table it waited for."""
    path = tmp_path / "trips.csv"
    size = bigfiles.csv_rows(path, 96 * MB)
    records = sum(1 for _ in path.open("rb")) - 1
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": 'print(sql("SELECT count(*) AS n FROM log")[0][0])'}},
            {"tool": "final", "args": {"answer": str(records)}},
            str(records),
        ],
    )
    proc = run_cli(["ask", str(path), "how many trips?", "-m", model, "--jsonl"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    builds = [e for e in events if e["event"] == "table_build"]
    assert builds, "no table_build event"
    assert all(e["bytes"] == size for e in builds)
    done = [e["done"] for e in builds]
    assert done == sorted(done) and 0 < done[-1] <= 1
    assert all(e["seconds"] > 0 for e in builds)
    assert any(e["left_s"] is not None for e in builds) or len(builds) == 1
    # Told before the model's first step, which ran over the whole table.
    first_step = next(i for i, e in enumerate(events) if e["event"] == "step")
    assert max(i for i, e in enumerate(events) if e["event"] == "table_build") < first_step
    step = events[first_step]
    assert step["ok"] and step["shown"] == str(records)
    assert events[-2]["event"] == "answer" and events[-2]["answer"] == str(records)
