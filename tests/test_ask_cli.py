"""`rlm ask` end to end through the CLI, with the scripted provider inside litellm."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import FIXTURES, latest_trace, run_cli, write_script


def _count(path: Path, needle: str) -> int:
    return sum(1 for line in path.read_text(errors="replace").splitlines() if needle in line)


def test_grep_execute_final_over_real_apache_log(tmp_path: Path, apache_log: Path) -> None:
    expected = _count(apache_log, '" 404 ')
    # The synthesis replies as asked: the value alone, an explanation, the findings it used.
    answer = json.dumps(
        {"answer": str(expected), "explanation": "Counted by code over every line.", "citations": ["F2"]}
    )
    model = write_script(
        tmp_path / "s.json",
        [
            {
                "content": "First a look at the status codes.",
                "tool": "grep",
                "args": {"pattern": '" 404 ', "max_matches": 3},
            },
            {
                "tool": "execute",
                "args": {"code": "n = sum(1 for l in context_lines if '\" 404 ' in l)\nprint(n)"},
            },
            {"tool": "final", "args": {"answer": f"{expected} requests returned 404"}},
            answer,
        ],
    )
    proc = run_cli(["ask", str(apache_log), "how many requests returned 404?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{expected}\n"  # stdout is the value alone, usable as it is
    trace = latest_trace(tmp_path)
    assert trace["status"] == "final" and trace["exit_code"] == 0
    assert [s["action"]["name"] for s in trace["steps"]] == ["grep", "execute", "final"]
    grep_preview = trace["steps"][0]["observation"]["preview"]
    assert grep_preview.startswith(f"{expected} lines match")
    assert trace["steps"][1]["observation"]["preview"].strip() == str(expected)
    assert trace["answer"] == str(expected)
    assert trace["synthesis"]["citations"] == ["F2"] and trace["synthesis"]["explanation"]
    assert trace["input"]["sha256"] and trace["input"]["lines"] == 10_000
    kinds = [f["kind"] for f in trace["ledger"]]
    assert kinds == ["grep", "result", "final_draft"]
    # The file is never in a prompt: no line of the log in any recorded reply or preview beyond caps.
    assert trace["totals"]["largest_prompt_tokens"] < 4000


def test_json_output_for_scripts(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "len(context_lines)"}},
            {"tool": "final", "args": {"answer": "10000 lines"}},
            "The log has 10000 lines [F1].",
        ],
    )
    proc = run_cli(["ask", str(apache_log), "how many lines?", "-m", model, "--json", "-q"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == "The log has 10000 lines."
    assert doc["status"] == "final" and doc["exit_code"] == 0
    assert doc["findings"][0]["text"] == "`len(context_lines)` gave: 10000"
    assert doc["usage"]["calls"] == 3 and doc["usage"]["cost_usd"] is None
    assert Path(tmp_path / doc["trace"]).exists()
    # -q: no progress on stderr for a clean answer (only warnings, e.g. a missing sandbox layer)
    assert all(line.startswith("rlm: warning:") for line in proc.stderr.splitlines()), proc.stderr


def test_every_turn_empty_ends_cleanly_non_zero(tmp_path: Path, apache_log: Path) -> None:
    """The classic failure: a model that returns empty content every turn stops after three, not 20."""
    model = write_script(tmp_path / "s.json", {"rules": [{"match": ".", "reply": ""}]})
    proc = run_cli(["ask", str(apache_log), "what is the busiest hour?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "no answer could be established (the model gave an empty reply 3 times in a row)" in proc.stderr
    assert "Traceback" not in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "no_answer" and len(trace["steps"]) == 3
    assert all(
        s["parse_error"] == "your reply was empty; reply with exactly one action" for s in trace["steps"]
    )


def test_malformed_actions_until_step_cap_answer_from_ledger(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {"tool": "execute", "args": {"code": "print(sum(1 for l in context_lines if 'GET' in l))"}},
                {"tool": "grep", "args": {"patern": "x"}},
                {"tool": "peek", "args": "{not json"},
                {"tool": "teleport", "args": {}},
                "I think the answer is obvious.",
            ],
            "rules": [{"match": "final answer to a question", "reply": "GET requests: 9,9xx [F1]"}],
        },
    )
    get_count = _count(apache_log, "GET")
    proc = run_cli(
        ["ask", str(apache_log), "how many GET requests?", "-m", model, "--max-steps", "5"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "GET requests: 9,9xx"
    assert "forced" in proc.stderr and "step limit of 5" in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "forced"
    errors = [s["parse_error"] for s in trace["steps"]]
    assert errors[1] == "unknown argument `patern` for `grep`; it takes: pattern, max_matches, ignore_case"
    assert errors[2].startswith("the arguments of `peek` are not valid JSON")
    assert errors[3].startswith("unknown action `teleport`")
    assert errors[4].startswith("no action found")
    assert trace["ledger"][0]["text"].endswith(f"gave: {get_count}")


def test_final_on_first_turn_is_refused(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "final", "args": {"answer": "42"}},
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
            {"tool": "final", "args": {"answer": "10000"}},
            "10000 [F1]",
        ],
    )
    proc = run_cli(["ask", str(apache_log), "lines?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["steps"][0]["observation"]["preview"].startswith("final refused: you have not looked")
    assert proc.stdout.strip() == "10000"


def test_text_protocol_ignores_invented_observations(tmp_path: Path, apache_log: Path) -> None:
    """Generation after the first action is the model's invention and must not be believed."""
    log = tmp_path / "calls.jsonl"
    model = write_script(
        tmp_path / "s.json",
        {
            "log": str(log),
            "replies": [
                '```python\nprint(len(context_lines))\n```\nOutput: 5\n\n```python\nfinal("5 lines")\n```',
                'FINAL("10000 lines")',
                "10000 lines [F1]",
            ],
        },
    )
    proc = run_cli(["ask", str(apache_log), "lines?", "-m", model, "--protocol", "text"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = latest_trace(tmp_path)
    assert [s["action"]["name"] for s in trace["steps"]] == ["execute", "final"]
    assert trace["steps"][0]["observation"]["preview"].strip() == "10000"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    second = calls[1]["messages"]
    assert calls[1]["tools"] == []  # text protocol: no native tools offered
    assistant = [m for m in second if m["role"] == "assistant"][0]["content"]
    assert "Output: 5" not in assistant and assistant.endswith("```")
    assert "```python" in second[0]["content"]  # the system prompt states the protocol


def test_worker_survives_system_exit_and_infinite_loop(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "x = 41\nraise SystemExit(3)"}},
            {"tool": "execute", "args": {"code": "x += 1\nprint(x)"}},
            {"tool": "execute", "args": {"code": "while True:\n    pass"}},
            # A loop that swallows every exception still cannot outlive the cell.
            {
                "tool": "execute",
                "args": {
                    "code": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
                },
            },
            {"tool": "execute", "args": {"code": "print('x' in dir())"}},
            {"tool": "execute", "args": {"code": "import os"}},
            {"tool": "final", "args": {"answer": "done"}},
            "done",
        ],
    )
    proc = run_cli(["ask", str(apache_log), "q", "-m", model, "--timeout", "2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    obs = [s["observation"]["preview"] for s in latest_trace(tmp_path)["steps"]]
    assert "SystemExit" in obs[0]
    assert obs[1].strip() == "42"  # state survived SystemExit
    assert "error:" in obs[2] and ("CPU" in obs[2] or "variables are gone" in obs[2])
    assert "variables are gone" in obs[3]
    assert obs[4].strip() == "False"  # the restarted worker has a fresh namespace
    assert "not allowed" in obs[5] and "os" in obs[5]


def test_prompt_does_not_grow_with_file_size(tmp_path: Path, apache_log: Path) -> None:
    lines = apache_log.read_bytes().splitlines(keepends=True)
    sizes = {}
    for mb in (1, 100):
        big = tmp_path / f"big{mb}.log"
        with big.open("wb") as fh:
            written = 0
            while written < mb * 1_000_000:
                chunk = b"".join(lines)
                fh.write(chunk)
                written += len(chunk)
        run_dir = tmp_path / f"run{mb}"
        run_dir.mkdir()
        model = write_script(
            run_dir / "s.json",
            [
                {"tool": "peek", "args": {"start": 1, "length": 30}},
                # Frequent at both sizes: the observation is full, and capped, in both runs.
                {"tool": "grep", "args": {"pattern": '" 200 ', "max_matches": 50}},
                {"tool": "execute", "args": {"code": "print(context_lines[-1])"}},
                {"tool": "final", "args": {"answer": "ok"}},
                "ok",
            ],
        )
        proc = run_cli(["ask", str(big), "q", "-m", model, "--json", "-q"], cwd=run_dir, timeout=300)
        assert proc.returncode == 0, proc.stderr
        sizes[mb] = json.loads(proc.stdout)["largest_prompt_tokens"]
    assert abs(sizes[100] - sizes[1]) <= 0.1 * sizes[1], sizes


def test_exit_codes(tmp_path: Path, apache_log: Path) -> None:
    missing = run_cli(["ask", str(tmp_path / "nope.log"), "q", "-m", "scripted/x.json"], cwd=tmp_path)
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    no_model = run_cli(["ask", str(apache_log), "q"], cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert no_model.returncode == 4 and "no model configured" in no_model.stderr
    no_key = run_cli(
        ["ask", str(apache_log), "q", "-m", "gpt-4o-mini"], cwd=tmp_path, env={"OPENAI_API_KEY": ""}
    )
    assert no_key.returncode == 4 and "OPENAI_API_KEY" in no_key.stderr
    usage = run_cli(["ask", str(apache_log)], cwd=tmp_path)
    assert usage.returncode == 2
    bad_depth = run_cli(
        ["ask", str(apache_log), "q", "-m", "scripted/x.json", "--max-depth", "4"], cwd=tmp_path
    )
    assert bad_depth.returncode == 2 and "--max-depth" in bad_depth.stderr


def test_provider_failure_after_retries_prints_partial_answer(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [{"tool": "execute", "args": {"code": "print(len(context_lines))"}}],
            "default": {"error": "server", "message": "upstream overloaded"},
        },
    )
    proc = run_cli(["ask", str(apache_log), "lines?", "-m", model], cwd=tmp_path, env={"RLM_RETRIES": "2"})
    assert proc.returncode == 5
    assert "upstream overloaded" in proc.stderr
    # No answer was written: stdout stays empty, what was established is told on stderr.
    assert proc.stdout == "" and re.search(r"gave: 10000", proc.stderr)
    assert latest_trace(tmp_path)["status"] == "provider_error"


def test_stdin_is_read(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "print(len(context_lines))"}},
            {"tool": "final", "args": {"answer": "2000"}},
            "2000 [F1]",
        ],
    )
    data = b"".join(apache_log.read_bytes().splitlines(keepends=True)[:2000])
    proc = run_cli(["ask", "-", "lines?", "-m", model, "-q"], cwd=tmp_path, stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"2000\n"
    assert latest_trace(tmp_path)["steps"][0]["observation"]["preview"].strip() == "2000"


def test_help_and_version_do_not_import_litellm(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = "import sys; from rlm.cli.app import app\ntry:\n    app(['--version'])\nexcept SystemExit:\n    pass\nprint('litellm' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout.splitlines() == ["rlm 0.1.0", "False"]


def test_budget_limit_exits_6_with_the_partial_answer(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [{"tool": "execute", "args": {"code": f"print({i} * 1000)"}} for i in range(1, 10)],
            "rules": [{"match": "final answer to a question", "reply": "Partial: 3000 [F3]"}],
        },
    )
    proc = run_cli(["ask", str(apache_log), "q", "-m", model, "--max-calls", "4"], cwd=tmp_path)
    assert proc.returncode == 6
    assert proc.stdout == "Partial: 3000\n"
    assert "the limit of 4 model calls was reached" in proc.stderr
    trace = latest_trace(tmp_path)
    assert trace["status"] == "budget" and len(trace["steps"]) == 3
    assert trace["totals"]["calls"] == 4  # three turns and the synthesis held back for the answer


def test_a_repeated_action_is_not_run_again(tmp_path: Path, apache_log: Path) -> None:
    """Small models loop on one action: it is refused, and a second refusal in a row ends the loop."""
    model = write_script(
        tmp_path / "s.json",
        {
            "replies": [
                {"tool": "grep", "args": {"pattern": "HEAD"}},
                {"tool": "grep", "args": {"pattern": "HEAD"}},
                {"tool": "grep", "args": {"pattern": "HEAD"}},
                {"tool": "execute", "args": {"code": "print('never reached')"}},
            ],
            "rules": [{"match": "final answer to a question", "reply": "answer [F1]"}],
        },
    )
    proc = run_cli(["ask", str(apache_log), "q", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "answer\n"
    trace = latest_trace(tmp_path)
    obs = [s["observation"]["preview"] for s in trace["steps"]]
    total = sum(1 for line in apache_log.read_text().splitlines() if "HEAD" in line)
    assert obs[1].startswith(
        f"not run: you already ran exactly this at step 1 (it showed: {total} lines match"
    )
    assert len(obs) == 3 and trace["status"] == "forced" and trace["stop"] == "stuck"


def test_a_plan_of_blocks_runs_its_first_block_not_yet_run(tmp_path: Path) -> None:
    """A small model writes its whole plan of blocks every turn, starting again with the peek it
    already ran: the next block of the plan runs instead, and the model is told so. A final
    written in the same plan is never taken: it was written before the results above it."""
    peek = "```python\npeek(1, 3)\n```"
    count = '```python\nn = sql("SELECT count(*) FROM log WHERE status = 404")[0][0]\nprint("n:", n)\n```'
    plan = f"{peek}\nThen count them:\n{count}\n```python\nfinal(n)\n```"
    script = {
        "log": "calls.jsonl",
        "replies": [
            peek,
            plan,
            plan,
            "```python\nfinal(n)\n```",
            json.dumps({"answer": "35", "explanation": "Counted.", "citations": ["F1"]}),
        ],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(
        ["ask", str(FIXTURES / "access.log"), "how many 404s?", "-m", model, "--protocol", "text"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "35\n"
    steps = latest_trace(tmp_path)["steps"]
    assert [s["action"]["name"] for s in steps] == ["peek", "execute", "peek", "execute"]
    assert steps[1]["observation"]["preview"] == (
        "(the first block of your reply repeated what you already ran, so this is the result of the "
        "next one)\nn: 35\n"
    )
    # The third reply's peek and count both repeat, and its final is not taken: refused as before.
    assert steps[2]["observation"]["preview"].startswith("not run: you already ran exactly this at step 1")
    # The model's own turn, as it sees it next: the block that ran, with what it wrote before it.
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    second = [m["content"] for m in calls[2]["messages"] if m["role"] == "assistant"][1]
    assert second == f"\nThen count them:\n{count}"


def test_model_code_mistakes_get_plain_advice(tmp_path: Path, apache_log: Path) -> None:
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "execute", "args": {"code": "The busiest client is 66.249.73.135 with many requests"}},
            {"tool": "execute", "args": {"code": "print(grep('HEAD', context_lines))"}},
            {"tool": "execute", "args": {"code": "a, b = 1, 2\nfinal(a, b)"}},
            {"tool": "execute", "args": {"code": "final(answer=a)"}},
            "x",
        ],
    )
    proc = run_cli(["ask", str(apache_log), "q", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    obs = [s["observation"]["preview"] for s in latest_trace(tmp_path)["steps"]]
    assert "SyntaxError" in obs[0] and "That was text, not Python. Reply with a ```python block" in obs[0]
    # The text passed along is understood (grep always searches the whole file), not a TypeError.
    total = sum(1 for line in apache_log.read_text().splitlines() if "HEAD" in line)
    assert obs[1].startswith(f"{total} lines match /HEAD/"), obs[1]
    # Every variable passed to final: one error in the model's words, then final(answer=...) works.
    assert "final takes one value, the answer to the question; you passed 2" in obs[2], obs[2]
    assert "final answer recorded" in obs[3]


def test_help_reads_well_and_lists_the_exit_codes(tmp_path: Path) -> None:
    proc = run_cli(["ask", "--help"], cwd=tmp_path, env={"COLUMNS": "100"})
    assert proc.returncode == 0
    text = proc.stdout
    assert "rlm ask [OPTIONS] PATH... QUESTION" in text and "-m, --model MODEL" in text
    assert not re.search(r"\S \.(\s|$)", text)  # no space before a full stop
    # No command writes an argument as {FILE} or a value as its Python type (<str>, <int>, ...).
    for command in (
        ["ask"],
        ["replay"],
        ["logs"],
        ["eval"],
        ["feedback"],
        ["memory", "forget"],
        ["local", "setup"],
    ):
        shown = run_cli([*command, "--help"], cwd=tmp_path, env={"COLUMNS": "100"}).stdout
        assert shown.startswith("Usage: ") and not re.search(r"\{[A-Z]+\}|<(str|int|float|bool)>", shown), (
            shown
        )
    assert "(env RLM_MODEL)" in text
    assert (
        "Exit codes:" in text and "6  a budget limit stopped the run" in text and "130  interrupted" in text
    )


def test_a_binary_input_is_said_to_be_binary(tmp_path: Path) -> None:
    blob = tmp_path / "dump.bin"
    blob.write_bytes(b"header\x00\x01\x02 payload\nsecond\x00line\n" * 50)
    model = write_script(
        tmp_path / "s.json",
        [
            {"tool": "peek", "args": {"start": 1, "length": 1}},
            {"tool": "final", "args": {"answer": "x"}},
            "x",
        ],
    )
    proc = run_cli(["ask", str(blob), "q", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "dump.bin looks binary (it holds NUL bytes)" in proc.stderr
    assert any("looks binary" in w for w in latest_trace(tmp_path)["warnings"])


def test_two_failing_cells_taking_turns_end_the_run_instead_of_burning_every_step(tmp_path: Path) -> None:
    """A small model alternates between two broken cells; each changes the sandbox's state, so
    neither is an exact repeat, yet nothing is learnt. The third try of the same failing call is
    refused, and two refusals in a row end the loop (stuck), long before the step limit."""
    a = {"tool": "execute", "args": {"code": "results = execute(sql('SELECT 1'))"}}
    b = {
        "tool": "execute",
        "args": {"code": "def execute(code):\n    return eval(code)\nprint(execute('1'))"},
    }
    model = write_script(tmp_path / "s.json", {"replies": [a, b] * 10, "default": "nothing established"})
    proc = run_cli(["ask", str(FIXTURES / "access.log"), "how many 404s?", "-m", model], cwd=tmp_path)
    trace = latest_trace(tmp_path)
    obs = [s["observation"]["preview"] for s in trace["steps"]]
    assert len(obs) == 6 and trace["nodes"][0]["status"] == "stuck"
    assert "execute is the action that runs this code, not a function inside it" in obs[0]
    assert obs[4].startswith("not run: this exact execute failed at step 3") and obs[5].startswith("not run")
    assert proc.returncode == 1 and proc.stdout == ""


def test_a_failing_cell_asked_again_unchanged_ends_the_run_after_three_refusals(tmp_path: Path) -> None:
    """A small model computed its answer, then called note() as it calls print, got a TypeError,
    and asked the same cell 18 more times (11 minutes). note() now takes what print takes; a cell
    that still fails and is asked again unchanged is refused, and the third refusal in a row ends
    the loop: the answer comes from what the first cell printed."""
    counted = {
        "tool": "execute",
        "args": {
            "code": 'n = sql("SELECT count(*) FROM log WHERE status = 404")[0][0]\nprint("n:", n)\nnote("404s:", n)'
        },
    }
    broken = {"tool": "execute", "args": {"code": "note(n, sep=None)"}}
    script = {
        "replies": [counted, *[broken] * 8],
        "rules": [{"match": "final answer to a question", "reply": "35 [F1]"}],
    }
    model = write_script(tmp_path / "s.json", script)
    proc = run_cli(["ask", str(FIXTURES / "access.log"), "how many 404s?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "35\n"
    trace = latest_trace(tmp_path)
    obs = [s["observation"]["preview"] for s in trace["steps"]]
    assert obs[0] == "n: 35\nnoted: 404s: 35\n", obs[0]
    assert "404s: 35" in [f["text"] for f in trace["ledger"]]
    assert "TypeError" in obs[1] and all(
        o.startswith("not run: this exact execute failed at step 2") for o in obs[2:]
    )
    assert len(obs) == 5 and trace["stop"] == "stuck"


def test_the_summary_line_counts_in_words_a_reader_expects(tmp_path: Path) -> None:
    replies = [
        {"tool": "peek", "args": {"start": 1, "length": 2}, "error": "server", "error_times": 1},
        {"tool": "final", "args": {"answer": "yes"}},
        # An answer with no value to look up: no second, widened synthesis pass (see
        # test_evidence_synthesis for an answer whose value no finding holds).
        json.dumps({"answer": "yes", "explanation": "Seen.", "citations": []}),
    ]
    model = write_script(tmp_path / "s.json", replies)
    question = "is the first request a GET?"
    proc = run_cli(["ask", str(FIXTURES / "access.log"), question, "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = proc.stderr.strip().splitlines()[-1]
    assert re.match(r"rlm: final · 2 steps · 3 calls · 1 failed request · [\d,]+ tokens · ", summary), summary


def test_a_refused_repeat_says_what_the_first_run_showed(tmp_path: Path) -> None:
    # A small model that asks for the same query again is refused with the value it already has,
    # not with the result's header line ("count_star()") alone.
    code = 'sql("SELECT count(*) FROM log WHERE status = 404")'
    replies = [
        {"tool": "execute", "args": {"code": code}},
        {"tool": "execute", "args": {"code": code}},
        {"tool": "final", "args": {"answer": "35"}},
        json.dumps({"answer": "35", "explanation": "Counted.", "citations": ["F1"]}),
    ]
    model = write_script(tmp_path / "s.json", replies)
    proc = run_cli(["ask", str(FIXTURES / "access.log"), "how many 404s?", "-m", model], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    refused = latest_trace(tmp_path)["steps"][1]["observation"]["preview"]
    assert "already ran exactly this at step 1 (it showed: count_star() / 35 / (1 row))" in refused
