"""The synthesis is shown the evidence that settled the question, and the answer's grounding is measured.

The finding holding the draft's value is the top item (first and last, once each), findings are
shown whole while the budget allows, and every answer's values are looked up in what the synthesis
was shown: `grounded` and the supporting ids reach the trace and --json, and a confidence the
evidence does not bear is lowered and said. Each run goes through the CLI with the scripted model
and the real worker; the synthesis prompt is read from the scripted provider's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import FIXTURES, latest_trace, run_cli, script_log, write_script

from rlm.run.grounding import ground

ACCESS = FIXTURES / "access.log"
NOT_FOUND = sum(1 for line in ACCESS.read_text().splitlines() if '" 404 ' in line)
COUNT_404 = "n = sum(1 for line in context_lines if '\" 404 ' in line)\nprint('not found:', n)"


def ask(tmp_path: Path, question: str, replies: list[Any], *flags: str) -> tuple[Any, dict[str, Any], str]:
    """One run: the process, its trace and the (last) synthesis prompt."""
    model = write_script(tmp_path / "s.json", {"log": "calls.jsonl", "replies": replies})
    proc = run_cli(["ask", str(ACCESS), question, "-m", model, *flags], cwd=tmp_path)
    prompt = script_log(tmp_path / "calls.jsonl")[-1]["messages"][-1]["content"]
    return proc, latest_trace(tmp_path), prompt


def synthesis_reply(answer: str, cited: list[str], confidence: str = "high") -> str:
    return json.dumps(
        {"answer": answer, "explanation": "Counted.", "citations": cited, "confidence": confidence}
    )


def test_the_finding_holding_the_drafts_value_is_the_top_item_shown_twice(tmp_path: Path) -> None:
    """The count comes first; a sanity check and a note come after it (later, and as heavy by
    kind): the count, which holds the draft's value, is the top item, not the last finding."""
    proc, trace, prompt = ask(
        tmp_path,
        "How many requests were answered with a not-found status?",
        [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "execute", "args": {"code": "print('lines in all:', len(context_lines))"}},
            {"tool": "execute", "args": {"code": "note('the log is in the combined format')"}},
            {"tool": "final", "args": {"answer": str(NOT_FOUND)}},
            synthesis_reply(str(NOT_FOUND), ["F1"]),
        ],
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    payload = trace["synthesis"]["payload"]
    assert payload["top"] == "F1"
    assert prompt.count("[F1]") == 2
    assert prompt.split("\n\n")[1].startswith("Most important: [F1]")
    assert "Again, most important: [F1]" in prompt
    # The others are shown once each, in the findings.
    assert prompt.count("[F2]") == 1 and prompt.count("[F3]") == 1
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(NOT_FOUND)
    assert doc["grounded"] is True and doc["supporting"][0] == "F1" and doc["confidence"] == "high"
    assert trace["synthesis"]["grounded"] is True and trace["synthesis"]["supporting"][0] == "F1"


def test_the_synthesis_is_shown_a_long_finding_whole_when_its_budget_allows(tmp_path: Path) -> None:
    """A cell prints 120 rows (about 4,000 characters): the investigation's prompts show its
    ends, but the synthesis has room for all of it, and is shown all of it."""
    code = "for i in range(120):\n    print(f'row {i:03d} host-{i * 7} seen {i * 13} times')"
    proc, trace, prompt = ask(
        tmp_path,
        "how often was host-413 seen?",
        [
            {"tool": "execute", "args": {"code": code}},
            {"tool": "final", "args": {"answer": "767"}},
            synthesis_reply("767", ["F1"]),
        ],
    )
    assert proc.returncode == 0, proc.stderr
    shown = next(f for f in trace["ledger"] if f["id"] == "F1")["text"]
    assert "row 060 host-420 seen 780 times" not in shown  # the investigation's cut
    for i in (0, 30, 60, 90, 119):  # every part of the output, not only its ends
        assert f"row {i:03d} host-{i * 7} seen {i * 13} times" in prompt
    top = prompt.split("\n\n")[1]
    assert top.startswith("Most important: [F1]") and "characters left out" not in top
    assert trace["synthesis"]["payload"]["tokens"]["findings"] > 1000


