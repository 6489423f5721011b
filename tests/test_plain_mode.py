"""`--mode plain|auto` and `--strict`, through the CLI with the scripted model over real fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import DATA, FIXTURES, latest_trace, run_cli, script_log, traces_in, write_script

from rlm.run.plain import SYSTEM

COUNTRIES = DATA / "iso3166" / "all.csv"  # 250 lines: fits half the scripted model's 32,000-token window
ACCESS = FIXTURES / "access.log"  # 2,000 lines, about 120,000 tokens: cut in plain mode
PLAIN_CALL = "^system: " + re.escape(SYSTEM[:60])
# The synthesis of an investigation writes back the draft it was given.
SYNTHESIS = {
    "match": r"^system: You write the final answer.*Draft answer from the investigation: (.*?)\n\n"
    r"(?:Note: |Write the final answer)",
    "reply": r"\1",
}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _shown_text(request: dict) -> str:
    """The file's text a plain call was shown: the body of the frame in its user message."""
    user = request["messages"][1]["content"]
    framed = re.search(r"<data-(\w{4})>\n(.*)\n</data-\1>", user, re.S)
    assert framed, user[:300]
    return framed.group(2)


def _plain_script(tmp_path: Path, reply: str) -> str:
    return write_script(tmp_path / "s.json", {"default": reply, "log": "calls.jsonl"})


