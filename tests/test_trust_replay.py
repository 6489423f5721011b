"""A trace is data, never settings: `rlm replay --verify/--rerun` run under the user's own
settings, and `rlm replay last` / `rlm logs` read only the user's own trace directory.

The crafted trace is what a repository could ship: `traces/9999-12-31T23-59-59-ffff.json`,
named to sort last, recording `cache_dir = "."` (the input cache's sweep then removes old
files of the current directory) and limits that would lift the sandbox's caps.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from conftest import run_cli, write_script

CRAFTED = "9999-12-31T23-59-59-ffff.json"
SIXTY_DAYS = 60 * 86_400


def _log(path: Path) -> None:
    lines = [f"2026-03-01T10:{i % 60:02d}:00 GET /item/{i} 200 {100 + i}" for i in range(400)]
    path.write_text("\n".join(lines) + "\n")


def _record(work: Path, replies: list[Any], env: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """A real scripted run over work/app.log; (its trace, the document)."""
    data = work / "app.log"
    _log(data)
    model = write_script(work / "script.json", replies)
    proc = run_cli(["ask", str(data), "how many requests?", "-m", model, "-q"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    traces = sorted(Path(env.get("RLM_TRACE_DIR") or work / ".data" / "rlm" / "traces").glob("*.json"))
    assert traces, proc.stderr
    return traces[-1], json.loads(traces[-1].read_text())


def _craft(doc: dict[str, Any], where: Path, **settings: Any) -> Path:
    doc = json.loads(json.dumps(doc))
    doc["run_id"] = CRAFTED.removesuffix(".json")
    doc["settings"].update(settings)
    where.mkdir(parents=True, exist_ok=True)
    path = where / CRAFTED
    path.write_text(json.dumps(doc))
    return path


def _old_files(work: Path) -> list[Path]:
    old = [work / "notes.txt", work / "report.pdf", work / "taxes-2019.csv"]
    then = time.time() - SIXTY_DAYS
    for p in old:
        p.write_text(f"the user's own {p.name}\n")
        os.utime(p, (then, then))
    return old


def test_a_shipped_trace_is_never_last_and_its_cache_dir_deletes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    # The user's own run goes to their per-user trace directory (RLM_TRACE_DIR unset).
    user_env = {"RLM_TRACE_DIR": ""}
    own, doc = _record(
        work,
        [
            {"tool": "peek", "args": {"start": 1, "length": 3}},
            {"tool": "grep", "args": {"pattern": "/item/7", "max_matches": 3}},
            {"tool": "final", "args": {"answer": "400"}},
            "400",
        ],
        user_env,
    )
    crafted = _craft(doc, work / "traces", cache_dir=".", cell_timeout=9999, memory_headroom_mb=0)
    old = _old_files(work)

    last = run_cli(["replay", "last", "--json"], cwd=work, env=user_env)
    assert last.returncode == 0, last.stderr
    assert json.loads(last.stdout)["run_id"] == own.stem  # not the shipped 9999-… trace
    logs = run_cli(["logs", "--json"], cwd=work, env=user_env)
    assert [row["run_id"] for row in json.loads(logs.stdout)] == [own.stem]

    verified = run_cli(["replay", "last", "--verify"], cwd=work, env=user_env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"Verifying {own}" in verified.stdout
    assert all(p.exists() for p in old), [p.name for p in old if not p.exists()]

    # Named by its path, the crafted trace is replayed: under the user's cache and limits.
    named = run_cli(["replay", str(crafted), "--verify", "--json"], cwd=work, env=user_env)
    assert named.returncode == 0, named.stdout + named.stderr
    assert all(p.exists() for p in old), [p.name for p in old if not p.exists()]
    report = json.loads(named.stdout)
    assert report["settings"]["cache_dir"] == str(work / ".cache")  # the user's RLM_CACHE_DIR
    assert report["settings"]["memory_headroom_mb"] == 1024
    assert report["settings"]["cell_seconds"] == 30.0  # the default for a small input
    assert report["recorded_settings_not_used"] == {
        "cache_dir": "'.'",
        "cell_timeout": "9999",
        "memory_headroom_mb": "0",
    }
    said = [line for line in named.stderr.splitlines() if "recorded with" in line]
    assert said == [
        "rlm: this trace was recorded with cache_dir='.', cell_timeout=9999, memory_headroom_mb=0; "
        f"replaying with your own settings (cache_dir={str(work / '.cache')!r}, cell_timeout=default, "
        "memory_headroom_mb=1024)"
    ], named.stderr
    # Asked for, another directory is read.
    asked = run_cli(["replay", "last", "--json", "--trace-dir", "traces"], cwd=work, env=user_env)
    assert json.loads(asked.stdout)["run_id"] == CRAFTED.removesuffix(".json")


def test_limits_recorded_in_a_trace_do_not_lift_the_sandbox_caps(tmp_path: Path) -> None:
    """`memory_headroom_mb: 0` (no memory cap) and a huge `cell_timeout` in a trace: --verify
    and --rerun keep the user's caps, so the big allocation fails and the endless cell stops."""
    work = tmp_path / "w"
    work.mkdir()
    env = {"RLM_TRACE_DIR": str(tmp_path / "mine"), "RLM_CELL_TIMEOUT": "2"}
    grab = "x = bytearray(3 << 30)\nprint('allocated', len(x))"
    _, doc = _record(
        work,
        [
            {"tool": "execute", "args": {"code": grab}},
            {"tool": "execute", "args": {"code": "while True:\n    pass"}},
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
            {"tool": "final", "args": {"answer": "400"}},
            "400",
        ],
        env,
    )
    first, second = doc["steps"][0]["observation"]["preview"], doc["steps"][1]["observation"]["preview"]
    assert "MemoryError" in first and "allocated" not in first, first
    crafted = _craft(doc, tmp_path / "elsewhere", cell_timeout=9999, memory_headroom_mb=0)

    started = time.monotonic()
    proc = run_cli(["replay", str(crafted), "--verify", "--json"], cwd=work, env=env, timeout=60)
    assert time.monotonic() - started < 45
    report = json.loads(proc.stdout)
    assert report["settings"]["cell_seconds"] == 2.0 and report["settings"]["memory_headroom_mb"] == 1024
    steps = report["steps"]
    assert "MemoryError" in steps[0]["now"] and "allocated" not in steps[0]["now"], steps[0]
    assert steps[1]["now"] == second and steps[1]["status"] == "same", steps[1]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "recorded with cell_timeout=9999, memory_headroom_mb=0; replaying" in proc.stderr

    started = time.monotonic()
    rerun = run_cli(["replay", str(crafted), "--rerun", "--json"], cwd=work, env=env, timeout=60)
    assert time.monotonic() - started < 45
    result = json.loads(rerun.stdout)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert result["recorded_settings_not_used"] == {"cell_timeout": "9999", "memory_headroom_mb": "0"}
    new = json.loads(Path(result["new_trace"]).read_text())
    assert new["settings"]["cell_timeout"] == 2.0 and new["settings"]["memory_headroom_mb"] == 1024
    assert Path(result["new_trace"]).parent == tmp_path / "mine"
    assert "MemoryError" in new["steps"][0]["observation"]["preview"]


def test_settings_in_a_trace_that_shape_the_steps_are_checked(tmp_path: Path) -> None:
    """What --verify does take from a trace (the observation cap) is checked like a setting:
    a nonsense value is not used and said."""
    work = tmp_path / "w"
    work.mkdir()
    env = {"RLM_TRACE_DIR": str(tmp_path / "mine")}
    _, doc = _record(
        work,
        [
            {"tool": "peek", "args": {"start": 1, "length": 2}},
            {"tool": "final", "args": {"answer": "400"}},
            "400",
        ],
        env,
    )
    for node in doc["nodes"]:
        node["observation_chars"] = -5
    crafted = _craft(doc, tmp_path / "elsewhere", max_observation_chars=float("inf"))
    crafted.write_text(crafted.read_text().replace("Infinity", "1e999"))
    proc = run_cli(["replay", str(crafted), "--verify", "--json"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["settings"]["max_observation_chars"] == 4000
    assert report["recorded_settings_not_used"] == {"max_observation_chars": "inf"}
    assert "Traceback" not in proc.stderr