def test_an_answer_no_finding_shown_holds_is_not_grounded_and_its_confidence_is_lowered(
    tmp_path: Path,
) -> None:
    """The synthesis answers with the status code the question names, not the count a finding
    holds: the code of the cell filters on it, but no finding states it. The answer is printed (it
    is not made up: the question says it), but it is not grounded, its "high" becomes "low", and
    stderr says so."""
    question = "How many requests returned status 404?"
    wrong = synthesis_reply("404", ["F1"], "high")
    proc, trace, _ = ask(
        tmp_path,
        question,
        [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "final", "args": {"answer": str(NOT_FOUND)}},
            wrong,
            wrong,  # the widened second pass a low-confidence answer gets
        ],
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == "404"
    assert doc["grounded"] is False and doc["supporting"] == [] and doc["confidence"] == "low"
    synthesis = trace["synthesis"]
    assert synthesis["stated_confidence"] == "high" and synthesis["missing"] == ["404"]
    assert "404 is in no finding shown" in synthesis["confidence_reason"]
    # The status code the question names is no answer to "how many": in doubt as well.
    assert doc["doubts"] == ["kind: the answer ('404') is a value the question itself states"]
    assert synthesis["first_attempt"]["confidence"] == "low"  # the check made the first pass unsure
    assert "found in no finding the synthesis was shown" in proc.stderr


