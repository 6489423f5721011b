"""`rlm replay` (plain, --json, --verify, --rerun) and `rlm logs` on real recorded runs."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, run_cli, write_script

from rlm.replay.render import child_steps

QUESTION = "How many orders failed, and for how much?"
SUB_PROMPT_TOKENS = "300"  # small, so a 60-line slice needs a child node


def _orders(path: Path) -> tuple[int, int]:
    lines, failed, amount = [], 0, 0
    for i in range(1, 61):
        status = "fail" if i % 7 == 0 or i % 11 == 0 else "ok"
        value = (i * 37) % 500 + 10
        lines.append(
            f"2026-02-{(i % 28) + 1:02d} 10:{i % 60:02d}:00 order={i:04d} status={status} amount={value}"
        )
        if status == "fail":
            failed, amount = failed + 1, amount + value
    path.write_text("\n".join(lines) + "\n")
    return failed, amount


def _script(failed: int, amount: int) -> dict[str, Any]:
    return {
        "rules": [{"match": "Question: How many failures here\\?", "reply": "Some failures."}],
        "replies": [
            {"content": "First a look.", "tool": "peek", "args": {"start": 1, "length": 3}},
            {
                "tool": "execute",
                "args": {
                    "code": "fails = [l for l in context_lines if 'status=fail' in l]\nprint(len(fails))"
                },
            },
            {"tool": "execute", "args": {"code": "print(sum(int(l.rsplit('=', 1)[1]) for l in fails))"}},
            {"tool": "grep", "args": {"pattern": "status=fail", "max_matches": 3}},
            {
                "tool": "llm_query",
                "args": {"question": "What is on these lines?", "start_line": 1, "end_line": 3},
            },
            "Three orders from February.",
            {"tool": "partition_map", "args": {"question": "How many failures here?", "chunk_lines": 10}},
            {
                "tool": "execute",
                "args": {
                    "code": "a = llm_query('Which order is first?', start_line=1, end_line=2)\nprint(a.upper())\nprint(len(results))"
                },
            },
            "Order 0001.",
            {
                "tool": "llm_query",
                "args": {"question": "How many orders failed?", "start_line": 1, "end_line": 60},
            },
            {
                "tool": "execute",
                "args": {
                    "code": "n = sum('status=fail' in l for l in context_lines)\nnote(f'{n} orders failed')\nprint(n)"
                },
            },
            {"tool": "final", "args": {"answer": f"{failed} orders failed"}},
            f"{failed} orders failed [F1].",
            {"tool": "final", "args": {"answer": f"{failed} orders failed, {amount} in all"}},
            f"{failed} orders failed, for {amount} in all [F1][F2].",
        ],
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real run with every kind of step: peek, execute (state kept), grep, a plain
    sub-call, partition_map, llm_query from code, a child node, final."""
    work = tmp_path_factory.mktemp("recorded")
    data = work / "orders.log"
    failed, amount = _orders(data)
    model = write_script(work / "s.json", _script(failed, amount))
    proc = run_cli(
        ["ask", str(data), QUESTION, "-m", model, "-q"],
        cwd=work,
        env={"RLM_SUB_PROMPT_TOKENS": SUB_PROMPT_TOKENS},
    )
    assert proc.returncode == 0, proc.stderr
    trace = sorted((work / "traces").glob("*.json"))[-1]
    return {
        "dir": work,
        "data": data,
        "trace": trace,
        "doc": json.loads(trace.read_text()),
        "answer": proc.stdout.strip(),
        "failed": failed,
        "amount": amount,
    }


def _copy(recorded: dict[str, Any], tmp_path: Path, edit: Any = None) -> Path:
    doc = json.loads(recorded["trace"].read_text())
    if edit:
        edit(doc)
    path = tmp_path / recorded["trace"].name
    path.write_text(json.dumps(doc))
    return path


def test_the_recorded_run_has_every_kind_of_step(recorded: dict[str, Any]) -> None:
    doc = recorded["doc"]
    actions = [(s["node"], s["action"]["name"]) for s in doc["steps"]]
    assert ("n1", "execute") in actions and ("n0", "partition_map") in actions
    assert [n["id"] for n in doc["nodes"]] == ["n0", "n1"]
    assert recorded["answer"] == f"{recorded['failed']} orders failed, for {recorded['amount']} in all."


