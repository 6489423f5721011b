"""The query of the question's own shape (rlm.run.queryhint): linked on real tables, and copied
by a model on the path users take (the CLI, the real worker, the synthesis, stdout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, latest_trace, run_cli, write_script

from rlm.input.source import open_source
from rlm.run.queryhint import hint_for

EVAL = FIXTURES / "eval"


def _task(task_id: str) -> dict[str, Any]:
    """A question with its answer from the dev or held-out set (answers checked by test_eval)."""
    for name in ("tasks.jsonl", "heldout.jsonl"):
        for line in (EVAL / name).read_text().splitlines():
            task = json.loads(line)
            if task["id"] == task_id:
                task["path"] = (EVAL / task["file"]).resolve()
                return task
    raise KeyError(task_id)


def _table(path: Path, cache: Path) -> dict[str, Any]:
    table = open_source(str(path), cache_dir=str(cache)).profile.table
    assert table is not None
    return table


@pytest.mark.parametrize(
    ("task_id", "sql"),
    [
        ("t01", "SELECT count(*) AS n FROM log WHERE status = 404"),
        ("t10", "SELECT count(DISTINCT src_ip) AS n FROM log WHERE event = 'failed_password'"),
        (
            "t11",
            "SELECT user, count(*) AS n FROM log WHERE event = 'failed_password' AND user IS NOT NULL "
            "GROUP BY 1 ORDER BY n DESC LIMIT 5",
        ),
        ("t05", "SELECT sum(bytes) AS total FROM log WHERE status = 200"),
        ("t07", "SELECT count(*) AS n FROM log WHERE agent ILIKE '%Googlebot%'"),
        ("t12", "SELECT count(*) AS n FROM log WHERE event = 'invalid_user'"),  # not 'invalid_user_request'
        ("t20", "SELECT round(sum(fare), 2) AS total FROM log"),  # the `total` column is not "the total of"
        ("h04", "SELECT count(*) AS n FROM log WHERE CAST(ts AS DATE) = DATE '2015-05-18'"),
        ("h05", "SELECT count(*) AS n FROM log WHERE status BETWEEN 500 AND 599"),
        ("h11", "SELECT count(*) AS n FROM log WHERE passengers > 3"),
        ("h15", "SELECT max(requests.total) AS largest FROM log"),
    ],
)
def test_a_question_is_linked_to_the_tables_columns_and_values(
    tmp_path: Path, task_id: str, sql: str
) -> None:
    task = _task(task_id)
    hint = hint_for(task["question"], _table(task["path"], tmp_path))
    assert hint is not None and hint.sql == sql


@pytest.mark.parametrize(
    ("path", "question"),
    [
        (FIXTURES / "data" / "loghub" / "HDFS_2k.log", "How many distinct block ids (blk_...) appear?"),
        (FIXTURES / "access.log", "How many lines are there?"),  # a count of everything needs no hint
        (FIXTURES / "access.log", "What happened around the deploy?"),
        (FIXTURES / "auth.log", "Which attacker was most persistent?"),  # no column is named
    ],
)
def test_a_question_that_does_not_map_gets_no_hint(tmp_path: Path, path: Path, question: str) -> None:
    assert hint_for(question, _table(path, tmp_path)) is None


def test_times_of_day_and_dates_without_a_year(tmp_path: Path) -> None:
    table = _table(FIXTURES / "auth.log", tmp_path)
    hint = hint_for("How many failed password attempts were there on Dec 10 after 07:00?", table)
    assert hint is not None
    assert hint.sql == (
        "SELECT count(*) AS n FROM log WHERE event = 'failed_password' AND strftime(ts, '%m-%d') = '12-10' "
        "AND strftime(ts, '%H:%M:%S') > '07:00:00'"
    )
    # an end with :59 is the whole minute; a round end is not included
    between = hint_for("How many lines were logged between 06:00 and 07:59 on Dec 10?", table)
    assert between is not None and "'%H:%M:%S') >= '06:00:00' AND strftime(ts, '%H:%M:%S') <= '07:59:59'" in (
        between.sql
    )
    hour = hint_for("How many lines were logged between 06:00 and 07:00 on Dec 10?", table)
    assert hour is not None and "<= '07:00:00'" not in hour.sql and "< '07:00:00'" in hour.sql


def test_a_time_of_day_on_a_timestamp_with_a_zone_runs(tmp_path: Path) -> None:
    """ts of an access log is TIMESTAMPTZ, which DuckDB does not cast to TIME."""
    import duckdb

    table = _table(FIXTURES / "access.log", tmp_path)
    hint = hint_for("How many requests were made between 10:00 and 10:30 on 17 May 2015?", table)
    assert hint is not None
    con = duckdb.connect(table["path"], read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    (count,) = con.execute(hint.sql).fetchone()
    lines = (FIXTURES / "access.log").read_text().splitlines()
    assert count == sum(1 for ln in lines if "[17/May/2015:10:" in ln and ln.split(":")[2] < "30") > 0


@pytest.mark.parametrize(
    ("path", "question", "sql"),
    [
        # a value of two columns is the one the words before it name
        (
            FIXTURES / "data" / "seaborn" / "taxis.csv",
            "How many trips were picked up in Queens with pickup_borough Queens and dropoff_borough Manhattan?",
            "SELECT count(*) AS n FROM log WHERE pickup_borough = 'Queens' AND dropoff_borough = 'Manhattan'",
        ),
        # a month and its year
        (
            FIXTURES / "data" / "loghub" / "Zookeeper_2k.log",
            "How many lines have the level WARN in August 2015?",
            "SELECT count(*) AS n FROM log WHERE level = 'WARN' AND strftime(ts, '%Y-%m') = '2015-08'",
        ),
        # a quoted phrase is searched whole, not linked by one of its words
        (
            FIXTURES / "auth.log",
            "How many 'Received disconnect' lines are there?",
            "SELECT count(*) AS n FROM log WHERE line ILIKE '%Received disconnect%'",
        ),
    ],
)
def test_values_are_linked_to_the_column_the_question_means(
    tmp_path: Path, path: Path, question: str, sql: str
) -> None:
    hint = hint_for(question, _table(path, tmp_path))
    assert hint is not None and hint.sql == sql


def test_a_time_slot_stands_for_a_column(tmp_path: Path) -> None:
    import duckdb

    table = _table(FIXTURES / "access.log", tmp_path)
    per_hour = hint_for("How many requests were made per hour?", table)
    busiest = hint_for("Which hour of the day had the most requests?", table)
    assert per_hour is not None and busiest is not None
    assert "strftime(ts, '%Y-%m-%d %H:00') AS hour" in per_hour.sql and per_hour.answer == "result"
    assert "strftime(ts, '%H') AS hour" in busiest.sql and busiest.shape == "rank"
    con = duckdb.connect(table["path"], read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    slots = con.execute(per_hour.sql).fetchall()
    lines = (FIXTURES / "access.log").read_text().splitlines()
    assert sum(n for _, n in slots) == len(lines)
    assert slots[0] == ("2015-05-17 10:00", sum("[17/May/2015:10:" in ln for ln in lines))


@pytest.mark.parametrize(
    ("path", "question"),
    [
        # Queens of which borough? Said nowhere: no guess.
        (FIXTURES / "data" / "seaborn" / "taxis.csv", "How many trips were there in Queens?"),
        # both values of one column at once: no row holds them
        (FIXTURES / "data" / "seaborn" / "taxis.csv", "How many trips were paid by cash and credit card?"),
        # a figure the query would drop
        (FIXTURES / "access.log", "Which 3 client IP addresses made the most requests?"),
        (FIXTURES / "access.log", "How many 404 responses were there before 2016?"),
        # a total of a field the table does not have is not a count of lines
        (
            FIXTURES / "data" / "loghub" / "Spark_2k.log",
            "Summed over all 'Finished task' lines, how many bytes?",
        ),
    ],
)
def test_a_query_that_could_mislead_is_not_offered(tmp_path: Path, path: Path, question: str) -> None:
    assert hint_for(question, _table(path, tmp_path)) is None


def _copying_model(tmp_path: Path) -> str:
    """A scripted model that does what small models do with an example: copies the reply format's
    query as it is, passes the value the example names to final, and (as the synthesis) writes the
    draft as the answer."""
    return write_script(
        tmp_path / "copy.json",
        {
            "log": "calls.jsonl",
            "rules": [
                {
                    "match": r"Draft answer from the investigation: ([^\n]*)",
                    "reply": '{"answer": "\\1", "explanation": "The query gave it.", "citations": ["F1"], '
                    '"confidence": "high", "confidence_reason": "one query"}',
                },
                {
                    "match": r"a first step is this query.*?```python\n(result = sql\(.*?\)\nprint\(result\))\n```",
                    "reply": "```python\n\\1\n```",
                    "times": 1,
                },
                {"match": r"final\((result\[0\]\[0\])\)", "reply": "```python\nfinal(\\1)\n```", "times": 1},
            ],
        },
    )


@pytest.mark.parametrize("task_id", ["t01", "t10", "t11", "t13", "h02", "h04", "h10", "h14", "h15"])
def test_a_model_that_copies_the_hint_answers_right_through_the_cli(tmp_path: Path, task_id: str) -> None:
    """The whole path: the hint in the prompt the model reads, the copied query run by the locked
    worker on the real table, final() of the value the hint names, the synthesis, stdout."""
    task = _task(task_id)
    model = _copying_model(tmp_path)
    proc = run_cli(
        ["ask", str(task["path"]), task["question"], "-m", model, "--protocol", "text"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.strip()
    if isinstance(task["answer"], float):
        assert abs(float(got) - task["answer"]) <= task.get("tolerance", 0), got
    else:
        assert got == str(task["answer"]), proc.stderr
    trace = latest_trace(tmp_path)
    steps = trace["steps"]
    assert [s["action"]["name"] for s in steps] == ["execute", "execute"]
    assert steps[0]["observation"]["ok"] and "error" not in steps[0]["observation"]["preview"].lower()
    drafts = [f for f in trace["ledger"] if f["kind"] == "final_draft"]
    assert [d["text"] for d in drafts] == [got]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert "Examples, inside execute" not in calls[0]["messages"][1]["content"]  # the generic ones compete
    hint = trace["nodes"][0]["query_hint"]
    assert hint["sql"] in steps[0]["action"]["args"]["code"] and hint["answer"] == "result[0][0]"
    shown = run_cli(["replay", "last"], cwd=tmp_path)
    assert shown.returncode == 0 and "shown first: SELECT" in shown.stdout, shown.stdout


def test_without_a_hint_the_generic_example_stays(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "s.json",
        {"log": "calls.jsonl", "replies": ["```python\npeek(1, 2)\n```", "```python\nfinal(2)\n```", "2"]},
    )
    question = "How many distinct block ids (blk_...) appear?"
    hdfs = FIXTURES / "data" / "loghub" / "HDFS_2k.log"
    proc = run_cli(["ask", str(hdfs), question, "-m", script, "--protocol", "text"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    system = calls[0]["messages"][0]["content"]
    assert "a first step is this query" not in system and 'sql("SELECT count(*) FROM log")' in system
    assert "Examples, inside execute" in calls[0]["messages"][1]["content"]


def test_a_tools_model_gets_the_hint_in_its_task(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "s.json",
        {
            "log": "calls.jsonl",
            "replies": [
                {"tool": "execute", "args": {"code": "print(1)"}},
                {"tool": "final", "args": {"answer": "see F1"}},
                "1",
            ],
        },
    )
    proc = run_cli(
        ["ask", str(FIXTURES / "access.log"), "How many requests used the HEAD method?", "-m", script],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    task = calls[0]["messages"][1]["content"]
    assert "A query of this question's shape" in task
    assert "SELECT count(*) AS n FROM log WHERE method = 'HEAD'" in task and "result[0][0]" in task


def test_an_answer_typed_into_final_is_told_the_variable_to_pass(tmp_path: Path) -> None:
    """final(86.76.247.183) after the hint's query (the offline model read the last row of the
    table and typed it): the advice names the hint's answer expression."""
    task = _task("t03")
    model = write_script(
        tmp_path / "s.json",
        {
            "rules": [
                {
                    "match": r"a first step is this query.*?```python\n(result = sql\(.*?\)\nprint\(result\))\n```",
                    "reply": "```python\n\\1\n```",
                    "times": 1,
                },
                {"match": r"Draft answer from the investigation", "reply": '{"answer": "66.249.73.135"}'},
            ],
            "replies": ["```python\nfinal(86.76.247.183)\n```", "```python\nfinal(result[0][0])\n```"],
        },
    )
    proc = run_cli(
        ["ask", str(task["path"]), task["question"], "-m", model, "--protocol", "text"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    steps = latest_trace(tmp_path)["steps"]
    advice = steps[1]["observation"]["preview"]
    assert "SyntaxError" in advice and "here final(result[0][0]) takes it from the query's rows" in advice, (
        advice
    )
    assert proc.stdout == "66.249.73.135\n"
