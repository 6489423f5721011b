"""`--protocol typed` through the CLI over real HTTP: the schema built from the table goes to the
server as the reply's format, each JSON reply is checked and compiled to a query, and a column the
table lacks comes back to the model as words it can act on."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb
from conftest import FIXTURES, latest_trace, run_cli
from openai_stub import OpenAIStub

from rlm.input.source import open_source


def _strings(node: Any) -> set[str]:
    """Every string an enum or const of the schema allows."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum":
                found |= {v for v in value if isinstance(v, str)}
            elif key == "const" and isinstance(value, str):
                found.add(value)
            else:
                found |= _strings(value)
    elif isinstance(node, list):
        for item in node:
            found |= _strings(item)
    return found


def _ask(stub: OpenAIStub, path: Path, question: str, cwd: Path, *options: str) -> Any:
    return run_cli(
        [
            "ask",
            str(path),
            question,
            "-m",
            "openai/stub",
            "--api-base",
            stub.api_base,
            "--protocol",
            "typed",
            *options,
        ],
        cwd=cwd,
    )


def test_a_typed_action_is_held_to_the_tables_schema_and_runs_as_a_query(
    tmp_path: Path, apache_log: Path
) -> None:
    lines = apache_log.read_text().splitlines()
    not_found = sum(1 for line in lines if re.search(r'" 404 ', line))
    replies = [
        json.dumps({"op": "count", "where": [{"column": "status", "cmp": "=", "value": 404}]}),
        json.dumps({"op": "final", "answer": str(not_found)}),
        json.dumps({"answer": str(not_found), "citations": ["F1"]}),
    ]
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, apache_log, "how many requests were answered 404?", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(not_found)

    first = stub.requests[0]["body"]
    schema = first["response_format"]["json_schema"]["schema"]
    assert first["response_format"]["type"] == "json_schema"
    allowed = _strings(schema)
    # The columns the model may name are the table's, and only those.
    assert {"status", "ip", "path", "method"} <= allowed and "country" not in allowed
    assert {"count", "top", "group", "rows", "grep", "peek"} <= allowed
    # A final before anything was looked at is refused, so the first turn's grammar has none;
    # once a query ran, it has.
    assert "final" not in allowed
    assert "final" in _strings(stub.requests[1]["body"]["response_format"]["json_schema"]["schema"])
    system = first["messages"][0]["content"]
    assert "JSON" in system and "```python" not in system  # no free code is asked of the model
    # ... nor shown: the profile's example queries are for code, which this model cannot run.
    assert "Examples, inside execute" not in first["messages"][1]["content"]
    assert "tools" not in first

    step = latest_trace(tmp_path)["steps"][0]
    assert step["action"]["name"] == "execute"
    assert "SELECT count(*)" in step["action"]["args"]["code"] and "404" in step["action"]["args"]["code"]
    # The query's rows reach the model as the next turn's observation.
    assert f"{not_found}" in stub.requests[1]["body"]["messages"][-1]["content"]
    # A small model reads the question last, before each reply: after the profile, then after
    # the newest result.
    question = "Question: how many requests were answered 404?"
    for request in stub.requests[:2]:
        last = request["body"]["messages"][-1]["content"]
        assert question in last.rsplit("</data-", 1)[-1], last[-300:]


def test_a_column_the_table_lacks_is_refused_in_words_the_model_can_act_on(
    tmp_path: Path, apache_log: Path
) -> None:
    ips = _distinct_ips(apache_log, 200)
    ok = [{"column": "status", "cmp": "=", "value": 200}]
    replies = [
        json.dumps({"op": "count_distinct", "column": "country", "where": ok}),
        json.dumps({"op": "count_distinct", "column": "ip", "where": ok}),
        json.dumps({"op": "final", "answer": str(ips)}),
        json.dumps({"answer": str(ips), "citations": ["F1"]}),
    ]
    question = "how many different clients got a 200?"
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, apache_log, question, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(ips)
    refusal = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "country" in refusal and "ip" in refusal  # what was wrong, and the columns there are
    # The question follows the newest result alone: an earlier turn is sent as it was first sent.
    third = stub.requests[2]["body"]["messages"]
    assert f"Question: {question}" in third[-1]["content"]
    assert "Question:" not in third[-3]["content"] and third[-3]["content"] in refusal
    steps = latest_trace(tmp_path)["steps"]
    assert steps[0]["action"] is None or steps[0]["action"]["name"] != "execute"
    assert steps[1]["action"]["name"] == "execute"


def _distinct_ips(path: Path, status: int | None = None) -> int:
    return len(
        {
            line.split()[0]
            for line in path.read_text().splitlines()
            if status is None or f'" {status} ' in line
        }
    )