def test_replay_plain_text_shows_the_tree(recorded: dict[str, Any]) -> None:
    proc = run_cli(["replay", str(recorded["trace"])], cwd=recorded["dir"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # not a terminal: no colour codes
    assert f"Question: {QUESTION}" in out
    assert "n0.1 peek lines 1-3" in out and "n0.4 grep /status=fail/ (max 3)" in out
    assert "n1 depth 1 · lines 1-60 · final" in out
    assert "↳ sub-call lines 1-3: Three orders from February." in out
    assert f"Answer: {recorded['answer']}" in out
    lines = out.splitlines()
    # The child node is drawn inside the root step that started it (n0.8), before n0.9.
    child_at = next(i for i, line in enumerate(lines) if "n1 depth 1" in line)
    step8 = next(i for i, line in enumerate(lines) if "n0.8 llm_query" in line)
    step9 = next(i for i, line in enumerate(lines) if "n0.9 final" in line)
    assert step8 < child_at < step9
    assert lines[child_at].index("n1") > lines[step8].index("n0.8")  # indented under it
    # The state-carrying cell's output, and its finding, are shown.
    assert f"    │   ├── {recorded['failed']}" in lines and f"    │   ├── {recorded['amount']}" in lines


def test_replay_json_is_machine_readable(recorded: dict[str, Any]) -> None:
    proc = run_cli(["replay", str(recorded["trace"]), "--json"], cwd=recorded["dir"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "rlm-replay/1" and doc["status"] == "final" and doc["exit_code"] == 0
    assert [s["action"] for s in doc["steps"] if s["node"] == "n0"] == [
        "peek", "execute", "execute", "grep", "llm_query", "partition_map", "execute", "llm_query", "final",
    ]  # fmt: skip
    child = next(n for n in doc["nodes"] if n["id"] == "n1")
    assert child["parent"] == "n0" and child["parent_step"] == 8 and child["depth"] == 1
    second = doc["steps"][1]
    assert second["observation"]["preview"].strip() == str(recorded["failed"])
    assert second["findings"] and second["prompt_tokens"] > 0
    assert doc["answer"] == recorded["answer"]


def test_replay_and_verify_do_not_import_litellm(recorded: dict[str, Any]) -> None:
    for extra in ([], ["--json"], ["--verify"]):
        proc = run_cli(
            ["replay", str(recorded["trace"]), *extra],
            cwd=recorded["dir"],
            env={"PYTHONPROFILEIMPORTTIME": "1"},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        imported = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
        assert len(imported) > 50  # the import log is really there
        assert not [line for line in imported if "litellm" in line], extra


def test_verify_all_steps_match(recorded: dict[str, Any]) -> None:
    proc = run_cli(["replay", str(recorded["trace"]), "--verify", "--json"], cwd=recorded["dir"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    deterministic = [
        s for s in recorded["doc"]["steps"] if s["action"]["name"] in ("peek", "grep", "execute")
    ]
    assert report["counts"] == {"same": len(deterministic), "different": 0, "skipped": 0}
    assert report["input_changed"] is False and report["ok"] is True
    # Cells ran in order in one worker: the second cell used `fails` from the first,
    # and llm_query inside code was answered from the trace.
    by_step = {(s["node"], s["index"]): s for s in report["steps"]}
    assert by_step[("n0", 3)]["now"].strip() == str(recorded["amount"])
    assert by_step[("n0", 7)]["now"].splitlines()[:2] == ["ORDER 0001.", "6"]
    plain = run_cli(["replay", str(recorded["trace"]), "--verify"], cwd=recorded["dir"])
    assert "All re-run steps match." in plain.stdout and "sha256 matches" in plain.stdout


def test_verify_reports_a_changed_input(recorded: dict[str, Any], tmp_path: Path) -> None:
    changed = tmp_path / "orders.log"
    text = recorded["data"].read_text().replace("order=0020 status=ok", "order=0020 status=fail", 1)
    changed.write_text(text)
    proc = run_cli(["replay", str(recorded["trace"]), "--verify", "--input", str(changed)], cwd=tmp_path)
    assert proc.returncode == 1
    assert "The input has changed since the run" in proc.stdout
    assert recorded["doc"]["input"]["sha256"] in proc.stdout
    assert "n0.2 execute: DIFFERENT" in proc.stdout
    assert f"-{recorded['failed']}" in proc.stdout and f"+{recorded['failed'] + 1}" in proc.stdout
    assert "n0.1 peek: same" in proc.stdout  # line 1 did not change
    assert "Traceback" not in proc.stderr


def test_verify_reports_a_changed_step(recorded: dict[str, Any], tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["steps"][3]["observation"]["preview"] = doc["steps"][3]["observation"]["preview"].replace(
            "order=0007", "order=0008"
        )

    path = _copy(recorded, tmp_path, edit)
    proc = run_cli(["replay", str(path), "--verify", "--json"], cwd=recorded["dir"])
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    different = [s for s in report["steps"] if s["status"] == "different"]
    assert [(s["node"], s["index"], s["action"]) for s in different] == [("n0", 4, "grep")]
    assert any(line.startswith("-") and "order=0008" in line for line in different[0]["diff"])
    assert any(line.startswith("+") and "order=0007" in line for line in different[0]["diff"])
    assert report["input_changed"] is False


def test_verify_with_the_input_gone_is_a_one_line_error(recorded: dict[str, Any], tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["input"]["path"] = str(tmp_path / "gone" / "orders.log")
        doc["input"]["display_name"] = str(tmp_path / "gone" / "orders.log")

    path = _copy(recorded, tmp_path, edit)
    proc = run_cli(["replay", str(path), "--verify"], cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "input of this run is missing" in proc.stderr


def test_rerun_reaches_the_same_answer(recorded: dict[str, Any], tmp_path: Path) -> None:
    out_dir = tmp_path / "rerun-traces"
    proc = run_cli(
        ["replay", str(recorded["trace"]), "--rerun", "--json", "--trace-dir", str(out_dir)],
        cwd=tmp_path,
        env={"RLM_SUB_PROMPT_TOKENS": SUB_PROMPT_TOKENS},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["answer_same"] and result["answer"] == recorded["answer"]
    assert result["status"] == "final"
    assert {s["status"] for s in result["steps"]} == {"same"}
    assert len(result["steps"]) == len(recorded["doc"]["steps"])
    new = json.loads(Path(result["new_trace"]).read_text())
    assert Path(result["new_trace"]).parent == out_dir
    assert [n["id"] for n in new["nodes"]] == ["n0", "n1"]
    # No network: every model call was played by the scripted provider.
    assert new["settings"]["model"].startswith("scripted/") and new["settings"]["sub_model"].startswith(
        "scripted/"
    )


def test_rerun_reports_a_different_answer(recorded: dict[str, Any], tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        # As if this version's engine had shown the model different grep output at step 4.
        doc["steps"][3]["observation"]["preview"] = "0 lines match /status=fail/"

    path = _copy(recorded, tmp_path, edit)
    proc = run_cli(["replay", str(path), "--rerun", "--trace-dir", str(tmp_path / "t")], cwd=tmp_path,
                   env={"RLM_SUB_PROMPT_TOKENS": SUB_PROMPT_TOKENS})  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "n0.4 DIFFERENT (output)" in proc.stdout
    assert "The answer is the same." in proc.stdout  # the same replies lead to the same answer


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "trace not found"),
        ("DIR", "is a directory"),
        ("{not json", "not a valid trace"),
        ('{"hello": 1}', "not an rlm trace"),
        ('{"schema": "rlm-trace/1", "steps": {"a": 1}}', "not a valid trace"),
        ('{"schema": "rlm-trace/1", "steps": [{"index": 1}]}', "not a valid trace"),
    ],
)
def test_unusable_traces_exit_3_with_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "t.json"
    if content == "DIR":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    for extra in ([], ["--json"], ["--verify"], ["--rerun"]):
        proc = run_cli(["replay", str(path), *extra], cwd=tmp_path)
        assert proc.returncode == 3, (extra, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


def test_logs_lists_recent_runs(recorded: dict[str, Any], tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(recorded["trace"], traces / "2026-01-01T00-00-00-aaaa.json")
    shutil.copy(recorded["trace"], traces / recorded["trace"].name)
    (traces / "2026-01-02T00-00-00-bbbb.json").write_text("{broken")
    proc = run_cli(["logs", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["run_id"] for r in rows] == [
        recorded["trace"].stem,
        "2026-01-02T00-00-00-bbbb",
        "2026-01-01T00-00-00-aaaa",
    ]
    assert rows[0]["question"] == QUESTION and rows[0]["status"] == "final"
    assert rows[0]["answer"] == recorded["answer"] and rows[0]["steps"] == len(recorded["doc"]["steps"])
    assert rows[1]["status"] == "unreadable"
    assert len(json.loads(run_cli(["logs", "--json", "-n", "1"], cwd=tmp_path).stdout)) == 1
    plain = run_cli(["logs"], cwd=tmp_path)
    assert plain.returncode == 0 and "How many orders failed" in plain.stdout and "unreadable" in plain.stdout
    last = run_cli(["replay", "last", "--json"], cwd=tmp_path)
    assert json.loads(last.stdout)["run_id"] == recorded["doc"]["run_id"]
    empty = run_cli(["logs", "--trace-dir", str(tmp_path / "none")], cwd=tmp_path)
    assert empty.returncode == 0 and "no traces" in empty.stderr


def test_child_steps_deduced_from_order_when_not_recorded() -> None:
    doc = {
        "nodes": [
            {"id": "n0", "parent": None},
            {"id": "n1", "parent": "n0"},
            {"id": "n2", "parent": "n1"},
            {"id": "n3", "parent": "n0"},
            {"id": "n4", "parent": "n0"},
        ],
        "steps": [
            {"node": "n0", "index": 1},
            {"node": "n2", "index": 1},
            {"node": "n1", "index": 1},
            {"node": "n1", "index": 2},
            {"node": "n0", "index": 2},
            {"node": "n3", "index": 1},
            {"node": "n0", "index": 3},
            {"node": "n4", "index": 1},  # the run died while n0's step 4 was waiting for n4
        ],
    }
    assert child_steps(doc) == {"n1": 2, "n2": 1, "n3": 3, "n4": None}
    doc["nodes"][1]["parent_step"] = 7  # recorded wins over deduced
    assert child_steps(doc)["n1"] == 7


EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "traces" / "examples").glob("*.json"))


def test_example_traces_replay_and_verify(tmp_path: Path) -> None:
    """The examples shipped in traces/examples/ work for a newcomer, from any directory."""
    assert len(EXAMPLES) >= 3
    for path in EXAMPLES:
        doc = json.loads(path.read_text())
        assert doc["schema"] == "rlm-trace/1" and doc["status"] == "final" and doc["answer"]
        shown = run_cli(["replay", str(path)], cwd=tmp_path)
        assert shown.returncode == 0 and f"Answer: {doc['answer']}" in shown.stdout, shown.stderr
        # The recorded input path is this machine's; the fixture is found next to the trace.
        verified = run_cli(["replay", str(path), "--verify", "--json"], cwd=tmp_path)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        report = json.loads(verified.stdout)
        assert report["input"].endswith(doc["input"]["display_name"]) and report["counts"]["same"] >= 2


def test_verify_finds_the_input_beside_a_moved_checkout(tmp_path: Path) -> None:
    """A clone elsewhere: the recorded absolute path is gone, `fixtures/...` next to the trace is used."""
    source = next(p for p in EXAMPLES if p.name == "access-404s.json")
    doc = json.loads(source.read_text())
    doc["input"]["path"] = "/nonexistent/checkout/" + doc["input"]["display_name"]
    clone = tmp_path / "clone"
    (clone / "traces" / "examples").mkdir(parents=True)
    (clone / "fixtures").mkdir()
    shutil.copy(
        source.parent.parent.parent / doc["input"]["display_name"], clone / doc["input"]["display_name"]
    )
    trace = clone / "traces" / "examples" / source.name
    trace.write_text(json.dumps(doc))
    proc = run_cli(["replay", str(trace), "--verify"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"input: {clone / doc['input']['display_name']}" in proc.stdout


def test_runs_are_found_from_any_directory(tmp_path: Path) -> None:
    """By default traces go to the per-user data directory; `replay last` and `logs` look
    there, wherever they are run from (./traces only when asked for)."""
    data = tmp_path / "userdata"
    env = {"RLM_TRACE_DIR": "", "XDG_DATA_HOME": str(data)}
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    model = write_script(
        here / "s.json",
        [
            {"tool": "peek", "args": {"start": 1, "length": 2}},
            {"tool": "final", "args": {"answer": "x"}},
            "x",
        ],
    )
    log = FIXTURES / "access.log"
    proc = run_cli(["ask", str(log), "first question", "-m", model], cwd=here, env=env)
    assert proc.returncode == 0, proc.stderr
    kept = list((data / "rlm" / "traces").glob("*.json"))
    assert len(kept) == 1 and not (here / "traces").exists()

    replay = run_cli(["replay", "last", "--json"], cwd=elsewhere, env=env)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["question"] == "first question"

    # ./traces is read only when asked for: wherever one stands, it may be a repository's.
    local = run_cli(
        ["ask", str(log), "second question", "-m", model],
        cwd=elsewhere,
        env={**env, "RLM_TRACE_DIR": "traces"},
    )
    assert local.returncode == 0, local.stderr
    logs = run_cli(["logs", "--json"], cwd=elsewhere, env=env)
    assert [row["question"] for row in json.loads(logs.stdout)] == ["first question"]
    asked = run_cli(["logs", "--json", "--trace-dir", "traces"], cwd=elsewhere, env=env)
    assert [row["question"] for row in json.loads(asked.stdout)] == ["second question"]


@pytest.mark.parametrize(
    "env, coloured",
    [
        ({"TERM": "xterm-256color"}, True),
        ({"TERM": "xterm-256color", "NO_COLOR": "1"}, False),
        ({"TERM": "dumb"}, False),
    ],
)
def test_report_colour_is_rich_s_decision_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], coloured: bool
) -> None:
    """verify, rerun and the stderr reporter colour through one painter: a terminal gets colour
    unless NO_COLOR or TERM=dumb says otherwise; a pipe never does."""
    import os

    from rlm.replay.paint import painter

    for key in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            painted = painter(tty)("DIFFERENT", "red")
    finally:
        os.close(master)
        os.close(slave)
    assert ("\x1b[" in painted) is coloured and "DIFFERENT" in painted
    assert painter(io.StringIO())("DIFFERENT", "red") == "DIFFERENT"
