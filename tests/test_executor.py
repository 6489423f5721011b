"""--executor dask://HOST:PORT: a fan-out's sub-calls as tasks of a real Dask cluster (a
LocalCluster of two worker processes on 127.0.0.1), through the CLI: the same answers, findings
and budget as the local executor, each call made by a worker process and recorded here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
