"""`rlm replay --rerun` from the trace's cassette: every model call served by its request's key.

Each test records a real scripted run through the CLI, then re-runs its trace through the
CLI as a user would. The cassette is what lets a re-run reproduce calls the steps do not
show (the widened second synthesis pass) and calls made in an order no trace records
(a fan-out's sub-calls finishing as they please).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import FIXTURES, run_cli, write_script

ACCESS = FIXTURES / "access.log"
COUNT_404 = "print(sum(1 for l in context_lines if '\" 404 ' in l))"


def _synthesis(answer: str, explanation: str, confidence: str, reason: str) -> str:
    return json.dumps(
        {
            "answer": answer,
            "explanation": explanation,
            "citations": ["F1"],
            "confidence": confidence,
            "confidence_reason": reason,
        }
    )


def _record(tmp_path: Path, script: dict[str, Any], question: str = "How many 404s?") -> tuple[Path, dict]:
    """One real scripted run over fixtures/access.log: (its trace, the document)."""
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(ACCESS), question, "-m", model, "--no-memory", "-q"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [trace] = sorted((tmp_path / "traces").glob("*.json"))
    return trace, json.loads(trace.read_text())


def _rerun(tmp_path: Path, trace: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    proc = run_cli(
        ["replay", str(trace), "--rerun", "--json", "--trace-dir", str(tmp_path / "rerun"), *extra],
        cwd=tmp_path,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


WIDENED = {
    "replies": [
        {"tool": "execute", "args": {"code": COUNT_404}},
        {"tool": "final", "args": {"answer": "35"}},
        _synthesis("35", "From the count.", "low", "the grep and the count may differ"),
        _synthesis("35", "The exact count settles it.", "high", "an exact count"),
    ]
}


def test_a_widened_synthesis_pass_is_rerun_with_no_drift(tmp_path: Path) -> None:
    """The first synthesis calls its answer unsure, so a second, widened pass writes it. The
    re-run makes the same four calls, each answered by its own recording: the same answer,
    the same two synthesis passes, nothing served out of place."""
    trace, doc = _record(tmp_path, WIDENED)
    recorded = doc["synthesis"]
    assert recorded["first_attempt"]["confidence"] == "low" and recorded["confidence"] == "high"
    assert doc["totals"]["calls"] == 4

    proc, result = _rerun(tmp_path, trace)
    assert result["answer_same"] and result["answer"] == "35"
    assert result["status"] == doc["status"] == "final"
    assert {s["status"] for s in result["steps"]} == {"same"}
    new = json.loads(Path(result["new_trace"]).read_text())
    # The widened pass ran again, from the same first answer, to the same second one.
    assert new["synthesis"]["first_attempt"] == recorded["first_attempt"]
    assert new["synthesis"]["explanation"] == "The exact count settles it."
    assert new["totals"]["calls"] == 4
    # Each call answered by its own recording: no drift.
    assert proc.returncode == 0 and result["ok"], proc.stdout + proc.stderr
    assert result["model_calls"] == {
        "recorded": 4,
        "by_key": 4,
        "by_order": [],
        "unanswered": [],
        "unplayed": [],
    }
    assert result["note"] is None and "no recorded model calls" not in proc.stderr
    # The re-run's trace holds its own cassette, with the same requests.
    assert [c["key"] for c in new["cassette"]["calls"]] == [c["key"] for c in doc["cassette"]["calls"]]
    assert new["models"]["root"].startswith("scripted/") and new["models"]["root"].endswith("#root")

    # The report a user reads says the same.
    plain = run_cli(["replay", str(trace), "--rerun", "--trace-dir", str(tmp_path / "rerun")], cwd=tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "model calls: 4 recorded, 4 played (4 matched by their request)" in plain.stdout
    assert "The answer is the same." in plain.stdout


def test_a_fan_out_is_served_by_request_whatever_order_its_calls_came_in(tmp_path: Path) -> None:
    """partition_map's sub-calls ran eight at a time and ended in any order; each chunk's
    answer names its own lines, so a reply served to the wrong chunk would show."""
    script = {
        "rules": [
            {
                "match": r"Question: Which statuses\?\n\nExcerpt \((lines [\d,]+-[\d,]+)\)",
                "reply": "\\1: mostly 200",
            }
        ],
        "replies": [
            {"tool": "partition_map", "args": {"question": "Which statuses?", "chunk_lines": 25}},
            {"tool": "execute", "args": {"code": "print(results[0])\nprint(results[-1])"}},
            {"tool": "final", "args": {"answer": "mostly 200"}},
            _synthesis("mostly 200", "Every chunk says so.", "high", "every chunk agrees"),
        ],
    }
    trace, doc = _record(tmp_path, script, "Which statuses are most common?")
    fanned = [c for c in doc["cassette"]["calls"] if "lines" in ((c.get("reply") or {}).get("content") or "")]
    assert len(fanned) >= 5, doc["cassette"]["calls"]

    proc, result = _rerun(tmp_path, trace)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {s["status"] for s in result["steps"]} == {"same"}, result["steps"]
    calls = result["model_calls"]
    assert calls["by_key"] == calls["recorded"] == len(doc["cassette"]["calls"])
    assert calls["by_order"] == calls["unanswered"] == calls["unplayed"] == []


def test_a_changed_prompt_is_served_in_order_and_said_and_a_missing_call_fails_the_rerun(
    tmp_path: Path,
) -> None:
    trace, doc = _record(tmp_path, WIDENED)

    # As if this version asked the second turn in other words: no recording has its key.
    changed = json.loads(trace.read_text())
    changed["cassette"]["calls"][1]["key"] = "0" * 64
    path = tmp_path / "changed" / trace.name
    path.parent.mkdir()
    path.write_text(json.dumps(changed))
    proc, result = _rerun(tmp_path, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["answer_same"] and result["ok"]
    assert result["model_calls"]["by_key"] == 3
    assert result["model_calls"]["by_order"] == [{"role": "root", "position": 2}]
    plain = run_cli(["replay", str(path), "--rerun", "--trace-dir", str(tmp_path / "rerun")], cwd=tmp_path)
    assert "PROMPT CHANGED: served in recorded order: root call 2" in plain.stdout

    # The widened pass's recording gone: the re-run asks for a call the cassette does not
    # hold (the first answer then stands) — drift, said, and exit 1.
    cut = json.loads(trace.read_text())
    del cut["cassette"]["calls"][3]
    path = tmp_path / "cut" / trace.name
    path.parent.mkdir()
    path.write_text(json.dumps(cut))
    proc, result = _rerun(tmp_path, path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not result["ok"] and result["model_calls"]["unanswered"] == [{"role": "root", "asked": 4}]
    plain = run_cli(["replay", str(path), "--rerun", "--trace-dir", str(tmp_path / "rerun")], cwd=tmp_path)
    assert plain.returncode == 1
    assert "NOT RECORDED: asked by the re-run, no recording left: root call 4" in plain.stdout


def test_a_trace_without_a_cassette_is_rerun_from_its_steps_and_says_what_it_cannot(
    tmp_path: Path,
) -> None:
    """A trace an earlier rlm wrote has no cassette: re-run the old way, said on stderr."""
    script = {
        "replies": [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "final", "args": {"answer": "35"}},
            _synthesis("35", "From the count.", "high", "an exact count"),
        ]
    }
    trace, _ = _record(tmp_path, script)
    old = json.loads(trace.read_text())
    del old["cassette"]
    path = tmp_path / "old" / trace.name
    path.parent.mkdir()
    path.write_text(json.dumps(old))
    proc, result = _rerun(tmp_path, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["answer_same"] and {s["status"] for s in result["steps"]} == {"same"}
    assert result["model_calls"] is None
    said = [line for line in proc.stderr.splitlines() if "no recorded model calls" in line]
    assert said == [
        "rlm: this trace holds no recorded model calls (an earlier rlm wrote it): it is re-run "
        "from its steps' replies in the order they show, which cannot replay a second, widened "
        "synthesis pass"
    ], proc.stderr