def test_a_condition_the_question_names_and_the_query_leaves_out_is_added_or_doubted(
    tmp_path: Path, apache_log: Path
) -> None:
    """A value of a listed column the question names, that the model's query has no filter on,
    is added to the query before it runs, and the model told; sent again, the action runs as
    written, and an answer given after it is in doubt (stderr, --json, confidence low), which
    --strict withholds; once the query has the filter, nothing is said."""
    question = "How many different client IPs received a 404 response?"
    everyone, right = _distinct_ips(apache_log), _distinct_ips(apache_log, 404)
    assert everyone != right
    unfiltered = json.dumps({"op": "count_distinct", "column": "ip"})
    filtered = json.dumps(
        {"op": "count_distinct", "column": "ip", "where": [{"column": "status", "cmp": "=", "value": 404}]}
    )

    def replies(*actions: str, answer: int) -> list[str]:
        final = json.dumps({"op": "final", "answer": str(answer)})
        return [*actions, final, json.dumps({"answer": str(answer), "citations": ["F1"]})]

    # Added: the query runs with the filter, and the model is told so.
    with OpenAIStub(replies(unfiltered, answer=right)) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(right) and doc["grounded"] is True and not doc["doubts"]
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"distinct ip\n-----------\n{right}\n" in told
    assert "the question names status = 404, which your action had no filter on: rlm added it" in told
    step = latest_trace(tmp_path)["steps"][0]
    assert '"status" = 404' in step["action"]["args"]["code"] and "rlm added it" in step["told"]

    # Sent again as it was, it runs as written: the answer after it is in doubt (the action is
    # also the prompt's own example for count_distinct on this table, which is said too).
    with OpenAIStub(replies(unfiltered, unfiltered, answer=everyone)) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(everyone) and doc["grounded"] is True  # grounded, and still wrong
    assert doc["doubts"] == ["status = 404", "the prompt's example"] and doc["confidence"] == "low"
    assert "has no filter on status = 404, which the question names" in proc.stderr
    told = stub.requests[2]["body"]["messages"][-1]["content"]
    assert f"distinct ip\n-----------\n{everyone}\n" in told
    assert "the question names status = 404, and this query has no filter on it" in told
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == ["status = 404", "the prompt's example"]

    with OpenAIStub(replies(unfiltered, unfiltered, answer=everyone)) as stub:
        strict = _ask(stub, apache_log, question, tmp_path, "--strict")
    assert strict.returncode == 1 and strict.stdout == ""
    withheld = "withheld as the query behind the answer has no filter on status = 404, which the question names and is the prompt's example"
    assert withheld in strict.stderr and f"(--strict): {everyone}" in strict.stderr

    # Told, the model runs the query again with the filter: its answer is not in doubt.
    with OpenAIStub(replies(unfiltered, unfiltered, filtered, answer=right)) as stub:
        fixed = _ask(stub, apache_log, question, tmp_path, "--strict")
    assert fixed.returncode == 0 and fixed.stdout.strip() == str(right), fixed.stderr
    assert "no filter" not in fixed.stderr
    assert "no filter" not in stub.requests[3]["body"]["messages"][-1]["content"]


def test_a_value_written_inside_messages_is_read_out_by_after(tmp_path: Path) -> None:
    """On a log whose messages write values after words (lead-ins the table found), the schema
    takes `after` on its free-text columns (the small model is not told of it: on unseen
    questions it put question words there), and an action with it reads the value out of the
    messages: the most common source address of the failed logins, as rows the model sees."""
    auth = Path(__file__).resolve().parent.parent / "fixtures" / "auth.log"
    failed = [line for line in auth.read_text().splitlines() if "Failed password" in line]
    sources = [re.search(r"from (\S+)", line)[1] for line in failed]  # type: ignore[index]
    busiest = max(sorted(set(sources)), key=sources.count)
    replies = [
        json.dumps(
            {
                "op": "top",
                "column": "message",
                "after": "from ",
                "k": 3,
                "where": [{"column": "message", "cmp": "contains", "value": "Failed password"}],
            }
        ),
        json.dumps({"op": "final", "answer": busiest}),
        json.dumps({"answer": busiest, "citations": ["F1"]}),
    ]
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, auth, "which address failed to log in most often?", tmp_path, "--no-memory")
    assert proc.returncode == 0 and proc.stdout == f"{busiest}\n", proc.stderr
    first = stub.requests[0]["body"]
    assert "after" in json.dumps(first["response_format"]["json_schema"]["schema"])
    assert '"after"' not in first["messages"][0]["content"]
    step = latest_trace(tmp_path)["steps"][0]
    assert "regexp_extract" in step["action"]["args"]["code"]
    shown = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"{busiest} " in shown and str(sources.count(busiest)) in shown, shown[-600:]


