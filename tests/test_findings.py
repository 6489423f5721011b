"""Findings that hold the evidence, through the CLI with a scripted model on the real access log."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from conftest import FIXTURES, latest_trace, run_cli, write_script

ACCESS = FIXTURES / "access.log"


def status_counts() -> Counter[str]:
    return Counter(line.split()[8] for line in ACCESS.read_text().splitlines())


def test_multi_line_results_and_grep_lines_become_findings_and_a_rerun_supersedes(tmp_path: Path) -> None:
    table = (
        "from collections import Counter\n"
        "c = Counter(line.split()[8] for line in context_lines)\n"
        "for status, n in sorted(c.items()):\n"
        "    print(status, n)"
    )
    script = {
        "log": "calls.jsonl",
        "replies": [
            {"tool": "execute", "args": {"code": "print(len(y))"}},  # an error: never a finding
            {"tool": "execute", "args": {"code": "y = [1]"}},
            {"tool": "execute", "args": {"code": "print(len(y))"}},
            {"tool": "execute", "args": {"code": "y = [1, 2]"}},
            {"tool": "execute", "args": {"code": "print(len(y))"}},  # the same code, a new state
            {"tool": "execute", "args": {"code": table}},
            {"tool": "grep", "args": {"pattern": '" 404 '}},
            {"tool": "final", "args": {"answer": "the draft answer"}},
            "the synthesis",
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(ACCESS), "q", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ledger = latest_trace(tmp_path)["ledger"]
    by_text = {f["text"]: f for f in ledger}

    assert not any("NameError" in f["text"] for f in ledger)
    old, new = by_text["`print(len(y))` gave: 1"], by_text["`print(len(y))` gave: 2"]
    assert old["superseded_by"] == new["id"] and new["superseded_by"] is None

    counts = status_counts()
    whole = "\n".join(f"{s} {n}" for s, n in sorted(counts.items()))
    result = next(f for f in ledger if f["kind"] == "result" and f["text"].startswith("`from collections"))
    first = sorted(counts.items())[0]
    assert f"gave: {first[0]} {first[1]}" in result["text"]
    assert (result["full"] or result["text"]).endswith(whole)  # the whole output is kept

    grep = next(f for f in ledger if f["kind"] == "grep")
    matching = [(i, line) for i, line in enumerate(ACCESS.read_text().splitlines(), 1) if '" 404 ' in line]
    assert grep["text"].startswith(f'grep /" 404 / matches {len(matching)} lines; first: {matching[0][0]}|')

    # The synthesis sees the draft once, whole, and the current findings; not the superseded one.
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    synthesis = calls[-1]["messages"][-1]["content"]
    assert synthesis.count("the draft answer") == 1
    assert "gave: 2" in synthesis and "gave: 1\n" not in synthesis and not synthesis.endswith("gave: 1")


def test_the_model_is_told_what_becomes_a_finding(tmp_path: Path) -> None:
    script = {
        "log": "calls.jsonl",
        "replies": [
            {"tool": "peek", "args": {"start": 1, "length": 2}},
            {"tool": "final", "args": {"answer": "x"}},
            "x",
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(ACCESS), "q", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    system = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])["messages"][0]["content"]
    assert "kept as findings" in system and "writes the answer from these findings" in system