def test_a_draft_answer_is_grounded_in_the_runs_findings(tmp_path: Path) -> None:
    """The synthesis names a figure found nowhere and is refused: the draft is the answer, and its
    grounding is looked up in every finding of the run."""
    proc, trace, _ = ask(
        tmp_path,
        "How many requests returned status 404?",
        [
            {"tool": "execute", "args": {"code": COUNT_404}},
            {"tool": "final", "args": {"answer": str(NOT_FOUND)}},
            synthesis_reply("9999", ["F1"]),
        ],
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(NOT_FOUND) and trace["synthesis"]["source"] == "draft"
    assert doc["grounded"] is True and doc["supporting"] == ["F1"]


def test_values_are_looked_up_by_value_and_by_normalised_text() -> None:
    shown = {
        "F1": "count_star()\n1873",
        "F2": "66.249.73.135   482\n10.0.0.7   12",
        "F3": "mean fare 12.3456",
        "M1": "/favicon.ico  807",
    }
    held = {
        "1,873": "F1",
        "1873.0": "F1",
        "12.35": "F3",  # a rounding of the figure shown
        "66.249.73.135": "F2",
        "favicon.ico": "M1",
        "66.249.73.135 (482 requests)": "F2",
    }
    for answer, ref in held.items():
        grounding = ground(answer, shown)
        assert grounding.grounded is True and grounding.supporting[0] == ref, (answer, grounding)
    for answer in ("1874", "10.0.0.9", "12.4", "root"):
        assert ground(answer, shown).grounded is False, answer
    assert ground("yes", shown).grounded is None  # no value to look up
    # A value only the question states does not ground an answer on its own …
    assert ground("404", shown, "how many 404s?").missing == ["404"]
    # … and needs no finding beside one that holds the rest.
    assert ground("404: 1873", shown, "how many 404s?").supporting == ["F1"]
    # A list: every item must be held.
    assert ground("66.249.73.135\n10.0.0.7", shown).grounded is True
    assert ground("66.249.73.135\n10.0.0.8", shown).missing == ["10.0.0.8"]
    # … written with commas and no space too; a number's digit groups are one value.
    assert ground("66.249.73.135,10.0.0.7", shown).grounded is True
    assert ground("66.249.73.135,10.0.0.8", shown).missing == ["10.0.0.8"]


def test_the_one_row_footer_of_a_query_echo_holds_no_answer() -> None:
    """A query that returned one row ends its echo with `(1 row)`: an answer of 1 where the row
    says 0 is not held by it, nor by the LIMIT note after it; a footer of more rows, or a 1 in
    the row itself, still is."""
    zero = {"F1": "distinct message\n----------------\n0\n(1 row)"}
    assert ground("1", zero).grounded is False
    limited = {
        "F1": "host | count\n-----+------\nLabSZ | 7\n(1 row; as many as the query's LIMIT 1, so there may be more)"
    }
    assert ground("1", limited).grounded is False and ground("7", limited).grounded is True
    assert ground("1", {"F1": "count\n-----\n1\n(1 row)"}).grounded is True
    # A memory is shown on one line: its footer holds no 1 either, its LIMIT note neither.
    remembered = "`result = sql('SELECT count(*) …')` gave: count ------ 429227 (1 row)"
    assert ground("1", {"M3": remembered}).grounded is False
    noted = (
        "host | count LabSZ | 7 (1 row; as many as the query's LIMIT 1: count them with count(*) or no LIMIT)"
    )
    assert ground("1", {"M1": noted}).grounded is False and ground("7", {"M1": noted}).grounded is True
    assert ground("1", {"M2": "count ----- 1 (1 row)"}).grounded is True
    assert ground("3", {"F1": "a\n-\nx\ny\nz\n(3 rows)"}).grounded is True


def test_a_synthesis_that_turns_the_investigations_no_into_yes_is_not_used(tmp_path: Path) -> None:
    """Through the CLI and the real worker: the count of responses over 10^12 bytes is 0 and the
    model answers "No"; a synthesis reply of "yes" (its explanation saying none was found) is not
    taken, the investigation's answer is, and the trace says why."""
    from conftest import ask_typed_cli

    log = FIXTURES / "access.log"
    sizes = [line.split('" ')[1].split()[1] for line in log.read_text().splitlines()]
    assert all(not s.isdigit() or int(s) < 10**12 for s in sizes) and any(s.isdigit() for s in sizes)
    count = {"op": "count", "where": [{"column": "bytes", "cmp": ">", "value": 10**12}]}
    flipped = {"answer": "yes", "explanation": "the count was 0: none was that large", "citations": ["F1"]}
    proc, _ = ask_typed_cli(
        log,
        "Was any response larger than a terabyte? yes or no",
        [json.dumps(count), json.dumps({"op": "final", "answer": "No"}), json.dumps(flipped)],
        cwd=tmp_path,
    )
    # (--strict withholds it: a count that kept no row leaves its answer in doubt)
    assert "withheld" in proc.stderr and proc.stderr.rstrip().splitlines()[-2].endswith(": No"), proc.stderr
    synthesis = latest_trace(tmp_path)["synthesis"]
    assert synthesis["answer"] == "No" and synthesis["source"] == "draft", synthesis
    assert "turned over" in synthesis["error"]


def test_a_remembered_one_row_count_does_not_ground_an_answer_of_1_through_the_cli(tmp_path: Path) -> None:
    """Two runs of one question, memory on: the first count's finding is remembered, and on the
    second run it is shown on one line, `… (1 row)`. A model's answer of 1, where the count is
    another number, stays ungrounded, and --strict withholds it both times."""
    from conftest import run_cli
    from openai_stub import OpenAIStub

    log = FIXTURES / "access.log"
    count = sum(1 for line in log.read_text().splitlines() if '" 404 ' in line)
    assert count not in (0, 1)
    action = {"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    replies = [
        json.dumps(action),
        json.dumps({"op": "final", "answer": "1"}),
        json.dumps({"answer": "1", "citations": ["F1"]}),
    ]
    question = "For how many requests did the server send status 404?"
    for run in range(2):
        with OpenAIStub(list(replies)) as stub:
            proc = run_cli(
                ["ask", str(log), question, "-m", "openai/stub", "--api-base", stub.api_base, "--protocol", "typed",
                 "--strict", "--json"],
                cwd=tmp_path,
            )  # fmt: skip
        doc = json.loads(proc.stdout)
        assert proc.returncode == 1 and doc["answer"] is None and doc["grounded"] is False, (run, proc.stderr)
    memory = json.loads(proc.stdout)["findings"]
    assert any(f["kind"] == "memory" and "(1 row)" in f["text"] for f in memory), memory


def test_a_synthesis_that_names_a_value_where_the_investigation_found_none_is_not_used(
    tmp_path: Path,
) -> None:
    """Through the CLI: the model's query kept no row and its answer says none did; a synthesis
    reply naming a value the question states is not taken, the investigation's answer is."""
    from conftest import ask_typed_cli

    table = FIXTURES / "data" / "iso3166" / "all.csv"
    kept_none = {
        "op": "group",
        "by": "sub-region",
        "where": [{"column": "region", "cmp": "=", "value": "Oceania"}],
        "min_count": 40,
    }
    draft = "No sub-region of Oceania has 40 entries."
    made_up = {"answer": "Oceania", "explanation": "the group shows Oceania", "citations": ["F1"]}
    proc, _ = ask_typed_cli(
        table,
        "Within Oceania, does any sub-region list 40 or more entries? Name it.",
        [json.dumps(kept_none), json.dumps({"op": "final", "answer": draft}), json.dumps(made_up)],
        cwd=tmp_path,
    )
    synthesis = latest_trace(tmp_path)["synthesis"]
    assert synthesis["answer"] == draft and synthesis["source"] == "draft", synthesis
    assert "found none" in synthesis["error"], synthesis
    assert "Oceania" not in proc.stdout
    # a count of 0, or a value the draft names, stands
    from rlm.run.synthesis import turned_over

    assert turned_over("0", "No line matched.") is None
    assert turned_over("Melanesia", "No sub-region but Melanesia has that many.") is None