def test_plain_mode_answers_from_the_whole_small_file_in_one_call(tmp_path: Path) -> None:
    model = _plain_script(tmp_path, "Answer: ```\nNorway\n```")
    question = "Which country has the alpha-2 code NO?"
    proc = run_cli(["ask", str(COUNTRIES), question, "-m", model, "--mode", "plain"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Norway\n"  # the lead-in and the fence are not the answer
    assert "cut" not in proc.stderr
    (request,) = script_log(tmp_path / "calls.jsonl")
    assert request["tools"] == []  # a direct call: no actions offered
    assert _shown_text(request) == "\n".join(_lines(COUNTRIES))
    assert "(all 250 lines shown)" in request["messages"][1]["content"]
    assert request["messages"][1]["content"].endswith(f"Question: {question}")
    trace = latest_trace(tmp_path)
    assert trace["mode"] == "plain" and trace["settings"]["mode"] == "plain"
    assert (trace["status"], trace["exit_code"], trace["answer"]) == ("final", 0, "Norway")
    assert trace["steps"] == [] and trace["nodes"] == [] and trace["synthesis"] is None
    plain = trace["plain"]
    assert (plain["lines"], plain["shown_lines"], plain["cut"]) == (250, 250, False)
    assert plain["grounded"] is True and plain["supporting"] == ["input"]
    assert trace["totals"]["calls"] == 1 and len(trace["cassette"]["calls"]) == 1

    doc = json.loads(
        run_cli(
            ["ask", str(COUNTRIES), question, "-m", model, "--mode", "plain", "--json"], cwd=tmp_path
        ).stdout
    )
    assert (doc["answer"], doc["mode"], doc["grounded"], doc["supporting"]) == (
        "Norway",
        "plain",
        True,
        ["input"],
    )
    assert doc["plain"] == {"lines": 250, "shown_lines": 250, "cut": False, "note": "all 250 lines shown"}


def test_plain_mode_shows_the_first_whole_lines_that_fit_and_says_where_it_cut(tmp_path: Path) -> None:
    model = _plain_script(tmp_path, "35")
    proc = run_cli(
        [
            "ask",
            str(ACCESS),
            "How many requests returned status 404?",
            "-m",
            model,
            "--mode",
            "plain",
            "--json",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    shown = doc["plain"]["shown_lines"]
    assert 100 < shown < 2000 and doc["plain"]["cut"] is True and doc["mode"] == "plain"
    note = f"lines 1-{shown:,} of 2,000 shown; the rest was cut"
    assert doc["plain"]["note"] == note
    # Said the same way in the prompt, on stderr and in --json's warnings.
    (request,) = script_log(tmp_path / "calls.jsonl")
    assert note in request["messages"][1]["content"]
    assert f"rlm: warning: plain mode: {note}" in proc.stderr
    assert doc["warnings"] == [f"plain mode: {note}"]
    # From line 1, whole lines only: exactly the first `shown` lines, and not the next one.
    assert _shown_text(request) == "\n".join(_lines(ACCESS)[:shown])
    trace = latest_trace(tmp_path)
    plain = trace["plain"]
    assert plain["shown_lines"] == shown and plain["cut"] is True
    # The prompt and the reply's allowance fit the model's window, by the client's own count.
    assert plain["window"] == 32_000
    assert plain["prompt_tokens_est"] + plain["reply_tokens"] <= plain["window"]
    assert (
        trace["totals"]["prompt_tokens"] == plain["prompt_tokens"] <= plain["window"] - plain["reply_tokens"]
    )
    # The answer, 35, is the true count over the whole file, but no line shown states it.
    assert doc["answer"] == "35" and doc["grounded"] is False

    replay = run_cli(["replay", "last"], cwd=tmp_path)
    assert replay.returncode == 0, replay.stderr
    assert f"warning: plain mode: {note}" in replay.stdout and "Answer: 35" in replay.stdout


def test_plain_mode_says_when_not_even_the_first_line_fits(tmp_path: Path) -> None:
    one_line = tmp_path / "one.json"
    one_line.write_text(json.dumps({"rows": [{"id": i, "name": f"row {i}"} for i in range(40_000)]}) + "\n")
    model = _plain_script(tmp_path, "never asked")
    proc = run_cli(["ask", str(one_line), "How many rows?", "-m", model, "--mode", "plain"], cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "line 1 of" in proc.stderr and "no call was made (--mode rlm reads it)" in proc.stderr
    assert not (tmp_path / "calls.jsonl").exists()
    trace = latest_trace(tmp_path)
    assert trace["status"] == "no_answer" and trace["plain"]["shown_lines"] == 0


def _investigation(tmp_path: Path, final: str, code: str) -> str:
    """A script for both modes: a plain call answers `final` too; an investigation runs `code`
    first, then gives `final` as its draft, which the synthesis writes back."""
    rules = [
        {"match": PLAIN_CALL, "reply": final},
        SYNTHESIS,
        {
            "match": r"Question: .*(?:not found|sampled)",
            "reply": {"tool": "final", "args": {"answer": final}},
        },
        {"match": r"Question: ", "reply": {"tool": "execute", "args": {"code": code}}},
    ]
    return write_script(tmp_path / "s.json", {"rules": rules, "log": "calls.jsonl"})


def test_auto_reads_a_small_file_whole_and_investigates_a_big_one(tmp_path: Path) -> None:
    count = sum('" 404 ' in line for line in _lines(ACCESS))
    model = _investigation(
        tmp_path, str(count), "print('not found:', sum(1 for l in context_lines if '\" 404 ' in l))"
    )
    small = run_cli(["ask", str(COUNTRIES), "How many 404s?", "-m", model, "--mode", "auto"], cwd=tmp_path)
    assert small.returncode == 0, small.stderr
    big = run_cli(["ask", str(ACCESS), "How many 404s?", "-m", model, "--mode", "auto"], cwd=tmp_path)
    assert big.returncode == 0, big.stderr
    assert big.stdout == f"{count}\n"

    first, second = traces_in(tmp_path)
    assert first["settings"]["mode"] == second["settings"]["mode"] == "auto"
    assert first["mode"] == "plain" and first["steps"] == [] and first["plain"]["cut"] is False
    assert second["mode"] == "rlm" and "plain" not in second
    assert [s["action"]["name"] for s in second["steps"]] == ["execute", "final"]
    requests = script_log(tmp_path / "calls.jsonl")
    assert requests[0]["tools"] == [] and _shown_text(requests[0]) == "\n".join(_lines(COUNTRIES))
    # The investigation's prompts never hold the file: line 1,000 of the log is in none of them.
    middle = _lines(ACCESS)[999]
    later = requests[1:]
    assert later and requests[1]["tools"]
    assert not any(middle in m["content"] for r in later for m in r["messages"] if m.get("content"))


def test_strict_withholds_an_answer_that_is_not_grounded_and_prints_one_that_is(tmp_path: Path) -> None:
    question = "Which country has the alpha-2 code NO?"
    # An answer no line of the file holds, with a control character a terminal would obey.
    model = _plain_script(tmp_path, "Atlantis\x1b[2J")
    proc = run_cli(
        ["ask", str(COUNTRIES), question, "-m", model, "--mode", "plain", "--strict"], cwd=tmp_path
    )
    assert proc.returncode == 1 and proc.stdout == ""
    withheld = [line for line in proc.stderr.splitlines() if "withheld as" in line]
    assert withheld == ["rlm: the answer was withheld as not grounded (--strict): Atlantis\\x1b[2J"]
    assert "\x1b" not in proc.stderr and "not grounded (confidence" not in proc.stderr
    trace = latest_trace(tmp_path)
    assert (trace["status"], trace["exit_code"], trace["answer"]) == ("withheld", 1, None)
    assert trace["settings"]["strict"] is True and trace["plain"]["grounded"] is False
    doc = json.loads(
        run_cli(
            ["ask", str(COUNTRIES), question, "-m", model, "--mode", "plain", "--strict", "--json"],
            cwd=tmp_path,
        ).stdout
    )
    assert (doc["answer"], doc["status"], doc["exit_code"], doc["grounded"]) == (None, "withheld", 1, False)

    grounded = _plain_script(tmp_path, "Norway")
    proc = run_cli(
        ["ask", str(COUNTRIES), question, "-m", grounded, "--mode", "plain", "--strict"], cwd=tmp_path
    )
    assert proc.returncode == 0 and proc.stdout == "Norway\n", proc.stderr
    assert latest_trace(tmp_path)["exit_code"] == 0


def test_strict_applies_to_an_investigation_too(tmp_path: Path) -> None:
    lines = len(_lines(ACCESS))
    # The draft states the line count, which no finding holds (the cell printed 5).
    model = _investigation(tmp_path, str(lines), "print('sampled', len(context_lines[:5]))")
    proc = run_cli(["ask", str(ACCESS), "How many lines?", "-m", model, "--strict"], cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert f"rlm: the answer was withheld as not grounded (--strict): {lines}" in proc.stderr
    trace = latest_trace(tmp_path)
    assert (trace["mode"], trace["status"], trace["exit_code"]) == ("rlm", "withheld", 1)
    # Without --strict the same run prints it, and says it is not grounded.
    proc = run_cli(["ask", str(ACCESS), "How many lines?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"{lines}\n"
    assert "not grounded" in proc.stderr


def test_a_prompt_the_model_counts_over_its_window_is_shown_again_with_fewer_lines(tmp_path: Path) -> None:
    """The window is filled by cl100k's count; a model whose tokenizer needs more (one that splits
    digits one by one) refuses the prompt, in its own counts: shown again, cut to what they leave."""
    too_many = "request (52000 tokens) exceeds the available context size (32000 tokens), try increasing it"
    model = write_script(
        tmp_path / "s.json",
        {"replies": [{"error": "bad_request", "message": too_many}], "default": "35", "log": "calls.jsonl"},
    )
    proc = run_cli(["ask", str(ACCESS), "404s?", "-m", model, "--mode", "plain", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == "35"
    first, second = script_log(tmp_path / "calls.jsonl")
    shown = [len(_shown_text(r).splitlines()) for r in (first, second)]
    # about 32,000 / 52,000 of the first prompt's lines, from line 1, whole lines
    assert 0.5 < shown[1] / shown[0] < 0.62, shown
    assert _shown_text(second) == "\n".join(_lines(ACCESS)[: shown[1]])
    assert doc["plain"]["shown_lines"] == shown[1]
    # The refusal answered by showing less is no error of the run; the trace keeps it.
    recorded = latest_trace(tmp_path)["plain"]
    assert recorded.get("error") is None
    assert len(recorded["overflows"]) == 1 and recorded["overflows"][0].endswith(f"HTTP 400: {too_many}")
    assert "the model counted 52,000 tokens where 32,000 fit" in proc.stderr
    assert "Traceback" not in proc.stderr

    # Refused every time: the last refusal is the run's error, exit 5, nothing on stdout.
    (tmp_path / "always").mkdir()
    always = write_script(
        tmp_path / "always" / "s.json",
        {"replies": [{"error": "bad_request", "message": too_many}] * 3, "log": "calls.jsonl"},
    )
    refused = run_cli(["ask", str(ACCESS), "q?", "-m", always, "--mode", "plain"], cwd=tmp_path / "always")
    assert refused.returncode == 5 and refused.stdout == "", refused.stderr
    assert len(script_log(tmp_path / "always" / "calls.jsonl")) == 3
    record = latest_trace(tmp_path / "always")["plain"]
    assert record["error"].endswith(too_many) and len(record["overflows"]) == 2
    assert refused.stderr.count("shown again with fewer lines") == 2

    # Any other refusal is the provider's failure, as before: no second call.
    (tmp_path / "other").mkdir()
    other = write_script(
        tmp_path / "other" / "s.json",
        {"replies": [{"error": "bad_request", "message": "unsupported parameter"}], "log": "calls.jsonl"},
    )
    failed = run_cli(["ask", str(ACCESS), "q?", "-m", other, "--mode", "plain"], cwd=tmp_path / "other")
    assert failed.returncode == 5 and failed.stdout == ""
    assert len(script_log(tmp_path / "other" / "calls.jsonl")) == 1
