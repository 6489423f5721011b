"""A cell's finding keeps its evidence by content, not by position: the head and the tail of what it
printed (the middle left out, its size said), the lines holding the draft's values, and what a cell
printed before it failed. Each run goes through the CLI with the scripted model and the real worker;
the synthesis prompt is read from the scripted provider's log.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import FIXTURES, latest_trace, run_cli, script_log, write_script

ACCESS = FIXTURES / "access.log"
FRAME = re.compile(r"<data-(?P<code>[a-z]{4})>(?P<body>.*?)</data-(?P=code)>", re.S)
# About 2,000 characters: a hundred rows, then the line that settles the question.
ROWS_THEN_TOTAL = (
    "for i in range(100):\n    print(f'row {i:03d} value {i * 37}')\nprint('TOTAL', 100 * 37 + 3621)"
)
LEFT_OUT = re.compile(r"… \[([\d,]+) characters left out\] …")


def run(tmp_path: Path, code: str, draft: str) -> tuple[dict[str, Any], str]:
    """One cell, a draft, a synthesis: the trace and the synthesis prompt."""
    script = {
        "log": "calls.jsonl",
        "replies": [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": draft}},
            '{"answer": "' + draft + '", "citations": ["F1"], "confidence": "high"}',
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(ACCESS), "what is the total?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return latest_trace(tmp_path), script_log(tmp_path / "calls.jsonl")[-1]["messages"][-1]["content"]


def shown_finding(prompt: str, fid: str) -> str:
    """The framed text of finding `fid` in the prompt's list of findings (the fullest place it is
    shown), not an observation that echoes the same output."""
    bodies = []
    for found in re.finditer(rf"\[{fid}\] \(result, [^)]*\) (?=<data-[a-z]{{4}}>)", prompt):
        body = FRAME.match(prompt, found.end())
        assert body
        bodies.append(body.group("body"))
    assert bodies, prompt
    return max(bodies, key=len)


def test_the_last_line_printed_reaches_the_synthesis_and_the_cut_says_its_size(tmp_path: Path) -> None:
    trace, prompt = run(tmp_path, ROWS_THEN_TOTAL, "the total line")
    result = next(f for f in trace["ledger"] if f["kind"] == "result")
    printed = "\n".join(f"row {i:03d} value {i * 37}" for i in range(100)) + "\nTOTAL 7321"
    assert len(printed) > 1800 and result["full"].endswith(printed)
    shown = shown_finding(prompt, result["id"])
    assert "TOTAL 7321" in shown and "row 000 value 0" in shown  # the tail and the head
    # The code is said once, whole here as it is short, and the output keeps its share.
    assert shown.startswith(
        "\n`for i in range(100):; print(f'row {i:03d} value {i * 37}'); print('TOTAL', 100 * 37 + 3621)` gave: "
    )
    # The elision says how many characters it left out: exactly those of the lines it stands for.
    gaps = LEFT_OUT.findall(result["text"])
    assert len(gaps) == 1, result["text"]
    kept = [ln for ln in result["text"].split(" gave: ", 1)[1].split("\n") if not LEFT_OUT.fullmatch(ln)]
    assert int(gaps[0].replace(",", "")) == len(printed) - len("\n".join(kept)) - 1


def test_the_lines_holding_the_drafts_value_are_kept(tmp_path: Path) -> None:
    trace, prompt = run(tmp_path, ROWS_THEN_TOTAL, "1,480")  # row 040, in the middle of the output
    result = next(f for f in trace["ledger"] if f["kind"] == "result")
    # The finding as the investigation's prompts show it keeps the line holding the draft's value.
    assert "row 040 value 1480" in result["text"] and "TOTAL 7321" in result["text"]
    assert len(LEFT_OUT.findall(result["text"])) == 2  # the middle left out on either side of it
    # The synthesis has the room for the whole output: it is shown whole.
    shown = shown_finding(prompt, result["id"])
    assert "row 040 value 1480" in shown and "TOTAL 7321" in shown and not LEFT_OUT.search(shown)


def test_a_failed_cells_printed_table_is_a_finding(tmp_path: Path) -> None:
    code = (
        "from collections import Counter\n"
        "c = Counter(line.split()[8] for line in context_lines)\n"
        "for status, n in sorted(c.items()):\n"
        "    print(status, n)\n"
        "print(c['200'] / 0)"
    )
    trace, prompt = run(tmp_path, code, "see the table")
    statuses = sorted(line.split()[8] for line in ACCESS.read_text().splitlines())
    table = "\n".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses)))
    results = [f for f in trace["ledger"] if f["kind"] == "result"]
    assert len(results) == 1 and "output of a failed cell" in results[0]["text"]
    assert (results[0]["full"] or results[0]["text"]).endswith(table)
    assert not any("ZeroDivisionError" in f["text"] for f in trace["ledger"])  # the error is no finding
    shown = shown_finding(prompt, results[0]["id"])
    assert (
        "output of a failed cell" in shown
        and table.split("\n")[0] in shown
        and table.split("\n")[-1] in shown
    )


def test_a_results_code_is_a_typed_field_the_text_shows_and_synthesis_reads() -> None:
    """The code behind a result is carried as a field, not parsed back out of the text: an
    answer that copies the code is told from one that copies what it printed, even when the
    printed text itself holds backquotes and "gave:"."""
    from rlm.run.ledger import Ledger
    from rlm.run.synthesis import copied_code

    ledger = Ledger()
    printed = "`x` gave: 1234 rows in total"
    found = ledger.add(
        printed, kind="result", evidence="n0.s2", node="n0", step=2, code="print(count_rows(t))"
    )
    assert found is not None and found.code == "print(count_rows(t))" and found.step == 2
    assert found.text == "`print(count_rows(t))` gave: `x` gave: 1234 rows in total"
    assert copied_code("print(count_rows(t))", [found])
    assert not copied_code("1234 rows in total", [found])
    # The same words in a note are evidence, never code.
    note = ledger.add("print(count_rows(t)) is what to run", kind="note", evidence="n0.s3", node="n0", step=3)
    assert note is not None and note.code is None
    assert not copied_code("print(count_rows(t)) is what to run", [note])