def test_a_model_that_keeps_answering_before_looking_is_stopped_at_the_second_refusal(
    tmp_path: Path, apache_log: Path
) -> None:
    """A server without a grammar lets a final through on the first turn: it is refused with the
    typed ops to use, and refused again it ends the loop, not the time budget."""
    replies = [json.dumps({"op": "final", "answer": "2015-05-17 10"})] * 6
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, apache_log, "which hour had the most requests?", tmp_path)
    assert proc.stdout == ""
    assert proc.returncode == 1  # no answer could be established
    assert "answering before it had looked at the file" in proc.stderr
    assert "Traceback" not in proc.stderr
    steps = latest_trace(tmp_path)["steps"]
    assert len(steps) == 2
    told = steps[0]["observation"]["preview"]
    assert told.startswith("final refused") and "count, top, group" in told and "execute" not in told
    assert len(stub.requests) == 2


def test_the_line_a_question_quotes_is_added_to_a_query_that_has_no_text_filter(tmp_path: Path) -> None:
    """A question that names its lines by quoting them (a placeholder for what varies): the
    model's query over every line gets `line contains` the quote's literal part, found in the
    file first, and the model is told; a quote the file does not hold changes nothing."""
    log = Path(__file__).resolve().parent.parent / "fixtures" / "auth.log"
    raw = log.read_text().splitlines()
    closed = sum(1 for line in raw if "connection closed by" in line.lower())
    assert 0 < closed < len(raw)
    count = json.dumps({"op": "count"})

    def replies(answer: int) -> list[str]:
        final = json.dumps({"op": "final", "answer": str(answer)})
        return [count, final, json.dumps({"answer": str(answer), "citations": ["F1"]})]

    question = "How many 'Connection closed by <ip> [preauth]' lines are there? Answer with a number."
    with OpenAIStub(replies(closed)) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == str(closed)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        "line contains 'Connection closed by' as written, which your action had no filter on: rlm added it"
        in told
    )
    assert f"count\n-----\n{closed}\n" in told, told[:400]
    code = latest_trace(tmp_path)["steps"][0]["action"]["args"]["code"]
    assert re.search(r"regexp_matches\(\"line\", \\'Connection.+closed.+by", code), code

    # Sent again as it was, it runs as written, and an answer after it is in doubt.
    final = json.dumps({"op": "final", "answer": str(len(raw))})
    again = [count, count, final, json.dumps({"answer": str(len(raw)), "citations": ["F2"]})]
    with OpenAIStub(again) as stub:
        strict = _ask(stub, log, question, tmp_path, "--strict")
    assert strict.returncode == 1 and strict.stdout == ""
    assert "line contains 'Connection closed by', which the question names (--strict): 2000" in strict.stderr

    # A quote no line holds: the query runs as the model wrote it.
    absent = "How many 'Session reaped for <ip>' lines are there?"
    with OpenAIStub(replies(len(raw))) as stub:
        proc = _ask(stub, log, absent, tmp_path)
    assert proc.returncode == 0, proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "rlm added" not in told and f"count\n-----\n{len(raw)}\n" in told

    # A filter on a value that is only a piece of the quote (the program every line names)
    # keeps lines the quote does not: the quote is added beside it.
    quote = "PAM service(sshd) ignoring max retries"
    held = sum(1 for line in raw if quote in line)
    assert 0 < held < sum(1 for line in raw if "sshd" in line)
    sshd = json.dumps({"op": "count", "where": [{"column": "program", "cmp": "=", "value": "sshd"}]})
    with OpenAIStub([sshd, *replies(held)[1:]]) as stub:
        proc = _ask(stub, log, f"How many times does the log say '{quote}'?", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == str(held)
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"line contains {quote!r} as written, which your action had no filter on: rlm added it" in told
    assert f"count\n-----\n{held}\n" in told, told[:400]


def test_the_same_unusable_action_sent_again_ends_the_loop(tmp_path: Path, apache_log: Path) -> None:
    """An action refused for the same fault, turn after turn, ends the loop at the fourth, with
    the reason on stderr, not when the time runs out."""
    unusable = json.dumps({"op": "group", "by": "method", "agg": "sum"})  # a total of what?
    with OpenAIStub([unusable] * 8) as stub:
        proc = _ask(stub, apache_log, "which method has the largest responses?", tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "kept sending an action that fails the same way" in proc.stderr
    assert "Traceback" not in proc.stderr
    steps = latest_trace(tmp_path)["steps"]
    assert len(steps) == 4 and len(stub.requests) == 4
    assert all('"agg" (sum, avg, min or max) and "column"' in s["parse_error"] for s in steps)


def test_an_answer_from_the_prompts_example_as_shown_is_in_doubt(tmp_path: Path, apache_log: Path) -> None:
    """A query that is the prompt's example for its op, word for word, runs, and the model is told
    it is the example: an answer after it is in doubt (stderr, --json, confidence low) and
    --strict withholds it; the model's own query after it clears the doubt."""
    from rlm.input.source import open_source
    from rlm.run.typed.describe import examples

    table = open_source(str(apache_log), cache_dir=str(tmp_path / "c")).profile.table
    assert table is not None
    example = next(a for what, a in examples(table) if what.startswith("top"))
    assert example["op"] == "top" and example["column"] == "ip"
    # The question asks for the clients that fetched one path most: the example ranks every client.
    question = "Which 5 client IPs fetched the robots file most often?"
    own = {**example, "where": [{"column": "path", "cmp": "contains", "value": "robots.txt"}]}
    lines = apache_log.read_text().splitlines()

    def busiest(chosen: list[str]) -> str:
        ips = [line.split()[0] for line in chosen]
        return max(sorted(set(ips)), key=ips.count)

    robots, everyone = busiest([ln for ln in lines if "robots.txt" in ln.split('"')[1]]), busiest(lines)
    assert robots != everyone

    def replies(*actions: dict[str, Any], answer: str) -> list[str]:
        final = json.dumps({"op": "final", "answer": answer})
        return [*map(json.dumps, actions), final, json.dumps({"answer": answer, "citations": ["F1"]})]

    # The example runs; the model is told what it is; the answer after it is in doubt.
    with OpenAIStub(replies(example, answer=everyone)) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (
        doc["answer"] == everyone and doc["doubts"] == ["the prompt's example"] and doc["confidence"] == "low"
    )
    assert "is the prompt's example action as shown there, not one written for the question" in proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert everyone in told and "Note: that action is the example from the list of actions" in told
    assert latest_trace(tmp_path)["synthesis"]["doubts"] == ["the prompt's example"]
    with OpenAIStub(replies(example, answer=everyone)) as stub:
        strict = _ask(stub, apache_log, question, tmp_path, "--strict")
    assert strict.returncode == 1 and strict.stdout == ""

    # The model sends the example again until the run stops it: the answer written from what it
    # found rests on the example all the same, and is in doubt.
    synthesis = json.dumps({"answer": everyone, "citations": ["F1"]})
    with OpenAIStub([json.dumps(example)] * 3 + [synthesis]) as stub:
        stuck = _ask(stub, apache_log, question, tmp_path, "--json")
    doc = json.loads(stuck.stdout)
    assert latest_trace(tmp_path)["nodes"][0]["status"] == "stuck", stuck.stderr
    assert doc["answer"] == everyone and doc["doubts"] == ["the prompt's example"], doc
    assert "withheld as the query behind the answer is the prompt's example action" in strict.stderr

    # Told, the model sends the question's own query: its answer stands.
    with OpenAIStub(replies(example, own, answer=robots)) as stub:
        fixed = _ask(stub, apache_log, question, tmp_path, "--json", "--strict")
    assert fixed.returncode == 0, fixed.stderr
    doc = json.loads(fixed.stdout)
    assert doc["answer"] == robots and not doc["doubts"] and "example" not in fixed.stderr
    assert robots in stub.requests[2]["body"]["messages"][-1]["content"]
    assert "robots.txt" in latest_trace(tmp_path)["steps"][1]["action"]["args"]["code"]


def test_a_count_that_kept_no_row_or_every_row_is_told_and_in_doubt(tmp_path: Path, apache_log: Path) -> None:
    """A count whose conditions match nothing: the model is shown what each matches alone, and an
    answer after it is in doubt (--strict withholds it); one whose conditions keep every row of
    the table likewise; a count that sets rows apart is neither."""
    lines = apache_log.read_text().splitlines()
    not_found = sum(1 for line in lines if re.search(r'" 404 ', line))
    question = "How many of the requests were for the missing page?"
    status = {"column": "status", "cmp": "=", "value": 404}
    nowhere = {"column": "path", "cmp": "contains", "value": "zz-no-such-path"}
    everywhere = {"column": "ip", "cmp": "contains", "value": "."}

    def replies(*wheres: list[dict[str, Any]], answer: int) -> list[str]:
        counts = [json.dumps({"op": "count", "where": where}) for where in wheres]
        final = json.dumps({"op": "final", "answer": str(answer)})
        return [*counts, final, json.dumps({"answer": str(answer), "citations": ["F1"]})]

    with OpenAIStub(replies([status, nowhere], answer=0)) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == "0" and doc["confidence"] == "low"
    assert doc["doubts"] == ["rows: matched no row (path contains 'zz-no-such-path' alone matches none)"]
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        f"Alone, each matches: status = 404: {not_found:,} rows; path contains 'zz-no-such-path': 0 rows."
        in told
    )
    assert (
        "the query behind the answer matched no row (path contains 'zz-no-such-path' alone matches none)"
        in (proc.stderr)
    )
    with OpenAIStub(replies([status, nowhere], answer=0)) as stub:
        strict = _ask(stub, apache_log, question, tmp_path, "--strict")
    assert (
        strict.returncode == 1
        and strict.stdout == ""
        and "withheld as the query behind the answer matched no row" in (strict.stderr)
    )

    # A value no row of its column holds: the worker names the column's values before the count
    # of 0, and the count is still read as one of none.
    absent = {"column": "path", "cmp": "=", "value": "/zz-no-such-page"}
    with OpenAIStub(replies([status, absent], answer=0)) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json")
    doc = json.loads(proc.stdout)
    assert doc["doubts"] == ["rows: matched no row (path = '/zz-no-such-page' alone matches none)"], doc
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "(sql: no row has path = '/zz-no-such-page'; its most common values: " in told
    assert "path = '/zz-no-such-page': 0 rows" in told

    # Each condition matches rows alone and only together none: each is written like its column's
    # values, and the count of nothing is the rows' own word, told to the model and not in doubt.
    requests = [re.search(r'"[A-Z]+ (\S+) [^"]*" (\d{3}) ', line) for line in lines]
    missing = {m[1] for m in requests if m and m[2] == "404"}
    found = next(m[1] for m in requests if m and m[1] not in missing and "'" not in m[1])
    elsewhere = {"column": "path", "cmp": "=", "value": found}
    named = f"Count the requests for {found} that hit a missing page."  # the path it keeps to
    with OpenAIStub(replies([status, elsewhere], answer=0)) as stub:
        proc = _ask(stub, apache_log, named, tmp_path, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == "0" and doc["doubts"] == [], doc
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "Note: no row matched the query's conditions. Alone, each matches: status = 404:" in told
    assert f"path = '{found}': " in told and "likely written unlike" not in told

    with OpenAIStub(replies([everywhere], answer=len(lines))) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json")
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(len(lines)) and doc["doubts"] == [
        "rows: kept every row of the table (its conditions set none apart)"
    ]
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"all {len(lines):,} rows of the table matched the query's conditions (ip contains '.')" in told

    # Told, the model counts the rows the question means: nothing is said, the answer stands.
    with OpenAIStub(replies([status, nowhere], [status], answer=not_found)) as stub:
        fixed = _ask(stub, apache_log, question, tmp_path, "--json", "--strict")
    assert fixed.returncode == 0, fixed.stderr
    doc = json.loads(fixed.stdout)
    assert doc["answer"] == str(not_found) and not doc["doubts"]
    assert "Note: no row matched" not in stub.requests[2]["body"]["messages"][-1]["content"]


def _auth_by_event(tmp_path: Path, aggregate: str) -> tuple[Path, dict[str, Any]]:
    """A copy of the fixture's sshd log, and `aggregate` of each of its events, by DuckDB."""
    log = tmp_path / "auth.log"
    log.write_bytes((FIXTURES / "auth.log").read_bytes())
    table = open_source(str(log), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        query = f"SELECT event, {aggregate} FROM log WHERE event IS NOT NULL GROUP BY 1"
        return log, dict(con.execute(query).fetchall())


def _asked_of_event(
    tmp_path: Path, log: Path, question: str, op: str, column: str, event: str, answer: str, *options: str
) -> tuple[Any, str]:
    """The CLI asked `question`, the model sending `op` of `column` over one event's lines and
    then `answer`: the process, and what the model was shown after its query."""
    action = {"op": op, "column": column, "where": [{"column": "event", "cmp": "=", "value": event}]}
    replies = [
        json.dumps(action),
        json.dumps({"op": "final", "answer": answer}),
        json.dumps({"answer": answer, "citations": ["F1"]}),
    ]
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json", *options)
    return proc, stub.requests[1]["body"]["messages"][-1]["content"]


def test_a_distinct_count_of_none_is_told_and_in_doubt(tmp_path: Path) -> None:
    """A distinct count of a column no row the query kept fills (the users of a kind of sshd line
    that names none) is 0 for want of values, not an answer: told, and in doubt; a distinct count
    of the same column over lines that fill it is neither."""
    log, by_event = _auth_by_event(tmp_path, "count(DISTINCT user)")
    empty = min(e for e, n in by_event.items() if n == 0)
    full = min(e for e, n in by_event.items() if n > 1)

    def question(event: str) -> str:  # the lines the query keeps to, named as the parse names them
        return f"How many different accounts show up in the {event} lines? The number alone."

    proc, told = _asked_of_event(tmp_path, log, question(empty), "count_distinct", "user", empty, "0")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["doubts"] == ["rows: counted no value of user (no row it kept holds one)"], doc
    assert "Note: no row the query kept holds a value of user." in told
    proc, told = _asked_of_event(
        tmp_path, log, question(full), "count_distinct", "user", full, str(by_event[full])
    )
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(by_event[full]) and doc["doubts"] == [], doc
    assert "holds a value of" not in told


def test_a_ranking_that_found_one_value_only_is_told_and_in_doubt(tmp_path: Path) -> None:
    """Asked which one is the most, the model ranks by a column every line holds the same value of
    (the one host of a syslog): the model is told the ranking sets nothing apart, and an answer
    from it is in doubt (--strict withholds it); a ranking of several values is neither."""
    log = tmp_path / "auth.log"
    log.write_bytes((FIXTURES / "auth.log").read_bytes())
    lines = log.read_text().splitlines()
    [host] = {line.split()[3] for line in lines}
    question = "Which one sent the most invalid-user attempts? Just it, alone."

    def replies(by: str, answer: str) -> list[str]:
        group = json.dumps({"op": "group", "by": by, "k": 5})
        return [
            group,
            json.dumps({"op": "final", "answer": answer}),
            json.dumps({"answer": answer, "citations": ["F1"]}),
        ]

    with OpenAIStub(replies("host", host)) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == host and doc["doubts"] == [
        "rows: ranked one value of host only (every row it kept has the same)"
    ]
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert (
        f"Note: every row the query kept has the same host ('{host}'): a ranking of one value sets nothing apart"
        in told
    )
    with OpenAIStub(replies("host", host)) as stub:
        strict = _ask(stub, log, question, tmp_path, "--strict")
    assert strict.returncode == 1 and strict.stdout == "" and "ranked one value of host only" in strict.stderr

    table = open_source(str(log), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        query = "SELECT src_ip, count(*) AS n FROM log WHERE src_ip IS NOT NULL GROUP BY 1 ORDER BY n DESC, 1"
        ranked = con.execute(query).fetchall()
    assert len(ranked) > 1
    with OpenAIStub(replies("src_ip", ranked[0][0])) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and not any("ranked one value" in d for d in doc["doubts"]), doc
    assert "sets nothing apart" not in stub.requests[1]["body"]["messages"][-1]["content"]


def _ranked_then_answered(action: dict[str, Any], answer: str) -> list[str]:
    return [
        json.dumps(action),
        json.dumps({"op": "final", "answer": answer}),
        json.dumps({"answer": answer, "citations": ["F1"]}),
    ]


def test_a_ranking_that_found_no_row_or_no_one_most_is_told_and_in_doubt(
    tmp_path: Path, apache_log: Path
) -> None:
    """Asked which one is the most: a ranking whose conditions keep no row, one whose first two
    rows tie, and one by a column whose every value counts one row each give no answer the rows
    hold. The model is told which, and an answer after it is in doubt (--strict withholds it);
    a ranking with one value alone on top is neither."""
    table = open_source(str(apache_log), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        ranked = con.execute(
            "SELECT path, list(n ORDER BY n DESC, ip) FROM (SELECT path, ip, count(*) AS n FROM log "
            "WHERE path IS NOT NULL GROUP BY 1, 2) GROUP BY 1 ORDER BY 1"
        ).fetchall()
        tied = next(p for p, ns in ranked if len(ns) > 1 and ns[0] == ns[1] > 1 and "'" not in p)
        alone = next(p for p, ns in ranked if len(ns) > 1 and ns[0] > ns[1] and "'" not in p)
        at_top = {
            p: con.execute(
                "SELECT ip, count(*) AS n FROM log WHERE path = ? GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 2", [p]
            ).fetchall()
            for p in (tied, alone)
        }
        only_200 = con.execute(
            "SELECT path FROM log GROUP BY 1 HAVING bool_and(status = 200) AND count(*) > 1 "
            "AND path NOT LIKE '%''%' ORDER BY 1 LIMIT 1"
        ).fetchone()[0]
        distinct = con.execute(
            "SELECT status FROM log GROUP BY 1 HAVING count(*) > 1 AND count(DISTINCT line) = count(*) "
            "ORDER BY count(*) DESC, 1 LIMIT 1"
        ).fetchone()[0]
    status = {"column": "status", "cmp": "=", "value": 404}

    def asked(action: dict[str, Any], answer: str, *options: str) -> tuple[Any, Any]:
        # The page a ranking keeps to is the one the question names.
        pages = [f["value"] for f in action.get("where", []) if f["column"] == "path" and f["cmp"] == "="]
        page = pages[0] if pages else "it"
        question = f"Which client asked for {page} most often? The address alone."
        with OpenAIStub(_ranked_then_answered(action, answer)) as stub:
            proc = _ask(stub, apache_log, question, tmp_path, "--json", *options)
        return proc, stub

    # No row: one condition matches none alone; then each matches alone, together none.
    nowhere = {"column": "path", "cmp": "contains", "value": "zz-no-such-path"}
    proc, stub = asked({"op": "top", "column": "ip", "k": 5, "where": [status, nowhere]}, "(0 rows)")
    doc = json.loads(proc.stdout)
    assert doc["doubts"] == ["rows: matched no row (path contains 'zz-no-such-path' alone matches none)"]
    assert "Alone, each matches: status = 404:" in stub.requests[1]["body"]["messages"][-1]["content"]
    elsewhere = {"column": "path", "cmp": "=", "value": only_200}
    proc, stub = asked(
        {"op": "top", "column": "ip", "k": 5, "where": [status, elsewhere]}, "(0 rows)", "--strict"
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["answer"] is None and doc["status"] == "withheld"
    assert doc["doubts"] == ["rows: found no row (its conditions together match none)"]
    assert f"path = '{only_200}': " in stub.requests[1]["body"]["messages"][-1]["content"]

    # A tie on top: the first address's answer is in doubt, the tie told.
    (first, n), (second, _) = at_top[tied]
    on_tied = {"column": "path", "cmp": "=", "value": tied}
    proc, stub = asked({"op": "top", "column": "ip", "k": 5, "where": [on_tied]}, first)
    doc = json.loads(proc.stdout)
    assert doc["answer"] == first and doc["doubts"] == [
        f"rows: ranked '{first}' first in a tie with '{second}' ({n} each)"
    ], doc
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert f"Note: '{first}' and '{second}' rank the same ({n}): neither is the most" in told

    # Every line counted once: a ranking by the line itself sets none above the others.
    on_distinct = {"column": "status", "cmp": "=", "value": distinct}
    proc, stub = asked({"op": "top", "column": "line", "k": 1, "where": [on_distinct]}, "x")
    assert json.loads(proc.stdout)["doubts"] == ["rows: ranked values of line that each count one row"]

    # One address alone on top: nothing said, the answer stands under --strict.
    (first, n), (_, below) = at_top[alone]
    assert n > below
    on_alone = {"column": "path", "cmp": "=", "value": alone}
    proc, stub = asked({"op": "top", "column": "ip", "k": 5, "where": [on_alone]}, first, "--strict")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == first and doc["doubts"] == [], doc
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "rank the same" not in told and "found no row" not in told


def test_a_rankings_count_given_where_the_question_asks_which_value_is_refused_then_in_doubt(
    tmp_path: Path,
) -> None:
    """Asked which process id wrote the most lines, a final giving the count beside the top id
    (both numbers) is refused once, with what the row's value is; given again after one more
    action it is taken and in doubt (--strict withholds it); the id itself is taken as it is."""
    log = FIXTURES / "auth.log"
    table = open_source(str(log), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        ranked = con.execute("SELECT pid, count(*) FROM log GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 2").fetchall()
    (pid, lines), (_, second) = ranked
    assert lines > second and lines != pid
    question = "Which pid wrote the most lines here? The pid alone."
    top = {"op": "top", "column": "pid", "k": 5}

    def replies(*answers: int) -> list[str]:
        # a ranking, a final, the ranking again cut shorter (not a repeat), a final, the synthesis
        first, last = answers
        return [
            json.dumps(top),
            json.dumps({"op": "final", "answer": str(first)}),
            json.dumps({**top, "k": 3}),
            json.dumps({"op": "final", "answer": str(last)}),
            json.dumps({"answer": str(last), "citations": ["F2"]}),
        ]

    with OpenAIStub(replies(lines, pid)) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == str(pid) and doc["doubts"] == [], doc
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: your answer is the count (or total) your ranking gives a row" in refused
    assert f"That row's value is '{pid}'." in refused  # named, to be copied

    with OpenAIStub(replies(lines, lines)) as stub:
        proc = _ask(stub, log, question, tmp_path, "--json", "--strict")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["answer"] is None and doc["status"] == "withheld"
    assert (
        "kind: the answer is what a ranking counts for its row 1, not the row's value, where the question asks which"
        in doc["doubts"]
    ), doc

    # Where the question asks how many, the count is the answer: nothing refused.
    how_many = "How many lines did the busiest pid write? Just the number."
    with OpenAIStub(
        replies(lines, lines)[:2] + [json.dumps({"answer": str(lines), "citations": ["F1"]})]
    ) as stub:
        proc = _ask(stub, log, how_many, tmp_path, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == str(lines)


def test_a_total_or_extreme_of_no_value_is_told_and_in_doubt(tmp_path: Path) -> None:
    """The largest source port of a kind of sshd line that writes none is NULL, not an answer:
    told, and in doubt (--strict withholds it); of lines that write one it is neither."""
    log, by_event = _auth_by_event(tmp_path, "max(src_port)")
    empty = min(e for e, n in by_event.items() if n is None)
    full = min(e for e, n in by_event.items() if n is not None)

    def question(event: str) -> str:  # the lines the query keeps to, named as the parse names them
        return f"Which source port is the largest among the {event} lines? The number alone."

    proc, told = _asked_of_event(tmp_path, log, question(empty), "max", "src_port", empty, "NULL", "--strict")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["answer"] is None and doc["status"] == "withheld"
    assert doc["doubts"] == ["rows: computed the max of no value of src_port (no row it kept holds one)"], doc
    assert "Note: no row the query kept holds a value of src_port: its max is of nothing." in told
    proc, told = _asked_of_event(
        tmp_path, log, question(full), "max", "src_port", full, str(by_event[full]), "--strict"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == str(by_event[full]) and "holds a value of" not in told


def test_a_list_that_leaves_out_values_its_ranking_shows_is_refused_then_in_doubt(
    tmp_path: Path, apache_log: Path
) -> None:
    """Asked for a list, a final naming some of the values its whole ranking shows and not the
    others is refused once; given again it is taken, in doubt. A value the question itself sets
    aside ("apart from GET") need not be listed."""
    table = open_source(str(apache_log), cache_dir=str(tmp_path / "own")).profile.table
    assert table is not None
    with duckdb.connect(table["path"], read_only=True) as con:
        methods = [
            m for (m,) in con.execute("SELECT method FROM log GROUP BY 1 ORDER BY count(*) DESC").fetchall()
        ]
    assert len(methods) >= 3 and methods[0] == "GET"
    others = methods[1:]
    question = "Apart from GET, which request methods does this log hold? List them."
    top = {"op": "top", "column": "method", "k": 10}

    def replies(first: str, last: str) -> list[str]:
        return [
            json.dumps(top),
            json.dumps({"op": "final", "answer": first}),
            json.dumps({**top, "k": 9}),
            json.dumps({"op": "final", "answer": last}),
            json.dumps({"answer": last, "citations": ["F2"]}),
        ]

    with OpenAIStub(replies(others[0], ", ".join(others))) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json", "--strict")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] == ", ".join(others) and doc["doubts"] == [], doc
    refused = stub.requests[2]["body"]["messages"][-1]["content"]
    assert "final refused: the question asks for a list, and your answer leaves out values" in refused

    with OpenAIStub(replies(others[0], others[0])) as stub:
        proc = _ask(stub, apache_log, question, tmp_path, "--json", "--strict")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["status"] == "withheld", doc
    assert doc["doubts"] == [f"kind: the answer lists 1 of the {len(others)} values its ranking shows"], doc


def test_a_value_the_question_leaves_out_is_added_as_an_exclusion(tmp_path: Path) -> None:
    """ "Other than <value>" keeps every other value's rows: rlm adds `!=`, where before it added
    nothing and told the model the value as a condition to keep to."""
    import csv

    taxis = FIXTURES / "data" / "seaborn" / "taxis.csv"
    with taxis.open(newline="") as fh:
        payments = [row["payment"] for row in csv.DictReader(fh)]
    others = sum(1 for p in payments if p and p != "cash")
    assert 0 < others < len(payments)
    question = "How many rides were paid for other than in cash?"
    replies = [
        json.dumps({"op": "count"}),
        json.dumps({"op": "final", "answer": str(others)}),
        json.dumps({"answer": str(others), "citations": ["F1"]}),
    ]
    with OpenAIStub(replies) as stub:
        proc = _ask(stub, taxis, question, tmp_path, "--strict")
    assert proc.returncode == 0 and proc.stdout == f"{others}\n", proc.stderr
    told = stub.requests[1]["body"]["messages"][-1]["content"]
    assert "the question names payment != 'cash', which your action had no filter on: rlm added it" in told
    assert f"count\n-----\n{others}\n" in told, told[-600:]


def test_which_words_leave_a_value_out(tmp_path: Path) -> None:
    from rlm.run.typed.conditions import excluded, negated

    assert excluded("Lines other than the 404s?", "404") and excluded("not from Queens", "Queens")
    assert excluded("every level except WARN", "WARN") and excluded("status besides 200", "200")
    # Said of whether any exists, or too far before it: negated, not excluded.
    assert negated("Were there no ERROR lines?", "ERROR") and not excluded(
        "Were there no ERROR lines?", "ERROR"
    )
    assert not excluded("not counting the lines written by ERROR handlers", "ERROR")
